"""``tc.export`` / ``tc.load``: one whole-program graph, saved as text, runnable without the source."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

import tc_capture
import tc_ir

from .backends import inductor, interpreter, with_fallback
from .options import Options


class ExportError(RuntimeError):
    """The program cannot be exported as one graph; the message lists the graph breaks."""


class ExportedProgram:
    """One graph whose parameters and buffers are held in it; call it with the tensor arguments.

    ``.graph`` is the ``tc_ir.Graph``, ``.save(path)`` writes its text form (weights included),
    ``.module()`` returns a callable, and :func:`tc.load` reads a saved program back.
    """

    def __init__(self, graph: tc_ir.Graph):
        self.graph = graph
        self._compiled: Callable | None = None

    def __call__(self, *args: Any) -> Any:
        inputs = [leaf for leaf in tc_ir.leaves(args) if isinstance(leaf, torch.Tensor)]
        if self._compiled is None:
            compile_graph = with_fallback(inductor, "inductor", Options())
            self._compiled = compile_graph(self.graph, inputs)
        return self._compiled(*inputs)

    def module(self) -> Callable:
        return self

    def save(self, path: str | Path) -> None:
        Path(path).write_text(str(self.graph))

    def __str__(self) -> str:
        return self.graph.format(data=False)


def export(fn_or_module: Callable, *args: Any) -> ExportedProgram:
    """Capture ``fn_or_module(*args)`` as one graph (``fullgraph``) with its weights held in it."""
    seen: list[tuple[tc_ir.Graph, list]] = []

    def record(graph: tc_ir.Graph, example_inputs: list) -> Callable:
        seen.append((graph, list(example_inputs)))
        return interpreter(graph)

    try:
        expect = tc_capture.optimize(record, fullgraph=True)(fn_or_module)(*args)
    except tc_capture.GraphBreakError as e:
        raise ExportError(f"tc.export needs one graph, but capture broke: {e}") from e
    if len(seen) != 1:
        raise ExportError(f"tc.export needs one graph, capture made {len(seen)}")
    graph = _hold_weights(*seen[0], fn_or_module)
    program = ExportedProgram(graph)
    _check_same(program, args, expect)
    return program


def _hold_weights(graph: tc_ir.Graph, example_inputs: list, owner: Any) -> tc_ir.Graph:
    """Turn inputs that are the module's parameters or buffers into values the graph holds."""
    module = owner if isinstance(owner, torch.nn.Module) else getattr(owner, "__self__", None)
    if not isinstance(module, torch.nn.Module):
        return graph
    names = {id(t): n for n, t in [*module.named_parameters(), *module.named_buffers()]}
    graph = graph.copy()
    for node, value in zip(list(graph.inputs), example_inputs):
        if id(value) in names:
            key = names[id(value)]
            with graph.inserting_before(node):
                held = graph.param(key, value) if isinstance(value, torch.nn.Parameter) else graph.constant(key, value)
            node.replace_all_uses_with(held)
            graph.erase(node)
    return graph


def _check_same(program: ExportedProgram, args: tuple, expect: Any) -> None:
    # The exported graph must take the user's tensors in the order they were passed.
    got = tc_ir.interpret(program.graph, [a for a in tc_ir.leaves(args) if isinstance(a, torch.Tensor)])
    for e, g in zip(tc_ir.leaves(expect), tc_ir.leaves(got)):
        if isinstance(e, torch.Tensor) and not torch.allclose(e, g, equal_nan=True):
            raise ExportError("the exported graph does not reproduce the program's result on its example inputs")


def load(path: str | Path) -> ExportedProgram:
    """Read a program saved by ``ExportedProgram.save``; it runs without the original source."""
    return ExportedProgram(tc_ir.parse(Path(path).read_text()))
