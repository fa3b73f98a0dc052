"""Each corruption a pass could leave behind is caught, and the message names node and rule."""

import pytest
import torch

import tc_ir
from tc_ir import Graph, TensorSpec, VerifyError

aten = torch.ops.aten
SPEC = TensorSpec((4,), torch.float32)


def good():
    g = Graph()
    x = g.input("x", SPEC)
    a = g.call(aten.relu.default, x)
    b = g.call(aten.mul.Tensor, a, 2.0)
    g.output(b)
    return g, x, a, b


def test_good_graph_passes():
    good()[0].verify()


def corrupt_order(g, x, a, b):
    g.nodes.remove(a)
    g.nodes.append(a)


def corrupt_duplicate_name(g, x, a, b):
    b.name = "relu"


def corrupt_spec(g, x, a, b):
    a.spec = TensorSpec((5,), torch.float32)


def corrupt_dtype(g, x, a, b):
    b.spec = TensorSpec((4,), torch.float16)


def corrupt_target(g, x, a, b):
    a.target = lambda t: t


def corrupt_users(g, x, a, b):
    x.users.clear()


def corrupt_stale_user(g, x, a, b):
    b.users[a] = None


def corrupt_held(g, x, a, b):
    with g.inserting_before(a):
        w = g.param("w", torch.nn.Parameter(torch.ones(4)))
    del g.tensors["w"]
    b.args = (a, w)


def corrupt_output(g, x, a, b):
    other = Graph("other")
    g.output(other.input("y", SPEC))


def corrupt_cross_graph(g, x, a, b):
    other = Graph("other")
    b.args = (other.input("y", SPEC), 2.0)


def corrupt_unprintable(g, x, a, b):
    b.args = (a, object())


def corrupt_bad_name(g, x, a, b):
    a.name = "not valid"


def corrupt_bad_spec_kind(g, x, a, b):
    a.spec = "f32[4]"


def corrupt_held_spec(g, x, a, b):
    with g.inserting_before(a):
        w = g.constant("w", torch.ones(4))
    w.spec = TensorSpec((3,), torch.float32)
    b.args = (a, w)


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (corrupt_order, "node %mul: reads %relu before it is defined"),
        (corrupt_duplicate_name, "node %relu: name is defined twice"),
        (corrupt_spec, r"node %relu: spec says f32\[5\] cpu but aten.relu.default gives f32\[4\] cpu"),
        (corrupt_dtype, r"node %mul: spec says f16\[4\] cpu but aten.mul.Tensor gives f32\[4\] cpu"),
        (corrupt_target, "node %relu: target does not resolve"),
        (corrupt_users, "node %relu: reads %x, whose users do not list it"),
        (corrupt_stale_user, "node %mul: users lists %relu, which does not read it"),
        (corrupt_held, "node %w: holds 'w', which is not in graph.tensors"),
        (corrupt_output, "node %y: is returned but not defined in this graph"),
        (corrupt_cross_graph, "node %mul: reads %y of graph other"),
        (corrupt_unprintable, "node %mul: tc_ir cannot write a object"),
        (corrupt_bad_name, "node %not valid: name is not an identifier"),
        (corrupt_bad_spec_kind, "node %relu: spec 'f32\\[4\\]' is not a TensorSpec"),
        (corrupt_held_spec, "node %w: spec f32\\[3\\] cpu differs from the held value's"),
    ],
)
def test_each_corruption_is_named(corrupt, message):
    g, x, a, b = good()
    corrupt(g, x, a, b)
    with pytest.raises(VerifyError, match=f"graph main, {message}"):
        g.verify()


def test_subgraph_problems_name_the_subgraph():
    g = Graph()
    x = g.input("x", SPEC)
    branch = Graph("branch")
    bx = branch.input("x", SPEC)
    bad = branch.call(aten.neg.default, bx)
    bad.spec = TensorSpec((2,), torch.float32)
    branch.output(bad)
    g.output(g.call(tc_ir.ops.cond, True, branch, branch, (x,)))
    with pytest.raises(VerifyError, match="graph branch, node %neg: spec says"):
        g.verify()


def test_duplicate_subgraph_names_are_rejected():
    g = Graph()
    x = g.input("x", SPEC)
    t, f = Graph("b"), Graph("b")
    for branch in (t, f):
        branch.output(branch.input("x", SPEC))
    g.output(g.call(tc_ir.ops.cond, True, t, f, (x,)))
    with pytest.raises(VerifyError, match="sub-graph names are not unique"):
        g.verify()
