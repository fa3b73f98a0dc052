import math
import operator

import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tc_ir
from tc_ir import Graph, TensorSpec, sym

aten = torch.ops.aten


def roundtrip(g):
    text = str(g)
    back = tc_ir.parse(text)
    assert back == g, f"\n{text}\n!=\n{back}"
    back.verify()
    return back


def test_every_target_kind_and_literal():
    g = Graph()
    x = g.input("x", TensorSpec((2, 3, 4), torch.float32, requires_grad=True))
    n = g.input("n", tc_ir.ScalarSpec(int))
    anything = g.input("opaque", None)
    w = g.param("block.weight", torch.nn.Parameter(torch.randn(4, 4)))
    c = g.constant("table", torch.arange(6, dtype=torch.int64).reshape(2, 3).t())
    scale = g.constant("scale", 0.5)
    v = g.call(aten.view.default, x, torch.Size([6, 4]))
    m = g.call(aten.mm.default, v, w)
    s = g.call(operator.getitem, m, (slice(None, None, 2), Ellipsis, None))
    a = g.call(aten.add.Tensor, s, 1.5, kwargs={"alpha": 2})
    k = g.call(aten._softmax.default, a, -1, False)
    z = g.call(aten.zeros.default, [2, 3], kwargs={"dtype": torch.bfloat16, "device": torch.device("cpu")})
    f = g.call(aten.clamp.default, k, -math.inf, math.inf)
    q = g.call(operator.mul, n, 3)
    g.output({"k": f, "z": [z, c], "q": (q,), "none": None, "s": scale, "o": anything, "j": complex(1, 2)})
    g.verify()
    back = roundtrip(g)
    assert back.tensors["table"].stride() == (1, 3)
    assert isinstance(back.tensors["block.weight"], torch.nn.Parameter)
    assert torch.equal(back.tensors["block.weight"], w.graph.tensors["block.weight"])


def test_text_reads_well():
    g = Graph()
    x = g.input("x", TensorSpec((1024,), torch.float32))
    g.output(g.call(aten.mul.Tensor, g.call(aten.relu.default, x), 2.0))
    assert str(g) == (
        "# tc_ir v1\n"
        "graph main:\n"
        "  %x: f32[1024] cpu = input\n"
        "  %relu: f32[1024] cpu = aten.relu.default(%x)\n"
        "  %mul: f32[1024] cpu = aten.mul.Tensor(%relu, 2.0)\n"
        "  return %mul\n"
    )


def test_format_can_write_another_name():
    g = Graph(name="forward_7")
    x = g.input("x", TensorSpec((4,), torch.float32))
    g.output(g.call(aten.neg.default, x))
    renamed = g.format(name="graph")
    assert "graph graph:" in renamed and "forward_7" not in renamed
    assert renamed.replace("graph graph:", "graph forward_7:") == g.format()
    assert g.name == "forward_7"


def test_symbolic_sizes_roundtrip():
    s0, s1 = sym("s0"), sym("s1")
    g = Graph()
    x = g.input("x", TensorSpec((s0, 2 * s1), torch.float32))
    y = g.call(aten.reshape.default, x, [s0 * 2 * s1], spec=TensorSpec((2 * s0 * s1,), torch.float32))
    g.output(y)
    back = roundtrip(g)
    assert back.inputs[0].spec.shape == (s0, 2 * s1)
    assert back.nodes[1].args[1][0] == 2 * s0 * s1


def test_nan_and_strings():
    g = Graph()
    x = g.input("x", TensorSpec((3,), torch.float32))
    y = g.call(aten.nan_to_num.default, x, math.nan, math.inf, -math.inf)
    z = g.call(aten.einsum.default, "i,i->i", [y, y])
    r = g.call(aten.div.Tensor_mode, z, x, kwargs={"rounding_mode": "floor"})
    g.output(r)
    roundtrip(g)


def test_subgraph_roundtrip():
    g = Graph()
    p = g.input("p", TensorSpec((), torch.bool))
    x = g.input("x", TensorSpec((4,), torch.float32))
    branches = []
    for name, fn in (("then", aten.sin.default), ("else_", aten.cos.default)):
        b = Graph(name)
        b.output(b.call(fn, b.input("x", TensorSpec((4,), torch.float32))))
        branches.append(b)
    g.output(g.call(tc_ir.ops.cond, p, *branches, [x]))
    back = roundtrip(g)
    inputs = [torch.tensor(False), torch.randn(4)]
    torch.testing.assert_close(tc_ir.interpret(back, inputs), torch.cos(inputs[1]))


