"""``tc_ir.ops.cond``: both branches compiled ahead of time, the pick made by the wrapper.

Each branch sub-graph goes through the whole pipeline (``compile``, same options) with
example inputs of the operands' layouts; the cond node becomes one extern call to a
:class:`CondCall`, which reads the predicate and runs the chosen branch's wrapper.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import tc_ir

from .ir import BufferValue, Pointwise, TensorValue


class CondCall:
    """``pred`` (a bool or a one-element tensor) picks which compiled branch runs on ``operands``."""

    def __init__(self, true_fn: Callable, false_fn: Callable):
        self.true_fn, self.false_fn = true_fn, false_fn

    def __call__(self, pred: Any, operands: tuple) -> Any:
        taken = bool(pred.item()) if isinstance(pred, torch.Tensor) else bool(pred)
        return (self.true_fn if taken else self.false_fn)(*operands)

    @property
    def kernels(self) -> list[str]:
        return list(self.true_fn.kernels) + list(self.false_fn.kernels)

    def __repr__(self) -> str:
        return "cond"


def example_of(value: Any) -> Any:
    """An input standing for ``value`` when compiling a branch (contents never read)."""
    if isinstance(value, BufferValue) and all(isinstance(s, int) for s in value.shape + value.stride):
        return torch.empty_strided(value.shape, value.stride, dtype=value.dtype, device=value.device)
    if isinstance(value, TensorValue):
        return None  # symbolic sizes: the branch compiles with the sub-graph's own specs
    return value if isinstance(value, (bool, int, float)) else None


def lower_cond(ctx, node: tc_ir.Node, args: tuple, kwargs: dict) -> Any:
    """The cond node as an extern call to both compiled branches."""
    pred, true_graph, false_graph, operands = _cond_args(args, kwargs)
    realize = lambda v: ctx.realize(v) if isinstance(v, Pointwise) else v  # noqa: E731
    pred, operands = realize(pred), tuple(realize(v) for v in operands)
    examples = [example_of(v) for v in operands]
    call = CondCall(ctx.compile_subgraph(true_graph, examples), ctx.compile_subgraph(false_graph, examples))
    return ctx.extern(node, (pred, operands), {}, "cond: each branch compiled on its own", target=call,
                      spec=node.spec)


def _cond_args(args: tuple, kwargs: dict) -> tuple:
    names = ("pred", "true_fn", "false_fn", "operands")
    values = list(args) + [kwargs[n] for n in names[len(args):]]
    pred, true_graph, false_graph, operands = values
    for g in (true_graph, false_graph):
        if not isinstance(g, tc_ir.Graph):
            raise TypeError(f"tc_inductor: a cond branch must be a tc_ir.Graph, got {type(g).__name__}")
    return pred, true_graph, false_graph, tuple(operands)
