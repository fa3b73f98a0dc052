"""Split reductions: a reduction of very many rows into few outputs in two kernels.

Batch-norm statistics and their backward sum a [N, C, H, W] value over N*H*W rows into C
outputs. One kernel gives each program a few outputs and every row, so C=64 outputs are a
handful of programs looping over 200k rows while the GPU idles. Split, the first kernel reduces
``chunks`` runs of ``size`` consecutive rows each into partials ``[chunks, *shape]`` (in the
compute dtype), chunks * outputs of them; the second reduces the partials over ``chunks``.

Rows are numbered by their flat position ``f`` in the reduced ranges (``rranges`` row-major), so
any reduced dims split alike (one flat dim, NCHW or NHWC). Where every index the reduction reads
steps through adjacent reduced dims as through one dim (NHWC: N, H and W of a channels-last
value are one run of rows ``C`` apart), those dims get ``f`` itself, not its digits: the kernels
compute ``f * C + c``, not three divisions and moduli per element.

A variance (batch norm's training statistics) splits as one unit, :func:`moments`: the first
kernel computes per chunk its sum and its sum of squared deviations from the chunk's own mean
(two loops over the chunk's rows, as an unsplit variance does over all of them); the second
combines the chunks as Chan's parallel algorithm does, never as E[x²] - E[x]² (which loses every
digit in float32 when the mean is large against the spread).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import sympy
import torch

from tc_ir.spec import contiguous_strides

from . import kir
from .ir import ComputedBuffer
from .kir import Ops, UOp

# Split when there are at least SPLIT_MIN_ROWS rows and SPLIT_MIN_ELEMENTS elements (below, one
# kernel is a few microseconds: a second kernel and its launch cost more than they save; a
# [64, 3000] softmax was five kernels at 32768) and the first kernel gets at least
# SPLIT_MIN_CHUNKS chunks: as many as make about SPLIT_TARGET_OUTPUTS partials (hundreds to
# thousands of programs), each of at least SPLIT_MIN_CHUNK rows (a program's worth). ResNet-50's
# last stage (512 channels over 64*7*7 rows, 1.6M elements) is 16 column programs of 3136 rows
# each unsplit.
SPLIT_MIN_ROWS = 2048
SPLIT_MIN_ELEMENTS = 1 << 18
SPLIT_TARGET_OUTPUTS = 32768
SPLIT_MIN_CHUNK = 256
SPLIT_MIN_CHUNKS = 4
SPLITTABLE = ("sum", "prod", "max", "min", "any", "all")  # partials of these reduce alike


def _static(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, sympy.Integer):
        return int(v)
    return None


def plan(shape: tuple, rranges: tuple, reduction_type: str, body: Callable | None = None) -> tuple[int, int] | None:
    """``(chunks, size)`` for a reduction worth splitting, else None: static sizes only (a
    symbolic one is kept whole), no arg-reductions (their partials would need the indices).
    With ``body`` (the C++ back end), only where the reduced dims are one run of rows: its
    unsplit kernel loops over each reduced dim, while a split one would divide per element
    (NCHW: measured slower there; NHWC faster)."""
    if reduction_type not in SPLITTABLE:
        return None
    sizes = [_static(v) for v in (*shape, *rranges)]
    if any(s is None for s in sizes):
        return None
    outputs, rows = math.prod(sizes[:len(shape)]), math.prod(sizes[len(shape):])
    if outputs < 1 or rows < SPLIT_MIN_ROWS or outputs * rows < SPLIT_MIN_ELEMENTS:
        return None
    most = min(-(-SPLIT_TARGET_OUTPUTS // outputs), rows // SPLIT_MIN_CHUNK)
    if most < SPLIT_MIN_CHUNKS:
        return None
    if body is not None and len(_runs(body, len(shape), tuple(sizes[len(shape):]))) > 1:
        return None
    # a divisor of the rows near the most chunks needs no mask for a ragged last chunk
    for chunks in range(most, max(most // 2, SPLIT_MIN_CHUNKS) - 1, -1):
        if rows % chunks == 0:
            return chunks, rows // chunks
    size = -(-rows // most)
    return -(-rows // size), size


def partial_body(body: Callable, nout: int, rranges: tuple, size: int, reduction_type: str) -> Callable:
    """The body of the first kernel: element ``(k, *index)`` row ``j`` is ``body``'s ``index``
    at flat row ``k * size + j`` (the identity of the reduction past the last row)."""
    rranges = tuple(int(r) for r in rranges)
    rows = math.prod(rranges)
    runs = _runs(body, nout, rranges)
    ragged = rows % size != 0

    def split_body(index, rindex):
        flat = index[0] * size + rindex[0]
        value = body(tuple(index[1:]), _digits(flat, rranges, runs))
        if not ragged:
            return value
        inside = kir.binary(Ops.LT, kir.index_value(flat), kir.const(rows, torch.int64))
        return kir.masked(inside, value, identity(reduction_type, value.dtype))

    return split_body


def identity(reduction_type: str, dtype: torch.dtype) -> UOp:
    """The value a reduction of ``reduction_type`` starts from (what a masked row adds)."""
    if reduction_type in ("max", "min"):
        if dtype == torch.bool:
            return kir.const(reduction_type == "min", dtype)
        if dtype.is_floating_point:
            return kir.const(float("-inf") if reduction_type == "max" else float("inf"), dtype)
        info = torch.iinfo(dtype)
        return kir.const(info.min if reduction_type == "max" else info.max, dtype)
    return kir.const({"sum": 0, "prod": 1, "any": 0, "all": 1}[reduction_type], dtype)


def _digits(flat: sympy.Expr, rranges: tuple, runs: list) -> tuple:
    """The reduced index of flat row ``flat``: per run of dims, its last dim gets the run's
    digit, the others 0 (the reads were checked to step through the run as one dim)."""
    rindex = [sympy.Integer(0)] * len(rranges)
    for n, run in enumerate(runs):
        last = run[-1]
        digit = kir.FloorDiv(flat, math.prod(rranges[last + 1:]))
        if n:  # the first run's digit is below its size without a modulus
            digit = kir.ModIndex(digit, math.prod(rranges[d] for d in run))
        rindex[last] = digit
    return tuple(rindex)


def _runs(body: Callable, nout: int, rranges: tuple) -> list[list[int]]:
    """The reduced dims (not of size 1) in runs that every index ``body`` computes steps through
    as one dim: adjacent dims a, b with stride(a) == stride(b) * size(b) in each of them."""
    marks = tuple(sympy.Symbol(f"split_r{j}", integer=True, nonnegative=True) for j in range(len(rranges)))
    dims = [j for j, r in enumerate(rranges) if r != 1]
    joined = [True] * max(len(dims) - 1, 0)
    for expr in _index_exprs(body(kir.xvars(nout), marks)):
        if not expr.free_symbols & set(marks):
            continue
        coeffs = _linear_coeffs(expr, marks)
        if coeffs is None:  # a view's division, an index used as a value...: digit by digit
            return [[d] for d in dims]
        for i, (a, b) in enumerate(zip(dims, dims[1:])):
            joined[i] = joined[i] and coeffs[a] == coeffs[b] * rranges[b]
    runs: list[list[int]] = []
    for i, d in enumerate(dims):
        if i and joined[i - 1]:
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


def _index_exprs(value: UOp):
    """Every index expression in ``value``'s tree (load addresses, index values, checks)."""
    for u in value.toposort():
        for a in u.arg if isinstance(u.arg, tuple) else (u.arg,):
            if isinstance(a, sympy.Basic):
                yield a


