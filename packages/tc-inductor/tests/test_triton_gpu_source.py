"""The Triton source generated for GPUs (persistent rows up to 4096, int32 index math, unmasked
full blocks, eviction hints, contiguous flat offsets), run on CPU tensors by the interpreter."""

from __future__ import annotations

import pytest
import torch
from inductor_helpers import assert_same, build

import tc_inductor
import tc_ir
from tc_inductor import kir
from tc_inductor.codegen import triton as triton_backend

aten = torch.ops.aten
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="GPU hosts run the real thing (-m cuda)")

CASES = {
    "bf16_scale": (lambda g, x: g.call(aten.mul.Tensor, x, 0.5), lambda: [torch.randn(64, 4096).bfloat16()]),
    "layer_norm": (lambda g, x, w, b: g.call(aten.native_layer_norm.default, x, [4096], w, b, 1e-5),
                   lambda: [torch.randn(8, 4096), torch.randn(4096), torch.randn(4096)]),
    "softmax_4096": (lambda g, x: g.call(aten._softmax.default, x, -1, False), lambda: [torch.randn(4, 4096)]),
    "softmax_8192": (lambda g, x: g.call(aten._softmax.default, x, -1, False), lambda: [torch.randn(4, 8192)]),
    "looped_sum": (lambda g, x: g.call(aten.sum.dim_IntList, x, [-1]), lambda: [torch.randn(3, 10000)]),
    "argmax_3000": (lambda g, x: g.call(aten.argmax.default, x, -1), lambda: [torch.randn(5, 3000)]),
    "transposed": (lambda g, x: g.call(aten.relu.default, g.call(aten.add.Tensor, x, 1.0)),
                   lambda: [torch.randn(37, 5).t()]),
    "odd_rows": (lambda g, x: g.call(aten.amax.default, x, [-1]), lambda: [torch.randn(7, 33)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_source_under_the_interpreter(name, monkeypatch):
    monkeypatch.setattr(triton_backend, "_interpreting", lambda device: False)
    fn, make = CASES[name]
    inputs = make()
    g = build(fn, inputs)
    k = tc_inductor.compile(g, inputs, {"backend": "triton", "cache": False})
    fresh = make()
    assert_same(k(*fresh), tc_ir.interpret(g, fresh))


@pytest.mark.parametrize("dtype,block", [(torch.float64, 512), (torch.float32, 1024), (torch.bfloat16, 1024),
                                         (torch.uint8, 1024)])
def test_pointwise_block_is_32_bytes_and_at_most_8_elements_a_thread(dtype, block, monkeypatch):
    """(16 elements a thread is where Triton 3.6 miscompiled a gather: benchmarks/NOTES.md §28.)"""
    monkeypatch.setattr(triton_backend, "_interpreting", lambda device: False)
    x = torch.zeros(64, 4096, dtype=dtype)
    k = tc_inductor.compile(build(lambda g, x: g.call(aten.clone.default, x), [x]), [x],
                            {"backend": "triton", "cache": False})
    assert f"XBLOCK={block}," in k.source
    assert "xmask" not in k.kernels[0].split("xmask = xindex < xnumel")[1]  # full blocks: no masks
    assert ".to(tl.int64)" not in k.kernels[0]  # small enough for int32 index math


REDUCTIONS = {  # every kind of reduction config: persistent (small and whole-tile rows), looped, columnar
    "rows_of_33": ((7, 33), [-1]), "rows_of_256": ((64, 256), [-1]), "rows_of_4096": ((8, 4096), [-1]),
    "rows_of_8192": ((4, 8192), [-1]), "rows_of_10000": ((3, 10000), [-1]), "columns": ((4096, 512), [0]),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_configs_run_at_most_8_elements_a_thread(name, monkeypatch):
    """Persistent reductions ran 16 elements a thread (a warp per 512) until §29; tc's own config
    and every config max-autotune times now run at most 8 (a columnar step: 32, 64 rows of a
    program's columns), never the 16 where Triton 3.6 compiled a gather wrong (§28)."""
    monkeypatch.setattr(triton_backend, "_interpreting", lambda device: False)
    seen = []
    heuristic = triton_backend.heuristic_config
    monkeypatch.setattr(triton_backend, "heuristic_config",
                        lambda kernel, *a, **kw: seen.append(kernel) or heuristic(kernel, *a, **kw))
    shape, dims = REDUCTIONS[name]
    x = torch.randn(shape)
    k = tc_inductor.compile(build(lambda g, x: g.call(aten.sum.dim_IntList, x, dims), [x]), [x],
                            {"backend": "triton", "cache": False})
    assert_same(k(x), x.sum(dims))
    assert seen
    for kernel in set(seen):
        columnar = triton_backend.is_columnar(kernel) and not triton_backend.is_persistent(kernel, False)
        for c in [heuristic(kernel, False)] + triton_backend.autotune_configs(kernel):
            per_thread = c["XBLOCK"] * c.get("RBLOCK", 1) / (32 * c["num_warps"])
            assert per_thread <= 8 or columnar and c == heuristic(kernel, False) and per_thread == 32, c


def test_index_values_that_overflow_int32_keep_int64_math():
    value = kir.UOp(kir.Ops.INDEX, torch.int64, (), kir.xvars(1)[0] * 2**40)
    store = kir.Store("b", kir.xvars(1)[0], value, torch.int64)
    kernel = kir.Kernel((64,), (), (kir.Stage((store,), ()),), (), (("b", torch.int64),))
    assert not triton_backend.fits_int32(kernel)
    small = kir.Kernel((64,), (), (kir.Stage((kir.Store("b", kir.xvars(1)[0], kir.UOp(
        kir.Ops.INDEX, torch.int64, (), kir.xvars(1)[0] * 3), torch.int64),), ()),), (), (("b", torch.int64),))
    assert triton_backend.fits_int32(small)


def test_arange_with_a_large_step_under_the_interpreter(monkeypatch):
    monkeypatch.setattr(triton_backend, "_interpreting", lambda device: False)
    x = torch.zeros(64, dtype=torch.int64)
    g = build(lambda g, x: g.call(aten.add.Tensor, x, g.call(
        aten.arange.start_step, 0, 64 * 2**33, 2**33, kwargs={"dtype": torch.int64})), [x])
    k = tc_inductor.compile(g, [x], {"backend": "triton", "cache": False})
    assert_same(k(x), tc_ir.interpret(g, [x]))
