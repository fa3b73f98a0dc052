"""Reduction lowerings: sum, mean, amax/amin, max/min with indices, arg*, prod, any/all,
var/std (two reductions one kernel fuses), softmax and log-softmax, layer norm."""

from __future__ import annotations

import math
from collections.abc import Callable

import sympy
import torch

from .. import kir
from ..ir import Pointwise, TensorValue, Unsupported
from ..kir import Ops, UOp
from .pointwise import finish, out_spec, read
from .registry import register

aten = torch.ops.aten
prims = torch.ops.prims


def _dims(x: TensorValue, dims) -> tuple:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(x.ndim))
    if isinstance(dims, int):
        dims = [dims]
    return tuple(sorted({d % x.ndim if x.ndim else 0 for d in dims}))


def full_index(x: TensorValue, dims: tuple, keepdim: bool, index: tuple, rindex: tuple) -> tuple:
    """The index of ``x`` for output ``index`` and reduction index ``rindex`` over ``dims``."""
    kept = [d for d in range(x.ndim) if d not in dims]
    kept_index = [index[d] for d in kept] if keepdim else list(index)
    full, it_kept, it_r = [], iter(kept_index), iter(rindex)
    for d in range(x.ndim):
        full.append(next(it_r) if d in dims else next(it_kept))
    return tuple(full)


def reduce(ctx, x: TensorValue, dims: tuple, keepdim: bool, reduction_type: str, shape: tuple,
           dtype: torch.dtype, value: Callable[[tuple], UOp], device=None) -> TensorValue:
    """A reduction of ``value(full index of x)`` over ``dims`` of ``x`` into a (shape, dtype) buffer."""
    device = device or x.device
    rranges = tuple(x.shape[d] for d in dims)
    if x.ndim == 0 or all(r == 1 for r in rranges):
        zeros = tuple(sympy.Integer(0) for _ in dims)
        return Pointwise(shape, dtype, device, lambda index: _single(
            value(full_index(x, dims, keepdim, index, zeros)) if x.ndim else value(()), reduction_type, dtype))
    reduced_dims = tuple(dims) if keepdim else ()

    def body(index, rindex):
        return value(full_index(x, dims, keepdim, index, rindex))

    return ctx.reduction(shape, dtype, device, body, rranges, reduction_type, reduced_dims)


def _single(v: UOp, reduction_type: str, dtype: torch.dtype) -> UOp:
    if reduction_type in ("argmax", "argmin"):
        return kir.const(0, torch.int64)
    if reduction_type in ("any", "all"):
        return kir.cast(v, torch.bool)
    return kir.cast(v, dtype)


def _simple(reduction_type: str, promote_ints: bool = False):
    def lowering(ctx, x, dim=None, keepdim=False, dtype=None):
        shape, out_dtype, device = out_spec(ctx)
        dims = _dims(x, dim)
        acc = kir.compute_dtype(out_dtype)
        return reduce(ctx, x, dims, keepdim, reduction_type, shape, out_dtype,
                      lambda full: kir.cast(x.load(full), acc))

    return lowering


for _targets, _rt in [((aten.sum.dim_IntList, aten.sum.default, prims.sum.default), "sum"),
                      ((aten.prod.dim_int, aten.prod.default, prims.prod.default), "prod"),
                      ((aten.amax.default, prims.amax.default), "max"),
                      ((aten.amin.default, prims.amin.default), "min")]:
    register(*_targets)(_simple(_rt))


@register(aten.sum.default, aten.prod.default)
def _sum_all(ctx, x, dtype=None):
    rt = "sum" if ctx.target is aten.sum.default else "prod"
    return _simple(rt)(ctx, x, None, False)


@register(aten.max.default, aten.min.default)
def _max_all(ctx, x):
    if x.ndim and math.prod(x.shape) == 0:
        raise Unsupported("max of an empty tensor raises")
    return _simple("max" if ctx.target is aten.max.default else "min")(ctx, x, None, False)


@register(aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims, aten.all.default)
def _any_all(ctx, x, dim=None, keepdim=False):
    shape, out_dtype, device = out_spec(ctx)
    rt = "any" if ctx.target in (aten.any.dim, aten.any.dims, aten.any.default) else "all"
    return reduce(ctx, x, _dims(x, dim), keepdim, rt, shape, out_dtype,
                  lambda full: kir.cast(x.load(full), torch.bool))


