"""Outputs and gradients that eager returns as distinct tensors come back in distinct memory.

A compiled graph merges equal values (common subexpressions, a reduction computed twice). Where
two such values were outputs (two bias gradients equal by construction: a residual add's two
branches, ResNet's downsample and last batch norm of a block) they came back as views of one
buffer, and every in-place write to one showed in the other: ``.grad`` accumulated over two
backward calls, ``clip_grad_norm_``, GradScaler's unscale, ``o1.add_(1)`` on a returned value.
Each case runs two steps with different inputs and compares with eager.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tc

BACKENDS = ["aot_eager", "inductor"]
CUDA = pytest.param("cuda", marks=[pytest.mark.cuda,
                                   pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")])


@pytest.fixture(autouse=True)
def _fresh():
    tc.reset()


class TwoBiases(nn.Module):
    """``b1`` and ``b2`` get equal gradients (two sums of one value)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.b1, self.b2 = nn.Parameter(torch.zeros(4)), nn.Parameter(torch.zeros(4))

    def forward(self, x):
        h = self.lin(x)
        return ((h + self.b1) * 2 + (h + self.b2) * 2).relu()


class SumOfTwo(nn.Module):
    """``a + b``: autograd hands one gradient tensor to both parameters."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Parameter(torch.randn(3, 4)), nn.Parameter(torch.randn(3, 4))

    def forward(self, x):
        return (self.a + self.b) * x


class Block(nn.Module):
    """A residual block with a projection: both branches end in batch norm."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8))
        self.down = nn.Sequential(nn.Conv2d(3, 8, 1, bias=False), nn.BatchNorm2d(8))

    def forward(self, x):
        return (self.conv(x) + self.down(x)).relu().mean((2, 3))


def _twins(make, device="cpu"):
    torch.manual_seed(0)
    ref = make().to(device)
    mine = make().to(device)
    mine.load_state_dict(ref.state_dict())
    return ref, mine


def _inputs(model, steps=2, device="cpu"):
    shape = (2, 3, 6, 6) if isinstance(model, Block) else (3, 4)
    return [torch.randn(shape, device=device) for _ in range(steps)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make", [TwoBiases, SumOfTwo, Block])
def test_gradients_accumulate_as_in_eager(backend, make):
    ref, mine = _twins(make)
    compiled = tc.compile(mine, backend=backend)
    for x in _inputs(ref):  # no zero_grad: the second backward adds into .grad in place
        ref(x).pow(2).sum().backward()
        compiled(x).pow(2).sum().backward()
    for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
    grads = [p.grad for p in mine.parameters()]
    pointers = [g.untyped_storage().data_ptr() for g in grads]
    assert len(set(pointers)) == len(pointers)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make", [TwoBiases, Block])
def test_clip_grad_norm_scales_each_gradient_once(backend, make):
    ref, mine = _twins(make)
    compiled = tc.compile(mine, backend=backend)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (ref, mine)]
    for x in _inputs(ref, steps=3):
        for model, fn, opt in ((ref, ref, opts[0]), (mine, compiled, opts[1])):
            opt.zero_grad()
            fn(x).pow(2).sum().backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            opt.step()
    for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
        torch.testing.assert_close(q, p, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_equal_outputs_are_distinct_tensors(backend, requires_grad):
    def f(a, b):
        return a + b, a + b, (a + b).view(-1), (a * 2).sum(0), (a * 2).sum(0, keepdim=True)

    compiled = tc.compile(f, backend=backend)
    for n in (3, 3):
        a, b = torch.randn(n, 2, requires_grad=requires_grad), torch.randn(n, 2)
        got, want = compiled(a, b), f(a, b)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
        with torch.no_grad():
            got[0].add_(1)
            got[3].add_(1)
        torch.testing.assert_close(got[1], want[1])
        torch.testing.assert_close(got[2], want[2])
        torch.testing.assert_close(got[4], want[4])


@pytest.mark.parametrize("backend", BACKENDS)
def test_views_the_program_makes_still_alias(backend):
    def f(a):
        y = a * 2
        return y, y.view(-1), y[0]

    got = tc.compile(f, backend=backend)(torch.randn(3, 2))
    got[0].add_(1)  # eager's outputs share y's memory: a write to one shows in the others
    torch.testing.assert_close(got[1], got[0].view(-1))
    torch.testing.assert_close(got[2], got[0][0])


@pytest.mark.parametrize("device", [CUDA])
@pytest.mark.parametrize("make", [SumOfTwo, Block])
def test_reduce_overhead_gradients_accumulate_as_in_eager(device, make):
    ref, mine = _twins(make, device)
    compiled = tc.compile(mine, mode="reduce-overhead")
    for x in _inputs(ref, steps=6, device=device):  # warm-ups, record, replays
        ref(x).pow(2).sum().backward()
        compiled(x).pow(2).sum().backward()
    for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-3, rtol=1e-3, msg=lambda m, name=name: f"{name}: {m}")
    pointers = [p.grad.untyped_storage().data_ptr() for p in mine.parameters()]
    assert len(set(pointers)) == len(pointers)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dtype_view_of_an_output_keeps_its_dtype(backend):
    # The two outputs share memory, so the second was rebuilt as an as_strided view of the first:
    # float32 where eager's is int32 (a wrong answer).
    def f(x):
        y = x * 2
        return y, y.view(torch.int32)

    compiled = tc.compile(f, backend=backend)
    for n in (4, 4):
        x = torch.randn(n)
        got, want = compiled(x), f(x)
        assert [g.dtype for g in got] == [w.dtype for w in want]
        torch.testing.assert_close(got, want)
        got[0].zero_()  # eager's int view shares the float's memory
        assert not got[1].any()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("view", ["reshape", "select", "transpose"])