def _linear_coeffs(expr: sympy.Expr, marks: tuple) -> list[int] | None:
    """The integer coefficient of each mark in ``expr``, or None unless ``expr`` is linear in
    them with integer coefficients."""
    expr = sympy.expand(expr)
    coeffs = [expr.coeff(m) for m in marks]
    if not all(c.is_Integer for c in coeffs):
        return None
    rest = sympy.expand(expr - sum(c * m for c, m in zip(coeffs, marks)))
    if rest.free_symbols & set(marks):
        return None
    return [int(c) for c in coeffs]


def moments(new_name: Callable[[], str], shape: tuple, dtype: torch.dtype, device, body: Callable, rranges: tuple,
            reduced_dims: tuple, split: tuple[int, int]) -> list[ComputedBuffer]:
    """The buffers of ``body``'s sum and M2 (sum of squared deviations from the mean) over
    ``rranges``, split in ``split`` = ``(chunks, size)`` (:func:`plan` of a sum): partial sums
    ``S[k]`` and ``M2[k]`` about each chunk's mean ``S[k] / n[k]`` in one kernel, then ``sum =
    sum_k S[k]`` and ``M2 = sum_k M2[k] + n[k] * (S[k] / n[k] - sum / rows)**2`` in another.
    Every term of the combine is non-negative: no cancellation. Returns the partial sums, the
    partial M2, the sum and the M2, in ``dtype`` (a compute dtype); the last two are ``shape``."""
    chunks, size = split
    rranges = tuple(int(r) for r in rranges)
    rows, nout = math.prod(rranges), len(shape)
    pshape = (chunks, *shape)
    sums = ComputedBuffer(new_name(), pshape, contiguous_strides(pshape), dtype, device,
                          partial_body(body, nout, rranges, size, "sum"), (size,), "sum")
    partial_m2 = ComputedBuffer(new_name(), pshape, contiguous_strides(pshape), dtype, device,
                                _partial_m2_body(body, sums, rranges, size, chunks), (size,), "sum")
    s, m2 = sums.value(), partial_m2.value()
    total = ComputedBuffer(new_name(), tuple(shape), contiguous_strides(shape), dtype, device,
                           lambda index, rindex: s.load((rindex[0], *index)), (chunks,), "sum", tuple(reduced_dims))
    t = total.value()

    def combine(index, rindex):
        n = _chunk_rows(rindex[0], chunks, size, rows, dtype)
        d = kir.binary(Ops.SUB, kir.binary(Ops.TRUEDIV, s.load((rindex[0], *index)), n),
                       kir.binary(Ops.TRUEDIV, t.load(index), kir.const(rows, dtype)))
        return kir.binary(Ops.ADD, m2.load((rindex[0], *index)), kir.binary(Ops.MUL, n, kir.binary(Ops.MUL, d, d)))

    final_m2 = ComputedBuffer(new_name(), tuple(shape), contiguous_strides(shape), dtype, device, combine,
                              (chunks,), "sum", tuple(reduced_dims))
    return [sums, partial_m2, total, final_m2]


