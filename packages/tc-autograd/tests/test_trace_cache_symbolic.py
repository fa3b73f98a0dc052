"""The trace cache for graphs with size symbols: one entry serves every size its guards admit,
and the guards come back exactly, so a read-back trace never runs at sizes it did not admit.

A plain dict stands in for the artifact store; a new ``aot`` on the same store is what a fresh
process does (the cross-process test through the umbrella is ``tests/test_dynamic_warm_cache.py``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_trace_cache import DictStore

import tc_autograd
import tc_autograd.api
import tc_ir
from tc_autograd import cache as trace_cache

s0, s1 = tc_ir.sym("s0"), tc_ir.sym("s1")
TOL = dict(atol=2e-5, rtol=2e-4)


@pytest.fixture
def traces(monkeypatch):
    """How many times tc_autograd traced (a read-back variant traces nothing)."""
    count = [0]
    original = tc_autograd.api._trace

    def counted(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(tc_autograd.api, "_trace", counted)
    return count


def _leaf(t: torch.Tensor, grad: bool = True) -> torch.Tensor:
    return t.detach().clone().requires_grad_(grad)


def mlp_graph() -> tc_ir.Graph:
    g = tc_ir.Graph("mlp")
    x = g.input("x", tc_ir.TensorSpec((s0, 8)))
    w = g.input("w", tc_ir.TensorSpec((16, 8), requires_grad=True))
    h = g.call(F.gelu, g.call(F.linear, x, w))
    g.output(g.call(torch.softmax, g.call("view", h, [s0 * 4, 4]), -1))
    return g


def mlp_eager(x, w):
    return torch.softmax(F.gelu(F.linear(x, w)).view(x.shape[0] * 4, 4), -1)


@pytest.mark.parametrize("train", [True, False])
def test_a_symbolic_trace_is_read_back_and_serves_sizes_never_traced(traces, train):
    store, w = DictStore(), torch.randn(16, 8, requires_grad=True)
    with torch.set_grad_enabled(train):
        cold = tc_autograd.aot(mlp_graph(), [torch.randn(5, 8, requires_grad=train), w], cache=store)
        assert store.puts == 1 and traces[0] == 1
        warm = tc_autograd.aot(mlp_graph(), [torch.randn(9, 8, requires_grad=train), w], cache=store)
    assert traces[0] == 1 and store.puts == 1, "the second aot reads the trace back"
    assert warm.guards == cold.guards
    graphs = ("forward_graph", "backward_graph", "inference_graph")
    assert [str(getattr(warm, a)) for a in graphs] == [str(getattr(cold, a)) for a in graphs]
    for n in [9, 3, 17, 2]:
        x = torch.randn(n, 8, requires_grad=train)
        xe, we = _leaf(x, train), _leaf(w)
        with torch.set_grad_enabled(train):
            out, want = warm(x, w), mlp_eager(xe, we)
        torch.testing.assert_close(out, want, **TOL)
        if train:
            cot = torch.randn_like(want)
            out.backward(cot)
            want.backward(cot)
            torch.testing.assert_close(x.grad, xe.grad, **TOL)
            torch.testing.assert_close(w.grad, we.grad, **TOL)
            w.grad = None
    assert traces[0] == 1 and store.puts == 1


def add_view_graph() -> tc_ir.Graph:
    """Adding [s0, 8] to [s1, 8] makes the trace assume s0 == s1 (a guard of the entry)."""
    g = tc_ir.Graph("g")
    x = g.input("x", tc_ir.TensorSpec((s0, 8)))
    y = g.input("y", tc_ir.TensorSpec((s1, 8), requires_grad=True))
    g.output(g.call(torch.mul, g.call(torch.add, x, y), 2.0))
    return g


def test_guards_are_read_back_exactly_and_still_refuse(traces):
    store = DictStore()
    cold = tc_autograd.aot(add_view_graph(), [torch.randn(6, 8), torch.randn(6, 8, requires_grad=True)], cache=store)
    assert [str(g) for g in cold.guards] in (["Eq(s0, s1)"], ["Eq(s1, s0)"])
    warm = tc_autograd.aot(add_view_graph(), [torch.randn(3, 8), torch.randn(3, 8, requires_grad=True)], cache=store)
    assert traces[0] == 1 and warm.guards == cold.guards
    assert warm.last.guard([torch.randn(4, 8), torch.randn(4, 8)])
    assert not warm.last.guard([torch.randn(4, 8), torch.randn(5, 8)])
    # y of size 1 broadcasts (eager allows it): the cached trace's guard refuses it, a new trace runs
    x, y = torch.randn(5, 8), torch.randn(1, 8, requires_grad=True)
    ye = _leaf(y)
    out, want = warm(x, y), (x + ye) * 2.0
    torch.testing.assert_close(out, want)
    out.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(y.grad, ye.grad)
    assert traces[0] == 2 and store.puts == 2, "traced again, stored in the key's next slot"


def relu_by_size(x):
    """A decomposition choosing by size (as kernel choices do): a guard ``s0 > 4`` in the trace."""
    if x.shape[0] > 4:
        return torch.ops.aten.clamp_min.default(x, 0)
    return torch.ops.aten.where.self(x > 0, x, torch.ops.aten.zeros_like.default(x))


def test_each_trace_for_refused_sizes_is_read_back_from_its_slot(traces):
    """Two traces of one variant (each side of ``s0 > 4``); a fresh aot finds each of them."""

    def graph():
        g = tc_ir.Graph("branch")
        g.output(g.call(torch.relu, g.input("x", tc_ir.TensorSpec((s0, 3)))))
        return g

    store, table = DictStore(), {torch.ops.aten.relu.default: relu_by_size}
    cold = tc_autograd.aot(graph(), [torch.randn(6, 3)], cache=store, decompositions=table)
    cold(torch.randn(3, 3))
    assert traces[0] == 2 and store.puts == 2
    assert sorted(key[-2:] for _, key in store.data) == ["-0", "-1"]
    warm = tc_autograd.aot(graph(), [torch.randn(2, 3)], cache=store, decompositions=table)  # slot 1
    for n in [2, 9, 4, 5, 3]:
        x = torch.randn(n, 3)
        torch.testing.assert_close(warm(x), torch.relu(x))
    assert traces[0] == 2 and store.puts == 2
    assert [str(g) for g in warm.variants["inference"].guards] == ["s0 <= 4"]
    assert [str(g) for g in warm.variants["inference"].other.guards] == ["s0 > 4"]
    assert "clamp_min" in str(warm.variants["inference"].other.traced.graph)


def test_a_size_one_trace_is_pinned_and_never_serves_other_sizes(traces):
    def graph():
        g = tc_ir.Graph("g")
        g.output(g.call(torch.sum, g.input("x", tc_ir.TensorSpec((s0, 4))), 0))
        return g

    store = DictStore()
    tc_autograd.aot(graph(), [torch.randn(1, 4)], cache=store)
    warm = tc_autograd.aot(graph(), [torch.randn(5, 4)], cache=store)
    assert traces[0] == 2, "the entry for s0 == 1 does not serve s0 == 5"
    assert [str(g) for g in warm.guards] == []
    again = tc_autograd.aot(graph(), [torch.randn(1, 4)], cache=store)
    assert traces[0] == 2 and [str(g) for g in again.guards] == ["Eq(s0, 1)"]
    for n in [1, 7, 1, 2]:
        x = torch.randn(n, 4)
        torch.testing.assert_close(again(x), x.sum(0))


def test_the_key_holds_symbolic_specs_not_the_example_sizes():
    opts = {"partition": "min_cut", "decompositions": None}
    g, w = mlp_graph(), torch.randn(16, 8)
    key = trace_cache.trace_key(g, [torch.randn(5, 8), w], "inference", opts)
    assert key == trace_cache.trace_key(g, [torch.randn(11, 8), w], "inference", opts)
    # which dims are symbolic is part of the key (the graph's specs), as are the static inputs' layouts
    static = mlp_graph()
    static.inputs[0].spec = tc_ir.TensorSpec((5, 8))
    assert key != trace_cache.trace_key(static, [torch.randn(5, 8), w], "inference", opts)
    assert key != trace_cache.trace_key(g, [torch.randn(5, 8), w.t().contiguous().t()], "inference", opts)
    # an int input bound to a size symbol: its spec, not its value
    h = tc_ir.Graph("h")
    x = h.input("x", tc_ir.TensorSpec((s0, 8)))
    n = h.input("n", tc_ir.ScalarSpec(int, s0))
    h.output(h.call("view", x, [n, 2, 4]))
    assert trace_cache.trace_key(h, [torch.randn(3, 8), 3], "inference", opts) == \
        trace_cache.trace_key(h, [torch.randn(7, 8), 7], "inference", opts)


def test_an_entry_whose_guards_do_not_read_back_is_not_stored(monkeypatch):
    store = DictStore()
    monkeypatch.setattr(trace_cache, "_decode_guard", lambda v: tc_ir.spec.sympy.true)  # a lossy reader
    tc_autograd.aot(add_view_graph(), [torch.randn(6, 8), torch.randn(6, 8, requires_grad=True)], cache=store)
    assert store.puts == 0


def test_a_batch_norm_float_of_sizes_is_cached(traces):
    """Training batch norm over a symbolic batch holds ``SizeFloat(s0/(s0 - 1))`` once decomposed;
    its text reads back, so the trace is stored and serves other batch sizes."""
    decompositions = pytest.importorskip("tc_inductor").decompositions()

    def graph():
        g = tc_ir.Graph("bn")
        x = g.input("x", tc_ir.TensorSpec((s0, 4)))
        w, b, rm, rv = (g.input(name, tc_ir.TensorSpec((4,))) for name in ("w", "b", "rm", "rv"))
        g.output(g.call(F.batch_norm, x, rm, rv, w, b, True))
        return g

    store = DictStore()
    params = [torch.ones(4, requires_grad=True), torch.zeros(4, requires_grad=True)]
    tc_autograd.aot(graph(), [torch.randn(6, 4, requires_grad=True), *params, torch.zeros(4), torch.ones(4)],
                    cache=store, decompositions=decompositions)
    assert store.puts == 1
    rm, rv = torch.zeros(4), torch.ones(4)
    warm = tc_autograd.aot(graph(), [torch.randn(9, 4, requires_grad=True), *params, rm, rv], cache=store,
                           decompositions=decompositions)
    assert traces[0] == 1
    x = torch.randn(11, 4, requires_grad=True)
    rme, rve = rm.clone(), rv.clone()
    out = warm(x, *params, rm, rv)
    xe = _leaf(x)
    want = F.batch_norm(xe, rme, rve, params[0], params[1], True)
    torch.testing.assert_close(out, want, **TOL)
    torch.testing.assert_close((rm, rv), (rme, rve), **TOL)  # n / (n - 1) at n = 11, not the traced 6
    out.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(x.grad, xe.grad, **TOL)


def test_a_backward_taking_size_inputs_is_read_back(traces, caplog):
    """``x.sum()`` over [s0, 8]: its backward expands the cotangent to [s0, 8] and saves nothing,
    so s0 comes in as an int input of its own (``backward_sizes``). The entry's check counted the
    backward's inputs without them: every read-back was 'damaged' and traced again, with a warning."""
    def graph():
        g = tc_ir.Graph("sum")
        x = g.input("x", tc_ir.TensorSpec((s0, 8), requires_grad=True))
        g.output(g.call(torch.mul, g.call(torch.sum, x), 3.0))
        return g

    store = DictStore()
    cold = tc_autograd.aot(graph(), [torch.randn(5, 8, requires_grad=True)], cache=store)
    assert traces[0] == 1 and any(n.name.startswith("size_") for n in cold.backward_graph.inputs)
    with caplog.at_level("WARNING"):
        warm = tc_autograd.aot(graph(), [torch.randn(7, 8, requires_grad=True)], cache=store)
    assert traces[0] == 1 and not [r for r in caplog.records if "damaged" in r.getMessage()]
    for n in (7, 3):
        x = torch.randn(n, 8, requires_grad=True)
        warm(x).backward()
        torch.testing.assert_close(x.grad, torch.full((n, 8), 3.0))
