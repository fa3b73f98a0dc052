"""Triton matmul templates with fused epilogues (codegen/triton_mm.py).

On the CPU the template runs under the Triton interpreter, forced with ``mm_template="always"``
(or ``"autotune"``, which benchmarks on any device); ``cuda`` tests cover the max-autotune path.
"""

from __future__ import annotations

import pytest
import torch
from inductor_helpers import build

import tc_inductor
import tc_ir
from tc_inductor.codegen import triton_mm

aten = torch.ops.aten
# dot products of K terms: looser than pointwise tolerances
DOT_TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (5e-2, 5e-2), torch.float16: (1e-2, 1e-2)}
TF32_TOL = (2e-2, 2e-2)


def run(fn, inputs, options, tol=None):
    g = build(fn, inputs)
    compiled = tc_inductor.compile(g, inputs, options)
    got, expected = compiled(*inputs), tc_ir.interpret(g, inputs)
    for r, e in zip(tc_ir.leaves(got), tc_ir.leaves(expected)):
        atol, rtol = tol or DOT_TOL[e.dtype]
        torch.testing.assert_close(r, e, atol=atol, rtol=rtol, check_stride=False)
    return compiled


def linear_gelu(g, x, w, b):
    h = g.call(aten.addmm.default, b, x, g.call(aten.t.default, w))
    return g.call(aten.gelu.default, h)


def mm_residual(g, x, w, r):
    return g.call(aten.relu.default, g.call(aten.add.Tensor, g.call(aten.mm.default, x, w), r))


def bmm_epilogue(g, a, b, r):
    y = g.call(aten.bmm.default, a, b)
    return g.call(aten.mul.Tensor, g.call(aten.silu.default, y), r)


def _rand(*shape, dtype):
    return torch.randn(*shape).to(dtype)


