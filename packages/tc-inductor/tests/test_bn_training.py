"""Batch norm in training on the Triton back end (under the interpreter here), through
tc_autograd: the statistics are one split reduction (per chunk of rows a sum and the squared
deviations from the chunk's own mean, combined as Chan's parallel algorithm: never E[x²]-E[x]²),
and the backward's two per-channel sums share their kernels. Values, gradients and running
statistics against eager on fresh inputs (2-d and 1-d, channels-last and contiguous, bf16 and
float32, sizes whose rows do not divide into chunks, a channel of huge mean and tiny variance);
kernel counts per batch norm so the fusion cannot silently regress."""

from __future__ import annotations

import pytest
import torch

import tc_inductor
import tc_ir
from tc_inductor import split_reduction

tc_autograd = pytest.importorskip("tc_autograd")
F = torch.nn.functional
CL = torch.channels_last


@pytest.fixture
def small_splits(monkeypatch):
    """Split the statistics of test-sized inputs as ResNet-50's are split on a GPU, into chunks
    of 16+ rows (so 715 rows are 43 chunks, the last of one row)."""
    monkeypatch.setattr(split_reduction, "SPLIT_MIN_ROWS", 64)
    monkeypatch.setattr(split_reduction, "SPLIT_MIN_ELEMENTS", 64)
    monkeypatch.setattr(split_reduction, "SPLIT_MIN_CHUNK", 16)


def _graph(specs: list, relu: bool) -> tc_ir.Graph:
    g = tc_ir.Graph()
    x, rm, rv, w, b = (g.input(n, s) for n, s in zip(("x", "rm", "rv", "w", "b"), specs))
    y = g.call(F.batch_norm, x, rm, rv, w, b, True, 0.1, 1e-5)
    g.output(g.call(torch.relu, y) if relu else y)
    return g


def _make(shape, dtype, channels_last, offset):
    """x (channel 0 shifted by ``offset`` with a spread of offset / 10**4, when given), running
    mean and variance, weight and bias; x, weight and bias require grad."""
    c = shape[1]
    x = torch.randn(shape)
    if offset:
        x[:, 0] = offset + x[:, 0] * offset * 1e-4
    x = x.to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=CL)
    params = [torch.randn(c), torch.rand(c) + 0.5, torch.randn(c), torch.randn(c)]
    return [x.requires_grad_(True), params[0], params[1], params[2].requires_grad_(True),
            params[3].requires_grad_(True)]


def _compile(make, relu=True, backend="triton"):
    """The aot function of a batch norm (+ relu) and the CompiledGraphs of its forward and backward."""
    compiled = []

    def compiler(graph, examples):
        compiled.append(tc_inductor.compile(graph, examples, {"backend": backend, "cache": False}))
        return compiled[-1]

    inputs = make()
    g = _graph([tc_ir.TensorSpec.from_tensor(t) for t in inputs], relu)
    f = tc_autograd.aot(g, inputs, fw_compiler=compiler, bw_compiler=compiler,
                        decompositions=tc_inductor.decompositions())
    return g, f, compiled


def _run_against_eager(make, tol, relu=True, calls=2, backend="triton"):
    g, f, compiled = _compile(make, relu, backend)
    for _ in range(calls):
        a = make()
        b = [t.detach().clone().requires_grad_(t.requires_grad) for t in a]
        got, want = f(*a), tc_ir.interpret(g, b)
        torch.testing.assert_close(got, want, **tol)
        grad = torch.randn_like(want)
        got.backward(grad)
        want.backward(grad)
        torch.testing.assert_close(a[0].grad, b[0].grad, **tol)
        for x, y in zip(a[1:], b[1:]):
            if x.grad is not None:  # weight and bias: sums over every row
                torch.testing.assert_close(x.grad, y.grad, atol=tol["atol"] * 10, rtol=tol["rtol"])
            else:  # running statistics, updated in place
                torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
    return compiled


FP32 = {"atol": 1e-4, "rtol": 1e-4}
BF16 = {"atol": 3e-2, "rtol": 3e-2}


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_2d_against_eager(small_splits, channels_last, dtype):
    """[5, 4, 13, 11]: 715 rows, no divisor near the chunk count (the last chunk is ragged)."""
    _run_against_eager(lambda: _make((5, 4, 13, 11), dtype, channels_last, 0), FP32 if dtype == torch.float32 else BF16)


