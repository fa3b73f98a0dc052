"""Identical kernels are built once, and only identical ones: sharing by source and launch config."""

from __future__ import annotations

import pytest
import torch
from inductor_helpers import check

aten = torch.ops.aten
BACKENDS = ["cpp", "triton"]


def _norm(g, x):
    centred = g.call(aten.sub.Tensor, x, g.call(aten.mean.dim, x, [1], True))
    var = g.call(aten.mean.dim, g.call(aten.mul.Tensor, centred, centred), [1], True)
    return g.call(aten.mul.Tensor, centred, g.call(aten.rsqrt.default, g.call(aten.add.Tensor, var, 1e-5)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(8, 64), (5, 33)])
def test_the_same_reduction_in_two_layers_is_one_kernel_source(backend, shape):
    # two "layers", each a matmul (an extern call, so a kernel boundary) and a normalisation
    def layers(g, x, w):
        return _norm(g, g.call(aten.mm.default, _norm(g, g.call(aten.mm.default, x, w)), w))

    rows, cols = shape
    k = check(layers, [torch.randn(rows, cols), torch.randn(cols, cols)], {"backend": backend},
              fresh=[torch.randn(rows, cols), torch.randn(cols, cols)])
    assert k.stats["kernels"] == 2
    assert len(k.kernels) == 1, "per-layer buffer names leaked into the kernel source"


def test_one_source_with_two_block_sizes_is_two_launch_configs():
    # argmax over 5 and over 51 elements generate the same masked source, with RBLOCK 8 and 64
    def two(g, a, b):
        return (g.call(aten.argmax.default, a), g.call(aten.argmax.default, b))

    fresh = [torch.randn(5, 1), torch.randn(3, 17)]
    fresh[1].view(-1)[37] = 10.0  # past the smaller block
    check(two, [torch.randn(5, 1), torch.randn(3, 17)], {"backend": "triton"}, fresh=fresh)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_a_constant_output_fused_into_a_reduction_kernel(backend, dtype):
    # the constant has no index to broadcast from: Triton needs it widened to the 2-D block
    def softmax_and_constant(g, x):
        e = g.call(aten.exp.default, g.call(aten.sub.Tensor, x, g.call(aten.amax.default, x, [1], True)))
        const = g.call(aten.full.default, [6, 33], True if dtype == torch.bool else 3.0,
                       kwargs={"dtype": dtype})
        return (g.call(aten.div.Tensor, e, g.call(aten.sum.dim_IntList, e, [1], True)), const)

    k = check(softmax_and_constant, [torch.randn(6, 33)], {"backend": backend}, fresh=[torch.randn(6, 33)])
    assert k.stats["kernels"] == 1
