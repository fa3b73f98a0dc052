"""View and movement lowerings: index math over the source, never a copy.

A view of a buffer stays a strided window when it can (so extern calls get it without a copy);
anything else is a :class:`Pointwise` whose index function maps into the source.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import sympy
import torch

from .. import kir
from ..ir import BufferValue, Pointwise, TensorValue, Unsupported
from ..kir import FloorDiv, ModIndex, Ops
from ..symbolic import provably_le
from .pointwise import out_spec
from .registry import register

aten = torch.ops.aten
prims = torch.ops.prims


def remap(x: TensorValue, shape: tuple, fn: Callable[[tuple], tuple]) -> Pointwise:
    return Pointwise(shape, x.dtype, x.device, lambda index: x.load(fn(index)))


def view_remap(x: TensorValue, shape: tuple, fn: Callable[[tuple], tuple],
               redo: Callable[[TensorValue], TensorValue]) -> Pointwise:
    """``remap`` for a view op; ``redo`` applies the same view to any value (a buffer gives a window).

    A view of a computed value remembers its pre-view base, so an extern call reading the view
    gets the base stored in its own layout plus a window (``t(w.to(bf16))`` into mm: a transposed
    view of a contiguous cast weight, with 16-byte aligned rows, not a transposed copy).
    """
    out = remap(x, shape, fn)
    if isinstance(x, Pointwise):
        base, chain = x.view_of or (x, None)
        out.view_of = (base, redo if chain is None else (lambda b: redo(chain(b))))
    return out


def _norm_dim(dim: int, ndim: int) -> int:
    return dim % ndim if ndim else 0


def _static(values) -> bool:
    return all(isinstance(v, int) for v in values)


# ---- reshape ----------------------------------------------------------------------------------

def _view_strides(old_shape, old_stride, new_shape) -> tuple | None:
    """Strides viewing (old_shape, old_stride) as new_shape without a copy (torch's rule), or None.

    Over symbolic sizes the rule runs on sizes it can order for every value of the symbols
    (:func:`_same`, :func:`_smaller`); where it cannot, None: the view becomes index math."""
    if not all(isinstance(v, (int, sympy.Expr)) for v in (*old_shape, *old_stride, *new_shape)):
        return None
    if _static(old_shape) and math.prod(old_shape) == 0:
        return tuple(kir_contiguous(new_shape))
    if not _static(old_shape) and any(_same(s, 0) for s in old_shape):
        return None
    new_stride = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = old_stride[-1] if old_stride else 1
    tensor_numel, view_numel = 1, 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        if tensor_d == 0 or (not _same(old_shape[tensor_d - 1], 1)
                             and not _same(old_stride[tensor_d - 1], tensor_numel * chunk_base_stride)):
            while view_d >= 0 and (_smaller(view_numel, tensor_numel) or _same(new_shape[view_d], 1)):
                new_stride[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if not _same(view_numel, tensor_numel):
                return None
            if tensor_d > 0:
                chunk_base_stride = old_stride[tensor_d - 1]
                tensor_numel, view_numel = 1, 1
    if view_d != -1:
        return None
    return tuple(_canonical(s) for s in new_stride)


def _same(a, b) -> bool:
    """``a == b`` for every value of the size symbols (structurally, after expansion)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


def _smaller(a, b) -> bool:
    """``a < b`` for every value of the size symbols, decided where ``a`` divides ``b`` by a
    monomial (a positive integer times symbols, each >= 2): the cases views meet (``s1`` into
    ``s0 * s1``). Unknown is False, which makes the callers decline (index math, no window)."""
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    if _same(a, 0):
        return not _same(b, 0) and _monomial_at_least_2(sympy.sympify(b)) is not None
    quotient = sympy.cancel(sympy.sympify(b) / sympy.sympify(a))
    return _monomial_at_least_2(quotient) is not None


def _monomial_at_least_2(expr: sympy.Expr):
    """``expr`` when it is a positive integer times size symbols and is >= 2 at every size; else None."""
    coeff, factors = expr.as_coeff_mul()
    if not (coeff.is_Integer and coeff > 0):
        return None
    for f in factors:
        base, exp = f.as_base_exp()
        if not (base.is_Symbol and exp.is_Integer and exp > 0):
            return None
    return expr if (factors or coeff >= 2) else None


def _canonical(value):
    """An int for a constant, the expanded expression for a symbolic size."""
    if isinstance(value, int):
        return value
    value = sympy.expand(sympy.sympify(value))
    return int(value) if value.is_Integer else value


def kir_contiguous(shape) -> list:
    out, running = [], 1
    for s in reversed(shape):
        out.append(running)
        running *= max(s, 1)
    return list(reversed(out))


def reshape_index(old: tuple, new: tuple) -> Callable[[tuple], tuple]:
    """Map an index of ``new`` to the index of ``old`` holding the same element (row-major)."""

    def fn(index: tuple) -> tuple:
        linear = sum((i * math.prod(new[k + 1:]) for k, i in enumerate(index)), sympy.Integer(0))
        out = []
        for k, size in enumerate(old):
            inner = math.prod(old[k + 1:])
            out.append(sympy.Integer(0) if size == 1 else ModIndex(FloorDiv(linear, inner), size))
        return tuple(out)

    groups = _match_groups(old, new)
    if groups is None:
        return fn

    def grouped(index: tuple) -> tuple:
        out = []
        for old_dims, new_dims in groups:
            sub_new = tuple(new[d] for d in new_dims)
            sub_old = tuple(old[d] for d in old_dims)
            sub_index = tuple(index[d] for d in new_dims)
            if len(sub_new) == len(sub_old) and all(map(_same, sub_new, sub_old)):
                out.extend(sub_index)
            else:
                out.extend(_group_map(sub_old, sub_new, sub_index))
        return tuple(out)

    return grouped


def _group_map(old: tuple, new: tuple, index: tuple) -> list:
    linear = sum((i * math.prod(new[k + 1:]) for k, i in enumerate(index)), sympy.Integer(0))
    out = []
    for k, size in enumerate(old):
        inner = math.prod(old[k + 1:])
        value = FloorDiv(linear, inner)
        # below ``size`` without a modulus where every dim before is 1 (linear < prod(old))
        leading = all(s == 1 for s in old[:k])
        out.append(sympy.Integer(0) if size == 1 else (value if leading else ModIndex(value, size)))
    return out


def _match_groups(old: tuple, new: tuple):
    """Split both shapes into consecutive groups of equal size products; over symbolic sizes
    only where every comparison is decided for every size (:func:`_same`, :func:`_smaller`)."""
    if (_static(old) and 0 in old) or not all(isinstance(v, (int, sympy.Expr)) for v in (*old, *new)):
        return None
    groups, i, j = [], 0, 0
    while i < len(old) or j < len(new):
        gi, gj = [i] if i < len(old) else [], [j] if j < len(new) else []
        po = old[i] if i < len(old) else 1
        pn = new[j] if j < len(new) else 1
        i, j = i + bool(gi), j + bool(gj)
        while not _same(po, pn):
            if _smaller(po, pn):
                if i >= len(old):
                    return None
                po *= old[i]
                gi.append(i)
                i += 1
            elif _smaller(pn, po):
                if j >= len(new):
                    return None
                pn *= new[j]
                gj.append(j)
                j += 1
            else:
                return None
        groups.append((gi, gj))
    return groups


def view(x: TensorValue, shape: tuple) -> TensorValue:
    shape = tuple(shape)
    if isinstance(x, BufferValue):
        stride = _view_strides(x.shape, x.stride, shape)
        if stride is not None:
            return x.restrided(shape, stride, x.offset)
    return view_remap(x, shape, reshape_index(x.shape, shape), lambda b: view(b, shape))


@register(aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.view_copy.default,
          prims.reshape.default)
def _view(ctx, x, size):
    shape, _, _ = out_spec(ctx)
    return view(x, shape)


@register(aten.flatten.using_ints, aten.unflatten.int)
def _flatten(ctx, x, *args):
    shape, _, _ = out_spec(ctx)
    return view(x, shape)


# ---- strided views ------------------------------------------------------------------------------

def permute(x: TensorValue, dims: list) -> TensorValue:
    dims = [_norm_dim(d, x.ndim) for d in dims]
    shape = tuple(x.shape[d] for d in dims)
    if isinstance(x, BufferValue):
        return x.restrided(shape, tuple(x.stride[d] for d in dims), x.offset)
    inverse = [dims.index(k) for k in range(len(dims))]
    return view_remap(x, shape, lambda index: tuple(index[inverse[k]] for k in range(len(dims))),
                      lambda b: permute(b, dims))


register(aten.permute.default, aten.permute_copy.default)(lambda ctx, x, dims: permute(x, dims))


@register(aten.transpose.int, aten.transpose_copy.int)
def _transpose(ctx, x, d0, d1):
    dims = list(range(x.ndim))
    if x.ndim:
        d0, d1 = _norm_dim(d0, x.ndim), _norm_dim(d1, x.ndim)
        dims[d0], dims[d1] = dims[d1], dims[d0]
    return permute(x, dims)


register(aten.t.default)(lambda ctx, x: permute(x, list(range(x.ndim))[::-1]))
register(aten.numpy_T.default)(lambda ctx, x: permute(x, list(range(x.ndim))[::-1]))


@register(aten.expand.default, aten.expand_copy.default, prims.broadcast_in_dim.default, aten.expand_as.default)
def _expand(ctx, x, *args, **kwargs):
    shape, _, _ = out_spec(ctx)
    lead = len(shape) - x.ndim
    if ctx.target is prims.broadcast_in_dim.default:
        keep = list(args[1])
        inner = tuple(x.shape[keep.index(d)] if d in keep else 1 for d in range(len(shape)))
        x, lead = view(x, inner), 0
    return expand(x, shape, lead)


def expand(x: TensorValue, shape: tuple, lead: int) -> TensorValue:
    if isinstance(x, BufferValue):
        stride = (0,) * lead + tuple(0 if (s == 1 and n != 1) else st for s, n, st in zip(x.shape, shape[lead:], x.stride))
        return x.restrided(shape, stride, x.offset)
    return view_remap(x, shape, lambda index: tuple(
        sympy.Integer(0) if s == 1 else i for i, s in zip(index[lead:], x.shape)), lambda b: expand(b, shape, lead))


def _slice_bounds(size, start, end, step):
    start = 0 if start is None else start
    end = size if end is None else end
    if not (_static([size, start, end])):
        return _symbolic_slice_bounds(size, start, end, step)
    start = max(0, min(size, start + size if start < 0 else start))
    end = max(start, min(size, end + size if end < 0 else end))
    return start, end, step, (end - start + step - 1) // step


def _symbolic_slice_bounds(size, start, end, step):
    """Slice bounds over size symbols, clamped as torch clamps them only where the clamp is
    provable for every size (symbols are >= 2); otherwise the lowering declines."""
    start = size + start if isinstance(start, int) and start < 0 else start
    end = size + end if isinstance(end, int) and end < 0 else end
    if isinstance(end, int) and end >= 2**62:  # ``x[a:]`` as capture writes it
        end = size
    if not (provably_le(0, start) and provably_le(start, end) and provably_le(end, size)):
        raise Unsupported(f"slice [{start}:{end}] of a dim of size {size} is not provably in range at every size")
    length = end - start if step == 1 else sympy.floor((end - start + step - 1) / sympy.Integer(step))
    return start, end, step, sympy.expand(length) if isinstance(length, sympy.Expr) else length


@register(aten.slice.Tensor, aten.slice_copy.Tensor)
def _slice(ctx, x, dim=0, start=None, end=None, step=1):
    dim = _norm_dim(dim, x.ndim)
    start, end, step, length = _slice_bounds(x.shape[dim], start, end, step)
    return slice_(x, dim, start, step, length)


def slice_(x: TensorValue, dim: int, start: int, step: int, length: int) -> TensorValue:
    shape = x.shape[:dim] + (length,) + x.shape[dim + 1:]
    if isinstance(x, BufferValue):
        stride = x.stride[:dim] + (x.stride[dim] * step,) + x.stride[dim + 1:]
        return x.restrided(shape, stride, x.offset + start * x.stride[dim])
    return view_remap(x, shape, lambda index: index[:dim] + (index[dim] * step + start,) + index[dim + 1:],
                      lambda b: slice_(b, dim, start, step, length))


@register(aten.select.int, aten.select_copy.int)
def _select(ctx, x, dim, i):
    dim = _norm_dim(dim, x.ndim)
    return select(x, dim, i + x.shape[dim] if i < 0 else i)


def select(x: TensorValue, dim: int, i: int) -> TensorValue:
    shape = x.shape[:dim] + x.shape[dim + 1:]
    if isinstance(x, BufferValue):
        return x.restrided(shape, x.stride[:dim] + x.stride[dim + 1:], x.offset + i * x.stride[dim])
    return view_remap(x, shape, lambda index: index[:dim] + (sympy.Integer(i),) + index[dim:],
                      lambda b: select(b, dim, i))


@register(aten.narrow.default)
def _narrow(ctx, x, dim, start, length):
    return _slice(ctx, x, dim, start, start + length if start >= 0 else start + x.shape[dim] + length)


def _reshape_to_spec(ctx, x, *args, **kwargs):
    shape, _, _ = out_spec(ctx)
    return view(x, shape)


for _target in (aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.unsqueeze.default,
                aten.squeeze_copy.dim, aten.squeeze_copy.dims, aten.unsqueeze_copy.default,
                prims.squeeze.default, aten.view_as.default):
    register(_target)(_reshape_to_spec)


@register(aten.alias.default)
def _alias(ctx, x):
    return x


@register(aten.as_strided.default, aten.as_strided_copy.default)
def _as_strided(ctx, x, size, stride, storage_offset=None):
    base = ctx.realize(x)
    if not ctx.owns_storage(base):
        raise Unsupported("as_strided on storage tc does not own")
    offset = base.offset if storage_offset is None else storage_offset
    return base.restrided(tuple(size), tuple(stride), offset)


@register(aten.diagonal.default, aten.diagonal_copy.default)
def _diagonal(ctx, x, offset=0, dim1=0, dim2=1):
    dim1, dim2 = _norm_dim(dim1, x.ndim), _norm_dim(dim2, x.ndim)
    shape, _, _ = out_spec(ctx)
    rest = [d for d in range(x.ndim) if d not in (dim1, dim2)]

    def fn(index):
        full = [None] * x.ndim
        for d, i in zip(rest, index[:-1]):
            full[d] = i
        full[dim1] = index[-1] + max(-offset, 0)
        full[dim2] = index[-1] + max(offset, 0)
        return tuple(full)

    return remap(x, shape, fn)


@register(aten.unfold.default)
def _unfold(ctx, x, dim, size, step):
    dim = _norm_dim(dim, x.ndim)
    shape, _, _ = out_spec(ctx)
    if x.ndim == 0:
        return remap(x, shape, lambda index: ())
    return remap(x, shape, lambda index: index[:dim] + (index[dim] * step + index[-1],) + index[dim + 1:-1])


# ---- data movement ----------------------------------------------------------------------------

@register(aten.flip.default, prims.rev.default)
def _flip(ctx, x, dims):
    dims = {_norm_dim(d, x.ndim) for d in dims}
    return remap(x, x.shape, lambda index: tuple(
        (x.shape[d] - 1 - i) if d in dims else i for d, i in enumerate(index)))


@register(aten.roll.default)
def _roll(ctx, x, shifts, dims=()):
    if not dims:
        flat = view(x, (math.prod(x.shape),))
        return view(_roll(ctx, flat, shifts, [0]), x.shape)
    shifts = dict(zip([_norm_dim(d, x.ndim) for d in dims], shifts))
    return remap(x, x.shape, lambda index: tuple(
        ModIndex(i + (x.shape[d] - shifts[d] % x.shape[d]), x.shape[d]) if d in shifts and x.shape[d] else i
        for d, i in enumerate(index)))


@register(aten.repeat.default)
def _repeat(ctx, x, repeats):
    shape, _, _ = out_spec(ctx)
    lead = len(repeats) - x.ndim
    return remap(x, shape, lambda index: tuple(
        ModIndex(i, s) for i, s in zip(index[lead:], x.shape)))


def _concat(ctx, pieces: list, dim: int, shape: tuple, dtype: torch.dtype, device) -> Pointwise:
    bounds, start = [], 0
    for p in pieces:
        bounds.append((start, start + p.shape[dim]))
        start += p.shape[dim]
    compute = kir.compute_dtype(dtype)

    def body(index):
        i = index[dim]
        if isinstance(i, (int, sympy.Integer)) and all(isinstance(v, int) for pair in bounds for v in pair):
            # a constant position (an optimizer selects its per-parameter scalar from a stack):
            # that piece alone, not a chain of conditions loading every piece
            for p, (lo, hi) in zip(pieces, bounds):
                if lo <= int(i) < hi:
                    return kir.cast(p.load(index[:dim] + (i - lo,) + index[dim + 1:]), compute)
        result = None
        for p, (lo, hi) in reversed(list(zip(pieces, bounds))):
            inside = kir.binary(Ops.AND, kir.binary(Ops.GE, kir.index_value(i), kir.size_value(lo, torch.int64)),
                                kir.binary(Ops.LT, kir.index_value(i), kir.size_value(hi, torch.int64)))
            value = kir.masked(inside, kir.cast(p.load(index[:dim] + (i - lo,) + index[dim + 1:]), compute), 0)
            result = value if result is None else kir.where(inside, value, result)
        return result

    return Pointwise(shape, dtype, device, body)


@register(aten.cat.default)
def _cat(ctx, tensors, dim=0):
    shape, dtype, device = out_spec(ctx)
    pieces = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0 and len(shape) != 1)]
    dim = _norm_dim(dim, len(shape))
    pieces = [p for p in pieces if p.shape[dim] != 0] or pieces[:1]
    return _concat(ctx, pieces, dim, shape, dtype, device)


