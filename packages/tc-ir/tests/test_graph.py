import operator

import pytest
import torch

import tc_ir
from tc_ir import Graph, TensorSpec

aten = torch.ops.aten
F32 = TensorSpec((4, 8), torch.float32)


def small_graph():
    g = Graph()
    x = g.input("x", F32)
    y = g.input("y", F32)
    a = g.call(aten.add.Tensor, x, y)
    b = g.call(aten.relu.default, a)
    g.output((b, {"sum": a}))
    return g, x, y, a, b


def test_users_follow_args():
    g, x, y, a, b = small_graph()
    assert list(x.users) == [a] and list(a.users) == [b]
    b.args = (x,)
    assert list(a.users) == [] and set(x.users) == {a, b}
    b.kwargs = {"alpha": y}
    assert b in y.users
    b.kwargs = {}
    assert b not in y.users


def test_replace_all_uses_updates_users_and_output():
    g, x, y, a, b = small_graph()
    c = g.call(aten.mul.Tensor, x, y)
    a.replace_all_uses_with(c)
    assert b.args == (c,) and not a.users
    assert g.outputs[1]["sum"] is c
    g.erase(a)
    with pytest.raises(tc_ir.VerifyError, match="reads %mul before it is defined"):
        g.verify()
    g = tc_ir.topo_sort(g)
    g.verify()
    assert "add" not in str(g)


def test_erase_refuses_used_node():
    g, x, y, a, b = small_graph()
    with pytest.raises(ValueError, match="still used"):
        g.erase(a)


def test_specs_inferred_on_meta():
    g = Graph()
    x = g.input("x", TensorSpec((3, 5), torch.float16))
    s = g.call(aten.sum.dim_IntList, x, [1], True)
    mm = g.call(torch.matmul, x, g.call("t", x))
    assert s.spec == TensorSpec((3, 1), torch.float16)
    assert mm.spec.shape == (3, 3)
    pair = g.call(aten.var_mean.correction, x, [0])
    assert isinstance(pair.spec, tuple) and pair.spec[0].shape == (5,)


def test_inserting_before_and_unique_names():
    g, x, y, a, b = small_graph()
    with g.inserting_before(b):
        n = g.call(aten.neg.default, a, name="add")
    assert g.nodes.index(n) == g.nodes.index(b) - 1
    assert n.name == "add_1"


def test_names_are_sanitised():
    g = Graph()
    n = g.param("layer.0.weight", torch.nn.Parameter(torch.randn(2)))
    assert n.name == "layer_0_weight" and n.target == "layer.0.weight"
    assert g.call(operator.add, n, 1, name="class").name == "v_class"


def test_subgraphs_listed_once():
    g = Graph()
    x = g.input("x", F32)
    t, f = Graph("t"), Graph("f")
    for branch, fn in ((t, aten.sin.default), (f, aten.cos.default)):
        bx = branch.input("x", F32)
        branch.output(branch.call(fn, bx))
    c1 = g.call(tc_ir.ops.cond, True, t, f, (x,))
    g.output(g.call(tc_ir.ops.cond, False, t, f, (c1,)))
    assert [s.name for s in g.subgraphs()] == ["t", "f"]
    g.verify()


def test_copy_is_independent():
    g, x, y, a, b = small_graph()
    h = g.copy()
    assert h == g
    h.node("relu").args = (h.node("x"),)
    assert h != g and b.args == (a,)


def test_building_a_graph_never_runs_side_effects():
    g = Graph()
    node = g.call(torch._C._set_grad_enabled, False)
    assert torch.is_grad_enabled() and node.spec is None
    assert g.call(aten.zeros.default, [2, 3]).spec == TensorSpec((2, 3), torch.float32)
