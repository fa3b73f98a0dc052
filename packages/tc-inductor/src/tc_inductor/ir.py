"""Tensor values during lowering: lazy index functions, buffers, and what gets computed.

A lowered value is a :class:`Pointwise` (a function from an index to a kernel-IR value, so
views and pointwise ops compose as index math and nothing is copied) or a :class:`BufferValue`
(a strided window on a named buffer). Lowering *realizes* a value into a
:class:`ComputedBuffer` when it must live in memory: graph outputs, reductions, extern
arguments, and expensive values read many times.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import sympy
import torch

from . import kir
from .kir import UOp

Index = tuple  # of sympy expressions, one per dim


class Unsupported(Exception):
    """A lowering declines this call (the node then runs as an extern call through torch)."""


def as_expr(dim: Any) -> sympy.Expr:
    return sympy.Integer(dim) if isinstance(dim, int) else dim


def strided_index(index: Index, stride: Sequence[Any], offset: Any = 0) -> sympy.Expr:
    """``offset + sum(index * stride)``, expanded. Memoised: a compile asks for few distinct ones
    (GPT-2's training graph: ~110 of ~5,300 calls), each a sympy ``expand``. Sizes, strides and
    offsets are ints or sympy expressions (equal only when the result is)."""
    index, stride = tuple(index), tuple(stride)
    try:
        return _cached_strided_index(index, stride, offset)
    except TypeError:  # something unhashable: computed, not memoised
        return _strided_index(index, stride, offset)


def _strided_index(index: Index, stride: tuple, offset: Any) -> sympy.Expr:
    return sympy.expand(as_expr(offset) + sum((as_expr(i) * as_expr(s) for i, s in zip(index, stride)), sympy.Integer(0)))


_cached_strided_index = functools.lru_cache(maxsize=8192)(_strided_index)


class TensorValue:
    """Something with a shape and dtype that can be read at an index."""

    shape: tuple
    dtype: torch.dtype
    device: torch.device

    def load(self, index: Index) -> UOp:
        raise NotImplementedError

    @property
    def ndim(self) -> int:
        return len(self.shape)


class Pointwise(TensorValue):
    """A value computed element by element from ``fn(index)``; results are memoised per index."""

    def __init__(self, shape: Sequence[Any], dtype: torch.dtype, device: torch.device, fn: Callable[[Index], UOp]):
        self.shape, self.dtype, self.device, self.fn = tuple(shape), dtype, torch.device(device), fn
        self._memo: dict[Index, UOp] = {}
        # (base, redo) when this value is only a view (permute, reshape, expand, slice...) of the
        # computed value ``base``: ``redo(buffer)`` re-applies the views to ``base`` once stored,
        # so an extern call gets a strided window on ``base`` in its own layout, as in eager.
        self.view_of: tuple | None = None

    def load(self, index: Index) -> UOp:
        index = tuple(sympy.sympify(i) for i in index)
        if index not in self._memo:
            value = self.fn(index)
            assert value.dtype == kir.compute_dtype(self.dtype), (value, self.dtype)
            self._memo[index] = value
        return self._memo[index]


class BufferValue(TensorValue):
    """A strided window (shape, stride, offset) on the named buffer ``name``."""

    def __init__(self, name: str, shape: Sequence[Any], stride: Sequence[Any], dtype: torch.dtype,
                 device: torch.device, offset: Any = 0):
        self.name, self.shape, self.stride, self.offset = name, tuple(shape), tuple(stride), offset
        self.dtype, self.device = dtype, torch.device(device)

    def load(self, index: Index) -> UOp:
        return kir.load(self.name, strided_index(index, self.stride, self.offset), self.dtype)

    def restrided(self, shape: Sequence[Any], stride: Sequence[Any], offset: Any) -> BufferValue:
        return BufferValue(self.name, shape, stride, self.dtype, self.device, offset)


@attrs.define(eq=False)
class ComputedBuffer:
    """A buffer a generated kernel writes.

    ``ranges`` index the buffer (its shape); a reduction also has ``rranges`` and computes
    ``body(index, rindex)``, reduced with ``reduction_type``; a pointwise buffer computes
    ``body(index, ())``. ``store_index(index)`` is where an element goes.
    """

    name: str
    shape: tuple
    stride: tuple
    dtype: torch.dtype
    device: torch.device
    body: Callable[[Index, Index], UOp]
    rranges: tuple = ()
    reduction_type: str | None = None
    reduced_dims: tuple = ()  # dims of ``shape`` that are size 1 because they were reduced
    # (shape, stride) of the value the graph sees, when the kernel iterates it in another order:
    # a channels-last [N, C, H, W] value is computed over ``shape`` (N, H, W, C), contiguous, so
    # its kernel walks memory in order; the wrapper allocates (and others read) this view of it.
    view: tuple | None = None

    @property
    def is_reduction(self) -> bool:
        return self.reduction_type is not None

    def store_index(self, index: Index) -> sympy.Expr:
        return strided_index(index, self.stride)

    def value(self) -> BufferValue:
        shape, stride = self.view or (self.shape, self.stride)
        return BufferValue(self.name, shape, stride, self.dtype, self.device)


@attrs.define(eq=False)
class ExternCall:
    """A call run by torch from the wrapper: ``target(*args, **kwargs)`` with buffers by name."""

    name: str
    target: Any
    args: tuple
    kwargs: dict
    outputs: Any  # BufferValue, a tuple of them (None where not a tensor), or None
    mutates: bool = False
    reason: str = ""
    # set by the scheduler on a mutating call: later steps are ordered after it (no fusion across)
    barrier_after: bool = False


@attrs.define(eq=False)
class InputBuffer:
    name: str
    spec: Any
    index: int  # position among the graph's inputs


def is_dense(shape: Sequence[Any], stride: Sequence[Any]) -> bool:
    """Whether ``stride`` is a permutation of contiguous strides of ``shape`` (size-1 dims
    ignored): the layout fills its storage with no gaps. Over symbolic sizes the strides are
    ordered at a sample size and then checked as exact expressions, so the answer holds at every size."""
    expected = sympy.Integer(1)
    for st, n in sorted(((st, n) for st, n in zip(stride, shape) if n != 1), key=lambda p: _sample(p[0])):
        if sympy.expand(as_expr(st) - expected) != 0:
            return False
        expected = expected * as_expr(n)
    return True


def _sample(value: Any) -> int:
    """``value`` at a large sample size, for ordering strides (never for deciding anything)."""
    if isinstance(value, int):
        return value
    return int(sympy.sympify(value).subs({s: 4099 + i for i, s in enumerate(sorted(value.free_symbols, key=str))}))