@pytest.mark.parametrize(
    "text, message",
    [
        ("graph main:\n", "header"),
        ("# tc_ir v99\ngraph main:\n  return None\n", "v99"),
        ("# tc_ir v1\ngraph main:\n  %y: f32[2] cpu = aten.relu.default(%x)\n  return %y\n", "%x is used before"),
        ("# tc_ir v1\ngraph main:\n  %x: f32[2 cpu = input\n  return %x\n", "line 3 \\(%x\\): malformed spec"),
        ("# tc_ir v1\ngraph main:\n  %x: f32[2] cpu = aten.nope.default()\n  return %x\n", "line 3 .*aten.nope.default"),
        ("# tc_ir v1\ngraph main:\n  %x: f32[2] cpu = input\n  return __import__('os')\n", "line 4: unexpected call"),
        ("# tc_ir v1\ngraph main:\n  %x: f32[2] cpu = param 'w'\n  return %x\n", "no data line"),
    ],
)
def test_parse_errors_name_the_line(text, message):
    with pytest.raises(tc_ir.ParseError, match=message):
        tc_ir.parse(text)


def test_unprintable_value_prints_but_strict_format_raises():
    g = Graph()
    x = g.input("x", TensorSpec((2,), torch.float32))
    g.output(g.call(aten.add.Tensor, x, object()))
    assert "aten.add.Tensor(%x, <object>)" in str(g)
    with pytest.raises(TypeError, match="cannot write a object"):
        g.format(strict=True)


UNARY = [aten.relu.default, aten.neg.default, aten.exp.default, aten.tanh.default, aten.sigmoid.default,
         aten.abs.default, aten.sin.default]
BINARY = [aten.add.Tensor, aten.mul.Tensor, aten.sub.Tensor, aten.maximum.default, operator.truediv]
SCALAR_OPS = [aten.add.Scalar, aten.mul.Scalar, aten.pow.Tensor_Scalar]


@st.composite
def random_graphs(draw):
    g = Graph()
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    values = [g.input(f"in{i}", TensorSpec(shape, dtype)) for i in range(draw(st.integers(1, 3)))]
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["unary", "binary", "scalar"]))
        pick = lambda: draw(st.sampled_from(values))  # noqa: E731
        if kind == "unary":
            values.append(g.call(draw(st.sampled_from(UNARY)), pick()))
        elif kind == "binary":
            values.append(g.call(draw(st.sampled_from(BINARY)), pick(), pick()))
        else:
            scalar = draw(st.floats(-3, 3, allow_nan=False, width=32) | st.integers(-3, 3))
            values.append(g.call(draw(st.sampled_from(SCALAR_OPS)), pick(), scalar))
    outs = draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))
    g.output(tuple(outs) if draw(st.booleans()) else {f"o{i}": o for i, o in enumerate(outs)})
    return g


@settings(max_examples=60, deadline=None)
@given(random_graphs())
def test_random_graphs_roundtrip_and_run_alike(g):
    g.verify()
    back = roundtrip(g)
    inputs = [torch.randn(n.spec.shape, dtype=n.spec.dtype) for n in g.inputs]
    expect, got = tc_ir.interpret(g, inputs), tc_ir.interpret(back, inputs)
    for e, r in zip(tc_ir.leaves(expect), tc_ir.leaves(got)):
        torch.testing.assert_close(r, e, equal_nan=True)


def test_format_without_data_cannot_be_parsed_back():
    g = Graph()
    g.output(g.constant("c", torch.ones(2)))
    assert "= ..." in g.format(data=False)
    with pytest.raises(tc_ir.ParseError, match="without tensor data"):
        tc_ir.parse(g.format(data=False))


def test_sympy_literal_parses_with_positive_integer_symbols():
    assert tc_ir.parse_spec("f32[s0, 4] cpu").shape[0] == sympy.Symbol("s0", integer=True, positive=True)
