"""Functional ``_foreach_<op>`` lowerings: one lazy pointwise value per list element.

A foreach op is N independent elementwise ops over lists of tensors. Lowered as N values of the
element op (``_foreach_add.List(xs, ys, alpha=a)`` is ``add(xs[i], ys[i], alpha=a)`` for each
``i``), it is no longer a wall between the ops of one parameter: an optimizer's update of one
parameter (its state, its step, the parameter) fuses into one kernel, and the scheduler's
multi-tensor pass (``combo.py``) then launches many such kernels as one. List arguments
(``Tensor[]``, ``Scalar[]``) are indexed per element; a single tensor (``.Tensor`` overloads) or
scalar is shared by every element. Each element is checked against its own spec like any
lowering (a mismatch makes the whole node an extern call).
"""

from __future__ import annotations

from typing import Any

import torch

from ..ir import Unsupported
from . import pointwise  # noqa: F401  (the element lowerings this module reuses, registered first)
from .registry import LOWERINGS, register

aten = torch.ops.aten

# foreach op name -> the element op whose lowering computes one item
_BINARY = {
    "add": aten.add.Tensor, "sub": aten.sub.Tensor, "mul": aten.mul.Tensor, "div": aten.div.Tensor,
    "pow": aten.pow.Tensor_Tensor, "maximum": aten.maximum.default, "minimum": aten.minimum.default,
    "clamp_min": aten.clamp_min.default, "clamp_max": aten.clamp_max.default,
    "addcmul": aten.addcmul.default, "addcdiv": aten.addcdiv.default, "lerp": aten.lerp.Tensor,
}
_UNARY = ("abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac",
          "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign",
          "sin", "sinh", "sqrt", "tan", "tanh", "trunc")


class _Item:
    """The lowering context for one element: the node's context with that element's spec and
    the element op as the target being lowered."""

    def __init__(self, ctx: Any, spec: Any, target: Any):
        self._ctx, self.spec, self.target = ctx, spec, target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def _element_args(values: Any, i: int, n: int) -> Any:
    if isinstance(values, (list, tuple)):
        if len(values) != n:
            raise Unsupported("foreach lists of different lengths")
        return values[i]
    return values


def _foreach(element: Any):
    def lowering(ctx, *args, **kwargs):
        specs = ctx.spec
        if not isinstance(specs, (tuple, list)) or not specs:
            raise Unsupported("foreach result is not a list of tensors")
        lower, n = LOWERINGS[element], len(specs)
        results = []
        for i, spec in enumerate(specs):
            item_args = tuple(_element_args(a, i, n) for a in args)
            item_kwargs = {k: _element_args(v, i, n) for k, v in kwargs.items()}
            results.append(lower(_Item(ctx, spec, element), *item_args, **item_kwargs))
        return tuple(results)

    return lowering


def _functional_overloads(name: str) -> list:
    packet = getattr(aten, f"_foreach_{name}", None)
    if packet is None:
        return []
    found = []
    for overload in packet.overloads():
        op = getattr(packet, overload)
        returns = op._schema.returns
        # not the *_out overloads, nor addcmul/addcdiv's ``Tensor scalars`` (one value per element
        # held in a tensor: a read of element i, which the element lowering does not take)
        tensor_scalars = any(a.name == "scalars" and str(a.type) == "Tensor" for a in op._schema.arguments)
        if len(returns) == 1 and str(returns[0].type) in ("List[Tensor]", "Tensor[]") and not tensor_scalars:
            found.append(op)
    return found


def _register_all() -> None:
    elements = dict(_BINARY)
    for name in _UNARY:
        op = getattr(getattr(aten, name, None), "default", None)
        if op is not None:
            elements[name] = op
    for name, element in elements.items():
        if element not in LOWERINGS:
            continue
        targets = _functional_overloads(name)
        if targets:
            register(*targets)(_foreach(element))


_register_all()
