"""tc.compile(opt.step) writes the new parameters and state into their own memory: results match
eager after several steps, and the runtime's copy-back copies none of the in-place pairs."""

from __future__ import annotations

import pytest
import torch

import tc
from tc_autograd import runtime


def _params(n: int, seed: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(3, 5), (7,), (2, 3, 4), (1,)]
    return [torch.nn.Parameter(torch.randn(shapes[i % len(shapes)], generator=g)) for i in range(n)]


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_compiled_step_matches_eager_and_skips_copies(kind):
    n = 24
    ref, ours = _params(n, 0), _params(n, 0)
    make = (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True)) if kind == "sgd" else \
        (lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.01, foreach=True))
    opt_ref, opt = make(ref), make(ours)
    step = tc.compile(opt.step)
    g = torch.Generator().manual_seed(1)
    for i in range(4):
        for a, b in zip(ref, ours):
            grad = torch.randn(a.shape, generator=g)
            a.grad, b.grad = grad.clone(), grad.clone()
        before = runtime.COUNTERS["skipped_copies"]
        opt_ref.step()
        step()
        skipped = runtime.COUNTERS["skipped_copies"] - before
        for a, b in zip(ref, ours):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
        if i >= 2:  # steady state: at least the parameters are written in place
            assert skipped >= n, skipped
    for a, b in zip(ref, ours):
        for key, value in opt_ref.state[a].items():
            torch.testing.assert_close(opt.state[b][key], value, rtol=1e-5, atol=1e-5)


def test_batchnorm_training_step_matches_eager():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU())
    ours = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU())
    ours.load_state_dict(ref.state_dict())
    compiled = tc.compile(ours)
    for _ in range(3):
        x = torch.randn(5, 6)
        ref(x).square().sum().backward()
        compiled(x).square().sum().backward()
        for a, b in zip(ref.state_dict().values(), ours.state_dict().values()):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
        for a, b in zip(ref.parameters(), ours.parameters()):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-5)