def test_2d_channels_last_on_the_cpp_backend(small_splits):
    """The C++ back end splits NHWC statistics too (N, H, W are one run of rows there); the
    backward's sums read the incoming gradient, contiguous NCHW here: one kernel, unsplit."""
    compiled = _run_against_eager(lambda: _make((5, 4, 13, 11), torch.float32, True, 0), FP32, relu=False,
                                  backend="cpp")
    assert [c.stats["kernels"] for c in compiled] == [3, 2]


@pytest.mark.parametrize("shape", [(7, 3, 401), (2807, 3)])
def test_1d_against_eager(small_splits, shape):
    """BatchNorm1d over [N, C, L] and [N, C]: 2807 rows (7 * 401, ragged chunks)."""
    _run_against_eager(lambda: _make(shape, torch.float32, False, 0), FP32, relu=False)


@pytest.mark.parametrize("channels_last", [False, True])
def test_huge_mean_tiny_variance(small_splits, channels_last):
    """Channel 0 around 1000 with a spread of 0.1: E[x²] - E[x]² in float32 cancels to noise
    (its rounding, ~0.06, is six times the variance); deviations from chunk means do not. The
    backward recomputes x - mean in float32, so eager itself is off there: compiled and eager
    are both measured against float64: the compiled error is eager's, or that of a few roundings
    of the mean."""
    def make():
        return _make((5, 4, 13, 11), torch.float32, channels_last, 1000.0)

    g, f, _ = _compile(make)
    for _ in range(2):
        a = make()
        b, exact = _copies(a, torch.float32), _copies(a, torch.float64)
        results = [f(*a), tc_ir.interpret(g, b), tc_ir.interpret(g, exact)]
        grad = torch.randn_like(results[1])
        for r in results:
            r.backward(grad.to(r.dtype))
        for got, want, truth in zip([results[0], a[0].grad, *a[1:3], a[3].grad, a[4].grad],
                                    [results[1], b[0].grad, *b[1:3], b[3].grad, b[4].grad],
                                    [results[2], exact[0].grad, *exact[1:3], exact[3].grad, exact[4].grad]):
            ours, eagers = ((v.double() - truth).abs().max().item() for v in (got, want))
            # a few float32 roundings of the mean (its ulp is 6e-5) scaled by rstd ~ 10; the
            # cancelling formula is off by the variance itself (O(1) relative)
            assert ours <= 4 * eagers + 3e-3 * truth.abs().max().item(), (ours, eagers)


def _copies(inputs: list, dtype: torch.dtype) -> list:
    return [t.detach().to(dtype).requires_grad_(t.requires_grad) for t in inputs]


def test_bf16_offset_channel(small_splits):
    """A bf16 channel around 50 with a spread of 2 (bf16 holds no finer offsets)."""
    def make():
        inputs = _make((5, 4, 13, 11), torch.float32, True, 0)
        x = inputs[0].detach()
        x[:, 0] = 50 + 2 * x[:, 0]
        inputs[0] = x.to(torch.bfloat16).requires_grad_(True)
        return inputs

    _run_against_eager(make, BF16)


def test_nan_and_inf_reach_the_statistics(small_splits):
    """A NaN in one chunk makes its channel's output NaN, an inf another's, as in eager."""
    def make():
        inputs = _make((5, 4, 13, 11), torch.float32, True, 0)
        x = inputs[0].detach()
        x[3, 1, 7, 2], x[0, 2, 12, 10] = float("nan"), float("inf")
        return [x, *inputs[1:]]

    g, f, _ = _compile(make, relu=False)
    a = make()
    b = [t.clone() for t in a]
    torch.testing.assert_close(f(*a), tc_ir.interpret(g, b), atol=1e-4, rtol=1e-4, equal_nan=True)
    torch.testing.assert_close(a[1], b[1], equal_nan=True)  # running mean
    torch.testing.assert_close(a[2], b[2], equal_nan=True)  # running variance


@pytest.mark.parametrize("channels_last", [False, True])
def test_kernels_per_batch_norm(small_splits, channels_last):
    """Forward: the statistics' partials (sum and squared deviations per chunk), their final
    kernel (with the running statistics' updates), the normalised output; backward: the two
    per-channel sums' partials, their final kernel, the input gradient. Unsplit, one kernel
    fewer each."""
    def kernels():
        compiled = _run_against_eager(lambda: _make((5, 4, 13, 11), torch.float32, channels_last, 0), FP32,
                                      relu=False, calls=1)
        return tuple(c.stats["kernels"] for c in compiled)

    assert kernels() == (3, 3)
    split_reduction.SPLIT_MIN_ROWS = 1 << 62  # (restored by the fixture's monkeypatch)
    assert kernels() == (2, 2)
