"""The interpreter against eager torch, at torch level and ATen level, with symbolic sizes."""

import operator

import pytest
import torch
import torch.nn.functional as F

import tc_ir
from tc_ir import Graph, TensorSpec, sym

aten = torch.ops.aten


@pytest.mark.parametrize("shape", [(3,), (2, 5), (4, 1, 7)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_aten_level_softmax_matches_eager(shape, dtype):
    g = Graph()
    x = g.input("x", TensorSpec(shape, dtype))
    m = g.call(aten.amax.default, x, [-1], True)
    e = g.call(aten.exp.default, g.call(aten.sub.Tensor, x, m))
    g.output(g.call(aten.div.Tensor, e, g.call(aten.sum.dim_IntList, e, [-1], True)))
    g.verify()
    t = torch.randn(shape, dtype=dtype)
    loose = {"atol": 1e-2, "rtol": 3e-2} if dtype == torch.bfloat16 else {}
    expect = torch.softmax(t.double(), -1).to(dtype)  # decomposed bf16 rounds differently from fused
    torch.testing.assert_close(tc_ir.interpret(g, [t]), expect, **loose)


@pytest.mark.parametrize("batch", [1, 3])
def test_torch_level_mlp_matches_eager(batch):
    lin1, lin2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
    g = Graph()
    x = g.input("x", TensorSpec((batch, 8), torch.float32))
    params = {name: g.input(name.replace(".", "_"), TensorSpec.from_tensor(p))
              for name, p in [("l1.weight", lin1.weight), ("l1.bias", lin1.bias),
                              ("l2.weight", lin2.weight), ("l2.bias", lin2.bias)]}
    h = g.call(F.linear, x, params["l1.weight"], params["l1.bias"])
    h = g.call(F.gelu, h, kwargs={"approximate": "tanh"})
    h = g.call("transpose", h, 0, 1)
    h = g.call("contiguous", h)
    h = g.call(operator.getitem, h, (slice(None), slice(0, batch)))
    y = g.call(F.linear, g.call("t", h), params["l2.weight"], params["l2.bias"])
    g.output({"y": y, "shape": g.call("size", y, 0)})
    g.verify()
    t = torch.randn(batch, 8)
    got = tc_ir.interpret(g, [t, lin1.weight, lin1.bias, lin2.weight, lin2.bias])
    torch.testing.assert_close(got["y"], lin2(F.gelu(lin1(t), approximate="tanh")))
    assert got["shape"] == batch


def test_held_params_and_constants():
    w = torch.nn.Parameter(torch.randn(3, 3))
    g = Graph()
    x = g.input("x", TensorSpec((3,), torch.float32))
    g.output(g.call(torch.mv, g.param("w", w), g.call(operator.mul, x, g.constant("k", 2.0))))
    t = torch.randn(3)
    torch.testing.assert_close(tc_ir.interpret(g, [t]), w @ (t * 2))


@pytest.mark.parametrize("n, m", [(2, 3), (5, 1), (7, 4)])
def test_symbolic_sizes_bind_from_inputs(n, m):
    s0, s1 = sym("s0"), sym("s1")
    g = Graph()
    x = g.input("x", TensorSpec((s0, s1), torch.float32))
    y = g.input("y", TensorSpec((s1,), torch.float32))
    flat = g.call(aten.view.default, g.call(aten.add.Tensor, x, y), [s0 * s1])
    g.output(g.call(aten.mul.Tensor, flat, 3.0))
    tx, ty = torch.randn(n, m), torch.randn(m)
    torch.testing.assert_close(tc_ir.interpret(g, [tx, ty]), ((tx + ty) * 3.0).reshape(-1))


def test_symbol_mismatch_and_wrong_inputs_are_clear():
    s0 = sym("s0")
    g = Graph()
    x = g.input("x", TensorSpec((s0,), torch.float32))
    y = g.input("y", TensorSpec((s0, 2), torch.float32))
    g.output(g.call(aten.add.Tensor, x, y))
    with pytest.raises(tc_ir.InterpretError, match="input %y: size 0 should be s0, got 4"):
        tc_ir.interpret(g, [torch.randn(3), torch.randn(4, 2)])
    with pytest.raises(tc_ir.InterpretError, match="takes 2 inputs, got 1"):
        tc_ir.interpret(g, [torch.randn(3)])
    with pytest.raises(tc_ir.InterpretError, match="expected 2 dims"):
        tc_ir.interpret(g, [torch.randn(3), torch.randn(3)])


def test_failing_node_is_named():
    g = Graph()
    x = g.input("x", TensorSpec((3,), torch.float32))
    g.output(g.call(aten.mm.default, x, x, spec=None))
    with pytest.raises(tc_ir.InterpretError, match="node %mm"):
        tc_ir.interpret(g, [torch.randn(3)])


def test_cond_runs_the_taken_branch():
    g = Graph()
    p = g.input("p", TensorSpec((), torch.bool))
    x = g.input("x", TensorSpec((4,), torch.float32))
    branches = []
    for name, fn in (("then", aten.sin.default), ("other", aten.cos.default)):
        b = Graph(name)
        b.output(b.call(fn, b.input("x", TensorSpec((4,), torch.float32))))
        branches.append(b)
    g.output(g.call(tc_ir.ops.cond, p, *branches, (x,)))
    t = torch.randn(4)
    torch.testing.assert_close(tc_ir.interpret(g, [torch.tensor(True), t]), t.sin())
    torch.testing.assert_close(tc_ir.interpret(g, [torch.tensor(False), t]), t.cos())


def test_in_place_methods_mutate_inputs_like_eager():
    g = Graph()
    x = g.input("x", TensorSpec((4,), torch.float32))
    g.call("add_", x, 1.0)
    g.output(None)
    t = torch.zeros(4)
    tc_ir.interpret(g, [t])
    torch.testing.assert_close(t, torch.ones(4))
