"""``tc.export`` / ``tc.load``: one whole-program graph, saved as data, runnable without the source.

A ``.tc`` file is a safetensors file (https://github.com/huggingface/safetensors): its tensors
are the program's weights and buffers as raw data, keyed by their state-dict names, and its
metadata holds ``format: "tc-export"``, ``version`` and ``graph``: the program's ATen graph in
``tc_ir`` text form (held tensors named, without bytes). The graph may call only ``torch.ops``
overloads (aten, prims, and custom ops registered by name in the loading process) and a fixed
table of Python operators (``tc_ir.targets.loadable_table``). Loading imports nothing, runs
nothing, and unpickles nothing: a file naming any other target, or malformed in any way
(truncated, bad UTF-8, absurd sizes, cycles, specs that do not fit the ops), raises
:class:`LoadError` with the node and line.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import safetensors
import safetensors.torch
import torch

import tc_autograd
import tc_capture
import tc_ir

from .backends import inductor, interpreter, with_fallback
from .options import Options


class ExportError(RuntimeError):
    """The program cannot be exported as one graph; the message lists the graph breaks."""


class LoadError(ValueError):
    """The file is not a well-formed tc export (the message says where and why)."""


FORMAT, VERSION = "tc-export", "1"


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
        if len(inputs) != len(self.graph.inputs):
            raise TypeError(f"exported program takes {len(self.graph.inputs)} tensors, got {len(inputs)}")
        if self._compiled is None:
            compile_graph = with_fallback(inductor, "inductor", Options())
            self._compiled = compile_graph(self.graph, inputs)
        return self._compiled(*inputs)

    def module(self) -> Callable:
        return self

    def save(self, path: str | Path) -> None:
        """Write the program as a ``.tc`` file (safetensors: weights as data, graph as metadata)."""
        held = {g_key: t for g in [self.graph, *self.graph.subgraphs()] for g_key, t in g.tensors.items()}
        tensors = {k: t.detach().cpu().contiguous().clone() for k, t in held.items() if isinstance(t, torch.Tensor)}
        metadata = {"format": FORMAT, "version": VERSION, "graph": self.graph.format(data=False, strict=True)}
        safetensors.torch.save_file(tensors, str(path), metadata=metadata)

    def __str__(self) -> str:
        return self.graph.format(data=False)


def export(fn_or_module: Callable, *args: Any) -> ExportedProgram:
    """Capture ``fn_or_module(*args)`` as one graph (``fullgraph``) with its weights held in it.

    The program takes the tensors of ``args`` (nested tuples, lists and dicts flattened in
    order) and returns what the function returned; Python values in ``args`` are baked in.
    """
    seen: list[tc_ir.Graph] = []

    def record(graph: tc_ir.Graph, example_inputs: list) -> Callable:
        seen.append(graph)
        return interpreter(graph)

    try:
        tc_capture.optimize(record, fullgraph=True)(fn_or_module)(*args)
    except tc_capture.GraphBreakError as e:
        raise ExportError(f"tc.export needs one graph, but capture broke: {e}") from e
    if len(seen) != 1 or "returns" not in seen[0].meta:
        raise ExportError(f"tc.export needs one graph, capture made {len(seen)}")
    bound = isinstance(fn_or_module, torch.nn.Module) or inspect.ismethod(fn_or_module)
    owner = fn_or_module if isinstance(fn_or_module, torch.nn.Module) else getattr(fn_or_module, "__self__", None)
    graph = _standalone(seen[0], owner, _tensor_paths(args, 1 if bound else 0))
    program = ExportedProgram(_to_aten(graph, [a for a in tc_ir.leaves(args) if isinstance(a, torch.Tensor)]))
    _check_same(program, fn_or_module, args)
    return program


def _to_aten(graph: tc_ir.Graph, inputs: list[torch.Tensor]) -> tc_ir.Graph:
    """The program as an ATen inference graph with its weights held: only ``torch.ops`` targets,
    which is what a file may name (torch-level functions and methods are code, not data)."""
    lifted, held = tc_ir.lift_held(graph)
    n = len(inputs)
    with torch.no_grad():
        traced = tc_autograd.trace(lifted, [*inputs, *held], decompositions=None, training=False)
    if traced.mutated_inputs:
        raise ExportError("tc.export: the program writes to its inputs in place; that cannot be exported")
    aten = traced.graph
    values = list(aten.outputs)

    def leaf(out: Any) -> Any:
        if out.kind == "graph":
            return values[out.args[0]]
        if out.kind == "value":
            return out.args[0]
        if out.kind == "input" and out.args[0] < n:
            return aten.inputs[out.args[0]]
        raise ExportError(f"tc.export: an output aliasing an input or another output ({out.kind}) cannot be exported")

    outputs = tc_ir.map_structure(traced.plan, leaf)
    for node, source, value in zip(list(aten.inputs[n:]), lifted.inputs[n:], held):
        with aten.inserting_before(node):
            kept = aten.param(source.meta["held"], value) if isinstance(value, torch.nn.Parameter) \
                else aten.constant(source.meta["held"], value)
        node.replace_all_uses_with(kept)
        aten.erase(node)
    aten.output(outputs)
    aten.verify()
    return aten


def _tensor_paths(args: tuple, first_slot: int) -> list[tuple]:
    """The path (argument slot, keys...) of every tensor in ``args``, in flattening order."""
    found: list[tuple] = []

    def walk(value: Any, path: tuple) -> None:
        if isinstance(value, torch.Tensor):
            found.append(path)
        elif isinstance(value, (tuple, list)):
            for i, item in enumerate(value):
                walk(item, path + (i,))
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, path + (key,))

    for slot, arg in enumerate(args, first_slot):
        walk(arg, (slot,))
    return found


def _state_name(where: str, state: dict[str, Any]) -> str:
    """The state-dict name of a parameter or buffer that capture names by attribute path
    (``_modules.fc1._parameters.weight`` is ``fc1.weight``)."""
    if where in state:
        return where
    return ".".join(p for p in where.split(".") if p not in ("_modules", "_parameters", "_buffers"))


def _standalone(graph: tc_ir.Graph, owner: Any, arg_paths: list[tuple]) -> tc_ir.Graph:
    """The captured graph made self-contained: weights held, inputs in the order of the user's
    tensors, and the user's return structure as the graph's output."""
    graph, meta = graph.copy(), graph.meta
    state = dict(owner.named_parameters()) | dict(owner.named_buffers()) if isinstance(owner, torch.nn.Module) else {}
    order: dict[tc_ir.Node, int] = {}
    for node, (kind, where) in zip(list(graph.inputs), meta["user_inputs"]):
        if kind in ("param", "buffer"):
            where = _state_name(where, state)
            value = state[where]
            with graph.inserting_before(node):
                held = graph.param(where, value) if kind == "param" else graph.constant(where, value)
            node.replace_all_uses_with(held)
            graph.erase(node)
        elif kind == "arg" and tuple(where) in arg_paths:
            order[node] = arg_paths.index(tuple(where))
        else:
            raise ExportError(f"tc.export: graph input %{node.name} comes from {kind} {where!r}, not from the arguments")
    inputs = sorted(order, key=order.get)
    graph.nodes[:] = inputs + [n for n in graph.nodes if n not in order]
    outputs = list(graph.outputs) if isinstance(graph.outputs, (tuple, list)) else [graph.outputs]
    graph.output(tc_capture.rebuild_returns(meta["returns"], outputs))
    try:
        graph.verify()
    except (tc_ir.VerifyError, TypeError) as e:
        raise ExportError(f"tc.export: the program's result cannot be written as a graph output: {e}") from e
    return graph


def _check_same(program: ExportedProgram, fn: Callable, args: tuple) -> None:
    # Fresh inputs of the same specs: the exported graph must compute what the program does.
    with torch.no_grad():
        expect = fn(*args)
        got = tc_ir.interpret(program.graph, [a for a in tc_ir.leaves(args) if isinstance(a, torch.Tensor)])
    for e, g in zip(tc_ir.leaves(expect), tc_ir.leaves(got)):
        if isinstance(e, torch.Tensor) and not torch.allclose(e, g, atol=1e-5, rtol=1e-4, equal_nan=True):
            raise ExportError("the exported graph does not reproduce the program's result on its example inputs")


def load(path: str | Path) -> ExportedProgram:
    """Read a program saved by ``ExportedProgram.save``; it runs without the original source.

    Data only: nothing is imported or executed while loading (see the module docstring for what a
    file may contain); a malformed file raises :class:`LoadError`."""
    try:
        with safetensors.safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {key: f.get_tensor(key) for key in f.keys()}
    except (OSError, ValueError, RuntimeError, safetensors.SafetensorError) as e:
        raise LoadError(f"{path}: not a readable tc export (safetensors: {e})") from None
    if metadata.get("format") != FORMAT or metadata.get("version") != VERSION or "graph" not in metadata:
        raise LoadError(f"{path}: not a tc export of version {VERSION} (metadata {sorted(metadata)})")
    try:
        graph = tc_ir.parse(metadata["graph"], tensors=tensors)
        graph.verify()
    except Exception as e:  # hostile data: parse and verify failures alike are a LoadError
        raise LoadError(f"{path}: {type(e).__name__}: {e}") from None
    return ExportedProgram(graph)
