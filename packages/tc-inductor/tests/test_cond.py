"""``tc_ir.ops.cond`` nodes over ATen sub-graphs: both branches compiled, the wrapper picks one."""

from __future__ import annotations

import pytest
import torch
from inductor_helpers import assert_same

import tc_inductor
import tc_ir

aten = torch.ops.aten
S = tc_ir.TensorSpec


def branch(name, fn, specs):
    b = tc_ir.Graph(name)
    b.output(fn(b, *[b.input(f"a{i}", s) for i, s in enumerate(specs)]))
    return b


def cond_graph(specs, true_fn, false_fn, pred_fn=None):
    g = tc_ir.Graph("g")
    xs = [g.input(f"x{i}", s) for i, s in enumerate(specs)]
    pred = pred_fn(g, *xs) if pred_fn else g.call(aten.gt.Scalar, g.call(aten.sum.default, xs[0]), 0)
    out = g.call(tc_ir.ops.cond, pred, branch("t", true_fn, specs), branch("f", false_fn, specs), tuple(xs))
    return g, out


def sin_mul(b, x, w):
    return b.call(aten.sin.default, b.call(aten.mul.Tensor, x, w))


def cos_add(b, x, w):
    return b.call(aten.add.Tensor, b.call(aten.cos.default, x), w)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_cond_takes_each_branch(backend):
    specs = (S((4, 8)), S((4, 8)))
    g, out = cond_graph(specs, sin_mul, cos_add)
    g.output(g.call(aten.mul.Tensor, out, 2.0))
    k = tc_inductor.compile(g, [torch.rand(4, 8), torch.randn(4, 8)], {"backend": backend})
    for sign in (1, -1):
        inputs = [sign * torch.rand(4, 8), torch.randn(4, 8)]
        assert_same(k(*inputs), tc_ir.interpret(g, inputs))
    assert "cond" in k.source


def test_cond_branches_returning_tuples():
    specs = (S((5,)), S((5,)))

    def true_fn(b, x, w):
        return (b.call(aten.add.Tensor, x, w), b.call(aten.sum.default, x))

    def false_fn(b, x, w):
        return (b.call(aten.sub.Tensor, x, w), b.call(aten.amax.default, w, [0]))

    g, out = cond_graph(specs, true_fn, false_fn)
    g.output((g.call(aten.relu.default, g.call(_getitem(), out, 0)), g.call(_getitem(), out, 1)))
    k = tc_inductor.compile(g, [torch.rand(5), torch.randn(5)])
    for sign in (1, -1):
        inputs = [sign * torch.rand(5), torch.randn(5)]
        assert_same(k(*inputs), tc_ir.interpret(g, inputs))


def test_cond_on_a_bool_tensor_input_and_a_branch_returning_its_input():
    specs = (S((3, 3)), S((), torch.bool))
    g = tc_ir.Graph("g")
    x, p = g.input("x", specs[0]), g.input("p", specs[1])
    t = branch("t", lambda b, a: b.call(aten.exp.default, a), specs[:1])
    f = branch("f", lambda b, a: a, specs[:1])
    g.output(g.call(tc_ir.ops.cond, p, t, f, (x,)))
    k = tc_inductor.compile(g, [torch.randn(3, 3), torch.tensor(True)])
    for flag in (True, False):
        inputs = [torch.randn(3, 3), torch.tensor(flag)]
        assert_same(k(*inputs), tc_ir.interpret(g, inputs))


def test_cond_branches_share_kernels_by_source():
    specs = (S((4, 8)), S((4, 8)))
    g, out = cond_graph(specs, sin_mul, sin_mul)
    g.output(out)
    k = tc_inductor.compile(g, [torch.rand(4, 8), torch.randn(4, 8)])
    inputs = [torch.rand(4, 8), torch.randn(4, 8)]
    assert_same(k(*inputs), tc_ir.interpret(g, inputs))


def _getitem():
    import operator

    return operator.getitem
