"""The reference interpreter: the oracle every other package's tests compare against."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch

from .graph import Graph
from .node import Node, map_structure
from .spec import ScalarSpec, TensorSpec, size_value


class InterpretError(RuntimeError):
    """Inputs that do not fit the graph, or a node whose target raised."""


def interpret(graph: Graph, inputs: Sequence[Any]) -> Any:
    """Run ``graph`` eagerly on ``inputs``; returns the outputs in the structure given to output()."""
    if len(inputs) != len(graph.inputs):
        raise InterpretError(f"graph {graph.name} takes {len(graph.inputs)} inputs, got {len(inputs)}")
    sizes = bind_sizes(graph, inputs)
    env: dict[Node, Any] = dict(zip(graph.inputs, inputs))

    def load(value: Any) -> Any:
        if isinstance(value, Node):
            return env[value]
        if isinstance(value, Graph):
            return lambda *args: interpret(value, args)
        if isinstance(value, sympy.Expr):
            return size_value(value, sizes)
        return value

    for node in graph.nodes:
        if node.op in ("param", "constant"):
            env[node] = graph.tensors[node.target]
        elif node.op == "call":
            args, kwargs = map_structure((node.args, node.kwargs), load)
            env[node] = _run(node, args, kwargs)
    return map_structure(graph.outputs, load)


def _run(node: Node, args: tuple, kwargs: dict) -> Any:
    try:
        if isinstance(node.target, str):
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        return node.target(*args, **kwargs)
    except Exception as e:
        raise InterpretError(f"node %{node.name} ({node.target}) failed: {e}") from e


def size_places(graph: Graph) -> dict[sympy.Symbol, tuple[int, int]]:
    """Where each size symbol is first read from the inputs, as ``bind_sizes`` binds it:
    ``(input position, dim)``, dim -1 for an int input that is the symbol. Symbols that appear
    only inside expressions (``2*s0``) have no place."""
    places: dict[sympy.Symbol, tuple[int, int]] = {}
    for position, node in enumerate(graph.inputs):
        spec = node.spec
        if isinstance(spec, ScalarSpec) and isinstance(spec.expr, sympy.Symbol):
            places.setdefault(spec.expr, (position, -1))
        elif isinstance(spec, TensorSpec):
            for dim, size in enumerate(spec.shape):
                if isinstance(size, sympy.Symbol):
                    places.setdefault(size, (position, dim))
    return places


def bind_sizes(graph: Graph, inputs: Sequence[Any]) -> dict[sympy.Symbol, int]:
    """Match input specs against the inputs' sizes: symbols get values, fixed sizes are checked."""
    sizes: dict[sympy.Symbol, int] = {}
    checks: list[tuple[Node, int, Any, int]] = []
    for node, value in zip(graph.inputs, inputs):
        if isinstance(node.spec, ScalarSpec) and node.spec.expr is not None:
            _bind(node.spec.expr, int(value), sizes, checks, node, -1)
            continue
        if not isinstance(node.spec, TensorSpec) or not isinstance(value, torch.Tensor):
            continue
        if value.ndim != node.spec.ndim:
            raise InterpretError(f"input %{node.name}: expected {node.spec.ndim} dims, got {value.ndim}")
        for dim, (want, got) in enumerate(zip(node.spec.shape, value.shape)):
            _bind(want, int(got), sizes, checks, node, dim)
    for node, dim, want, got in checks:
        if (want.subs(sizes) if isinstance(want, sympy.Expr) else want) != got:
            where = "value" if dim < 0 else f"size {dim}"
            raise InterpretError(f"input %{node.name}: {where} should be {want}, got {got}")
    return sizes


def _bind(want: Any, got: int, sizes: dict, checks: list, node: Node, dim: int) -> None:
    """The first plain symbol seen takes its value; everything else is checked once all are bound."""
    if isinstance(want, sympy.Symbol) and want not in sizes:
        sizes[want] = got
    else:
        checks.append((node, dim, want, got))
