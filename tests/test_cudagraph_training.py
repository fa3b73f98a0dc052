"""tc.compile(mode="reduce-overhead") training loops on CUDA: forward and backward graphs recorded
and replayed, losses, gradients and parameters equal to eager's over several optimizer steps."""

from __future__ import annotations

import pytest
import torch

import tc
import tc_runtime

pytestmark = pytest.mark.cuda


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 128),
                               torch.nn.Tanh(), torch.nn.Linear(128, 10))


def cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                               torch.nn.Conv2d(16, 16, 3, stride=2), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))


@pytest.fixture
def graphed(monkeypatch):
    tc.reset()  # a model compiled by an earlier test would be served from the cache
    made = []
    real = tc_runtime.cudagraphify

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tc_runtime, "cudagraphify", spy)
    return made


@pytest.mark.parametrize("make, shape", [(mlp, (16, 64)), (cnn, (8, 3, 16, 16))])
@pytest.mark.parametrize("set_to_none", [True, False])
def test_training_loop_matches_eager(make, shape, set_to_none, graphed):
    torch.manual_seed(0)
    model = make().cuda()
    ref = make().cuda()
    ref.load_state_dict(model.state_dict())
    compiled = tc.compile(model, mode="reduce-overhead")
    opts = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for m in (model, ref)]
    for step in range(8):  # warm-ups (a kernel's first-launch check syncs once), record, replays
        x = torch.randn(shape, device="cuda")
        y = torch.randint(0, 10, (shape[0],), device="cuda")
        out = compiled(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        want = torch.nn.functional.cross_entropy(ref(x), y)
        want.backward()
        torch.testing.assert_close(loss, want, rtol=1e-4, atol=1e-4)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4)
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=set_to_none)
        for p, q in zip(model.state_dict().values(), ref.state_dict().values()):
            torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4)
    states = [s for g in graphed for s in g.planner.states.values()]
    assert len(graphed) == 2 and not [s.fallback for s in states if s.fallback]
    assert all(sum(s.replays for s in g.planner.states.values()) >= 3 for g in graphed)
    backward_graphs = [s.graph for s in graphed[1].planner.states.values() if s.graph is not None]
    assert backward_graphs and all(g.in_place for g in backward_graphs)  # saved tensors not copied


def test_kept_outputs_and_two_forwards_before_backward(graphed):
    """Outputs kept across steps and gradient accumulation: a replay never overwrites a live one."""
    torch.manual_seed(0)
    model, ref = mlp().cuda(), mlp().cuda()
    ref.load_state_dict(model.state_dict())
    compiled = tc.compile(model, mode="reduce-overhead")
    kept, kept_ref = [], []
    for _ in range(5):
        xs = [torch.randn(16, 64, device="cuda") for _ in range(2)]
        outs = [compiled(x) for x in xs]
        sum(o.square().mean() for o in outs).backward()
        sum(ref(x).square().mean() for x in xs).backward()
        kept += outs
        kept_ref += [ref(x).detach() for x in xs]
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4)
    for a, b in zip(kept, kept_ref):
        torch.testing.assert_close(a.detach(), b, rtol=1e-4, atol=1e-4)
