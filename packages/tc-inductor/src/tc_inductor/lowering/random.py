"""Random ops as generated code: rand/randn (and *_like), bernoulli, native_dropout, uniform, normal.

Every random op gets its own seed (``ctx.random_seed``: one slot of an int64 buffer the wrapper
draws from torch's generator on each call) and numbers its elements by their flat (row-major)
index in the op's result. ``Ops.RAND``/``Ops.RANDN`` of (seed, index) is a pure function, so the
op stays an ordinary lazy ``Pointwise``: it fuses with its producers and consumers, and two
kernels reading it (a dropout mask used by the output and saved for the backward) compute the
same numbers. Values are generated in float32 and cast, as eager does for half types.
"""

from __future__ import annotations

import sympy
import torch

import tc_ir.spec

from .. import kir
from ..ir import Pointwise, Unsupported
from ..kir import Ops, UOp
from .pointwise import out_spec, read
from .registry import register

aten = torch.ops.aten
F32 = torch.float32

# The largest value below 1 of each half type: a float32 uniform rounds up to 1.0 otherwise.
_BELOW_ONE = {torch.float16: 1 - 2.0**-11, torch.bfloat16: 1 - 2.0**-8}


def _flat(index: tuple, shape: tuple) -> sympy.Expr:
    stride = tc_ir.spec.contiguous_strides(shape)
    return sympy.expand(sum((sympy.sympify(i) * s for i, s in zip(index, stride)), sympy.Integer(0)))


def random_values(ctx, op: Ops, shape: tuple, device: torch.device):
    """``index -> float32 UOp``: a fresh stream of uniform (RAND) or normal (RANDN) numbers."""
    seed = ctx.random_seed(device)
    return lambda index: kir.random(op, seed, _flat(index, shape))


def _float_out(ctx) -> tuple:
    shape, dtype, device = out_spec(ctx)
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise Unsupported(f"random {dtype} (generated in float32)")
    return shape, dtype, device


def _uniform01(ctx) -> Pointwise:
    shape, dtype, device = _float_out(ctx)
    draw = random_values(ctx, Ops.RAND, shape, device)

    def body(index):
        u = draw(index)
        if dtype in _BELOW_ONE:  # keep [0, 1) after rounding to the half type
            u = kir.binary(Ops.MIN, u, kir.const(_BELOW_ONE[dtype], F32))
        return kir.cast(u, dtype)

    return Pointwise(shape, dtype, device, body)


def _normal01(ctx) -> Pointwise:
    shape, dtype, device = _float_out(ctx)
    draw = random_values(ctx, Ops.RANDN, shape, device)
    return Pointwise(shape, dtype, device, lambda index: kir.cast(draw(index), dtype))


register(aten.rand.default, aten.rand_like.default)(lambda ctx, *args, **kwargs: _uniform01(ctx))
register(aten.randn.default, aten.randn_like.default)(lambda ctx, *args, **kwargs: _normal01(ctx))


def _affine(ctx, op: Ops, scale, shift) -> Pointwise:
    """``shift + scale * draw`` with ``scale``/``shift`` numbers or tensors (broadcast to the result)."""
    shape, dtype, device = _float_out(ctx)
    draw = random_values(ctx, op, shape, device)

    def body(index):
        value = kir.binary(Ops.MUL, draw(index), read(scale, index, F32))
        return kir.cast(kir.binary(Ops.ADD, read(shift, index, F32), value), dtype)

    return Pointwise(shape, dtype, device, body)


def _bind(target, args: tuple, kwargs: dict) -> dict:
    """Arguments by schema name, defaults filled in (``uniform``'s ``from`` is a Python keyword)."""
    schema = target._schema.arguments
    bound = {a.name: a.default_value for a in schema if a.has_default_value()}
    bound.update(zip([a.name for a in schema], args))
    return bound | kwargs


@register(aten.uniform.default)
def _uniform(ctx, *args, **kwargs):
    a = _bind(aten.uniform.default, args, kwargs)
    return _affine(ctx, Ops.RAND, float(a["to"]) - float(a["from"]), float(a["from"]))


@register(aten.normal_functional.default)
def _normal_functional(ctx, *args, **kwargs):
    a = _bind(aten.normal_functional.default, args, kwargs)
    return _affine(ctx, Ops.RANDN, float(a["std"]), float(a["mean"]))


register(aten.normal.Tensor_float)(lambda ctx, mean, std=1.0, **kw: _affine(ctx, Ops.RANDN, std, mean))
register(aten.normal.float_Tensor)(lambda ctx, mean, std, **kw: _affine(ctx, Ops.RANDN, std, mean))
register(aten.normal.Tensor_Tensor)(lambda ctx, mean, std, **kw: _affine(ctx, Ops.RANDN, std, mean))


def keep_mask(ctx, p, shape: tuple, device: torch.device):
    """``index -> bool UOp``: true with probability ``p`` (a number, or a tensor broadcast to ``shape``)."""
    draw = random_values(ctx, Ops.RAND, shape, device)
    if isinstance(p, (int, float)):
        bound = kir.const(float(p), F32)
        return lambda index: kir.binary(Ops.LT, draw(index), bound)
    return lambda index: _below(draw(index), read(p, index, p.dtype))


def _below(u: UOp, p: UOp) -> UOp:
    wide = p.dtype if p.dtype == torch.float64 else F32
    return kir.binary(Ops.LT, kir.cast(u, wide), kir.cast(p, wide))


def _bernoulli(ctx, p) -> Pointwise:
    shape, dtype, device = out_spec(ctx)
    keep = keep_mask(ctx, p, shape, device)
    return Pointwise(shape, dtype, device, lambda index: kir.cast(keep(index), dtype))


register(aten.bernoulli.default)(lambda ctx, x, *, generator=None: _bernoulli(ctx, x))
register(aten.bernoulli.Tensor)(lambda ctx, x, p, *, generator=None: _bernoulli(ctx, p))
# bernoulli.p has no default for p, but functionalizing ``bernoulli_(x)`` (p=0.5 by default) can
# leave it out, so the in-place op's default is the one assumed.
register(aten.bernoulli.p)(lambda ctx, x, p=0.5, *, generator=None: _bernoulli(ctx, p))


@register(aten.native_dropout.default)
def _native_dropout(ctx, x, p, train):
    """As ATen: ``mask = bernoulli(1 - p)`` (bool), ``out = x * mask * scale`` with ``scale =
    1 / (1 - p)`` (0 when p == 1); ``train=False`` gives ``(x, ones)``."""
    out_spec_, mask_spec = ctx.spec
    shape, dtype, device, mask_dtype = out_spec_.shape, out_spec_.dtype, out_spec_.device, mask_spec.dtype
    if train is False:
        return (Pointwise(shape, dtype, device, lambda index: x.load(index)),
                Pointwise(shape, mask_dtype, device, lambda index: kir.const(True, mask_dtype)))
    keep_p = 1.0 - float(p)
    scale = 0.0 if keep_p == 0 else 1.0 / keep_p
    keep = keep_mask(ctx, keep_p, shape, device)
    compute = kir.compute_dtype(dtype)

    def out(index):
        kept = kir.binary(Ops.MUL, x.load(index), kir.cast(keep(index), compute))
        return kir.binary(Ops.MUL, kept, kir.const(scale, compute))

    return Pointwise(shape, dtype, device, out), Pointwise(shape, mask_dtype, device, lambda index: keep(index))
