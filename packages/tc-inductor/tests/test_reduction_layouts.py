"""Reductions read memory along its contiguous dimension, whichever dimension is reduced."""

from __future__ import annotations

import re

import pytest
import torch
from inductor_helpers import build, check

import tc_inductor
from tc_inductor.codegen import triton as triton_codegen

aten = torch.ops.aten


def _launch_config(source: str) -> dict:
    line = next(ln for ln in source.splitlines() if "TritonLauncher" in ln)
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line.split("#", 1)[1])}


@pytest.mark.parametrize("shape", [(300, 70), (1000, 33), (129, 257)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_bias_gradient_reads_a_run_of_columns_per_row(shape, dtype):
    # sum over the rows of gelu(x) * grad: a bias gradient, contiguous along the kept dimension
    def bias_grad(g, x, grad):
        return g.call(aten.sum.dim_IntList, g.call(aten.mul.Tensor, g.call(aten.gelu.default, x), grad), [0])

    x, grad = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
    graph = build(bias_grad, [x, grad])
    k = tc_inductor.compile(graph, [x, grad], {"backend": "triton", "cache": False})
    # fp32 inside the kernel: compare with fp32 math on the same inputs (eager rounds each step)
    expected = (torch.nn.functional.gelu(x.float()) * grad.float()).sum(0)
    torch.testing.assert_close(k(x, grad).float(), expected, atol=1e-2 * shape[0] ** 0.5, rtol=1e-2)
    config = _launch_config(k.source)
    assert config["XBLOCK"] >= 16 and config["RBLOCK"] == triton_codegen.COLUMN_RBLOCK, config


@pytest.mark.parametrize("dims,columnar", [([0], True), ([1], False), ([0, 1], False)])
def test_which_reductions_count_as_columnar(dims, columnar):
    def reduce(g, x):
        return g.call(aten.sum.dim_IntList, g.call(aten.exp.default, x), dims)

    k = check(reduce, [torch.randn(3000, 200)], {"backend": "triton"}, fresh=[torch.randn(3000, 200)])
    config = _launch_config(k.source)
    assert (config["RBLOCK"] == triton_codegen.COLUMN_RBLOCK and config["XBLOCK"] > 1) == columnar, config


def test_a_column_reduction_of_a_transposed_input_is_a_row_reduction_in_memory():
    # x.t().sum(1) sums x's columns, which are x.t()'s contiguous rows: not columnar
    def reduce(g, x):
        return g.call(aten.sum.dim_IntList, g.call(aten.t.default, x), [0])

    x = torch.randn(40, 2000)  # (< 2048 rows: not split, see test_split_reduction.py)
    k = check(reduce, [x], {"backend": "triton"}, fresh=[torch.randn(40, 2000)])
    assert _launch_config(k.source)["XBLOCK"] == 1  # one row a program, the looped row kernel
