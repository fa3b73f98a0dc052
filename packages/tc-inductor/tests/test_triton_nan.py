"""NaN through the Triton back end's comparisons, as eager: amax/amin/max/min (whole or over a
dim) of a row holding a NaN are NaN, argmax/argmin (and max.dim's indices) point at its first
NaN; maximum/minimum/clamp propagate a NaN operand, fmax/fmin ignore it. Persistent, looped and
split (partials, then their reduction) kernels, float32 and bfloat16, the interpreter's source
and the GPU's (run by the interpreter), each compiled once and run on two fresh inputs.

The interpreter runs Triton's NaN-ignoring float max/min (LLVM's maxnum/minnum: what the GPU
runs for ``tl.maximum`` without ``propagate_nan``) as numpy's NaN-propagating ``maximum``: the
``gpu_maxnum`` fixture makes it ignore NaN as the GPU does, so a dropped NaN shows here too."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from inductor_helpers import build
from triton.runtime import interpreter

import tc_inductor
import tc_ir
from tc_inductor import split_reduction
from tc_inductor.codegen import triton as triton_backend

aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")
DTYPES = [pytest.param(torch.float32, id="f32"), pytest.param(torch.bfloat16, id="bf16")]
# a row within the interpreter's persistent limit, and one looped over (both persistent on GPU)
ROWS = [33, 3000]


@pytest.fixture(autouse=True)
def gpu_maxnum(monkeypatch):
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_maxnumf",
                        lambda self, a, b: self.binary_op(a, b, np.fmax))
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_minnumf",
                        lambda self, a, b: self.binary_op(a, b, np.fmin))


def _compile(fn, inputs):
    return tc_inductor.compile(build(fn, inputs), inputs, {"backend": "triton", "cache": False})


def _same(got, want, tol=0.0):
    """Values as eager's (NaN where eager's is, exactly unless ``tol``), indices exactly."""
    got, want = list(tc_ir.leaves(got)), list(tc_ir.leaves(want))
    assert len(got) == len(want)
    for r, e in zip(got, want):
        assert r.dtype == e.dtype and r.shape == e.shape, (r.dtype, e.dtype, r.shape, e.shape)
        torch.testing.assert_close(r, e, atol=tol, rtol=tol, equal_nan=True, check_stride=False)


def _rows(n: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Rows with a NaN first, in the middle, last, two NaNs, all NaN, +-inf with and without a
    NaN, all -inf, all +inf, and a plain one; the middle positions vary with ``gen``."""
    x = torch.randn(11, n, generator=gen)
    mid, other = (int(i) for i in torch.randint(1, n - 1, (2,), generator=gen))
    x[0, 0] = NAN
    x[1, mid] = NAN
    x[2, n - 1] = NAN
    x[3, min(mid, other)], x[3, max(mid, other) + 1] = NAN, NAN
    x[4] = NAN
    x[5, other], x[5, mid] = INF, -INF
    x[6, 0], x[6, mid], x[6, n - 1] = INF, NAN, -INF
    x[7] = -INF
    x[8] = INF
    x[9, mid] = -INF
    return x.to(dtype)


# op name -> (graph of x, eager of x); the row dim is the last one
REDUCTIONS = {
    "amax": (lambda g, x: g.call(aten.amax.default, x, [1]), lambda x: x.amax(1)),
    "amin": (lambda g, x: g.call(aten.amin.default, x, [1]), lambda x: x.amin(1)),
    "max.dim": (lambda g, x: g.call(aten.max.dim, x, 1), lambda x: tuple(torch.max(x, 1))),
    "min.dim": (lambda g, x: g.call(aten.min.dim, x, 1, True), lambda x: tuple(torch.min(x, 1, True))),
    "argmax": (lambda g, x: g.call(aten.argmax.default, x, 1), lambda x: x.argmax(1)),
    "argmin": (lambda g, x: g.call(aten.argmin.default, x, 1, True), lambda x: x.argmin(1, True)),
    "max": (lambda g, x: g.call(aten.max.default, g.call(aten.select.int, x, 0, 1)), lambda x: x[1].max()),
    "min": (lambda g, x: g.call(aten.min.default, g.call(aten.select.int, x, 0, 6)), lambda x: x[6].min()),
    "argmax_all": (lambda g, x: g.call(aten.argmax.default, x), lambda x: x.argmax()),
}


