"""Real CUDA graphs (marked ``cuda``; run on the GPU test host): results equal the plain callable."""

from __future__ import annotations

import pytest
import torch

from tc_runtime import cudagraphify, shared_pool

pytestmark = pytest.mark.cuda


def _mlp(width=64, depth=3):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).cuda()


def test_replay_equals_plain_calls():
    model = _mlp()
    g = cudagraphify(model, [torch.randn(8, 64, device="cuda")])
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(8, 64, device="cuda")
            torch.testing.assert_close(g(x), model(x))
    (state,) = g.planner.states.values()
    assert state.graph is not None and state.replays == 3 and not g.planner.fallbacks()


def test_multiple_shapes_and_nested_outputs():
    def fn(x, y):
        return {"sum": (x + y,), "prod": x * y, "n": 3}

    g = cudagraphify(fn, [torch.randn(2, device="cuda")] * 2)
    for _ in range(3):
        for n in (4, 16, 128):
            x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            out = g(x, y)
            torch.testing.assert_close(out["sum"][0], x + y)
            torch.testing.assert_close(out["prod"], x * y)
            assert out["n"] == 3
    assert g.planner.graph_count == 3


def test_static_inputs_read_in_place_and_rerecorded_when_moved():
    def fn(x, w, b):
        return torch.addmm(b, x, w)

    x = torch.randn(4, 8, device="cuda")
    w, b = torch.randn(8, 8, device="cuda"), torch.randn(8, device="cuda")
    g = cudagraphify(fn, [x, w, b], static_input_indices=[1, 2])
    for _ in range(3):
        torch.testing.assert_close(g(x, w, b), fn(x, w, b))
    w.copy_(torch.randn(8, 8, device="cuda"))  # an optimizer step: same memory, new values
    torch.testing.assert_close(g(x, w, b), fn(x, w, b))
    w2 = torch.randn(8, 8, device="cuda")  # a new tensor: the graph must be recorded again
    torch.testing.assert_close(g(x, w2, b), fn(x, w2, b))
    torch.testing.assert_close(g(x, w2, b), fn(x, w2, b))
    assert next(iter(g.planner.states.values())).records == 2


def test_static_input_mutated_exactly_once_per_call():
    def fn(x, running):
        running.mul_(0.5).add_(x)
        return running * 1

    running = torch.zeros(16, device="cuda")
    expected = torch.zeros(16, device="cuda")
    g = cudagraphify(fn, [torch.ones(16, device="cuda"), running], static_input_indices=[1])
    for _ in range(5):
        x = torch.randn(16, device="cuda")
        expected = expected * 0.5 + x
        torch.testing.assert_close(g(x, running), expected)
    torch.testing.assert_close(running, expected)
    assert g.planner.graph_count == 1


def test_clone_outputs_survive_later_replays():
    g = cudagraphify(lambda x: x * 2, [torch.ones(4, device="cuda")])
    xs = [torch.randn(4, device="cuda") for _ in range(5)]
    kept = [g(x) for x in xs]
    for x, y in zip(xs, kept):
        torch.testing.assert_close(y, x * 2)


def test_alias_outputs_raise_when_read_after_overwrite():
    g = cudagraphify(lambda x: x.sin(), [torch.ones(4, device="cuda")], output_mode="alias")
    x1, x2 = torch.randn(4, device="cuda"), torch.randn(4, device="cuda")
    g(x1)  # warm-up
    first = g(x1)
    kept = first.clone()
    second = g(x2)
    with pytest.raises(RuntimeError, match="overwritten by a later replay"):
        first.sum()
    torch.testing.assert_close(second, x2.sin())
    torch.testing.assert_close(kept, x1.sin())


@pytest.mark.xfail(reason="on torch 2.11 (H200) the second graph grew the pool as much as the first "
                          "(134 MB vs 136 MB): memory freed in one capture is not reused by the next", strict=False)
def test_graphs_share_one_pool():
    pool = shared_pool()
    snapshot = getattr(torch.cuda, "memory_snapshot", None)
    if snapshot is None or not snapshot() or "segment_pool_id" not in snapshot()[0]:
        pytest.skip("memory snapshots do not name pools in this torch")

    def pool_bytes():
        return sum(s["total_size"] for s in snapshot() if tuple(s.get("segment_pool_id", ())) == tuple(pool))

    def chain(x):  # large temporaries, small output
        return ((x.exp() * 2).sin() + 1).sum(dim=1)

    x = torch.randn(4096, 4096, device="cuda")
    first = cudagraphify(chain, [x], static_input_indices=[0])
    second = cudagraphify(lambda x: chain(x) * 3, [x], static_input_indices=[0])
    first(x), second(x)  # warm-ups
    before = pool_bytes()
    first(x)
    grown_first = pool_bytes() - before
    second(x)
    grown_second = pool_bytes() - before - grown_first
    torch.testing.assert_close(second(x), chain(x) * 3)
    assert grown_first >= 64 << 20, grown_first
    assert grown_second < grown_first // 4, (grown_first, grown_second)


def test_cpu_sync_during_capture_falls_back():
    def fn(x):
        if x.sum().item() > 0:  # a CPU sync: not allowed while capturing
            return x * 2
        return x * 3

    g = cudagraphify(fn, [torch.ones(4, device="cuda")])
    for _ in range(3):
        x = torch.randn(4, device="cuda")
        torch.testing.assert_close(g(x), fn(x))
    (reason,) = g.planner.fallbacks().values()
    assert "synchronises with the CPU" in reason
    ok = cudagraphify(lambda x: x + 1, [x])  # CUDA still healthy: the next capture works
    for _ in range(3):
        torch.testing.assert_close(ok(x), x + 1)
    assert ok.planner.graph_count == 1


def test_mutated_input_falls_back_on_cuda():
    def fn(x):
        x.add_(1)
        return x.sum()

    g = cudagraphify(fn, [torch.zeros(4, device="cuda")])
    x = torch.zeros(4, device="cuda")
    for step in range(1, 4):
        g(x)
        torch.testing.assert_close(x, torch.full((4,), float(step), device="cuda"))
    assert g.planner.fallbacks()


def test_training_step_forward_and_backward_graphs():
    """A forward and a backward graph (as tc's autograd wrapper would make) sharing the pool."""
    torch.manual_seed(0)
    w = torch.randn(32, 32, device="cuda")

    def forward(x, w):
        h = x @ w
        return h.relu(), h

    def backward(grad_out, h, x, w):
        grad_h = grad_out * (h > 0)
        return grad_h @ w.t(), x.t() @ grad_h

    fwd = cudagraphify(forward, [torch.ones(8, 32, device="cuda"), w], static_input_indices=[1])
    bwd = cudagraphify(backward, [torch.ones(8, 32, device="cuda")] * 3 + [w], static_input_indices=[3])
    for _ in range(4):
        x = torch.randn(8, 32, device="cuda", requires_grad=True)
        wr = w.clone().requires_grad_()
        y_ref = (x @ wr).relu()
        g = torch.randn_like(y_ref)
        y_ref.backward(g)
        with torch.no_grad():
            y, h = fwd(x.detach(), w)
            gx, gw = bwd(g, h, x.detach(), w)
        torch.testing.assert_close(y, y_ref)
        torch.testing.assert_close(gx, x.grad)
        torch.testing.assert_close(gw, wr.grad)
    assert fwd.planner.graph_count == bwd.planner.graph_count == 1
