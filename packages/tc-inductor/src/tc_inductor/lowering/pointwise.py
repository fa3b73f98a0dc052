"""Pointwise lowerings: arithmetic, comparisons, math, casts, where, clamp, activations."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import sympy
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as KIND
from torch._prims_common import elementwise_dtypes

from .. import kir
from ..ir import Pointwise, TensorValue, Unsupported
from ..kir import Ops, UOp
from ..symbolic import scalar_example, scalar_value
from .registry import register

aten = torch.ops.aten
prims = torch.ops.prims


# ---- helpers shared by every lowering module ---------------------------------------------

def broadcast_index(value: TensorValue, index: tuple) -> tuple:
    """The index into ``value`` for an element of a broadcast result indexed by ``index``."""
    index = index[len(index) - value.ndim:] if value.ndim else ()
    return tuple(sympy.Integer(0) if size == 1 else i for i, size in zip(index, value.shape))


def read(value: Any, index: tuple, dtype: torch.dtype) -> UOp:
    """``value`` (tensor or Python number) at ``index`` of the broadcast result, as ``dtype``."""
    if isinstance(value, TensorValue):
        return kir.cast(value.load(broadcast_index(value, index)), dtype)
    if isinstance(value, UOp):
        return kir.cast(value, dtype)
    if isinstance(value, sympy.Expr) and not value.is_Number:  # computed from sizes (an int, SizeFloat)
        return kir.cast(scalar_value(value), dtype)
    return kir.const(value, kir.compute_dtype(dtype))


def _meta(value: Any) -> Any:
    if isinstance(value, TensorValue):
        return torch.empty((1,) * value.ndim, dtype=value.dtype, device="meta")
    return scalar_example(value)


def promote(args: tuple, kind: KIND) -> tuple[torch.dtype, torch.dtype]:
    """(compute dtype, result dtype) of an elementwise op on ``args`` (half types compute in f32)."""
    compute, result = elementwise_dtypes(*[_meta(a) for a in args if a is not None], type_promotion_kind=kind)
    return kir.compute_dtype(compute), result


def finish(ctx, value: UOp, dtype: torch.dtype) -> UOp:
    """Cast a result to ``dtype``'s compute type, rounding as eager would when asked to."""
    out = kir.cast(value, dtype)
    if ctx.options.get("emulate_precision_casts"):
        out = kir.round_to(out, dtype)
    return out


def out_spec(ctx) -> tuple:
    spec = ctx.spec
    if not hasattr(spec, "shape"):
        raise Unsupported("output is not a single tensor")
    return spec.shape, spec.dtype, spec.device


def make_pointwise(ctx, args: tuple, fn: Callable[..., UOp], kind: KIND = KIND.DEFAULT,
                   compute: torch.dtype | None = None) -> Pointwise:
    """Lower an elementwise op: broadcast ``args``, cast to the compute dtype, apply ``fn``."""
    shape, dtype, device = out_spec(ctx)
    if compute is None:
        compute, _ = promote(args, kind)

    # Eager casts every tensor operand to the common dtype before computing: a float32 0-dim
    # tensor beside a bfloat16 one is rounded to bfloat16 first (``v == s`` compared s unrounded)
    common = promote(args, KIND.NO_OPMATH)[1]
    if ctx.options.get("emulate_precision_casts"):
        args = tuple(_round_scalar(a, common) for a in args)
    narrowed = [isinstance(a, TensorValue) and common in kir.LOW_PRECISION and a.dtype != common
                and a.dtype.is_floating_point for a in args]

    def body(index: tuple) -> UOp:
        values = [read(a, index, compute) for a in args]
        values = [kir.round_to(v, common) if n else v for v, n in zip(values, narrowed)]
        return finish(ctx, fn(*values), dtype)

    return Pointwise(shape, dtype, device, body)


def _round_scalar(value: Any, dtype: torch.dtype) -> Any:
    """Eager casts a Python scalar operand to a half-precision tensor's dtype; so do we when emulating."""
    if isinstance(value, float) and dtype in kir.LOW_PRECISION:
        return float(torch.tensor(value, dtype=dtype))
    return value


def register_pointwise(targets: tuple, fn: Callable[..., UOp], kind: KIND = KIND.DEFAULT, nargs: int | None = None):
    def lowering(ctx, *args, **kwargs):
        if kwargs:
            raise Unsupported(f"keyword arguments {sorted(kwargs)}")
        if nargs is not None and len(args) != nargs:
            raise Unsupported(f"expected {nargs} arguments")
        return make_pointwise(ctx, args, fn, kind)

    register(*targets)(lowering)