def _check_rows(name, n, dtype):
    fn, eager = REDUCTIONS[name]
    gen = torch.Generator().manual_seed(n)
    compiled = _compile(fn, [_rows(n, dtype, gen)])
    for _ in range(2):
        x = _rows(n, dtype, gen)
        _same(compiled(x), eager(x))
    return compiled


def _looped(compiled) -> bool:
    return any("for roffset in range" in k for k in compiled.kernels)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ROWS)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_keep_nan_as_eager(name, n, dtype, monkeypatch):
    """Unsplit: a persistent row, or one looped over in RBLOCK steps."""
    monkeypatch.setattr(split_reduction, "SPLIT_MIN_ROWS", 1 << 62)
    compiled = _check_rows(name, n, dtype)
    assert _looped(compiled) == (n * (11 if name == "argmax_all" else 1) > triton_backend.PERSISTENT_MAX)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["amax", "amin", "max.dim", "min", "argmin"])
def test_long_rows_split_or_not_keep_nan(name, dtype):
    """The same rows with splitting on: max/min as partials over chunks, then those reduced."""
    _check_rows(name, 3000, dtype)


@pytest.mark.parametrize("name", ["amax", "min.dim", "argmax", "argmin", "max"])
@pytest.mark.parametrize("n", [33, 10000])
def test_gpu_source_keeps_nan(name, n, monkeypatch):
    """The GPU's source (a NaN-propagating combine in the row reduction), run by the interpreter;
    10000 is longer than the GPU's persistent limit."""
    monkeypatch.setattr(triton_backend, "_interpreting", lambda device: False)
    monkeypatch.setattr(split_reduction, "SPLIT_MIN_ROWS", 1 << 62)
    compiled = _check_rows(name, n, torch.float32)
    assert "tl.reduce(a, axis, _tc_m" in compiled.kernels[0]
    assert _looped(compiled) == (n > triton_backend.PERSISTENT_MAX_GPU)


@pytest.mark.parametrize("shape", [(0, 7), (3, 0, 5)])
def test_zero_size(shape):
    """Zero rows (eager allows a reduction over a non-empty dim of an empty tensor)."""
    def fn(g, x):
        return (g.call(aten.amax.default, x, [-1]), g.call(aten.max.dim, x, -1),
                g.call(aten.argmin.default, x, -1))

    def eager(x):
        return (x.amax(-1), *torch.max(x, -1), x.argmin(-1))

    x = torch.randn(shape)
    compiled = _compile(fn, [x])
    _same(compiled(x), eager(x))


def _split_input(dtype, gen, channels_last):
    x = torch.randn(8, 4, 32, 32, generator=gen)
    i, j = (int(v) for v in torch.randint(0, 32, (2,), generator=gen))
    x[0, 0, 0, 0] = NAN  # the first chunk's first row
    x[7, 1, 31, 31] = NAN  # the last chunk's last row
    x[3, 2, i, j] = NAN  # anywhere
    x[1, 2, j, i] = INF
    x[5, 3, i, j], x[6, 3, j, i] = INF, -INF
    x = x.to(dtype)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("channels_last", [True, False])
def test_split_reductions_keep_nan(dtype, channels_last):
    """Per-channel max/min of an image batch: partials over chunks of rows, then those reduced."""
    def fn(g, x):
        return (g.call(aten.amax.default, x, [0, 2, 3]), g.call(aten.amin.default, x, [0, 2, 3], True))

    gen = torch.Generator().manual_seed(1)
    compiled = _compile(fn, [_split_input(dtype, gen, channels_last)])
    assert compiled.stats["kernels"] == 2  # split: both partials in one kernel, both finals in one
    for _ in range(2):
        x = _split_input(dtype, gen, channels_last)
        _same(compiled(x), (x.amax((0, 2, 3)), x.amin((0, 2, 3), True)))


