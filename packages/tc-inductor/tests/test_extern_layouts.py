"""Layouts of the buffers extern calls read: views of computed values reach the vendor kernel as
views of a buffer in the value's own layout (as in eager), never as a copy in the view's layout."""

from __future__ import annotations

import torch

import tc_inductor
import tc_ir

aten = torch.ops.aten


def _mm_of_transposed_cast(t_spec=None):
    x, w = torch.randn(16, 64).bfloat16(), torch.randn(67, 64)
    g = tc_ir.Graph()
    xi, wi = g.input("x", tc_ir.TensorSpec.from_tensor(x)), g.input("w", tc_ir.TensorSpec.from_tensor(w))
    cast = g.call(aten._to_copy.default, wi, kwargs={"dtype": torch.bfloat16})
    wt = g.call(aten.t.default, cast, spec=t_spec)
    g.output(g.call(aten.mm.default, xi, wt))
    return g, [x, w]


def _extern_args(compiled, inputs):
    """The tensors each extern call of ``compiled`` receives, by wrapping the bound externs."""
    env = compiled._fn.__globals__
    seen = []
    for name in [n for n in env if n.startswith("ext_")]:
        real = env[name]

        def spy(*args, _real=real, **kwargs):
            seen.append([v for a in args if isinstance(a, torch.Tensor) for v in (tuple(a.shape), a.stride())])
            return _real(*args, **kwargs)
        env[name] = spy
    return seen, compiled(*inputs)


def test_mm_of_transposed_cast_gets_a_view_of_a_row_major_buffer():
    g, inputs = _mm_of_transposed_cast()
    compiled = tc_inductor.compile(g, inputs, {"cache": False})
    assert "empty_strided((67, 64), (64, 1)" in compiled.source
    assert ".as_strided((64, 67), (1, 64))" in compiled.source
    seen, out = _extern_args(compiled, inputs)
    assert seen == [[(16, 64), (64, 1), (64, 67), (1, 64)]]
    torch.testing.assert_close(out, tc_ir.interpret(g, inputs), atol=0.1, rtol=2e-2)  # bf16: one ulp of results near 8


def test_view_spec_with_contiguous_strides_still_stores_the_base_layout():
    # A tracer may record a view's spec as contiguous; the base's layout must still win.
    spec = tc_ir.TensorSpec((64, 67), torch.bfloat16, torch.device("cpu"), (67, 1))
    g, inputs = _mm_of_transposed_cast(spec)
    compiled = tc_inductor.compile(g, inputs, {"cache": False})
    seen, out = _extern_args(compiled, inputs)
    assert seen == [[(16, 64), (64, 1), (64, 67), (1, 64)]]
    torch.testing.assert_close(out, tc_ir.interpret(g, inputs), atol=0.1, rtol=2e-2)  # bf16: one ulp of results near 8


def test_bmm_of_permuted_expanded_value_gets_a_window_on_its_base():
    x, y = torch.randn(2, 8, 5), torch.randn(2, 5, 8)
    g = tc_ir.Graph()
    xi, yi = g.input("x", tc_ir.TensorSpec.from_tensor(x)), g.input("y", tc_ir.TensorSpec.from_tensor(y))
    r = g.call(aten.relu.default, yi)
    p = g.call(aten.permute.default, r, [0, 2, 1])  # [2, 8, 5] view of relu's [2, 5, 8]
    g.output(g.call(aten.bmm.default, xi, g.call(aten.permute.default, p, [0, 2, 1])))
    compiled = tc_inductor.compile(g, [x, y], {"cache": False})
    seen, out = _extern_args(compiled, [x, y])
    assert seen == [[(2, 8, 5), (40, 5, 1), (2, 5, 8), (40, 8, 1)]]
    torch.testing.assert_close(out, tc_ir.interpret(g, [x, y]))


def test_triton_mm_of_transposed_cast():
    g, inputs = _mm_of_transposed_cast()
    compiled = tc_inductor.compile(g, inputs, {"cache": False, "backend": "triton"})
    seen, out = _extern_args(compiled, inputs)
    assert seen == [[(16, 64), (64, 1), (64, 67), (1, 64)]]
    torch.testing.assert_close(out, tc_ir.interpret(g, inputs), atol=0.1, rtol=2e-2)  # bf16: one ulp of results near 8