def unary_fn(op: Ops) -> Callable[[UOp], UOp]:
    return lambda x: kir.unary(op, x)


def binary_fn(op: Ops) -> Callable[[UOp, UOp], UOp]:
    return lambda a, b: kir.binary(op, a, b)


def c(value: Any, like: UOp) -> UOp:
    return kir.const(value, like.dtype)


# ---- arithmetic ----------------------------------------------------------------------------

def _with_alpha(op: Ops):
    def lowering(ctx, a, b, alpha=1):
        def fn(x, y):
            return kir.binary(op, x, y if alpha == 1 else kir.binary(Ops.MUL, y, c(alpha, y)))

        return make_pointwise(ctx, (a, b), fn)

    return lowering


register(aten.add.Tensor, aten.add.Scalar)(_with_alpha(Ops.ADD))
register(aten.sub.Tensor, aten.sub.Scalar)(_with_alpha(Ops.SUB))
register(aten.rsub.Tensor, aten.rsub.Scalar)(lambda ctx, a, b, alpha=1: _with_alpha(Ops.SUB)(ctx, b, a, alpha))
register_pointwise((aten.mul.Tensor, aten.mul.Scalar, prims.mul.default), binary_fn(Ops.MUL))
register_pointwise((prims.add.default,), binary_fn(Ops.ADD))
register_pointwise((prims.sub.default,), binary_fn(Ops.SUB))
register_pointwise((aten.div.Tensor, aten.div.Scalar), binary_fn(Ops.TRUEDIV), KIND.INT_TO_FLOAT)


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(ctx, a, b, rounding_mode=None):
    if rounding_mode is None:
        return make_pointwise(ctx, (a, b), binary_fn(Ops.TRUEDIV), KIND.INT_TO_FLOAT)
    op = Ops.FLOORDIV if rounding_mode == "floor" else Ops.TRUNCDIV
    return make_pointwise(ctx, (a, b), binary_fn(op))


register_pointwise((aten.floor_divide.default, aten.floor_divide.Scalar), binary_fn(Ops.FLOORDIV))
register_pointwise((aten.remainder.Tensor, aten.remainder.Scalar), binary_fn(Ops.MOD))
register_pointwise((aten.fmod.Tensor, aten.fmod.Scalar), binary_fn(Ops.FMOD))
register_pointwise((aten.neg.default,), unary_fn(Ops.NEG))
register_pointwise((aten.abs.default,), unary_fn(Ops.ABS))
register_pointwise((aten.maximum.default, aten.max.other), binary_fn(Ops.MAX))
register_pointwise((aten.minimum.default, aten.min.other), binary_fn(Ops.MIN))
register_pointwise((aten.fmax.default,), lambda a, b: kir.where(kir.unary(Ops.ISNAN, b), a,
                                                               kir.where(kir.unary(Ops.ISNAN, a), b, kir.binary(Ops.MAX, a, b))))
register_pointwise((aten.fmin.default,), lambda a, b: kir.where(kir.unary(Ops.ISNAN, b), a,
                                                               kir.where(kir.unary(Ops.ISNAN, a), b, kir.binary(Ops.MIN, a, b))))
register_pointwise((aten.sign.default,), unary_fn(Ops.SIGN))
register_pointwise((aten.sgn.default,), unary_fn(Ops.SIGN))
register_pointwise((aten.square.default,), lambda x: kir.binary(Ops.MUL, x, x))
register_pointwise((aten.atan2.default,), binary_fn(Ops.ATAN2), KIND.INT_TO_FLOAT)
register_pointwise((aten.hypot.default,), binary_fn(Ops.HYPOT))
register_pointwise((aten.copysign.Tensor, aten.copysign.Scalar), binary_fn(Ops.COPYSIGN), KIND.INT_TO_FLOAT)
register_pointwise((aten.nextafter.default,), binary_fn(Ops.NEXTAFTER))
register_pointwise((aten.reciprocal.default,), unary_fn(Ops.RECIPROCAL), KIND.INT_TO_FLOAT)
register_pointwise((aten.frac.default,), lambda x: kir.binary(Ops.SUB, x, kir.unary(Ops.TRUNC, x)))
register_pointwise((aten.lerp.Scalar, aten.lerp.Tensor),
                   lambda a, b, w: kir.binary(Ops.ADD, a, kir.binary(Ops.MUL, w, kir.binary(Ops.SUB, b, a))))
