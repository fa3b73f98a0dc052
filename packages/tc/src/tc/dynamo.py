"""tc as a ``torch.compile`` back end: ``torch.compile(model, backend="tc")``.

Registered through the ``torch_dynamo_backends`` entry point of the umbrella's pyproject; the
only place tc meets Dynamo. Dynamo's FX graph is converted with ``tc_ir.from_fx`` and compiled by
tc's inductor back end (falling back to eager for the graph, with a warning, on failure).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

import tc_ir

from .backends import inductor, with_fallback
from .options import Options


def tc_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable:
    """The entry point Dynamo calls with each captured FX graph."""
    options = Options.from_user(kwargs.get("mode"), kwargs.get("options"))
    graph = tc_ir.from_fx(gm, example_inputs, name="dynamo")
    compiled = with_fallback(inductor, "tc", options)(graph, list(example_inputs))
    return lambda *inputs: compiled(*inputs)
