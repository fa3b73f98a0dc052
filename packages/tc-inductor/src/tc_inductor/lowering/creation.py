"""Constants and factories: full/zeros/ones/empty (and *_like, new_*), scalar_tensor, arange, iota."""

from __future__ import annotations

import torch

from .. import kir
from ..ir import Pointwise, Unsupported
from ..kir import Ops
from .pointwise import out_spec
from .registry import register

aten = torch.ops.aten
prims = torch.ops.prims


def filled(ctx, value) -> Pointwise:
    shape, dtype, device = out_spec(ctx)
    if isinstance(value, complex):
        raise Unsupported("complex fill")
    return Pointwise(shape, dtype, device, lambda index: kir.const(value, dtype))


def _fill_from(position: int | None, value=None):
    def lowering(ctx, *args, **kwargs):
        return filled(ctx, args[position] if position is not None else value)

    return lowering


register(aten.full.default, aten.new_full.default)(lambda ctx, *a, **k: filled(ctx, a[1]))
register(aten.full_like.default)(lambda ctx, *a, **k: filled(ctx, a[1]))
register(aten.fill.Scalar)(lambda ctx, x, v: filled(ctx, v))
register(aten.scalar_tensor.default)(lambda ctx, v, **k: filled(ctx, v))
for _target in (aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default, aten.empty.memory_format,
                aten.empty_like.default, aten.new_empty.default, aten.empty_strided.default,
                aten.new_empty_strided.default):
    register(_target)(_fill_from(None, 0))
for _target in (aten.ones.default, aten.ones_like.default, aten.new_ones.default):
    register(_target)(_fill_from(None, 1))


@register(aten.fill.Tensor)
def _fill_tensor(ctx, x, value):
    shape, dtype, device = out_spec(ctx)
    return Pointwise(shape, dtype, device, lambda index: kir.cast(value.load(()), dtype))


def _arange(ctx, start, end=None, step=1):
    shape, dtype, device = out_spec(ctx)
    compute = kir.compute_dtype(dtype)
    wide = torch.float64 if dtype.is_floating_point else torch.int64

    def body(index):
        i = kir.cast(kir.index_value(index[0]), wide)
        v = kir.binary(Ops.ADD, kir.const(start, wide), kir.binary(Ops.MUL, i, kir.const(step, wide)))
        return kir.cast(v, compute)

    return Pointwise(shape, dtype, device, body)


@register(aten.arange.start_step)
def _arange_start_step(ctx, start, end, step=1, **kwargs):
    return _arange(ctx, start, end, step)


register(aten.arange.start)(lambda ctx, start, end, **kwargs: _arange(ctx, start, end, 1))
register(aten.arange.default)(lambda ctx, end, **kwargs: _arange(ctx, 0, end, 1))
register(prims.iota.default)(lambda ctx, length, *, start, step, **kwargs: _arange(ctx, start, None, step))
