"""Test infrastructure: record a Python function as a torch-level tc_ir graph.

A ``TorchFunctionMode`` runs the function on real tensors and writes one node per torch
function or tensor method call that returns a tensor (or writes in place). Grad-mode and autocast
changes are noticed between calls and recorded as ``torch._C._set_grad_enabled`` and
``torch.amp._enter_autocast``/``_exit_autocast`` nodes, the way capture records them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

import tc_ir


def _is_method(func: Any) -> bool:
    name = getattr(func, "__name__", None)
    return name is not None and getattr(torch.Tensor, name, None) is func


class _Tracer(TorchFunctionMode):
    def __init__(self, graph: tc_ir.Graph):
        super().__init__()
        self.graph = graph
        self.nodes: dict[int, tc_ir.Node] = {}
        self.keep: list[Any] = []
        self.grad = torch.is_grad_enabled()
        self.autocast: tc_ir.Node | None = None

    def bind(self, value: torch.Tensor, node: tc_ir.Node) -> None:
        self.keep.append(value)
        self.nodes[id(value)] = node

    def node_of(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and id(value) not in self.nodes:
            self.bind(value, self.graph.constant(f"c{len(self.graph.tensors)}", value.detach().clone()))
        return self.nodes[id(value)] if isinstance(value, torch.Tensor) else value

    def sync_state(self) -> None:
        if torch.is_grad_enabled() != self.grad:
            self.grad = torch.is_grad_enabled()
            self.graph.call(torch._C._set_grad_enabled, self.grad, spec=None)
        enabled = torch.is_autocast_enabled("cpu")
        if enabled and self.autocast is None:
            args = ("cpu", torch.get_autocast_dtype("cpu"), True, torch.is_autocast_cache_enabled())
            self.autocast = self.graph.call(torch.amp._enter_autocast, *args, spec=None)
        elif not enabled and self.autocast is not None:
            self.graph.call(torch.amp._exit_autocast, self.autocast, spec=None)
            self.autocast = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.sync_state()
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        writes = name.endswith("_") and not name.endswith("__") or name == "__setitem__"
        has_tensor = any(isinstance(v, torch.Tensor) for v in tc_ir.leaves(out))
        if not (has_tensor or writes):
            return out
        target = name if _is_method(func) else func
        node_args, node_kwargs = tc_ir.map_structure((args, kwargs), self.node_of)
        node = self.graph.call(target, *node_args, kwargs=node_kwargs)
        if isinstance(out, torch.Tensor):
            self.bind(out, node)
        elif isinstance(out, (tuple, list)):
            for i, v in enumerate(out):
                if isinstance(v, torch.Tensor):
                    self.bind(v, self.graph.call(operator.getitem, node, i))
        return out


def trace(fn: Callable, inputs: list[torch.Tensor], names: list[str] | None = None, name: str = "f") -> tc_ir.Graph:
    """The torch-level graph of ``fn(*inputs)``; inputs are bound by identity, in order."""
    graph = tc_ir.Graph(name)
    tracer = _Tracer(graph)
    names = names or [f"x{i}" for i in range(len(inputs))]
    for value, n in zip(inputs, names):
        tracer.bind(value, graph.input(n, tc_ir.spec_of(value)))
    with tracer:
        out = fn(*inputs)
        tracer.sync_state()
    graph.output(tc_ir.map_structure(out, tracer.node_of))
    return graph


def module_inputs(module: torch.nn.Module) -> tuple[list[torch.Tensor], list[str]]:
    """The module's parameters then buffers, with their names (the extra graph inputs)."""
    named = list(module.named_parameters()) + list(module.named_buffers())
    return [t for _, t in named], [n.replace(".", "_") for n, _ in named]


def trace_module(module: Callable, args: list[Any], autocast: bool = False) -> tc_ir.Graph:
    """``module(*args)`` as a graph whose inputs are the args, then parameters, then buffers.

    ``autocast`` runs the call under CPU bfloat16 autocast (recorded as enter/exit nodes).
    """
    state, names = module_inputs(module) if isinstance(module, torch.nn.Module) else ([], [])
    arg_names = [f"arg{i}" for i in range(len(args))]

    def call(*xs: Any) -> Any:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return module(*xs[: len(args)])

    return trace(call, list(args) + state, arg_names + names, name=getattr(type(module), "__name__", "f"))
