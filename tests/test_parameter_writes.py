"""In-place writes to parameters (autograd leaves that require grad) inside a compiled function.

Under ``no_grad`` (a weight clamped, an average kept, ``w.data.mul_``) eager allows them; tc's
copy-back wrote the new value with grad mode on and raised "a leaf Variable that requires grad is
being used in an in-place operation" (a crash where eager ran). Under grad mode eager refuses
them, and so must tc, with eager's error. A buffer that does not require grad written with a
value that does still takes its history (``CopyBackwards``), as in eager.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tc

BACKENDS = ["aot_eager", "inductor"]


@pytest.fixture(autouse=True)
def _fresh():
    tc.reset()


class Clamped(nn.Module):
    """A WGAN-style critic that clamps its weight, and keeps a running mean of its input."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.register_buffer("mean", torch.zeros(4))

    def forward(self, x):
        with torch.no_grad():
            self.lin.weight.clamp_(-0.3, 0.3)
            self.mean.mul_(0.9).add_(x.mean(0), alpha=0.1)
        self.lin.bias.data.mul_(0.5)
        return self.lin(x - self.mean).relu().sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_grad_writes_to_parameters_in_forward(backend):
    torch.manual_seed(0)
    ref, mine = Clamped(), Clamped()
    mine.load_state_dict(ref.state_dict())
    compiled = tc.compile(mine, backend=backend)
    for _ in range(3):
        x = torch.randn(5, 4)
        want, got = ref(x), compiled(x)
        torch.testing.assert_close(got, want)
        want.backward()
        got.backward()
        for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
            torch.testing.assert_close(q, p, msg=lambda m, name=name: f"{name}: {m}")
            torch.testing.assert_close(q.grad, p.grad, msg=lambda m, name=name: f"grad of {name}: {m}")
        torch.testing.assert_close(mine.mean, ref.mean)
        assert mine.lin.weight.is_leaf and mine.lin.weight.grad_fn is None


def grad_mode_write(x, w):
    w.add_(1)
    return (x * w).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_grad_mode_write_to_a_leaf_raises_as_in_eager(backend):
    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        grad_mode_write(x, w)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        tc.compile(grad_mode_write, backend=backend)(x, w)


def copy_into(x, buf):
    buf.copy_(x * 2)
    return buf.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_buffer_written_with_a_value_that_requires_grad_takes_its_history(backend):
    x, mine = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    with torch.no_grad():
        mine.copy_(x)
    b1, b2 = torch.zeros(3), torch.zeros(3)
    copy_into(x, b1).backward()
    tc.compile(copy_into, backend=backend)(mine, b2).backward()
    torch.testing.assert_close(mine.grad, x.grad)
    assert b2.requires_grad and type(b2.grad_fn) is type(b1.grad_fn)
