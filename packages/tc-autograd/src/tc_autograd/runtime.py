"""Runtime glue: run compiled graphs so the results behave like eager under autograd.

The wrapper (1) calls the compiled forward (inside a ``torch.autograd.Function`` when training),
(2) copies the new values of mutated inputs back into them, in input order, and (3) rebuilds the
user's output structure, regenerating outputs that alias an input as views of that input.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

import tc_ir

from .joint import OutputLeaf, Traced

DOUBLE_BACKWARD = ("tc_autograd: double backward (or create_graph=True) through a compiled region "
                   "is not supported; run this region eagerly to differentiate twice")


def no_ambient_autocast() -> contextlib.ExitStack:
    """Compiled graphs already hold their casts; an autocast around the call must not add more."""
    stack = contextlib.ExitStack()
    for device in ("cpu", "cuda"):
        if torch.is_autocast_enabled(device):
            stack.enter_context(torch.autocast(device, enabled=False))
    return stack


def copy_back(inputs: Sequence[Any], positions: list[int], values: Sequence[torch.Tensor]) -> None:
    for i, value in zip(positions, values):
        target = inputs[i]
        grad = torch.is_grad_enabled() and (value.requires_grad or target.requires_grad)
        with torch.set_grad_enabled(grad):
            target.copy_(value)


def rebuild(plan: Any, inputs: Sequence[Any], outputs: Sequence[Any]) -> Any:
    """The user's output structure from the plan's leaves."""
    def leaf(entry: OutputLeaf) -> Any:
        kind = entry.kind
        if kind == "graph":
            return outputs[entry.args[0]]
        if kind == "input":
            return inputs[entry.args[0]]
        if kind == "input_view":
            i, size, stride, offset, requires_grad = entry.args
            base = inputs[i]
            view = base.as_strided(size, stride, base.storage_offset() + offset)
            return view if requires_grad or not view.requires_grad else view.detach()
        return entry.args[0]

    return tc_ir.map_structure(plan, lambda v: leaf(v) if isinstance(v, OutputLeaf) else v)


class InferenceRunner:
    """One forward graph; nothing is differentiated."""

    def __init__(self, traced: Traced, forward: Callable):
        self.traced, self.forward = traced, forward

    def __call__(self, inputs: Sequence[Any]) -> Any:
        with torch.no_grad(), no_ambient_autocast():
            values = self.forward(*inputs)
        n = self.traced.num_user_outputs
        copy_back(inputs, self.traced.mutated_inputs, values[n:])
        return rebuild(self.traced.plan, inputs, values[:n])


class TrainingRunner:
    """Forward and backward graphs joined by a ``torch.autograd.Function``."""

    def __init__(self, traced: Traced, forward: Callable, backward: Callable, num_saved: int):
        self.traced, self.num_saved = traced, num_saved
        self.function = _make_function(traced, forward, backward, num_saved)

    def __call__(self, inputs: Sequence[Any]) -> Any:
        values = self.function.apply(*inputs)
        n = self.traced.num_user_outputs
        copy_back(inputs, self.traced.mutated_inputs, values[n:])
        return rebuild(self.traced.plan, inputs, values[:n])


def _make_function(traced: Traced, forward: Callable, backward: Callable, num_saved: int) -> type:
    num_values = len(traced.differentiable)

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            with no_ambient_autocast():
                results = forward(*inputs)
            values, saved = tuple(results[:num_values]), results[num_values:]
            ctx.save_for_backward(*_protect_from_copy_back(saved, [inputs[i] for i in traced.mutated_inputs]))
            ctx.num_inputs = len(inputs)
            ctx.mark_non_differentiable(*[v for v, d in zip(values, traced.differentiable) if not d])
            return values

        @staticmethod
        def backward(ctx, *cotangents):
            if torch.is_grad_enabled():
                raise RuntimeError(DOUBLE_BACKWARD)
            tangents = [c.contiguous() for c, d in zip(cotangents, traced.differentiable) if d]
            with no_ambient_autocast():
                grads = backward(*ctx.saved_tensors, *tangents)
            by_input = dict(zip(traced.grad_inputs, grads))
            return tuple(by_input.get(i) for i in range(ctx.num_inputs))

    return CompiledFunction


def _protect_from_copy_back(saved: Sequence[Any], mutated: list[torch.Tensor]) -> list[Any]:
    """Clone saved tensors sharing memory with inputs the wrapper is about to overwrite.

    The backward needs their old values, and autograd's version counter would reject them.
    """
    pointers = {t.untyped_storage().data_ptr() for t in mutated}
    return [s.clone() if isinstance(s, torch.Tensor) and s.untyped_storage().data_ptr() in pointers else s
            for s in saved]
