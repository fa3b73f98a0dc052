"""Interop with ``torch.fx``: the only module of tc that touches it (docs/ARCHITECTURE.md).

:func:`from_fx` reads graphs that Dynamo or ``fx.symbolic_trace`` made; :func:`to_fx` hands a
tc_ir graph to code written for ``torch.compile`` back ends, with the node metadata they read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch
import torch.fx as fx
import torch.nn.functional as F

from . import ops
from .graph import Graph
from .node import Node, map_structure
from .spec import ScalarSpec, TensorSpec, spec_of, sym

# Dynamo's higher-order ops mapped to tc_ir's own.
_HIGHER_ORDER = {"cond": ops.cond}


class _InlineAllModules(fx.Tracer):
    """Traces through every module, so the result has only functions, methods and attributes."""

    def is_leaf_module(self, m: torch.nn.Module, qualname: str) -> bool:
        return False


def _held(graph: Graph, module: torch.nn.Module, path: str, attr: str) -> Node | None:
    value = getattr(module, attr)
    return None if value is None else _attribute(graph, module, attr, f"{path}.{attr}")


def _call_linear(graph: Graph, m: torch.nn.Module, path: str, x: Any) -> Node:
    return graph.call(F.linear, x, _held(graph, m, path, "weight"), _held(graph, m, path, "bias"))


def _call_conv(graph: Graph, m: Any, path: str, x: Any) -> Node:
    if m.padding_mode != "zeros":
        raise NotImplementedError(f"{path}: padding_mode={m.padding_mode!r} has no functional form here")
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[len(m.kernel_size)]
    w, b = _held(graph, m, path, "weight"), _held(graph, m, path, "bias")
    return graph.call(fn, x, w, b, m.stride, m.padding, m.dilation, m.groups)


def _call_batch_norm(graph: Graph, m: Any, path: str, x: Any) -> Node:
    if m.training and m.track_running_stats:
        raise NotImplementedError(f"{path}: BatchNorm in training mode updates buffers; put it in eval()")
    use_batch_stats = m.training or not m.track_running_stats
    stats = [_held(graph, m, path, n) for n in ("running_mean", "running_var", "weight", "bias")]
    return graph.call(F.batch_norm, x, *stats, use_batch_stats, m.momentum or 0.0, m.eps)


def _call_layer_norm(graph: Graph, m: Any, path: str, x: Any) -> Node:
    w, b = _held(graph, m, path, "weight"), _held(graph, m, path, "bias")
    return graph.call(F.layer_norm, x, list(m.normalized_shape), w, b, m.eps)


def _call_embedding(graph: Graph, m: Any, path: str, x: Any) -> Node:
    return graph.call(F.embedding, x, _held(graph, m, path, "weight"), m.padding_idx)


# Leaf modules that torch.fx keeps as ``call_module`` but whose forward has Python control flow
# (so it cannot be traced through), mapped to the functional call they make.
_MODULE_CALLS = {
    torch.nn.Linear: _call_linear,
    torch.nn.Conv1d: _call_conv,
    torch.nn.Conv2d: _call_conv,
    torch.nn.Conv3d: _call_conv,
    torch.nn.BatchNorm1d: _call_batch_norm,
    torch.nn.BatchNorm2d: _call_batch_norm,
    torch.nn.BatchNorm3d: _call_batch_norm,
    torch.nn.LayerNorm: _call_layer_norm,
    torch.nn.Embedding: _call_embedding,
}


def _call_module(graph: Graph, gm: torch.nn.Module, path: str, args: tuple, kwargs: dict) -> Any:
    module = gm.get_submodule(path)
    rule = _MODULE_CALLS.get(type(module))
    if rule is not None and not kwargs and len(args) == 1:
        return rule(graph, module, path, args[0])
    inner = from_fx(fx.GraphModule(module, _InlineAllModules().trace(module)), name=path.replace(".", "_"))
    return _inline(graph, inner, path, args)


def _inline(graph: Graph, inner: Graph, prefix: str, args: tuple) -> Any:
    env: dict[Node, Any] = dict(zip(inner.inputs, args))
    load = lambda value: map_structure(value, lambda v: env[v] if isinstance(v, Node) else v)  # noqa: E731
    for node in inner.nodes:
        if node.op in ("param", "constant"):
            env[node] = getattr(graph, node.op)(f"{prefix}.{node.target}", inner.tensors[node.target])
        elif node.op == "call":
            a, k = load((node.args, node.kwargs))
            env[node] = graph.call(node.target, *a, kwargs=k, spec=node.spec, name=node.name)
    return load(inner.outputs)


def from_fx(gm: torch.nn.Module, example_inputs: Sequence[Any] | None = None, name: str = "main") -> Graph:
    """Convert an ``fx.GraphModule`` (or any symbolically traceable module) to a ``tc_ir.Graph``.

    Leaf-module calls become the functional calls they make (Linear -> ``F.linear``...),
    parameters and buffers become held values, and specs come from the FX node metadata
    (Dynamo's fake values), from ``example_inputs``, or from shape inference on the meta device.
    """
    if not isinstance(gm, fx.GraphModule):
        gm = fx.symbolic_trace(gm)
    graph = Graph(name)
    env: dict[fx.Node, Any] = {}
    placeholders = iter(example_inputs or ())
    load = lambda value: map_structure(value, lambda v: env[v] if isinstance(v, fx.Node) else v)  # noqa: E731
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            example = next(placeholders, None)
            env[node] = graph.input(node.name, _fx_spec(node) or spec_of(example))
        elif node.op == "get_attr":
            env[node] = _attribute(graph, gm, node.target, node.target)
        elif node.op == "call_module":
            env[node] = _call_module(graph, gm, node.target, *load((node.args, node.kwargs)))
        elif node.op in ("call_function", "call_method"):
            target = _HIGHER_ORDER.get(getattr(node.target, "__name__", None), node.target)
            args, kwargs = load((node.args, node.kwargs))
            env[node] = graph.call(target, *args, kwargs=kwargs, spec=_fx_spec(node), name=node.name)
        elif node.op == "output":
            graph.output(load(node.args[0]))
    return graph


def _attribute(graph: Graph, root: torch.nn.Module, path: str, key: str) -> Node | Graph:
    value = root
    for part in path.split("."):
        value = getattr(value, part)
    if isinstance(value, torch.nn.Module):
        return from_fx(value, name=key.replace(".", "_"))
    if key in graph.tensors:  # read twice: one held value
        return next(n for n in graph.nodes if n.op in ("param", "constant") and n.target == key)
    if isinstance(value, torch.nn.Parameter):
        return graph.param(key, value)
    return graph.constant(key, value)


def _fx_spec(node: fx.Node) -> Any:
    value = node.meta.get("val", node.meta.get("example_value"))
    if value is not None:
        try:
            return _symbolic_spec(value)
        except _NoSizeForm:  # a size torch writes with its own functions (FloorDiv...): left to inference
            return None
    meta = node.meta.get("tensor_meta")
    if meta is not None and hasattr(meta, "shape"):
        return TensorSpec(tuple(meta.shape), meta.dtype, "cpu", tuple(meta.stride), meta.requires_grad)
    return None


class _NoSizeForm(Exception):
    pass


def _size(dim: Any) -> Any:
    """A size of Dynamo's (int, SymInt) as tc_ir holds it: an int, or an expression over
    :func:`tc_ir.sym` symbols named as Dynamo's (``s27``); Dynamo's int symbols may lack
    ``positive=True``, tc's size symbols have it."""
    if isinstance(dim, torch.SymInt):
        dim = dim.node.expr
    if not isinstance(dim, sympy.Basic):
        return int(dim)
    if any(type(a).__module__.startswith("torch") for a in sympy.preorder_traversal(dim)):
        raise _NoSizeForm(dim)
    return dim.xreplace({s: sym(s.name) for s in dim.free_symbols})


def _symbolic_spec(value: Any) -> Any:
    """``spec_of`` for Dynamo's fake values, whose sizes may be SymInts: a SymInt is an int that
    equals an expression (``ScalarSpec(int, s27)``), a fake tensor's sizes and strides are
    expressions over tc_ir's symbols."""
    if isinstance(value, torch.SymInt):
        return ScalarSpec(int, _size(value))
    if isinstance(value, (tuple, list)):
        specs = tuple(_symbolic_spec(v) for v in value)
        return specs if value and all(isinstance(v, torch.Tensor) for v in value) else spec_of(value)
    if isinstance(value, torch.Tensor) and not all(isinstance(d, int) for d in (*value.shape, *value.stride())):
        return TensorSpec(tuple(map(_size, value.shape)), value.dtype, value.device, tuple(map(_size, value.stride())),
                          value.requires_grad)
    return spec_of(value)


def to_fx(graph: Graph) -> fx.GraphModule:
    """Convert a ``tc_ir.Graph`` to an ``fx.GraphModule`` (held values become attributes).

    Each node's ``meta`` holds ``tc_spec`` and, for tensors of static shape, ``val`` and
    ``example_value``: fake tensors (shape, dtype, strides, device, no data) as Dynamo puts
    there, so ``torch.compile`` back ends that read them work unchanged.
    """
    root = torch.nn.Module()
    fake = _FakeValues()
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
        fake.annotate(env[node], node.spec)
    fx_graph.output(map_structure(graph.outputs, load))
    return fx.GraphModule(root, fx_graph, class_name=graph.name)


class _FakeValues:
    """Fake tensors for specs, made in one ``FakeTensorMode`` per converted graph (lazily: most
    graphs are never read by a back end that looks at metadata, but making them is cheap)."""

    def __init__(self) -> None:
        self.mode: Any = None

    def annotate(self, node: fx.Node, spec: Any) -> None:
        value = self.value(spec)
        if value is not None:
            node.meta["val"] = node.meta["example_value"] = value

    def value(self, spec: Any) -> Any:
        if isinstance(spec, tuple):
            values = [self.value(s) for s in spec]
            return None if any(v is None for v in values) else tuple(values)
        if not isinstance(spec, TensorSpec) or not spec.is_static:
            return None
        if self.mode is None:
            from torch._subclasses.fake_tensor import FakeTensorMode

            self.mode = FakeTensorMode(allow_non_fake_inputs=True)
        try:
            with self.mode:
                value = torch.empty_strided(spec.shape, spec.stride, dtype=spec.dtype, device=spec.device)
        except (RuntimeError, AssertionError):  # e.g. a CUDA spec on a machine without CUDA
            return None
        return value.requires_grad_(spec.requires_grad) if spec.dtype.is_floating_point else value


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