@register(aten.mean.dim, aten.mean.default)
def _mean(ctx, x, dim=None, keepdim=False, dtype=None):
    shape, out_dtype, device = out_spec(ctx)
    dims = _dims(x, dim)
    count = math.prod(x.shape[d] for d in dims) if x.ndim else 1
    acc = kir.compute_dtype(out_dtype)
    total = reduce(ctx, x, dims, keepdim, "sum", shape, acc, lambda full: kir.cast(x.load(full), acc))
    return Pointwise(shape, out_dtype, device, lambda index: finish(ctx, kir.binary(
        Ops.TRUEDIV, total.load(index), kir.size_value(count, acc)), out_dtype))


def _arg(rt: str):
    def lowering(ctx, x, dim=None, keepdim=False):
        shape, out_dtype, device = out_spec(ctx)
        if dim is None:
            from .views import view
            x, dim, keepdim = view(x, (math.prod(x.shape),)), 0, False
        dims = _dims(x, dim)
        compute = kir.compute_dtype(x.dtype)
        return reduce(ctx, x, dims, keepdim, rt, shape, torch.int64, lambda full: kir.cast(x.load(full), compute),
                      device=device)

    return lowering


register(aten.argmax.default)(_arg("argmax"))
register(aten.argmin.default)(_arg("argmin"))


@register(aten.max.dim, aten.min.dim)
def _max_dim(ctx, x, dim, keepdim=False):
    is_max = ctx.target is aten.max.dim
    values = _simple("max" if is_max else "min")
    indices = _arg("argmax" if is_max else "argmin")
    spec = ctx.spec
    ctx.spec = spec[0]
    v = values(ctx, x, dim, keepdim)
    ctx.spec = spec[1]
    i = indices(ctx, x, dim, keepdim)
    ctx.spec = spec
    return v, i


# ---- var / std ----------------------------------------------------------------------------------

def _moments(ctx, x: TensorValue, dims: tuple, correction, keepdim: bool, shape: tuple, dtype: torch.dtype):
    """(mean, var) of ``x`` over ``dims``, in the compute dtype: the sum, then the squared
    deviations from the mean summed (two loops of one kernel), or both split (``ctx.moments``)."""
    acc = kir.compute_dtype(dtype)
    count = math.prod(x.shape[d] for d in dims) if x.ndim else 1
    keep_shape = tuple(1 if d in dims else s for d, s in enumerate(x.shape))
    mean, sq = _sums(ctx, x, dims, keep_shape, acc)
    correction = 1 if correction is None else correction
    denom = max(count - correction, 0)
    keep = (lambda index: index) if keepdim else (lambda index: _keep_index(index, dims, x.ndim))  # noqa: E731
    var = Pointwise(shape, acc, x.device, lambda index: kir.binary(
        Ops.TRUEDIV, sq.load(keep(index)), kir.size_value(denom, acc)))
    mean_out = mean if keepdim else Pointwise(shape, acc, x.device, lambda index: mean.load(keep(index)))
    return mean_out, var


def _sums(ctx, x: TensorValue, dims: tuple, keep_shape: tuple, acc: torch.dtype) -> tuple:
    """The mean of ``x`` over ``dims`` and the sum of its squared deviations from it, both of
    ``keep_shape``.

    Unsplit, both are computed on the values shifted by each row's first one (``x - x[0]``):
    rows of equal values then have a mean of exactly that value and no deviation at all, as
    eager's Welford reductions give them (``x.var(0) > 0`` was True for a constant column: the
    mean ``sum / n`` of three equal float64 values is not always that value), and the sums of
    a shifted row lose fewer digits when its mean is large against its spread."""
    value = lambda full: kir.cast(x.load(full), acc)  # noqa: E731
    rranges = tuple(x.shape[d] for d in dims)
    count = math.prod(rranges) if x.ndim else 1
    if x.ndim and not all(r == 1 for r in rranges):
        split = ctx.moments(keep_shape, acc, x.device, lambda index, rindex: value(
            full_index(x, dims, True, index, rindex)), rranges, tuple(dims))
        if split is not None:
            total, sq = split
            return Pointwise(keep_shape, acc, x.device, lambda index: kir.binary(
                Ops.TRUEDIV, total.load(index), kir.size_value(count, acc))), sq
    first = lambda full: _row_start(full, dims)  # noqa: E731
    shift = x.ndim and count != 0  # (an empty row has no first value)
    shifted = (lambda full: kir.binary(Ops.SUB, value(full), value(first(full)))) if shift else value  # noqa: E731
    total = reduce(ctx, x, dims, True, "sum", keep_shape, acc, shifted)

    def shifted_mean(index):
        return kir.binary(Ops.TRUEDIV, total.load(index), kir.size_value(count, acc))

    def centered(full):
        d = kir.binary(Ops.SUB, shifted(full), shifted_mean(first(full)))
        return kir.binary(Ops.MUL, d, d)

    mean = Pointwise(keep_shape, acc, x.device, lambda index: kir.binary(Ops.ADD, value(index), shifted_mean(index))
                     if shift else shifted_mean(index))
    return mean, reduce(ctx, x, dims, True, "sum", keep_shape, acc, centered)


