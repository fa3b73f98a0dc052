"""Higher-order ops that the IR itself defines: their sub-graph args arrive as callables."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


def cond(pred: Any, true_fn: Callable, false_fn: Callable, operands: Sequence[Any]) -> Any:
    """Run ``true_fn(*operands)`` if ``pred`` holds, else ``false_fn(*operands)``.

    ``pred`` may be a Python bool or a one-element tensor. Both branches must return values
    of the same structure and specs; in a graph they are sub-graphs of the ``cond`` node.
    """
    taken = bool(pred.item()) if isinstance(pred, torch.Tensor) else bool(pred)
    return (true_fn if taken else false_fn)(*operands)


def autograd_function(forward: Callable, backward: Callable, operands: Sequence[Any], n_args: int, n_free: int,
                      non_differentiable: Sequence[int] = (), name: str = "") -> Any:
    """A ``torch.autograd.Function``'s ``apply``: ``forward`` computes, ``backward`` gives gradients.

    ``operands`` are the function's tensor arguments (``n_args``, which get gradients), then
    ``n_free`` tensors the forward reads besides them, then tensors only the backward reads.
    ``forward(*operands[:n_args + n_free])`` returns ``(outputs, saved)`` (``outputs`` a tensor or a
    tuple of them, ``saved`` a tuple); ``backward(*saved, *operands[n_args + n_free:], *grads)``
    (one gradient per output) returns one gradient or ``None`` per tensor argument. Outputs at
    ``non_differentiable`` positions get no gradient. ``name`` is the user's class, for reading.
    """
    return _AutogradFunction.apply(forward, backward, n_args, n_free, tuple(non_differentiable), *operands)


class _AutogradFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, forward, backward, n_args, n_free, non_differentiable, *operands):  # noqa: ANN001
        outputs, saved = forward(*operands[:n_args + n_free])
        ctx.backward, ctx.n_args, ctx.n_operands = backward, n_args, len(operands)
        ctx.save_for_backward(*saved, *operands[n_args + n_free:])
        flat = (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)
        ctx.mark_non_differentiable(*[flat[i] for i in non_differentiable])
        return outputs

    @staticmethod
    def backward(ctx, *grads):  # noqa: ANN001
        got = ctx.backward(*ctx.saved_tensors, *grads)
        got = (got,) if not isinstance(got, (tuple, list)) else tuple(got)
        return (None,) * 5 + got + (None,) * (ctx.n_operands - ctx.n_args)


HIGHER_ORDER_OPS = {cond, autograd_function}