@register(aten.stack.default)
def _stack(ctx, tensors, dim=0):
    shape, dtype, device = out_spec(ctx)
    dim = _norm_dim(dim, len(shape))
    pieces = [view(t, t.shape[:dim] + (1,) + t.shape[dim:]) for t in tensors]
    return _concat(ctx, pieces, dim, shape, dtype, device)


@register(aten.constant_pad_nd.default)
def _pad(ctx, x, pad, value=0):
    shape, dtype, device = out_spec(ctx)
    compute = kir.compute_dtype(dtype)
    pads = {x.ndim - 1 - k: (pad[2 * k], pad[2 * k + 1]) for k in range(len(pad) // 2)}

    def body(index):
        src, conds = list(index), []
        for d, (left, _) in pads.items():
            src[d] = index[d] - left
            if True:
                iv = kir.index_value(src[d])
                conds.append(kir.binary(Ops.AND, kir.binary(Ops.GE, iv, kir.const(0, torch.int64)),
                                        kir.binary(Ops.LT, iv, kir.size_value(x.shape[d], torch.int64))))
        if not conds:
            return kir.cast(x.load(tuple(src)), compute)
        mask = conds[0]
        for cnd in conds[1:]:
            mask = kir.binary(Ops.AND, mask, cnd)
        return kir.masked(mask, kir.cast(x.load(tuple(src)), compute), value)

    return Pointwise(shape, dtype, device, body)


def _split(ctx, x, sizes: list, dim: int) -> tuple:
    dim = _norm_dim(dim, x.ndim)
    out, start = [], 0
    for size in sizes:
        out.append(_slice(ctx, x, dim, start, start + size, 1))
        start += size
    return tuple(out)


@register(aten.split.Tensor, aten.split_copy.Tensor)
def _split_tensor(ctx, x, split_size, dim=0):
    total = x.shape[_norm_dim(dim, x.ndim)]
    sizes = [min(split_size, total - s) for s in range(0, total, split_size)] if split_size else [0]
    return _split(ctx, x, sizes or [0], dim)


register(aten.split_with_sizes.default, aten.split_with_sizes_copy.default)(
    lambda ctx, x, sizes, dim=0: _split(ctx, x, list(sizes), dim))


@register(aten.unbind.int, aten.unbind_copy.int)
def _unbind(ctx, x, dim=0):
    dim = _norm_dim(dim, x.ndim)
    return tuple(_select(ctx, x, dim, i) for i in range(x.shape[dim]))
