"""Interop with ``torch.fx``: the only module of tc that touches it (DESIGN.md)."""

from __future__ import annotations

from typing import Any, Sequence

import sympy
import torch
import torch.fx as fx

from . import ops
from .graph import Graph
from .node import Node, map_structure
from .spec import spec_of

# Dynamo's higher-order ops mapped to tc_ir's own.
_HIGHER_ORDER = {"cond": ops.cond}


class _InlineAllModules(fx.Tracer):
    """Traces through every module, so the result has only functions, methods and attributes."""

    def is_leaf_module(self, m: torch.nn.Module, qualname: str) -> bool:
        return False


def from_fx(gm: torch.nn.Module, example_inputs: Sequence[Any] | None = None, name: str = "main") -> Graph:
    """Convert an ``fx.GraphModule`` (or any symbolically traceable module) to a ``tc_ir.Graph``.

    Leaf-module calls are traced through, parameters and buffers become held values, and specs
    come from the FX node metadata (Dynamo's fake values), from ``example_inputs``, or from
    shape inference on the meta device.
    """
    if not isinstance(gm, fx.GraphModule) or any(n.op == "call_module" for n in gm.graph.nodes):
        gm = fx.GraphModule(gm, _InlineAllModules().trace(gm))
    graph = Graph(name)
    env: dict[fx.Node, Any] = {}
    placeholders = iter(example_inputs or ())
    load = lambda value: map_structure(value, lambda v: env[v] if isinstance(v, fx.Node) else v)  # noqa: E731
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            example = next(placeholders, None)
            env[node] = graph.input(node.name, _fx_spec(node) or spec_of(example))
        elif node.op == "get_attr":
            env[node] = _attribute(graph, gm, node.target)
        elif node.op in ("call_function", "call_method"):
            target = _HIGHER_ORDER.get(getattr(node.target, "__name__", None), node.target)
            args, kwargs = load((node.args, node.kwargs))
            env[node] = graph.call(target, *args, kwargs=kwargs, spec=_fx_spec(node), name=node.name)
        elif node.op == "output":
            graph.output(load(node.args[0]))
    return graph


def _attribute(graph: Graph, gm: torch.nn.Module, path: str) -> Node | Graph:
    value = gm
    for part in path.split("."):
        value = getattr(value, part)
    if isinstance(value, torch.nn.Module):
        return from_fx(value, name=path.replace(".", "_"))
    if isinstance(value, torch.nn.Parameter):
        return graph.param(path, value)
    return graph.constant(path, value)


def _fx_spec(node: fx.Node) -> Any:
    value = node.meta.get("val", node.meta.get("example_value"))
    if value is not None:
        return spec_of(value)
    meta = node.meta.get("tensor_meta")
    if meta is not None and hasattr(meta, "shape"):
        from .spec import TensorSpec

        return TensorSpec(tuple(meta.shape), meta.dtype, "cpu", tuple(meta.stride), meta.requires_grad)
    return None


def to_fx(graph: Graph) -> fx.GraphModule:
    """Convert a ``tc_ir.Graph`` to an ``fx.GraphModule`` (held values become attributes)."""
    root = torch.nn.Module()
    fx_graph = fx.Graph()
    env: dict[Node, fx.Node] = {}

    def load(value: Any) -> Any:
        if isinstance(value, Node):
            return env[value]
        if isinstance(value, Graph):
            _set_path(root, value.name, to_fx(value))
            return fx_graph.get_attr(value.name)
        if isinstance(value, sympy.Expr):
            raise NotImplementedError(f"graph {graph.name}: symbolic sizes have no FX form yet ({value})")
        return value

    for node in graph.nodes:
        if node.op == "input":
            env[node] = fx_graph.placeholder(node.name)
        elif node.op in ("param", "constant"):
            _set_path(root, node.target, graph.tensors[node.target])
            env[node] = fx_graph.get_attr(node.target)
        else:
            args, kwargs = map_structure((node.args, node.kwargs), load)
            kind = "call_method" if isinstance(node.target, str) else "call_function"
            env[node] = fx_graph.create_node(kind, node.target, args, kwargs, name=node.name)
        env[node].meta["tc_spec"] = node.spec
    fx_graph.output(map_structure(graph.outputs, load))
    return fx.GraphModule(root, fx_graph, class_name=graph.name)


def _set_path(root: torch.nn.Module, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    module = root
    for part in parents:
        if not hasattr(module, part):
            module.add_module(part, torch.nn.Module())
        module = getattr(module, part)
    if isinstance(value, torch.nn.Parameter) or isinstance(value, torch.nn.Module):
        setattr(module, leaf, value)
    elif isinstance(value, torch.Tensor):
        module.register_buffer(leaf, value)
    else:
        setattr(module, leaf, value)
