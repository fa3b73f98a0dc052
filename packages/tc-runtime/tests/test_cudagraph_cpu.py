"""The CUDA-graph runtime's decisions and bookkeeping, on the CPU (a fake recorder stands in)."""

from __future__ import annotations

import logging

import pytest
import torch

from tc_runtime import cudagraphify
from tc_runtime.cudagraphs import Eager, Planner, Record, Replay, Warmup, signature
from tc_runtime.cudagraphs.mutation import same_bits
from tc_runtime.cudagraphs.plan import describe
from tc_runtime.testing import FakeRecorder, alias_outputs, graphed


def mlp(x, w):
    return torch.relu(x @ w) * 2, x.sum()


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.INFO, logger="tc.cudagraphs")
    return caplog


def test_replays_equal_plain_calls():
    w = torch.randn(4, 3)
    g = graphed(mlp, static=[1])
    for _ in range(4):
        x = torch.randn(2, 4)
        got, want = g(x, w), mlp(x, w)
        torch.testing.assert_close(got, want)
    assert len(g.recorder.graphs) == 1 and g.recorder.graphs[0].replays == 3


def test_one_graph_per_signature_recorded_lazily():
    g = graphed(lambda x, k: x * k)
    for n in (2, 3, 2, 3, 2, 3):
        x = torch.randn(n)
        torch.testing.assert_close(g(x, 2), x * 2)
    assert len(g.recorder.graphs) == 2  # recorded on the second call of each signature
    assert [graph.replays for graph in g.recorder.graphs] == [2, 2]
    g(torch.randn(4), 2)
    assert len(g.recorder.graphs) == 2  # a one-off shape is never recorded
    for _ in range(2):
        g(torch.randn(2), 3)  # a scalar is baked into a graph: a new signature
        g(torch.randn(2, dtype=torch.float64), 2)
        g(torch.randn(4, 2).t(), 2)  # other strides
    assert len(g.recorder.graphs) == 5


def test_shape_limit_then_plain_calls_logged_once(logs):
    g = graphed(lambda x: x + 1, max_graphs=2)
    for n in (1, 1, 2, 2, 3, 3, 4, 1):
        x = torch.randn(n)
        torch.testing.assert_close(g(x), x + 1)
    assert len(g.recorder.graphs) == 2
    reasons = [r for r in logs.messages if "shape limit" in r]
    assert len(reasons) == 2  # shapes (3,) and (4,), each once
    assert set(g.planner.fallbacks().values()) == {reasons[0].split("without a graph: ")[1]}


def test_cpu_tensors_fall_back_with_the_real_recorder(logs):
    g = cudagraphify(mlp, [torch.randn(2, 4), torch.randn(4, 3)], static_input_indices=[1])
    x, w = torch.randn(2, 4), torch.randn(4, 3)
    for _ in range(2):
        torch.testing.assert_close(g(x, w), mlp(x, w))
    assert [r for r in logs.messages if "CPU tensor" in r], logs.messages
    assert g.planner.graph_count == 0
    assert g.planner.states[signature((x, w))].eager_calls == 2


def test_mutated_input_falls_back_and_keeps_eager_semantics(logs):
    def bump(x):
        x.add_(1)
        return x * 2

    g = graphed(bump)
    x = torch.zeros(3)
    for step in range(1, 4):
        torch.testing.assert_close(g(x), torch.full((3,), 2.0 * step))
        torch.testing.assert_close(x, torch.full((3,), float(step)))  # the caller's tensor changed
    assert not g.recorder.graphs
    assert any("writes into non-static inputs [0]" in m for m in logs.messages)


def test_mutation_invisible_to_version_counters_found_by_value():
    def sneaky(x):
        x.data.add_(1)  # .data has its own version counter, like a raw kernel's write
        return x + 0

    g = graphed(sneaky)
    g(torch.zeros(3))
    g(torch.zeros(3))
    assert not g.recorder.graphs and g.planner.fallbacks()
    blind = graphed(sneaky, by_value=False)
    blind(torch.zeros(3))
    blind(torch.zeros(3))
    assert blind.recorder.graphs  # documented limit when the value check is off


def test_mutating_a_static_input_is_fine():
    def step(x, buf):
        buf.add_(x)
        return buf * 1

    buf = torch.zeros(3)
    g = graphed(step, static=[1])
    for _ in range(3):
        g(torch.ones(3), buf)
    torch.testing.assert_close(buf, torch.full((3,), 3.0))
    assert len(g.recorder.graphs) == 1


