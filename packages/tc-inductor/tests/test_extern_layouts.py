"""Layouts of the buffers extern calls read: views of computed values reach the vendor kernel as
views of a buffer in the value's own layout (as in eager), never as a copy in the view's layout."""

from __future__ import annotations

import operator

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

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


def _efficient_attention_graph(bias: torch.Tensor, computed: bool):
    """q, k, v and a bias (computed in the graph, or read as it is) into the memory-efficient
    attention op, as eager's SDPA calls it on CUDA (the bias expanded over the batch)."""
    q, k, v = (torch.randn(4, 2, 17, 16) for _ in range(3))
    g = tc_ir.Graph()
    qi, ki, vi, bi = (g.input(n, tc_ir.TensorSpec.from_tensor(t)) for n, t in zip("qkvb", (q, k, v, bias)))
    b = g.call(aten.mul.Tensor, bi, 2.0) if computed else bi
    b = g.call(aten.expand.default, b, [4, 2, 17, 17])
    out = g.call(aten._scaled_dot_product_efficient_attention.default, qi, ki, vi, b, False)
    g.output(g.call(operator.getitem, out, 0))
    return g, [q, k, v, bias]


@pytest.mark.parametrize("computed", [True, False])
def test_efficient_attention_bias_is_stored_aligned(computed):
    """The kernel refuses a bias whose strides but the last are not multiples of 16 bytes; a
    [.., 17, 17] bias reaches it as a window on rows padded to 24 (BEiT on CUDA raised "attn_bias
    is not correctly aligned" in the backward). The kernel itself runs only on CUDA: here a
    stand-in receives the operands."""
    bias = torch.randn(1, 2, 17, 17)
    g, inputs = _efficient_attention_graph(bias, computed)
    compiled = tc_inductor.compile(g, inputs, {"cache": False})
    env = compiled._fn.__globals__
    (name,) = [n for n in env if n.startswith("ext_")]
    seen = []

    def stand_in(q, k, v, b, *rest):
        seen.append(b.clone())
        assert b.stride()[-1] == 1 and all(s % 8 == 0 for s in b.stride()[:-1]), b.stride()
        assert b.stride(0) == 0  # still broadcast over the batch: stored once
        return torch.zeros_like(q), torch.zeros(4, 2, 0), torch.zeros((), dtype=torch.int64), torch.zeros((), dtype=torch.int64)

    env[name] = stand_in
    compiled(*inputs)
    want = (bias * 2 if computed else bias).expand(4, 2, 17, 17)
    torch.testing.assert_close(seen[0], want)


def test_an_aligned_bias_reaches_the_kernel_as_it_is():
    padded = torch.randn(1, 2, 17, 24)
    g, inputs = _efficient_attention_graph(padded[..., :17], computed=False)
    compiled = tc_inductor.compile(g, inputs, {"cache": False})
    assert "empty_strided" not in compiled.source  # no copy of the bias


@pytest.mark.parametrize("view_first", [False, True], ids=["cast_then_view", "view_then_cast"])
def test_a_cast_of_a_view_feeds_an_extern_from_the_layer_norms_kernel(view_first):
    # GPT-2's Conv1D: x.view(-1, features), then autocast casts it for addmm. The cast of the view
    # of a LayerNorm's output is stored by the LayerNorm's own kernel, as the view of the cast is,
    # and the extern call gets a window on that [batch, seq, features] buffer.
    def fn(x, h, w, b, w2, b2):
        y = x + h
        ln = aten.native_layer_norm.default(y, [64], w, b, 1e-5)[0]
        flat = ln.view(32, 64).to(torch.bfloat16) if view_first else ln.to(torch.bfloat16).view(32, 64)
        return torch.addmm(b2, flat, w2), y

    inputs = [torch.randn(2, 16, 64), torch.randn(2, 16, 64), torch.randn(64), torch.randn(64),
              torch.randn(64, 48).bfloat16(), torch.randn(48).bfloat16()]
    g = tc_ir.from_fx(make_fx(fn)(*inputs), inputs)
    compiled = tc_inductor.compile(g, inputs, {"cache": False})
    assert compiled.stats["kernels"] == 1, compiled.source
    assert ".as_strided((32, 64), (64, 1))" in compiled.source
    for got, want in zip(compiled(*inputs), fn(*inputs)):
        torch.testing.assert_close(got, want, atol=0.1, rtol=2e-2)  # bf16 products


def test_a_view_read_by_two_externs_is_stored_by_the_norms_kernel():
    # LLaMA's MLP: gate_proj and up_proj read one flattened cast of the RMSNorm's output. A view
    # with several readers is stored once, as its base, by the kernel that computes the base
    # (when it is worth storing: here it reads five buffers, _expensive).
    def fn(x, h, w, b, w1, w2):
        y = x + h
        normed = w * (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)) + b
        flat = normed.to(torch.bfloat16).view(32, 64)
        return flat @ w1, flat @ w2

    inputs = [torch.randn(2, 16, 64), torch.randn(2, 16, 64), torch.randn(64), torch.randn(64),
              torch.randn(64, 48).bfloat16(), torch.randn(64, 48).bfloat16()]
    g = tc_ir.from_fx(make_fx(fn)(*inputs), inputs)
    compiled = tc_inductor.compile(g, inputs, {"cache": False})
    assert compiled.stats["kernels"] == 1, compiled.source
    assert compiled.source.count(".as_strided((32, 64), (64, 1))") == 2
    for got, want in zip(compiled(*inputs), fn(*inputs)):
        torch.testing.assert_close(got, want, atol=0.1, rtol=2e-2)  # bf16 products