register_pointwise((aten.xlogy.Tensor,), lambda x, y: kir.where(
    kir.unary(Ops.ISNAN, y), y, kir.where(kir.binary(Ops.EQ, x, c(0, x)), c(0, x),
                                          kir.binary(Ops.MUL, x, kir.unary(Ops.LOG, y)))), KIND.INT_TO_FLOAT)


@register(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def _pow(ctx, a, b):
    if isinstance(b, (int, float)) and not isinstance(b, bool) and b in (0.5, 1, 2, 3, -1, -0.5):
        square = lambda x: kir.binary(Ops.MUL, x, x)  # noqa: E731
        special = {0.5: unary_fn(Ops.SQRT), 1: lambda x: x, 2: square,
                   3: lambda x: kir.binary(Ops.MUL, square(x), x),
                   -1: unary_fn(Ops.RECIPROCAL), -0.5: unary_fn(Ops.RSQRT)}[b]
        compute, _ = promote((a, b), KIND.BOOL_TO_LONG)
        if b >= 1 or compute.is_floating_point:
            return make_pointwise(ctx, (a,), special, compute=compute)
    return make_pointwise(ctx, (a, b), binary_fn(Ops.POW), KIND.BOOL_TO_LONG)


@register(aten.addcmul.default)
def _addcmul(ctx, a, t1, t2, value=1):
    return make_pointwise(ctx, (a, t1, t2), lambda x, y, z: kir.binary(
        Ops.ADD, x, kir.binary(Ops.MUL, kir.binary(Ops.MUL, y, z), c(value, x))))


@register(aten.addcdiv.default)
def _addcdiv(ctx, a, t1, t2, value=1):
    return make_pointwise(ctx, (a, t1, t2), lambda x, y, z: kir.binary(
        Ops.ADD, x, kir.binary(Ops.MUL, kir.binary(Ops.TRUEDIV, y, z), c(value, x))), KIND.INT_TO_FLOAT)


# ---- math ----------------------------------------------------------------------------------

for _targets, _op in [
    ((aten.exp.default, prims.exp.default), Ops.EXP), ((aten.exp2.default,), Ops.EXP2),
    ((aten.expm1.default,), Ops.EXPM1), ((aten.log.default, prims.log.default), Ops.LOG),
    ((aten.log2.default,), Ops.LOG2), ((aten.log10.default,), Ops.LOG10), ((aten.log1p.default,), Ops.LOG1P),
    ((aten.sqrt.default, prims.sqrt.default), Ops.SQRT), ((aten.rsqrt.default, prims.rsqrt.default), Ops.RSQRT),
    ((aten.sin.default,), Ops.SIN), ((aten.cos.default,), Ops.COS), ((aten.tan.default,), Ops.TAN),
    ((aten.asin.default,), Ops.ASIN), ((aten.acos.default,), Ops.ACOS), ((aten.atan.default,), Ops.ATAN),
    ((aten.sinh.default,), Ops.SINH), ((aten.cosh.default,), Ops.COSH), ((aten.tanh.default,), Ops.TANH),
    ((aten.asinh.default,), Ops.ASINH), ((aten.acosh.default,), Ops.ACOSH), ((aten.atanh.default,), Ops.ATANH),
    ((aten.erf.default,), Ops.ERF), ((aten.erfc.default,), Ops.ERFC), ((aten.erfinv.default,), Ops.ERFINV),
    ((aten.lgamma.default,), Ops.LGAMMA), ((aten.sigmoid.default,), Ops.SIGMOID),
]:
    register_pointwise(_targets, unary_fn(_op), KIND.INT_TO_FLOAT, nargs=1)

for _targets, _op in [((aten.floor.default,), Ops.FLOOR), ((aten.ceil.default,), Ops.CEIL),
                      ((aten.round.default,), Ops.ROUND), ((aten.trunc.default,), Ops.TRUNC)]:
    register_pointwise(_targets, lambda x, _op=_op: x if not x.dtype.is_floating_point else kir.unary(_op, x), nargs=1)


@register(aten.round.decimals)
def _round_decimals(ctx, x, decimals=0):
    scale = 10.0 ** decimals
    return make_pointwise(ctx, (x,), lambda v: kir.binary(Ops.TRUEDIV, kir.unary(
        Ops.ROUND, kir.binary(Ops.MUL, v, c(scale, v))), c(scale, v)))


register_pointwise((aten.logit.default,), lambda x: kir.unary(Ops.LOG, kir.binary(
    Ops.TRUEDIV, x, kir.binary(Ops.SUB, c(1, x), x))), KIND.INT_TO_FLOAT, nargs=1)

# ---- comparisons and logic ------------------------------------------------------------------

for _targets, _op in [((aten.eq.Tensor, aten.eq.Scalar), Ops.EQ), ((aten.ne.Tensor, aten.ne.Scalar), Ops.NE),
                      ((aten.lt.Tensor, aten.lt.Scalar), Ops.LT), ((aten.le.Tensor, aten.le.Scalar), Ops.LE),
                      ((aten.gt.Tensor, aten.gt.Scalar), Ops.GT), ((aten.ge.Tensor, aten.ge.Scalar), Ops.GE)]:
    register_pointwise(_targets, binary_fn(_op), KIND.ALWAYS_BOOL)


def _as_bool(x: UOp) -> UOp:
    return kir.cast(x, torch.bool)


register_pointwise((aten.logical_and.default,), lambda a, b: kir.binary(Ops.AND, _as_bool(a), _as_bool(b)), KIND.ALWAYS_BOOL)
register_pointwise((aten.logical_or.default,), lambda a, b: kir.binary(Ops.OR, _as_bool(a), _as_bool(b)), KIND.ALWAYS_BOOL)
register_pointwise((aten.logical_xor.default,), lambda a, b: kir.binary(Ops.XOR, _as_bool(a), _as_bool(b)), KIND.ALWAYS_BOOL)
register_pointwise((aten.logical_not.default,), lambda a: kir.unary(Ops.NOT, _as_bool(a)), KIND.ALWAYS_BOOL)
register_pointwise((aten.isnan.default,), unary_fn(Ops.ISNAN), KIND.ALWAYS_BOOL)
register_pointwise((aten.isinf.default,), unary_fn(Ops.ISINF), KIND.ALWAYS_BOOL)
register_pointwise((aten.signbit.default,), unary_fn(Ops.SIGNBIT), KIND.ALWAYS_BOOL)
register_pointwise((aten.isfinite.default,), lambda x: kir.unary(Ops.NOT, kir.binary(
    Ops.OR, kir.unary(Ops.ISNAN, x), kir.unary(Ops.ISINF, x))), KIND.ALWAYS_BOOL)
register_pointwise((aten.isposinf.default,), lambda x: kir.binary(Ops.EQ, x, c(math.inf, x))
                   if x.dtype.is_floating_point else kir.const(False, torch.bool), KIND.ALWAYS_BOOL)
register_pointwise((aten.isneginf.default,), lambda x: kir.binary(Ops.EQ, x, c(-math.inf, x))
                   if x.dtype.is_floating_point else kir.const(False, torch.bool), KIND.ALWAYS_BOOL)

for _targets, _op, _logical in [
    ((aten.bitwise_and.Tensor, aten.bitwise_and.Scalar), Ops.BITAND, Ops.AND),
    ((aten.bitwise_or.Tensor, aten.bitwise_or.Scalar), Ops.BITOR, Ops.OR),
    ((aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar), Ops.BITXOR, Ops.XOR),
]:
    register_pointwise(_targets, lambda a, b, _op=_op, _logical=_logical: kir.binary(
        _logical if a.dtype == torch.bool else _op, a, b))
register_pointwise((aten.bitwise_not.default,), lambda a: kir.unary(Ops.NOT if a.dtype == torch.bool else Ops.BITNOT, a))
register_pointwise((aten.bitwise_left_shift.Tensor, aten.__lshift__.Scalar), binary_fn(Ops.LSHIFT))
register_pointwise((aten.bitwise_right_shift.Tensor, aten.__rshift__.Scalar), binary_fn(Ops.RSHIFT))


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar, prims.where.default)
def _where(ctx, cond, a, b):
    shape, dtype, device = out_spec(ctx)
    compute, _ = promote((a, b), KIND.NO_OPMATH)
    compute = kir.compute_dtype(compute)

    def body(index: tuple) -> UOp:
        return finish(ctx, kir.where(read(cond, index, torch.bool), read(a, index, compute), read(b, index, compute)), dtype)

    return Pointwise(shape, dtype, device, body)