def _row_start(full, dims):
    """The index ``full`` with every reduced dim at 0: its row's first element, and the element a
    keepdim statistic of the row is stored at."""
    return tuple(sympy.Integer(0) if d in dims else i for d, i in enumerate(full))


def _keep_index(index, dims, ndim):
    it = iter(index)
    return tuple(sympy.Integer(0) if d in dims else next(it) for d in range(ndim))


def _cast_value(ctx, v: TensorValue, dtype: torch.dtype) -> Pointwise:
    return Pointwise(v.shape, dtype, v.device, lambda index: finish(ctx, v.load(index), dtype))


@register(aten.var.correction, aten.std.correction, aten.var_mean.correction, aten.std_mean.correction)
def _var(ctx, x, dim=None, *, correction=None, keepdim=False):
    spec = ctx.spec
    first = spec[0] if isinstance(spec, tuple) else spec
    if not first.dtype.is_floating_point:
        raise Unsupported("complex var")
    mean, var = _moments(ctx, x, _dims(x, dim), correction, keepdim, first.shape, first.dtype)
    if ctx.target in (aten.std.correction, aten.std_mean.correction):
        var = Pointwise(var.shape, var.dtype, var.device, lambda index: kir.unary(Ops.SQRT, var.load(index)))
    out = _cast_value(ctx, var, first.dtype)
    if isinstance(spec, tuple):
        return out, _cast_value(ctx, mean, first.dtype)
    return out


# ---- softmax, layer norm ------------------------------------------------------------------------

def _softmax_parts(ctx, x: TensorValue, dim: int, acc: torch.dtype):
    dims = _dims(x, dim)
    keep_shape = tuple(1 if d in dims else s for d, s in enumerate(x.shape))
    xv = lambda full: kir.cast(x.load(full), acc)  # noqa: E731
    mx = reduce(ctx, x, dims, True, "max", keep_shape, acc, xv)
    row = lambda full: _row_start(full, dims)  # noqa: E731
    shifted = lambda full: kir.binary(Ops.SUB, xv(full), mx.load(row(full)))  # noqa: E731
    total = reduce(ctx, x, dims, True, "sum", keep_shape, acc, lambda full: kir.unary(Ops.EXP, shifted(full)))
    return shifted, total, row


@register(aten._softmax.default, aten._log_softmax.default)
def _softmax(ctx, x, dim, half_to_float=False):
    shape, dtype, device = out_spec(ctx)
    if x.ndim == 0:
        raise Unsupported("0-d softmax")
    acc = kir.compute_dtype(dtype)
    shifted, total, row = _softmax_parts(ctx, x, dim, acc)
    if ctx.target is aten._softmax.default:
        fn = lambda index: kir.binary(Ops.TRUEDIV, kir.unary(Ops.EXP, shifted(index)), total.load(row(index)))  # noqa: E731
    else:
        fn = lambda index: kir.binary(Ops.SUB, shifted(index), kir.unary(Ops.LOG, total.load(row(index))))  # noqa: E731
    return Pointwise(shape, dtype, device, lambda index: finish(ctx, fn(index), dtype))


@register(aten.native_layer_norm.default)
def _layer_norm(ctx, x, normalized_shape, weight, bias, eps):
    out_spec_, mean_spec, rstd_spec = ctx.spec
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    acc = kir.compute_dtype(out_spec_.dtype)
    mean, var = _moments(ctx, x, dims, 0, True, mean_spec.shape, acc)
    rstd = Pointwise(var.shape, acc, x.device, lambda index: kir.unary(
        Ops.RSQRT, kir.binary(Ops.ADD, var.load(index), kir.const(eps, acc))))
    row = lambda full: _row_start(full, dims)  # noqa: E731

    def body(index):
        v = kir.binary(Ops.MUL, kir.binary(Ops.SUB, kir.cast(x.load(index), acc), mean.load(row(index))),
                       rstd.load(row(index)))
        inner = index[dims[0]:]
        if weight is not None:
            v = kir.binary(Ops.MUL, v, read(weight, inner, acc))
        if bias is not None:
            v = kir.binary(Ops.ADD, v, read(bias, inner, acc))
        return finish(ctx, v, out_spec_.dtype)

    out = Pointwise(out_spec_.shape, out_spec_.dtype, x.device, body)
    return out, _cast_value(ctx, mean, mean_spec.dtype), _cast_value(ctx, rstd, rstd_spec.dtype)
