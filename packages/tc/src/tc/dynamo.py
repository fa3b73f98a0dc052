"""tc as a ``torch.compile`` back end: ``torch.compile(model, backend="tc")``.

Registered through the ``torch_dynamo_backends`` entry point of the umbrella's pyproject; the
only place tc meets Dynamo. Dynamo's FX graph is converted with ``tc_ir.from_fx`` and compiled by
tc's inductor back end (falling back to eager for the graph, with a warning, on failure).

Dynamic shapes: once Dynamo sees a size change it hands over graphs whose sizes are symbols
(SymInt placeholders, fake example values with symbolic sizes). ``from_fx`` turns those into
``ScalarSpec(int, s)`` inputs and symbolic ``TensorSpec``s; the graph is compiled once,
symbolically, and runs at every size Dynamo's guards admit (tc_autograd re-traces when its own
size guards refuse a call). When the symbolic compile fails (a back end that cannot take symbolic
graphs), the graph is specialised per concrete shape under the hood instead (see
``tc.backends.KernelsPerShape``): each new shape compiles a static copy, correct at every size.
Inside the symbolic path, tc_autograd traces once; the kernels themselves are compiled per shape
until tc_inductor's symbolic kernels are switched on (``tc.backends.SYMBOLIC_KERNELS``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

import tc_ir

from .backends import KernelsPerShape, inductor, is_symbolic, with_fallback
from .options import Options

log = logging.getLogger("tc.dynamo")
MAX_SHAPES = 64  # scalar values kept per graph (oldest dropped first)


def tc_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable:
    """The entry point Dynamo calls with each captured FX graph."""
    options = Options.from_user(kwargs.get("mode"), kwargs.get("options"))
    graph = tc_ir.from_fx(gm, example_inputs, name="dynamo")
    examples = [concrete(e) for e in example_inputs]
    if not is_symbolic(graph):
        compiled = with_fallback(inductor, "tc", options)(graph, examples)
        return lambda *inputs: compiled(*inputs)
    scalars = scalar_inputs(graph)
    if scalars:
        return ByScalarValue(graph, examples, options, scalars)
    return SymbolicGraph(graph, examples, options)


def scalar_inputs(graph: tc_ir.Graph) -> list[int]:
    """Inputs that are 0-dim tensors read only by ``.item()``: Python floats Dynamo made dynamic
    (``dynamic=True`` wraps a module's ``eps`` so). ``.item()`` is data-dependent for tc's trace,
    so their values are baked into the graph instead, one compile per value (see ByScalarValue)."""
    found = []
    for i, node in enumerate(graph.inputs):
        spec = node.spec
        if (isinstance(spec, tc_ir.TensorSpec) and spec.ndim == 0 and node.users
                and all(u.target == "item" and len(u.args) == 1 for u in node.users)):
            found.append(i)
    return found


def bake_scalars(graph: tc_ir.Graph, positions: list[int], values: tuple) -> tc_ir.Graph:
    """A copy of ``graph`` whose ``.item()`` reads of those inputs are the given values."""
    baked = graph.copy()
    inputs = baked.inputs
    for i, value in zip(positions, values):
        for item in list(inputs[i].users):
            item.replace_all_uses_with(value)
            baked.erase(item)
    return baked


class ByScalarValue:
    """A symbolic graph with scalar inputs baked in: one :class:`SymbolicGraph` per set of their
    values, checked on every call (one ``.item()`` each)."""

    def __init__(self, graph: tc_ir.Graph, example_inputs: list[Any], options: Options, positions: list[int]):
        self.graph, self.options, self.positions = graph, options, positions
        self.compiled: dict[tuple, SymbolicGraph] = {}
        self._get(example_inputs)

    def _get(self, inputs: Sequence[Any]) -> SymbolicGraph:
        values = tuple(inputs[i].item() for i in self.positions)
        fn = self.compiled.get(values)
        if fn is None:
            if len(self.compiled) >= MAX_SHAPES:
                self.compiled.pop(next(iter(self.compiled)))
            baked = bake_scalars(self.graph, self.positions, values)
            fn = self.compiled[values] = SymbolicGraph(baked, list(inputs), self.options)
        return fn

    def __call__(self, *inputs: Any) -> Any:
        return self._get(inputs)(*inputs)


def concrete(value: Any) -> Any:
    """An example input as a value: Dynamo passes the SymInt itself for an int it made dynamic;
    its hint is the int of this call (``int()`` would add a guard to Dynamo's ShapeEnv)."""
    if isinstance(value, torch.SymInt):
        return int(value.node.hint)
    return value


class SymbolicGraph:
    """A graph with size symbols: compiled symbolically when the back end takes it, else run
    through :class:`PerShape`. A symbolic compile that fails later (a new grad-mode variant
    the back end cannot compile) also switches to per-shape specialisation."""

    def __init__(self, graph: tc_ir.Graph, example_inputs: list[Any], options: Options):
        self.graph, self.options = graph, options
        self.per_shape: KernelsPerShape | None = None
        try:
            self.fn: Callable | None = inductor(graph, example_inputs, options)
            log.debug("graph %s compiled once for symbolic sizes", graph.name)
        except Exception as e:  # noqa: BLE001 - any failure: the per-shape path is always correct
            self.fn = None
            self._specialise(e)

    def _specialise(self, e: Exception) -> None:
        log.debug("graph %s: symbolic compile failed (%s: %s); specialising per shape",
                  self.graph.name, type(e).__name__, e)
        self.per_shape = KernelsPerShape(self.graph, with_fallback(inductor, "tc", self.options))

    def __call__(self, *inputs: Any) -> Any:
        if self.fn is not None:
            try:
                return self.fn(*inputs)
            except Exception as e:
                if not getattr(e, "tc_while_compiling", False):
                    raise
                self.fn = None
                self._specialise(e)
        return self.per_shape(*inputs)