@register(aten.clamp.default, aten.clamp.Tensor, aten.clip.default)
def _clamp(ctx, x, min=None, max=None):  # noqa: A002
    args = (x, min, max)

    def fn(v, lo=None, hi=None):
        if lo is not None:
            v = kir.binary(Ops.MAX, v, lo)
        if hi is not None:
            v = kir.binary(Ops.MIN, v, hi)
        return v

    present = tuple(a for a in args if a is not None)
    compute, _ = promote(present, KIND.DEFAULT)

    def apply(*vals):
        it = iter(vals)
        v = next(it)
        return fn(v, next(it) if min is not None else None, next(it) if max is not None else None)

    return make_pointwise(ctx, present, apply, compute=compute)


register(aten.clamp_min.default, aten.clamp_min.Tensor)(lambda ctx, x, lo: _clamp(ctx, x, lo, None))
register(aten.clamp_max.default, aten.clamp_max.Tensor)(lambda ctx, x, hi: _clamp(ctx, x, None, hi))

# ---- activations ----------------------------------------------------------------------------

register_pointwise((aten.relu.default,), lambda x: kir.binary(Ops.MAX, x, c(0, x)) if x.dtype != torch.bool else x, nargs=1)


@register(aten.hardtanh.default)
def _hardtanh(ctx, x, lo=-1.0, hi=1.0):
    return make_pointwise(ctx, (x,), lambda v: kir.binary(Ops.MIN, kir.binary(Ops.MAX, v, c(lo, v)), c(hi, v)))