def test_an_output_viewing_an_intermediate_may_be_written_in_place(backend, view):
    # Returned from inside the autograd Function, such a view refused any in-place write
    # ("Output 0 of CompiledFunction is a view and is being modified inplace") where eager's works.
    def f(x, w):
        h = x @ w
        return {"reshape": lambda: h.view(-1), "select": lambda: h[:, 0], "transpose": lambda: h.t()}[view]()

    compiled = tc.compile(f, backend=backend)
    for n in (3, 3):
        x, w = torch.randn(n, 4), torch.randn(4, 5, requires_grad=True)
        w2 = w.detach().clone().requires_grad_()
        got, want = compiled(x, w), f(x, w2)
        got.mul_(3)
        want.mul_(3)
        torch.testing.assert_close(got, want)
        cotangent = torch.randn_like(want)
        got.backward(cotangent)
        want.backward(cotangent)
        torch.testing.assert_close(w.grad, w2.grad)


def test_a_view_of_an_intermediate_over_dynamic_sizes_compiles():
    def f(x):
        return (x * 2).view(-1)

    compiled = tc.compile(f, dynamic=True)
    for n in (3, 5, 7):
        x = torch.randn(n, 4, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no eager fallback
            got = compiled(x)
        torch.testing.assert_close(got, f(x))
        got.sum().backward()
        torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_view_whose_gradient_comes_from_an_ops_formula_keeps_it(backend):
    # var_mean(keepdim=True) decomposes below autograd: its var output views a 0-dim value that
    # has no gradient of its own. Rebuilt as a view of that value, the output lost its gradient
    # (found by the OpInfo sweep: var_mean, native_group_norm, unfold).
    def f(x):
        return torch.var_mean(x, dim=0, keepdim=True)

    compiled = tc.compile(f, backend=backend)
    for n in (5, 5):
        x1 = torch.randn(n, requires_grad=True)
        x2 = x1.detach().clone().requires_grad_()
        got, want = compiled(x2), f(x1)
        cotangents = [torch.randn_like(w) for w in want]
        torch.autograd.backward(want, cotangents)
        torch.autograd.backward(got, cotangents)
        torch.testing.assert_close(x2.grad, x1.grad)