@pytest.mark.parametrize("where", [0, 20000, 40008, None])
def test_split_flat_reduction_keeps_nan(where, monkeypatch):
    """A whole-tensor max/min over 40009 values (156 chunks, the last one ragged): its NaN in the
    first, a middle or the last chunk, or all NaN; without split as well."""
    def fn(g, x):
        return g.call(aten.amax.default, x, [0]), g.call(aten.min.default, x)

    def make():
        x = torch.randn(40009)
        if where is None:
            x[:] = NAN
        else:
            x[where] = NAN
        return x

    for split in (True, False):
        with monkeypatch.context() as m:
            if not split:
                m.setattr(split_reduction, "SPLIT_MIN_ROWS", 1 << 62)
            compiled = _compile(fn, [make()])
            assert (compiled.stats["kernels"] > 1) == split  # split: partials, then one final kernel
            for _ in range(2):
                x = make()
                _same(compiled(x), (x.amax(0), x.min()))


POINTWISE = {
    "maximum": (lambda g, a, b: g.call(aten.maximum.default, a, b), torch.maximum),
    "minimum": (lambda g, a, b: g.call(aten.minimum.default, a, b), torch.minimum),
    "fmax": (lambda g, a, b: g.call(aten.fmax.default, a, b), torch.fmax),
    "fmin": (lambda g, a, b: g.call(aten.fmin.default, a, b), torch.fmin),
    "clamp_tensor": (lambda g, a, b: g.call(aten.clamp.Tensor, a, g.call(aten.neg.default, g.call(aten.abs.default, b)),
                                            g.call(aten.abs.default, b)),
                     lambda a, b: torch.clamp(a, -b.abs(), b.abs())),
    "clamp_scalar": (lambda g, a, b: g.call(aten.clamp.default, a, -0.5, 0.5), lambda a, b: torch.clamp(a, -0.5, 0.5)),
    "clamp_nan_bound": (lambda g, a, b: g.call(aten.clamp.default, a, NAN), lambda a, b: torch.clamp(a, NAN)),
    "clamp_min": (lambda g, a, b: g.call(aten.clamp_min.default, a, 0.0), lambda a, b: torch.clamp_min(a, 0.0)),
    "relu": (lambda g, a, b: g.call(aten.relu.default, a), lambda a, b: torch.relu(a)),
    "hardtanh": (lambda g, a, b: g.call(aten.hardtanh.default, a), lambda a, b: torch.nn.functional.hardtanh(a)),
}


def _operands(dtype, gen):
    a, b = torch.randn(2, 64, 37, generator=gen)
    picks = torch.rand(4, 64, 37, generator=gen)
    a[picks[0] < 0.1], b[picks[1] < 0.1] = NAN, NAN
    a[picks[2] < 0.05], b[picks[3] < 0.05] = INF, -INF
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(POINTWISE))
def test_pointwise_compares_as_eager(name, dtype):
    fn, eager = POINTWISE[name]
    gen = torch.Generator().manual_seed(2)
    compiled = _compile(fn, list(_operands(dtype, gen)))
    for _ in range(2):
        a, b = _operands(dtype, gen)
        _same(compiled(a, b), eager(a, b))


@pytest.mark.parametrize("n", ROWS)
def test_a_row_minus_its_max_is_nan_where_eager_is(n):
    """A row minus its max (a softmax's first step): a NaN anywhere makes
    the whole row NaN, the other rows are untouched."""
    def fn(g, x):
        return g.call(aten.sub.Tensor, x, g.call(aten.amax.default, x, [-1], True))

    gen = torch.Generator().manual_seed(3)
    compiled = _compile(fn, [_rows(n, torch.float32, gen)])
    for _ in range(2):
        x = _rows(n, torch.float32, gen)
        _same(compiled(x), x - x.amax(-1, True))


