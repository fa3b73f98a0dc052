import operator

import pytest
import torch

import tc_ir
from tc_ir import Graph, TensorSpec

aten = torch.ops.aten
SPEC = TensorSpec((8,), torch.float32)


def test_dce_keeps_impure_and_outputs():
    g = Graph()
    x = g.input("x", SPEC)
    g.call(aten.exp.default, x)  # dead
    g.call("add_", x, 1.0)  # mutation: kept
    g.call(aten.rand.default, [3])  # advances the RNG: kept
    g.constant("unused", torch.ones(2))
    y = g.call(aten.neg.default, x)
    g.output(y)
    out = tc_ir.dce(g)
    names = [n.name for n in out.nodes]
    assert names == ["x", "add", "rand", "neg"]
    assert "unused" not in out.tensors and len(g.nodes) == 6  # input graph unchanged
    out.verify()


def test_cse_merges_pure_but_not_random():
    g = Graph()
    x = g.input("x", SPEC)
    a1 = g.call(aten.add.Tensor, x, 1.0)
    a2 = g.call(aten.add.Tensor, x, 1.0)
    a3 = g.call(aten.add.Tensor, x, 2.0)
    r1 = g.call(aten.rand_like.default, x)
    r2 = g.call(aten.rand_like.default, x)
    g.output((g.call(aten.mul.Tensor, a1, a2), g.call(aten.mul.Tensor, a2, a3), r1, r2))
    out = tc_ir.cse(g)
    m1, m2, d, e = out.outputs
    assert m1.args[0] is m1.args[1] is m2.args[0] and m2.args[1] is not m1.args[0] and d is not e
    out.verify()
    t = torch.randn(8)
    res = tc_ir.interpret(out, [t])
    torch.testing.assert_close(res[0], (t + 1) * (t + 1))


def test_cse_keeps_outputs_in_memory_of_their_own():
    """Equal outputs stay two calls (eager returns two tensors: a write to one must not show in
    the other), views of them too; an output equal to an inner value takes that value's place."""
    g = Graph()
    x = g.input("x", SPEC)
    inner = g.call(aten.exp.default, x)
    a1 = g.call(aten.add.Tensor, inner, 1.0)
    a2 = g.call(aten.add.Tensor, g.call(aten.exp.default, x), 1.0)
    v1 = g.call(aten.view.default, g.call(aten.sin.default, x), [2, 4])
    v2 = g.call(aten.view.default, g.call(aten.sin.default, x), [2, 4])
    late = g.call(aten.exp.default, x)  # an output equal to the inner value: merged into it
    g.output((a1, a2, v1, v2, late))
    out = tc_ir.cse(g, inplace=True)  # the same node objects, to compare
    o = out.outputs
    assert o[0] is not o[1] and o[1].args[0] is inner  # the inner exp is shared, the adds are not
    assert o[2] is not o[3] and o[2].args[0] is not o[3].args[0]
    assert o[4] is inner
    out.verify()
    t = torch.randn(8)
    res = tc_ir.interpret(out, [t])
    torch.testing.assert_close(res[1], t.exp() + 1)
    torch.testing.assert_close(res[3], t.sin().view(2, 4))


def test_topo_sort_restores_order_and_detects_cycles():
    g = Graph()
    x = g.input("x", SPEC)
    a = g.call(aten.relu.default, x)
    b = g.call(aten.neg.default, a)
    g.output(b)
    g.nodes.reverse()
    fixed = tc_ir.topo_sort(g)
    assert [n.name for n in fixed.nodes] == ["x", "relu", "neg"]
    fixed.verify()
    cyc = fixed.copy()
    cyc.node("relu").args = (cyc.node("neg"),)
    with pytest.raises(ValueError, match="cycle"):
        tc_ir.topo_sort(cyc)


def test_extract_subgraph_runs_like_the_region():
    g = Graph()
    x = g.input("x", SPEC)
    w = g.param("w", torch.nn.Parameter(torch.randn(8)))
    a = g.call(aten.mul.Tensor, x, w)
    b = g.call(aten.exp.default, a)
    c = g.call(aten.sin.default, b)
    d = g.call(aten.add.Tensor, c, a)
    g.output(d)
    region = tc_ir.extract(g, [w, b, c, a])
    region.verify()
    assert region.meta["inputs_from"] == ["x"]
    assert region.meta["outputs_to"] == ["mul", "sin"]
    t = torch.randn(8)
    mul, sin = tc_ir.interpret(region, [t])
    torch.testing.assert_close(sin, torch.sin(torch.exp(t * g.tensors["w"])))


def test_dependency_graph_is_a_dag_of_uses():
    g = Graph()
    x = g.input("x", SPEC)
    a = g.call(operator.add, x, x)
    b = g.call(operator.mul, a, x)
    g.output(b)
    dag = tc_ir.dependency_graph(g)
    assert set(dag.edges) == {(x, a), (x, b), (a, b)}


def test_lift_held_makes_inputs_after_the_others():
    g = Graph()
    w = g.param("w", torch.nn.Parameter(torch.randn(8)))
    x = g.input("x", SPEC)
    k = g.constant("k", 3.0)  # not a tensor: stays held
    b = g.constant("b", torch.randn(8))
    g.output(g.call(aten.add.Tensor, g.call(aten.mul.Tensor, x, w), g.call(aten.mul.Tensor, b, k)))
    lifted, values = tc_ir.lift_held(g)
    lifted.verify()
    assert [n.name for n in lifted.inputs] == ["x", "w_in", "b_in"]
    assert [n.meta["held"] for n in lifted.inputs[1:]] == ["w", "b"]
    assert values[0] is g.tensors["w"] and set(lifted.tensors) == {"k"}
    t = torch.randn(8)
    torch.testing.assert_close(tc_ir.interpret(lifted, [t, *values]), tc_ir.interpret(g, [t]))


def test_cse_keeps_calls_of_targets_without_an_exact_name():
    def local_double(x):  # a local function: no importable name tells it apart from another
        return x * 2

    g = Graph()
    x = g.input("x", TensorSpec((3,), torch.float32))
    y = g.call(aten.neg.default, x)
    g.output(g.call(aten.mul.Tensor, g.call(local_double, y), g.call(local_double, y)))
    merged = tc_ir.passes.cse(g)
    assert len(merged.calls) == 4
    t = torch.randn(3)
    torch.testing.assert_close(tc_ir.interpret(merged, [t]), (-t * 2) ** 2)