def test_moved_static_input_rerecords_then_falls_back(logs):
    g = graphed(lambda x, w: x @ w, static=[1], max_rerecords=2)
    x = torch.randn(2, 3)
    w = torch.randn(3, 3)
    g(x, w)
    g(x, w)
    for _ in range(4):
        w = torch.randn(3, 3)  # a new parameter tensor: new address
        torch.testing.assert_close(g(x, w), x @ w)
    assert len(g.recorder.graphs) == 3  # first + 2 re-records
    assert any("moved after 3 recordings" in m for m in logs.messages)
    assert sum("moved (new data_ptr)" in m for m in logs.messages) == 2


def test_capture_error_falls_back_with_reason(logs):
    rec = FakeRecorder(fail=RuntimeError("operation not permitted when stream is capturing\nmore"))
    g = graphed(lambda x: x.sin(), recorder=rec)
    x = torch.randn(5)
    torch.testing.assert_close(g(x), x.sin())
    torch.testing.assert_close(g(x), x.sin())
    (reason,) = g.planner.fallbacks().values()
    assert reason == "capture failed: RuntimeError: operation not permitted when stream is capturing"
    assert sum("capture failed" in m for m in logs.messages) == 1


def test_failed_warm_up_is_retried_before_recording():
    calls = []

    def flaky(x):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first call fails")
        x.add_(1)
        return x

    g = graphed(flaky)
    with pytest.raises(RuntimeError):
        g(torch.zeros(2))
    g(torch.zeros(2))  # checked again: the mutation is found, no graph
    assert not g.recorder.graphs and g.planner.fallbacks()


def test_outputs_requiring_grad_fall_back():
    w = torch.randn(3, requires_grad=True)
    g = graphed(lambda x: x * w)
    y = g(torch.randn(3))
    y.sum().backward()
    assert w.grad is not None and not g.recorder.graphs
    with torch.no_grad():
        g(torch.randn(3))
        g(torch.randn(3))
    assert len(g.recorder.graphs) == 1  # grad mode is part of the signature


def test_unsupported_arguments_run_plainly_logged_once(logs):
    g = graphed(lambda xs: xs[0] + 1)
    for _ in range(3):
        g([torch.ones(2)])
    assert sum("input 0 is a list" in m for m in logs.messages) == 1


def test_expanded_input_falls_back():
    g = graphed(lambda x: x + 1)
    x = torch.randn(1, 4).expand(3, 4)
    torch.testing.assert_close(g(x), x + 1)
    assert "expanded" in next(iter(g.planner.fallbacks().values()))


def test_clone_outputs_are_never_overwritten():
    g = graphed(lambda x: {"y": (x * 2,), "n": 7})
    kept = [g(torch.full((2,), float(i))) for i in range(4)]
    for i, out in enumerate(kept):
        assert out["n"] == 7
        torch.testing.assert_close(out["y"][0], torch.full((2,), 2.0 * i))


def test_alias_outputs_poisoned_when_their_graph_replays():
    outputs, poison = alias_outputs()
    g = graphed(lambda x: x * 2, outputs=outputs)
    g(torch.ones(2))  # record: plain result, not an alias
    first = g(torch.ones(2))
    where = first.data_ptr()
    assert not poison.poisoned
    second = g(torch.ones(2))
    assert poison.has(first) and not poison.has(second)
    assert "was overwritten by a later replay" in poison.poisoned[0][1]
    assert where == second.data_ptr()  # no copy: that is the point of alias mode


def test_alias_outputs_can_be_fed_back():
    outputs, poison = alias_outputs()
    g = graphed(lambda h: h * 0.5 + 1, outputs=outputs)
    h, want = torch.zeros(3), torch.zeros(3)
    for _ in range(5):
        h, want = g(h), want * 0.5 + 1
        torch.testing.assert_close(h, want)
    assert len(poison.poisoned) == 3  # every handed-out alias but the last


def test_alias_ledger_follows_capture_order_across_callables():
    outputs, poison = alias_outputs()
    fwd = graphed(lambda x: x + 1, outputs=outputs)
    bwd = graphed(lambda x: x * 3, outputs=outputs)  # same pool, recorded later
    x = torch.ones(2)
    fwd(x), bwd(x)  # warm-ups
    f1, b1 = fwd(x), bwd(x)  # recorded in this order
    b2 = bwd(x)
    assert poison.has(b1) and not poison.has(f1)  # a later graph cannot touch an earlier one's outputs
    f2 = fwd(x)  # ...but an earlier graph's temporaries may hold the later one's outputs
    assert poison.has(f1) and poison.has(b2) and not poison.has(f2)


