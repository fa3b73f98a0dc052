"""prims ops left by torch's decompositions compile to generated kernels, not Python externs."""

from __future__ import annotations

import pytest
import torch

import tc_inductor
import tc_ir

prims, aten = torch.ops.prims, torch.ops.aten


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("shape", [(4, 6, 5), (2, 3, 1)])
def test_batch_norm_style_prims_have_no_extern_calls(backend, shape):
    g = tc_ir.Graph()
    x = g.input("x", tc_ir.TensorSpec(shape, torch.float32))
    var = g.call(prims.var.default, x, [0, 2], 1.0)
    total = g.call(prims.sum.default, x, [0, 2])
    mean = g.call(prims.div.default, total, float(shape[0] * shape[2]))
    wide = g.call(prims.broadcast_in_dim.default, mean, list(shape), [1])
    half = g.call(prims.convert_element_type.default, g.call(aten.sub.Tensor, x, wide), torch.float16)
    g.output((var, half))
    t = torch.randn(shape)
    k = tc_inductor.compile(g, [t], options={"backend": backend})
    assert k.stats["extern_calls"] == 0, k.source
    for got, want in zip(k(t), tc_ir.interpret(g, [t])):
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)


def test_integer_prims_div_truncates_like_prims():
    g = tc_ir.Graph()
    a = g.input("a", tc_ir.TensorSpec((6,), torch.int64))
    b = g.input("b", tc_ir.TensorSpec((6,), torch.int64))
    g.output(g.call(prims.div.default, a, b))
    x, y = torch.tensor([7, -7, 5, -5, 9, 0]), torch.tensor([2, 2, -3, -3, 4, 3])
    k = tc_inductor.compile(g, [x, y], options={"backend": "cpp"})
    torch.testing.assert_close(k(x, y), tc_ir.interpret(g, [x, y]))