@register(aten.leaky_relu.default)
def _leaky_relu(ctx, x, slope=0.01):
    return make_pointwise(ctx, (x,), lambda v: kir.where(
        kir.binary(Ops.GT, v, c(0, v)), v, kir.binary(Ops.MUL, v, c(slope, v))))


@register(aten.threshold.default)
def _threshold(ctx, x, threshold, value):
    return make_pointwise(ctx, (x,), lambda v: kir.where(kir.binary(Ops.LE, v, c(threshold, v)), c(value, v), v))


@register(aten.threshold_backward.default)
def _threshold_backward(ctx, grad, x, threshold):
    return make_pointwise(ctx, (grad, x), lambda g, v: kir.where(kir.binary(Ops.LE, v, c(threshold, v)), c(0, g), g))


def _gelu(x: UOp, approximate: str) -> UOp:
    half = kir.binary(Ops.MUL, x, c(0.5, x))
    if approximate == "tanh":
        inner = kir.binary(Ops.MUL, c(math.sqrt(2 / math.pi), x), kir.binary(
            Ops.ADD, x, kir.binary(Ops.MUL, c(0.044715, x), kir.binary(Ops.MUL, x, kir.binary(Ops.MUL, x, x)))))
        return kir.binary(Ops.MUL, half, kir.binary(Ops.ADD, c(1, x), kir.unary(Ops.TANH, inner)))
    erf = kir.unary(Ops.ERF, kir.binary(Ops.MUL, x, c(1 / math.sqrt(2), x)))
    return kir.binary(Ops.MUL, half, kir.binary(Ops.ADD, c(1, x), erf))


@register(aten.gelu.default)
def _gelu_lowering(ctx, x, approximate="none"):
    return make_pointwise(ctx, (x,), lambda v: _gelu(v, approximate))


register_pointwise((aten.silu.default,), lambda x: kir.binary(Ops.MUL, x, kir.unary(Ops.SIGMOID, x)), nargs=1)
register_pointwise((aten.mish.default,), lambda x: kir.binary(Ops.MUL, x, kir.unary(Ops.TANH, _softplus(x, 1.0, 20.0))), nargs=1)
register_pointwise((aten.hardsigmoid.default,), lambda x: kir.binary(Ops.TRUEDIV, kir.binary(
    Ops.MIN, kir.binary(Ops.MAX, kir.binary(Ops.ADD, x, c(3, x)), c(0, x)), c(6, x)), c(6, x)), nargs=1)
register_pointwise((aten.hardswish.default,), lambda x: kir.binary(Ops.MUL, x, kir.binary(Ops.TRUEDIV, kir.binary(
    Ops.MIN, kir.binary(Ops.MAX, kir.binary(Ops.ADD, x, c(3, x)), c(0, x)), c(6, x)), c(6, x))), nargs=1)


def _softplus(x: UOp, beta: float, threshold: float) -> UOp:
    bx = kir.binary(Ops.MUL, x, c(beta, x))
    soft = kir.binary(Ops.TRUEDIV, kir.unary(Ops.LOG1P, kir.unary(Ops.EXP, bx)), c(beta, x))
    return kir.where(kir.binary(Ops.GT, bx, c(threshold, x)), x, soft)


