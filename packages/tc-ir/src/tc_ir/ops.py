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


HIGHER_ORDER_OPS = {cond}