def test_dropped_graph_poisons_its_aliases():
    outputs, poison = alias_outputs()
    g = graphed(lambda x, w: x * w, static=[1], outputs=outputs, max_rerecords=0)
    x = torch.ones(2)
    g(x, torch.ones(2))
    w = torch.ones(2)
    g(x, w)
    held = g(x, w)
    g(x, torch.ones(2))  # the static input moved, no re-record allowed: graph dropped
    assert poison.has(held)
    g.clear()
    assert not g.planner.states


def test_planner_decisions():
    p = Planner(max_graphs=1, max_rerecords=0)
    assert p.decide(("a",), (1,)) == Warmup()
    assert p.decide(("a",), (1,)) == Warmup()  # the first warm-up did not finish
    p.warmed(("a",))
    assert isinstance(p.decide(("a",), (1,)), Record)
    p.recorded(("a",), "graph-a", (1,))
    assert p.decide(("a",), (1,)) == Replay("graph-a")
    limit = p.decide(("b",), ())
    assert isinstance(limit, Eager) and limit.first
    assert p.decide(("b",), ()) == Eager(limit.reason, first=False)
    moved = p.decide(("a",), (2,))
    assert isinstance(moved, Eager) and moved.dropped == "graph-a" and p.graph_count == 0
    assert p.states[("a",)].replays == 1 and p.states[("b",)].eager_calls == 2


def test_signature_and_description():
    x = torch.randn(2, 3)
    assert signature((x, 1)) == signature((torch.randn(2, 3), 1))
    assert signature((x, 1)) != signature((x, 1.0))
    assert signature((x, object())).startswith("input 1 is a object")
    assert describe(signature((x, 2))) == "(float32[2, 3]@cpu, 2)"


def test_same_bits():
    nan = torch.tensor([float("nan"), 1.0])
    assert same_bits(nan, nan.clone())
    assert not same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert same_bits(torch.tensor([1 + 2j]), torch.tensor([1 + 2j]))
    assert not same_bits(torch.tensor([True, False]), torch.tensor([True, True]))


def test_alias_mode_needs_cuda_build():
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(RuntimeError, match="alias"):
        cudagraphify(lambda x: x, [torch.ones(1)], output_mode="alias")
    with pytest.raises(ValueError):
        cudagraphify(lambda x: x, [torch.ones(1)], output_mode="fast")
    with pytest.raises(IndexError):
        cudagraphify(lambda x: x, [torch.ones(1)], static_input_indices=[3])


# ---- the last signature, checked in C++ (plan.LastSignature) ----------------------------------
def test_the_last_signature_is_reused_only_for_arguments_that_have_it():
    from tc_runtime.cudagraphs.plan import LastSignature

    x, w = torch.randn(4, 3), torch.randn(3, requires_grad=True)
    last = LastSignature()
    assert last.get((x, w)) is None
    sig = signature((x, w))
    last.note(sig, (x, w))
    assert last.get((x, w)) == sig and last.get((x.clone(), w.detach().requires_grad_())) == sig
    for other in [(x.t().contiguous().t(), w),  # strides
                  (x[:3], w), (x.double(), w), (x, w.detach()),  # shape, dtype, requires_grad
                  (x, w, x), (x,), (x, 3)]:  # count, a non-tensor
        assert last.get(other) is None, other
    with torch.no_grad():
        assert last.get((x, w)) is None  # grad mode is part of the signature
    x.resize_(2, 6)  # metadata changed in place, same tensor object
    assert last.get((x, w)) is None


def test_the_last_signature_keeps_no_tensor_alive_and_is_not_rebuilt_for_refused_arguments():
    import weakref

    from tc_runtime.cudagraphs import plan

    x = torch.randn(5)
    last = plan.LastSignature()
    last.note(signature((x, x)), (x, x))  # one tensor twice: torch's check refuses it
    known = last._known
    assert last.get((x, x)) is None
    last.note(signature((x, x)), (x, x))
    assert last._known is known  # the same signature: not built again on every call
    ref = weakref.ref(x)
    del x
    assert ref() is None  # a replay's liveness counts storage holders: the check must hold none


def test_a_graphed_call_after_an_in_place_resize_is_no_replay():
    g = graphed(lambda x: x * 2)
    x = torch.randn(4, 3)
    for _ in range(3):
        torch.testing.assert_close(g(x), x * 2)  # warm-up, record, replay
    assert g.planner.states[signature((x,))].replays == 1
    x.resize_(2, 6)
    torch.testing.assert_close(g(x), x * 2)  # a new signature: a plain warm-up call
    assert len(g.planner.states) == 2