@register(aten.softplus.default)
def _softplus_lowering(ctx, x, beta=1, threshold=20):
    return make_pointwise(ctx, (x,), lambda v: _softplus(v, beta, threshold))


@register(aten.elu.default)
def _elu(ctx, x, alpha=1, scale=1, input_scale=1):
    return make_pointwise(ctx, (x,), lambda v: kir.binary(Ops.MUL, c(scale, v), kir.where(
        kir.binary(Ops.GT, v, c(0, v)), v,
        kir.binary(Ops.MUL, c(alpha, v), kir.unary(Ops.EXPM1, kir.binary(Ops.MUL, v, c(input_scale, v)))))))



@register(aten.sigmoid_backward.default)
def _sigmoid_backward(ctx, grad, y):
    return make_pointwise(ctx, (grad, y), lambda g, v: kir.binary(Ops.MUL, g, kir.binary(
        Ops.MUL, v, kir.binary(Ops.SUB, c(1, v), v))))


@register(aten.tanh_backward.default)
def _tanh_backward(ctx, grad, y):
    return make_pointwise(ctx, (grad, y), lambda g, v: kir.binary(Ops.MUL, g, kir.binary(
        Ops.SUB, c(1, v), kir.binary(Ops.MUL, v, v))))


@register(aten.gelu_backward.default)
def _gelu_backward(ctx, grad, x, approximate="none"):
    if approximate != "none":
        raise Unsupported("tanh gelu backward is decomposed")

    def fn(g, v):
        cdf = kir.binary(Ops.MUL, c(0.5, v), kir.binary(Ops.ADD, c(1, v), kir.unary(
            Ops.ERF, kir.binary(Ops.MUL, v, c(1 / math.sqrt(2), v)))))
        pdf = kir.binary(Ops.MUL, c(1 / math.sqrt(2 * math.pi), v), kir.unary(
            Ops.EXP, kir.binary(Ops.MUL, c(-0.5, v), kir.binary(Ops.MUL, v, v))))
        return kir.binary(Ops.MUL, g, kir.binary(Ops.ADD, cdf, kir.binary(Ops.MUL, v, pdf)))

    return make_pointwise(ctx, (grad, x), fn)


# ---- casts and copies ----------------------------------------------------------------------

def _identity(ctx, x, *args, **kwargs):
    shape, dtype, device = out_spec(ctx)
    if not isinstance(x, TensorValue):
        raise Unsupported("not a tensor")
    if x.device != device:
        raise Unsupported("device copy")
    return Pointwise(shape, dtype, device, lambda index: finish(ctx, read(x, index, dtype), dtype))


def _cast(ctx, x, *args, **kwargs):
    """A dtype cast. A cast of a view of a computed value is also that view of the cast value
    (elementwise ops commute with views), so an extern call reading it gets the cast base in
    its own layout plus a window, as for a view of a cast. GPT-2's ``Conv1D`` flattens its
    input, then autocast casts it for ``addmm``: the cast of the view of a LayerNorm's output,
    stored as a [tokens, features] buffer, did not fit the LayerNorm's [batch, seq] x [features]
    kernel and was stored by a kernel of its own, re-reading the row."""
    out = _identity(ctx, x, *args, **kwargs)
    if isinstance(x, Pointwise) and x.view_of is not None and kwargs.get("memory_format") is None:
        base, redo = x.view_of
        out.view_of = (Pointwise(base.shape, out.dtype, out.device,
                                 lambda index: finish(ctx, read(base, index, out.dtype), out.dtype)), redo)
    return out


for _target in (aten.clone.default, aten.to.device, aten.contiguous.default, aten.alias_copy.default,
                aten.lift_fresh_copy.default, aten.positive.default, aten._conj.default, aten.resolve_conj.default,
                aten.resolve_neg.default, aten.detach.default, aten.detach_copy.default, aten.lift_fresh.default,
                aten.dropout.default):
    register(_target)(_identity)
for _target in (aten._to_copy.default, prims.convert_element_type.default, aten.to.dtype, aten.to.dtype_layout,
                aten.type_as.default):
    register(_target)(_cast)


@register(aten.copy.default)
def _copy(ctx, dst, src, non_blocking=False):
    return _identity(ctx, src)


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(ctx, x, mask, value):
    shape, dtype, device = out_spec(ctx)
    compute = kir.compute_dtype(dtype)

    def body(index: tuple) -> UOp:
        return kir.where(read(mask, index, torch.bool), read(value, index, compute), read(x, index, compute))

    return Pointwise(shape, dtype, device, body)