@pytest.mark.parametrize("dtype", DTYPES)
def test_column_reductions_keep_nan(dtype, monkeypatch):
    """Over the rows of a [rows, features] matrix, unsplit: columnar kernels, a run of columns
    over 64 rows a step."""
    def fn(g, x):
        return (g.call(aten.amax.default, x, [0]), g.call(aten.min.dim, x, 0), g.call(aten.argmax.default, x, 0))

    def make(gen):
        x = torch.randn(3000, 64, generator=gen)
        rows = torch.randint(0, 3000, (64,), generator=gen)
        x[rows[:20], torch.arange(20)] = NAN  # one NaN in each of the first 20 columns
        x[0, 20], x[2999, 21], x[:, 22] = NAN, NAN, NAN
        x[rows[30:40], torch.arange(30, 40)] = INF
        return x.to(dtype)

    monkeypatch.setattr(split_reduction, "SPLIT_MIN_ROWS", 1 << 62)
    gen = torch.Generator().manual_seed(4)
    compiled = _compile(fn, [make(gen)])
    assert f"RBLOCK={triton_backend.COLUMN_RBLOCK}," in compiled.source
    for _ in range(2):
        x = make(gen)
        _same(compiled(x), (x.amax(0), *torch.min(x, 0), x.argmax(0)))


ARG_INDEX_CASES = pytest.mark.parametrize("name, rows, n, dim", [
    (name, rows, n, dim) for name in ("argmax", "argmin") for rows, n in ((768, 6), (128, 36), (96, 49),
                                                                          (16, 1000), (4, 5000)) for dim in (1, 0)])


@ARG_INDEX_CASES
def test_float64_arg_index_beside_other_loads(name, rows, n, dim):
    """argmax/argmin's int64 index accumulator (``tl.where(take, rindex, idx)``) in float64, fused
    after a batch norm and ReLU of the row whose result is stored too: the shape of the where-chain
    ptxas -O3 miscompiled beside float64 loads in max pooling (NOTES §30-31). Rows within and beyond
    the persistent limit, over the last dim and the first (ReLU's zeros make ties, so the first of
    equal values must win as in eager). Here under the interpreter; ``test_cuda_...`` on a GPU."""
    _check_arg_index(name, rows, n, dim, "cpu")


@pytest.mark.cuda
@ARG_INDEX_CASES
def test_cuda_float64_arg_index_beside_other_loads(name, rows, n, dim):
    """The same on the GPU, at tc's own configs and ptxas -O3."""
    _check_arg_index(name, rows, n, dim, "cuda")


def _check_arg_index(name, rows, n, dim, device):
    g = torch.Generator().manual_seed(rows * n + dim)
    shape = (rows, n) if dim == 1 else (n, rows)
    stat_shape = (rows, 1) if dim == 1 else (1, rows)
    x = torch.randn(shape, generator=g, dtype=torch.float64).to(device)
    stats = [torch.randn(stat_shape, generator=g, dtype=torch.float64).to(device) for _ in range(4)]
    op = getattr(aten, name).default

    def fn(gr, x, m, s, w, b):
        y = gr.call(aten.relu.default, gr.call(aten.add.Tensor, gr.call(aten.mul.Tensor, gr.call(
            aten.mul.Tensor, gr.call(aten.sub.Tensor, x, m), s), w), b))
        return y, gr.call(op, y, dim)

    compiled = _compile(fn, [x, *stats])
    for fresh in (x, torch.randn_like(x)):
        got = compiled(fresh, *stats)
        y = torch.relu((fresh - stats[0]) * stats[1] * stats[2] + stats[3])
        _same(got, (y, getattr(torch, name)(y, dim)), tol=1e-12)
