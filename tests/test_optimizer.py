"""``tc.compile(opt.step)`` through the default (inductor) back end: a small MLP trained 3 steps
beside an eager twin, parameters and optimizer state compared after each step."""

from __future__ import annotations

import copy

import pytest
import torch

import tc


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


OPTIMIZERS = {
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_compiled_optimizer_step_matches_eager(name):
    torch.manual_seed(0)
    model = _mlp()
    twin = copy.deepcopy(model)
    opt, eager_opt = OPTIMIZERS[name](model.parameters()), OPTIMIZERS[name](twin.parameters())
    step = tc.compile(opt.step)
    for _ in range(3):
        x, y = torch.randn(5, 8), torch.randn(5, 4)
        for m, o in ((model, opt), (twin, eager_opt)):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
        step()
        eager_opt.step()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-5)
        for p, q in zip(model.parameters(), twin.parameters()):
            for key, v in eager_opt.state[q].items():
                torch.testing.assert_close(opt.state[p][key], v, atol=1e-5, rtol=1e-5)
    report = tc.explain(opt.step)
    assert (report.graph_count, report.graph_break_count) == (1, 0), str(report)
