"""Graphs built on torch versions whose meta kernels give wrong specs still compile correctly."""

from __future__ import annotations

import pytest
import torch

import tc_inductor
import tc_ir

aten = torch.ops.aten


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_vector_norm_over_size1_negative_dim_with_torch_2_11_spec(backend):
    # torch <= 2.12's meta says norm(x[5, 1], dim=-1) is [5, 1]; the device gives [5].
    x = torch.randn(5, 1)
    g = tc_ir.Graph()
    xi = g.input("x", tc_ir.TensorSpec.from_tensor(x))
    wrong = tc_ir.TensorSpec((5, 1), torch.float32, torch.device("cpu"))
    g.output(g.call(aten.linalg_vector_norm.default, xi, 2, [-1], spec=wrong))
    out = tc_inductor.compile(g, [x], {"cache": False, "backend": backend})(x)
    expected = torch.linalg.vector_norm(x, 2, [-1])
    assert out.shape == expected.shape == (5,)
    torch.testing.assert_close(out, expected)
