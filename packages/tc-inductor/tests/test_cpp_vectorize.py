"""C++ back end: vectorised paths (libmvec math, omp simd max/min with NaN, row caching)."""

import pytest
import torch
from inductor_helpers import check

aten = torch.ops.aten
OPTS = {"backend": "cpp", "cache": False}


@pytest.mark.parametrize("shape", [(3, 5), (64, 128), (7, 1000), (300, 257)])
def test_softmax_rows_cached(shape):
    x = torch.randn(*shape) * 10
    k = check(lambda g, x: g.call(aten._softmax.default, x, -1, False), [x], OPTS)
    assert "row0[" in k.kernels[0] or shape[1] > 4096


def test_layer_norm_residual_odd_and_transposed():
    x, y, w, b = torch.randn(33, 130), torch.randn(130, 33).t(), torch.randn(130), torch.randn(130)
    check(lambda g, x, y, w, b: g.call(aten.native_layer_norm.default, g.call(aten.add.Tensor, x, y), [130], w, b,
                                       1e-5), [x, y, w, b], OPTS)


@pytest.mark.parametrize("op", [aten.amax.default, aten.amin.default])
def test_max_min_propagate_nan(op):
    x = torch.randn(9, 77)
    x[2, 5] = float("nan")
    x[4, 76] = float("nan")
    x[6] = float("-inf")
    k = check(lambda g, x: g.call(op, x, [1]), [x], OPTS)
    assert "nan_" in k.kernels[0]


def test_int_max_rows():
    x = torch.randint(-100, 100, (5, 33))
    check(lambda g, x: g.call(aten.amax.default, x, [1]), [x], OPTS)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (512, 512)])
def test_gelu_sizes_around_parallel_threshold(shape, approximate):
    x = torch.randn(*shape) * 4
    check(lambda g, x: g.call(aten.gelu.default, x, kwargs={"approximate": approximate}), [x], OPTS)


def test_exp_edge_values():
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 88.7, 88.8, -87.0, -103.9, -104.5, 0.0, -0.0, 1e30])
    k = check(lambda g, x: g.call(aten.exp.default, x), [x], OPTS)
    assert "tc_expf" in k.kernels[0]


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_vector_math_other_dtypes(dtype):
    x = torch.randn(37, 129).to(dtype)
    check(lambda g, x: g.call(aten.mul.Tensor, g.call(aten.tanh.default, x), g.call(aten.erf.default, x)), [x], OPTS)
    check(lambda g, x: g.call(aten._softmax.default, x, -1, False), [x.float()], OPTS)


def test_non_contiguous_pointwise_inner_simd():
    x = torch.randn(40, 70).t()
    k = check(lambda g, x: g.call(aten.sigmoid.default, g.call(aten.add.Tensor, x, 1.0)), [x], OPTS)
    assert "#pragma omp" in k.kernels[0]