def _partial_m2_body(body: Callable, sums: ComputedBuffer, rranges: tuple, size: int, chunks: int) -> Callable:
    """Element ``(k, *index)``: the sum over chunk ``k``'s rows of ``(value - S[k] / n[k])**2``
    (rows past the last, of a ragged last chunk, add 0)."""
    rows = math.prod(rranges)
    runs = _runs(body, len(sums.shape) - 1, rranges)
    s = sums.value()

    def m2_body(index, rindex):
        flat = index[0] * size + rindex[0]
        value = body(tuple(index[1:]), _digits(flat, rranges, runs))
        mean = kir.binary(Ops.TRUEDIV, s.load(index), _chunk_rows(index[0], chunks, size, rows, value.dtype))
        d = kir.binary(Ops.SUB, value, mean)
        square = kir.binary(Ops.MUL, d, d)
        if rows % size == 0:
            return square
        inside = kir.binary(Ops.LT, kir.index_value(flat), kir.const(rows, torch.int64))
        return kir.masked(inside, square, kir.const(0, value.dtype))

    return m2_body


def _chunk_rows(k, chunks: int, size: int, rows: int, dtype: torch.dtype) -> UOp:
    """How many rows chunk ``k`` holds, as a ``dtype`` value: ``size``, but fewer in a ragged
    last chunk."""
    last = rows - (chunks - 1) * size
    if last == size:
        return kir.const(size, dtype)
    is_last = kir.binary(Ops.EQ, kir.index_value(k), kir.const(chunks - 1, torch.int64))
    return kir.where(is_last, kir.const(last, dtype), kir.const(size, dtype))
