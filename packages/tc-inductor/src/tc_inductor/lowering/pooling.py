"""Max pooling, forward and backward, as generated code (1-d pooling reaches us as 2-d).

Forward: each output element is its window's max, unrolled over the window as eager's kernels
walk it: a later element wins when it is greater or NaN (so a NaN gives NaN and, of several, the
last NaN's index), ties keep the first, positions in the padding are skipped (never 0, never a
winner), and the index starts at the window's first position at or after the input's start (the
answer eager gives for a window of only -inf, and for one wholly in the padding: dilation 2 over
a 1-pixel image gives -inf and an index past the plane).

Backward: the gradient of an input element is the sum, over the output windows that can contain
it, of those windows' incoming gradients whose recorded index is this element: a gather over at
most ``prod(((k - 1) * dilation) // stride + 1)`` windows, so it fuses with the pointwise ops
around it (eager scatters, which cannot). The indices must be the forward's, as for eager's CUDA
kernel and torch.compile's lowering: an index outside its window is not looked for.

The forward's index math is int32 where the plane allows (``_index_dtype``: a GPU miscompile of
the int64 form). Windows of more than ``MAX_WINDOW`` elements decline, and so does the forward in
float64 on CUDA (``_check_forward_device``: a second ptxas miscompile of its index chain):
eager's kernel, as an extern call (the forward's torch decomposition is not used:
``decompositions.WRONG_DECOMPOSITIONS``).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import sympy
import torch

from .. import kir
from ..ir import Pointwise, TensorValue, Unsupported
from ..kir import FloorDiv, Ops, UOp
from .registry import register

aten = torch.ops.aten

# The most window elements (forward) or candidate windows (backward) unrolled into one element's
# code; torch.compile's limit too. Larger windows leave long, slow kernels.
MAX_WINDOW = 25


def _params(n: int, kernel_size, stride, padding, dilation) -> tuple[tuple, ...]:
    """(kernel, stride, padding, dilation), each a tuple of ``n`` ints, as eager reads them: one
    value stands for every dim, and an empty stride is the kernel size."""

    def expand(value, default=None) -> tuple:
        values = tuple(value) if isinstance(value, (list, tuple)) else (value,)
        if not values:
            values = default
        values = values * n if len(values) == 1 else values
        if len(values) != n or not all(isinstance(v, int) for v in values):
            raise Unsupported(f"pooling parameters {value!r} are not {n} ints")
        return values

    kernel = expand(kernel_size)
    return kernel, expand(stride, kernel), expand(padding), expand(dilation)


def _check_input(x: TensorValue, n: int) -> None:
    if x.ndim not in (n + 1, n + 2):
        raise Unsupported(f"max pooling of a {x.ndim}-d input")
    if not x.dtype.is_floating_point:
        raise Unsupported(f"max pooling of {x.dtype}")  # eager's minimum is not -inf there


def _flat(positions: tuple, sizes: tuple, dtype: torch.dtype = torch.int64) -> UOp:
    """The flat index, as ``dtype``, of ``positions`` (UOps of ``dtype`` or sympy expressions)
    into ``sizes``."""
    flat = None
    for pos, size in zip(positions, sizes):
        pos = pos if isinstance(pos, UOp) else _position(pos, dtype)
        if flat is None:
            flat = pos
        else:
            flat = kir.binary(Ops.ADD, kir.binary(Ops.MUL, flat, kir.size_value(size, dtype)), pos)
    return flat


def _position(expr: sympy.Expr, dtype: torch.dtype) -> UOp:
    return kir.cast(kir.index_value(expr), dtype)


def _index_dtype(sizes: tuple) -> torch.dtype:
    """int32 for the index math of a window over a plane of fewer than 2**31 elements (static
    sizes), else int64. Besides being cheaper, int32 sidesteps a GPU miscompile: Triton 3.6's
    PTX of the int64 where-chain, fused beside float64 loads, came out of every ptxas at -O3
    (12.8, 12.9, 13.0) with wrong indices, and right at -O0 or in int32 (NOTES §30)."""
    plane = math.prod(sizes)
    return torch.int32 if isinstance(plane, int) and plane < 2**31 else torch.int64


def _check_forward_device(x: TensorValue, device: Any) -> None:
    """float64 on CUDA declines (eager's kernel). The forward's where-chain of window positions,
    chosen by float64 comparisons, came out of ptxas -O3 wrong twice on the H200: first in int64
    (§30, fixed by int32 index math), then in int32 inside a horizontally fused kernel (timm's
    inception_v3 training in float64: a 3x3/2 pooling's indices over 11x11 and 5x5 maps, gradients
    off by up to 39; right with that one kernel at -O0, NOTES §31). float32 and bfloat16 forwards
    passed every GPU check and stay generated; the backward stays generated in every dtype."""
    if x.dtype == torch.float64 and torch.device(device).type == "cuda":
        raise Unsupported("float64 max pooling on CUDA (a ptxas miscompile of its index chain)")


def _always(condition: sympy.Expr) -> bool:
    """Whether ``condition`` (over non-negative loop indices) holds for every index sympy can say."""
    return bool(condition) if condition in (sympy.true, sympy.false) else False


# ---- forward ---------------------------------------------------------------------------------

class _Window:
    """One output element's window over ``x``'s last ``n`` dims: positions, and the max."""

    def __init__(self, x: TensorValue, params: tuple, out_shape: tuple, index: tuple):
        self.x, (self.kernel, self.stride, self.padding, self.dilation) = x, params
        self.n = len(self.kernel)
        self.prefix, self.out = index[:len(index) - self.n], index[len(index) - self.n:]
        self.out_sizes = out_shape[len(out_shape) - self.n:]
        self.in_sizes = x.shape[x.ndim - self.n:]
        self.start = tuple(o * s - p for o, s, p in zip(self.out, self.stride, self.padding))
        self.itype = _index_dtype(self.in_sizes)

    def position(self, d: int, j: int) -> sympy.Expr:
        return self.start[d] + j * self.dilation[d]

    def inside(self, d: int, j: int) -> list[UOp]:
        """The conditions (none when always true) for element ``j`` of dim ``d`` to be in the input."""
        pos, conds = self.position(d, j), []
        if j * self.dilation[d] < self.padding[d]:  # can fall in the left padding
            conds.append(kir.binary(Ops.GE, _position(pos, self.itype), kir.const(0, self.itype)))
        last = (self.out_sizes[d] - 1) * self.stride[d] - self.padding[d] + j * self.dilation[d]
        if not _always(sympy.sympify(last) < sympy.sympify(self.in_sizes[d])):  # or past the end
            conds.append(kir.binary(Ops.LT, _position(pos, self.itype), kir.size_value(self.in_sizes[d], self.itype)))
        return conds

    def element(self, js: tuple) -> tuple[UOp, UOp]:
        """(value in the compute dtype, -inf in the padding; its flat index) of window element ``js``."""
        positions = tuple(self.position(d, j) for d, j in enumerate(js))
        value = kir.cast(self.x.load(self.prefix + positions), self.x.dtype)
        conds = [c for d, j in enumerate(js) for c in self.inside(d, j)]
        if conds:
            value = kir.masked(_all(conds), value, float("-inf"))
        return value, _flat(positions, self.in_sizes, self.itype)

    def first_index(self) -> UOp:
        """Eager's starting index: per dim, the window's first position that is not before the
        input (its ``while (start < 0) start += dilation``)."""
        firsts = []
        for d in range(self.n):
            first = _position(self.position(d, self.kernel[d] - 1), self.itype)
            for j in reversed(range(self.kernel[d] - 1)):
                if j * self.dilation[d] < self.padding[d]:
                    pos = _position(self.position(d, j), self.itype)
                    first = kir.where(kir.binary(Ops.GE, pos, kir.const(0, self.itype)), pos, first)
                else:
                    first = _position(self.position(d, j), self.itype)
            firsts.append(first)
        return _flat(tuple(firsts), self.in_sizes, self.itype)

    def max(self) -> tuple[UOp, UOp]:
        """(max, its int64 flat index), walking the window in eager's order."""
        elements = [self.element(js) for js in itertools.product(*(range(k) for k in self.kernel))]
        if all(not self.inside(d, 0) for d in range(self.n)):  # the first element is always in
            (best, where), rest = elements[0], elements[1:]
        else:
            best, where, rest = kir.const(float("-inf"), self.x.dtype), self.first_index(), elements
        for value, index in rest:
            wins = kir.binary(Ops.OR, kir.binary(Ops.GT, value, best), kir.unary(Ops.ISNAN, value))
            best, where = kir.where(wins, value, best), kir.where(wins, index, where)
        return best, kir.cast(where, torch.int64)


def _max_pool(n: int):
    def lowering(ctx, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        _check_input(x, n)
        params = _params(n, kernel_size, stride, padding, dilation)
        if math.prod(params[0]) > MAX_WINDOW:
            raise Unsupported(f"a window of {math.prod(params[0])} elements")
        values_spec, indices_spec = ctx.spec
        _check_forward_device(x, values_spec.device)
        shape = tuple(values_spec.shape)
        # the input is read once per window element: a value that is itself such a gather is stored
        if isinstance(x, Pointwise) and _loads(x) > 8:
            x = ctx.realize(x)

        # one window walk per index, shared by the values and the indices (built once, not twice)
        walks: dict = {}

        def walk(index):
            if index not in walks:
                walks[index] = _Window(x, params, shape, index).max()
            return walks[index]

        return (Pointwise(shape, x.dtype, values_spec.device, lambda index: walk(index)[0]),
                Pointwise(shape, torch.int64, indices_spec.device, lambda index: walk(index)[1]))

    return lowering


def _loads(value: Pointwise) -> int:
    return sum(1 for u in value.load(kir.xvars(value.ndim)).toposort() if u.op is Ops.LOAD)


register(aten.max_pool2d_with_indices.default)(_max_pool(2))
register(aten.max_pool3d_with_indices.default)(_max_pool(3))


# ---- backward --------------------------------------------------------------------------------

def _candidates(params: tuple) -> tuple[int, ...]:
    """Per dim, how many consecutive windows can contain one input position."""
    kernel, stride, _, dilation = params
    return tuple(((k - 1) * dl) // s + 1 for k, s, dl in zip(kernel, stride, dilation))


def _max_pool_backward(n: int):
    def lowering(ctx, grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
        _check_input(x, n)
        params = _params(n, kernel_size, stride, padding, dilation)
        counts = _candidates(params)
        if math.prod(counts) > MAX_WINDOW:
            raise Unsupported(f"{math.prod(counts)} windows can hold one input element")
        spec, (_, stride_, padding_, _) = ctx.spec, params
        in_sizes, out_sizes = x.shape[x.ndim - n:], grad_output.shape[grad_output.ndim - n:]
        compute = kir.compute_dtype(spec.dtype)

        def fn(index):
            prefix, pos = index[:len(index) - n], index[len(index) - n:]
            target = _flat(pos, in_sizes)
            # per dim, the last window starting at or before this position (position + padding >= 0)
            last = tuple(FloorDiv(p + pad, s) for p, pad, s in zip(pos, padding_, stride_))
            total = kir.const(0, compute)
            for back in itertools.product(*(reversed(range(c)) for c in counts)):  # eager's order
                window = tuple(lst - b for lst, b in zip(last, back))
                conds = [c for d in range(n) for c in _window_exists(window[d], back[d], in_sizes[d],
                                                                     out_sizes[d], padding_[d], stride_[d])]
                at = prefix + window
                hit = kir.binary(Ops.EQ, kir.cast(indices.load(at), torch.int64), target)
                part = kir.where(hit, kir.cast(grad_output.load(at), compute), kir.const(0, compute))
                total = kir.binary(Ops.ADD, total, kir.masked(_all(conds), part, 0) if conds else part)
            return total

        return Pointwise(spec.shape, spec.dtype, spec.device, fn)

    return lowering


def _window_exists(window: sympy.Expr, back: int, in_size: Any, out_size: Any, padding: int,
                   stride: int) -> list[UOp]:
    """The conditions (none where always true) for window number ``window``, ``back`` windows
    before the last one to start at or before its position, to be one of the ``out_size``."""
    conds = []
    if back > 0:
        conds.append(kir.binary(Ops.GE, kir.index_value(window), kir.const(0, torch.int64)))
    # the last window of the input's last position is a window, for static sizes sympy can say
    largest = (in_size - 1 + padding) // stride - back if isinstance(in_size, int) else None
    if largest is None or not _always(sympy.sympify(largest) < sympy.sympify(out_size)):
        conds.append(kir.binary(Ops.LT, kir.index_value(window), kir.size_value(out_size, torch.int64)))
    return conds


def _all(conds: list[UOp]) -> UOp:
    mask = conds[0]
    for c in conds[1:]:
        mask = kir.binary(Ops.AND, mask, c)
    return mask


register(aten.max_pool2d_with_indices_backward.default)(_max_pool_backward(2))
register(aten.max_pool3d_with_indices_backward.default)(_max_pool_backward(3))
