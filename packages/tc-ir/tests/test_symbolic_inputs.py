"""Size symbols bound from tensor shapes and from int inputs (``ScalarSpec(int, s0)``)."""

import pytest
import torch

import tc_ir
from tc_ir import ScalarSpec, TensorSpec, sym
from tc_ir.interpret import InterpretError


def _flatten_graph() -> tc_ir.Graph:
    s0, s1 = sym("s0"), sym("s1")
    g = tc_ir.Graph("flat")
    x = g.input("x", TensorSpec((s0, 3)))
    n = g.input("n", ScalarSpec(int, s1))
    g.output((g.call(torch.ops.aten.view.default, x, [3 * s0]), n))
    return g


@pytest.mark.parametrize("rows", [2, 5, 17])
def test_symbols_bind_from_tensors_and_ints(rows):
    x = torch.randn(rows, 3)
    out, n = tc_ir.interpret(_flatten_graph(), [x, 7])
    assert torch.equal(out, x.view(-1)) and n == 7


def test_an_int_bound_to_a_tensor_size_is_checked():
    g = tc_ir.Graph("g")
    s0 = sym("s0")
    x = g.input("x", TensorSpec((s0,)))
    g.input("n", ScalarSpec(int, s0))
    g.output(x)
    tc_ir.interpret(g, [torch.randn(4), 4])
    with pytest.raises(InterpretError, match="should be s0, got 5"):
        tc_ir.interpret(g, [torch.randn(4), 5])


def test_symbolic_int_specs_round_trip_through_text():
    g = _flatten_graph()
    again = tc_ir.parse(str(g))
    assert str(again) == str(g)
    assert again.inputs[1].spec == ScalarSpec(int, sym("s1"))
