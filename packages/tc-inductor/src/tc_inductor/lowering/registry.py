"""The lowering table and the context a lowering is given (passed explicitly, never ambient)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from ..ir import BufferValue, TensorValue

# ATen overload → lowering(ctx, *args, **kwargs) -> TensorValue | tuple | python value
LOWERINGS: dict[Any, Callable[..., Any]] = {}


def register(*targets: Any) -> Callable:
    """Register a lowering for each of ``targets`` (ATen overloads), beside the op's code."""

    def wrap(fn: Callable) -> Callable:
        for target in targets:
            LOWERINGS[target] = fn
        return fn

    return wrap


class LoweringContext(Protocol):
    """What a lowering may ask of the graph being lowered."""

    spec: Any  # the output spec of the node being lowered
    options: Any

    def realize(self, value: TensorValue) -> BufferValue: ...

    def random_seed(self, device: torch.device) -> Any: ...  # a kir SEED value for a new random op

    def reduction(self, shape: tuple, dtype: torch.dtype, device: torch.device, body: Callable,
                  rranges: tuple, reduction_type: str, reduced_dims: tuple = ()) -> BufferValue: ...

    # (sum, sum of squared deviations from the mean) as one split reduction, or None: not split
    def moments(self, shape: tuple, dtype: torch.dtype, device: torch.device, body: Callable,
                rranges: tuple, reduced_dims: tuple = ()) -> tuple[BufferValue, BufferValue] | None: ...
