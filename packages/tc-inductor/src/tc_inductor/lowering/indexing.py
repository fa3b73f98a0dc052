"""Indexing lowerings: gather, index_select, embedding, advanced indexing, tril/triu.

Data-dependent indices become indirect symbols in the load's index expression
(:func:`tc_inductor.kir.indirect_symbol`), so the gathered tensor is never materialised. Every
one is bounds-checked in the kernel (``Ops.CHECK_INDEX``): eager raises on an index out of range,
and an unchecked load would read (or write past) another allocation.
"""

from __future__ import annotations

import sympy
import torch

from .. import kir
from ..ir import Pointwise, TensorValue, Unsupported
from ..kir import Ops, UOp
from .pointwise import broadcast_index, out_spec
from .registry import register

aten = torch.ops.aten


def indirect(value: UOp, size, wraps: bool) -> sympy.Symbol:
    """A symbol for index ``value`` into a dim of ``size``, checked to lie in [0, size); negative
    ones are first wrapped as Python indexing does when ``wraps`` (advanced indexing, not gather,
    index_select or embedding, where eager rejects them)."""
    if size == 0:  # every index is out of range, and there is no element to read instead
        raise Unsupported("indexing into a dim of size 0")
    return kir.indirect_symbol(kir.checked_index(value, size, wraps))


@register(aten.gather.default)
def _gather(ctx, x, dim, index, sparse_grad=False):
    shape, dtype, device = out_spec(ctx)
    dim = dim % max(x.ndim, 1)

    def fn(i):
        if x.ndim == 0:
            return x.load(())
        j = indirect(index.load(i), x.shape[dim], wraps=False)
        return x.load(i[:dim] + (j,) + i[dim + 1:])

    return Pointwise(shape, dtype, device, fn)


@register(aten.index_select.default)
def _index_select(ctx, x, dim, index):
    shape, dtype, device = out_spec(ctx)
    dim = dim % max(x.ndim, 1)

    def fn(i):
        if x.ndim == 0:
            return x.load(())
        j = indirect(index.load((i[dim],) if index.ndim else ()), x.shape[dim], wraps=False)
        return x.load(i[:dim] + (j,) + i[dim + 1:])

    return Pointwise(shape, dtype, device, fn)


@register(aten.embedding.default)
def _embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    shape, dtype, device = out_spec(ctx)
    k = indices.ndim

    def fn(i):
        return weight.load((indirect(indices.load(i[:k]), weight.shape[0], wraps=False), i[k]))

    return Pointwise(shape, dtype, device, fn)


@register(aten.index.Tensor)
def _index(ctx, x, indices):
    shape, dtype, device = out_spec(ctx)
    indices = list(indices) + [None] * (x.ndim - len(indices))
    used = [d for d, t in enumerate(indices) if t is not None]
    if any(indices[d].dtype in (torch.bool, torch.uint8) for d in used):
        raise Unsupported("boolean mask indexing has a data-dependent shape")
    bshape = torch.broadcast_shapes(*[tuple(indices[d].shape) for d in used])
    adjacent = used == list(range(used[0], used[-1] + 1))
    start = used[0] if adjacent else 0
    nb = len(bshape)

    def fn(i):
        bidx = i[start:start + nb]
        rest = iter(i[:start] + i[start + nb:])
        full = []
        for d in range(x.ndim):
            if indices[d] is None:
                full.append(next(rest))
            else:
                t = indices[d]
                full.append(indirect(t.load(broadcast_index(t, bidx)), x.shape[d], wraps=True))
        return x.load(tuple(full))

    return Pointwise(shape, dtype, device, fn)


def _tri(lower: bool):
    def lowering(ctx, x: TensorValue, diagonal=0):
        shape, dtype, device = out_spec(ctx)

        def fn(i):
            row, col = kir.index_value(i[-2]), kir.index_value(i[-1])
            diff = kir.binary(Ops.SUB, col, row)
            keep = kir.binary(Ops.LE if lower else Ops.GE, diff, kir.const(diagonal, torch.int64))
            v = x.load(i)
            return kir.where(keep, v, kir.const(0, dtype))

        return Pointwise(shape, dtype, device, fn)

    return lowering


register(aten.tril.default)(_tri(True))
register(aten.triu.default)(_tri(False))