def _is_template(compiled) -> bool:
    return "Triton matmul template" in compiled.source


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", [(17, 33, 65), (33, 17, 20)])
def test_addmm_bias_gelu_fused(dtype, m, n, k):
    x, w, b = _rand(m, k, dtype=dtype), _rand(n, k, dtype=dtype), _rand(n, dtype=dtype)
    c = run(linear_gelu, [x, w, b], {"mm_template": "always"})
    assert _is_template(c) and c.stats["kernels"] == 1 and c.stats["extern_calls"] == 0
    assert "tl.dot" in c.kernels[0] and "tl.erf" in c.kernels[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mm_residual_relu_fused(dtype):
    x, w, r = _rand(17, 65, dtype=dtype), _rand(65, 33, dtype=dtype), _rand(17, 33, dtype=dtype)
    c = run(mm_residual, [x, w, r], {"mm_template": "always"})
    assert _is_template(c) and c.stats["kernels"] == 1 and c.stats["extern_calls"] == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bmm_epilogue_fused(dtype):
    a, b, r = _rand(3, 17, 65, dtype=dtype), _rand(3, 65, 33, dtype=dtype), _rand(33, dtype=dtype)
    c = run(bmm_epilogue, [a, b, r], {"mm_template": "always"})
    assert _is_template(c) and c.stats["kernels"] == 1 and c.stats["extern_calls"] == 0


def test_cast_epilogue_and_transposed_operand():
    x, w = torch.randn(17, 33), torch.randn(65, 33)

    def fn(g, x, w):
        y = g.call(aten.mm.default, x, g.call(aten.t.default, w))
        return g.call(aten._to_copy.default, y, kwargs={"dtype": torch.bfloat16})

    c = run(fn, [x, w], {"mm_template": "always"}, tol=DOT_TOL[torch.bfloat16])
    assert _is_template(c) and c.stats["extern_calls"] == 0


def test_product_also_an_output_is_stored():
    x, w, b = torch.randn(17, 65), torch.randn(33, 65), torch.randn(33)

    def fn(g, x, w, b):
        h = g.call(aten.addmm.default, b, x, g.call(aten.t.default, w))
        return h, g.call(aten.relu.default, h)

    c = run(fn, [x, w, b], {"mm_template": "always"})
    assert _is_template(c) and c.stats["kernels"] == 1


def test_bare_bmm_and_addmm_scalars():
    a, b = torch.randn(2, 17, 33), torch.randn(2, 33, 65)
    assert _is_template(run(lambda g, a, b: g.call(aten.bmm.default, a, b), [a, b], {"mm_template": "always"}))
    bias, x, w = torch.randn(17, 1), torch.randn(17, 20), torch.randn(20, 33)

    def fn(g, bias, x, w):
        return g.call(aten.addmm.default, bias, x, w, kwargs={"beta": 0.5, "alpha": 2.0})

    assert _is_template(run(fn, [bias, x, w], {"mm_template": "always"}))


def test_without_max_autotune_the_extern_path_is_unchanged():
    x, w, b = torch.randn(17, 65), torch.randn(33, 65), torch.randn(33)
    for options in ({}, {"backend": "triton"}, {"backend": "triton", "max_autotune": True}, {"mm_template": "never"}):
        c = run(linear_gelu, [x, w, b], options)
        assert not _is_template(c) and c.stats["extern_calls"] == 1 and c.stats["kernels"] == 1
        assert "tl.dot" not in "".join(c.kernels)


def test_mode_only_autotunes_cuda_under_max_autotune():
    opts = tc_inductor.config.Options
    assert triton_mm.mode(opts(), "cuda") == "extern"
    assert triton_mm.mode(opts(max_autotune=True), "cpu") == "extern"
    assert triton_mm.mode(opts(max_autotune=True), "cuda") == "autotune"
    assert triton_mm.mode(opts(max_autotune=True, mm_template="never"), "cuda") == "extern"
    with pytest.raises(ValueError):
        opts(mm_template="sometimes")


@pytest.mark.parametrize("winner", ["template", "extern"])
def test_autotune_picks_the_fastest(monkeypatch, winner):
    calls = []

    def fake_bench(fn, device):
        fn()  # every candidate really runs (interpreted)
        calls.append(fn)
        first = len(calls) == 1  # the extern baseline is measured first
        return (1.0 if first else 2.0) if winner == "extern" else (2.0 if first else 1.0)

    monkeypatch.setattr(triton_mm, "bench", fake_bench)
    x, w, b = torch.randn(17, 65), torch.randn(33, 65), torch.randn(33)
    c = run(linear_gelu, [x, w, b], {"mm_template": "autotune", "cache": False})
    assert len(calls) > 2
    assert _is_template(c) == (winner == "template")


def test_fp32_precision_follows_allow_tf32():
    assert triton_mm._precision(torch.float32, "cpu") == ', input_precision="ieee"'
    assert triton_mm._precision(torch.bfloat16, "cuda") == ""


# ---- on the GPU host --------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cuda_max_autotune_linear_gelu(dtype):
    x, w, b = (torch.randn(*s, device="cuda").to(dtype) for s in ((1024, 768), (3072, 768), (3072,)))
    tol = TF32_TOL if dtype == torch.float32 and triton_mm.allow_tf32() else DOT_TOL[dtype]
    c = run(linear_gelu, [x, w, b], {"max_autotune": True}, tol=(max(tol[0], 2e-2), max(tol[1], 2e-2)))
    assert c.stats["kernels"] == 1  # either the template, or the extern call and its epilogue


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_template_forced_odd_shapes(dtype):
    x, w, r = (torch.randn(*s, device="cuda").to(dtype) for s in ((257, 129), (129, 65), (257, 65)))
    c = run(mm_residual, [x, w, r], {"mm_template": "always"}, tol=(3e-2, 3e-2))
    assert _is_template(c) and c.stats["extern_calls"] == 0
    a, b2, r2 = (torch.randn(*s, device="cuda").to(dtype) for s in ((4, 65, 129), (4, 129, 33), (33,)))
    assert _is_template(run(bmm_epilogue, [a, b2, r2], {"mm_template": "always"}, tol=(3e-2, 3e-2)))


@pytest.mark.cuda
def test_cuda_autotune_choice_is_cached(monkeypatch):
    x, w, b = (torch.randn(*s, device="cuda", dtype=torch.bfloat16) for s in ((512, 256), (512, 256), (512,)))
    first = run(linear_gelu, [x, w, b], {"max_autotune": True})
    monkeypatch.setattr(triton_mm, "autotune", lambda *a, **k: pytest.fail("benchmarked again on a cache hit"))
    second = run(linear_gelu, [x, w, b], {"max_autotune": True})
    assert first.source == second.source
