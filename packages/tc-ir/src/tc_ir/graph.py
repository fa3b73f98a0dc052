"""The graph: inputs, named tensors, calls in order, and a nested output structure."""

from __future__ import annotations

import contextlib
import functools
import keyword
import re
from collections.abc import Iterator
from typing import Any

import torch

from .node import Node, _collect, map_structure, nodes_in
from .spec import ScalarSpec, TensorSpec, spec_of

_NAME_RE = re.compile(r"[^0-9a-zA-Z_]+")


class Graph:
    """A straight-line program over tensors, used at both torch level and ATen level.

    >>> import torch, tc_ir
    >>> aten = torch.ops.aten
    >>> g = tc_ir.Graph()
    >>> x = g.input("x", tc_ir.TensorSpec((1024,), torch.float32))
    >>> y = g.call(aten.mul.Tensor, g.call(aten.relu.default, x), 2.0)
    >>> g.output(y)
    >>> g.verify()
    >>> tc_ir.parse(str(g)) == g
    True

    Specs of call nodes are inferred on the meta device when not given (static sizes only).
    Sub-graphs (for higher-order ops such as :func:`tc_ir.ops.cond`) are passed as plain args.
    """

    def __init__(self, name: str = "main"):
        self.name = name
        self.nodes: list[Node] = []
        self.tensors: dict[str, Any] = {}
        self.outputs: Any = None
        self.output_nodes: dict[Node, None] = {}
        self.meta: dict[str, Any] = {}
        self._names: set[str] = set()
        # base -> a suffix such that every ``{base}_{i}`` below it is taken (names are found
        # from there, not from 1: a graph with 1000 adds found each new one in 1000 tries)
        self._suffix_from: dict[str, int] = {}
        self._insert_at: int | None = None

    # ---- building -------------------------------------------------------------------------
    @property
    def inputs(self) -> list[Node]:
        return [n for n in self.nodes if n.op == "input"]

    def input(self, name: str, spec: Any) -> Node:
        """A graph input; ``spec`` is a TensorSpec, ScalarSpec or None (any Python value)."""
        return self._add(name, "input", None, (), {}, spec)

    def param(self, name: str, value: torch.Tensor) -> Node:
        """A trainable tensor the graph holds under ``name`` (like an ``nn.Module`` attribute)."""
        return self._hold(name, "param", value)

    def constant(self, name: str, value: Any) -> Node:
        """A constant tensor or Python value the graph holds under ``name``."""
        return self._hold(name, "constant", value)

    def _hold(self, name: str, op: str, value: Any) -> Node:
        if name in self.tensors:
            raise ValueError(f"graph {self.name} already holds a value named {name!r}")
        self.tensors[name] = value
        return self._add(name, op, name, (), {}, spec_of(value))

    def call(self, target: Any, *args: Any, kwargs: dict | None = None, spec: Any = None,
             name: str | None = None) -> Node:
        """A call of ``target(*args, **kwargs)``; ``spec`` is inferred when left out."""
        kwargs = kwargs or {}
        if spec is None:
            spec = infer_spec(target, args, kwargs)
        return self._add(name or default_name(target), "call", target, args, kwargs, spec)

    def output(self, value: Any) -> None:
        """Set the graph's result: a node, a value, or nested tuples/lists/dicts of them."""
        self.outputs = value
        self.output_nodes = dict.fromkeys(nodes_in(value))

    def replace_output(self, old: Node, new: Any) -> None:
        if old in self.output_nodes:
            self.output(map_structure(self.outputs, lambda v: new if v is old else v))

    @contextlib.contextmanager
    def inserting_before(self, node: Node) -> Iterator[None]:
        """New nodes go just before ``node`` inside the block (and at the end after it)."""
        saved, self._insert_at = self._insert_at, self.nodes.index(node)
        try:
            yield
        finally:
            self._insert_at = saved

    def _add(self, name: str, op: str, target: Any, args: tuple, kwargs: dict, spec: Any) -> Node:
        node = Node(self, self.unique_name(name), op, target, args, kwargs, spec)
        if self._insert_at is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(self._insert_at, node)
            self._insert_at += 1
        return node

    def unique_name(self, hint: str) -> str:
        """``hint`` made an identifier, or the first free ``{hint}_{i}`` (i = 1, 2, ...)."""
        base = _name_base(hint)
        name = base
        if name in self._names:
            i = self._suffix_from.get(base, 1)
            name = f"{base}_{i}"
            while name in self._names:
                i += 1
                name = f"{base}_{i}"
            self._suffix_from[base] = i + 1
        self._names.add(name)
        return name

    def _free_name(self, name: str) -> None:
        self._names.discard(name)
        base, sep, suffix = name.rpartition("_")
        if sep and suffix.isdigit() and 1 <= int(suffix) < self._suffix_from.get(base, 1):
            self._suffix_from[base] = int(suffix)  # free again: the first free one may be this

    def erase(self, node: Node) -> None:
        """Remove a node that nothing reads."""
        if node.users or node in self.output_nodes:
            raise ValueError(f"cannot erase %{node.name}: still used by {list(node.users) or 'output'}")
        node.args, node.kwargs = (), {}
        self.nodes.remove(node)
        self._free_name(node.name)
        if node.op in ("param", "constant"):
            del self.tensors[node.target]

    # ---- reading --------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"graph {self.name} has no node %{name}")

    @property
    def calls(self) -> list[Node]:
        return [n for n in self.nodes if n.op == "call"]

    def subgraphs(self) -> list[Graph]:
        """Sub-graphs used as args, depth first, each once."""
        found: dict[int, Graph] = {}
        for n in self.calls:
            for value in _graphs_in((n.args, n.kwargs)):
                if id(value) not in found:
                    found[id(value)] = value
                    for inner in value.subgraphs():
                        found.setdefault(id(inner), inner)
        return list(found.values())

    def copy(self) -> Graph:
        """A deep copy of the structure (tensors held are shared, not cloned)."""
        from .text import copy_graph

        return copy_graph(self)

    def verify(self) -> None:
        """Raise :class:`tc_ir.VerifyError` naming the first inconsistency found."""
        from .verify import verify

        verify(self)

    def format(self, data: bool = True, header: str | None = None, name: str | None = None,
               strict: bool = False) -> str:
        """The text form; ``data=False`` leaves out the bytes of held tensors (for logs).

        ``name`` replaces the graph's own name in the text: cache keys pass a fixed one, so the
        same graph has the same key whatever number its name got in this process. Never raises
        for a target (one without an exact name prints as ``<name>``); cache keys pass
        ``strict=True``, which raises ``TargetError`` instead, so two targets never share a key."""
        from .text import format_graph

        return format_graph(self, data=data, header=header, name=name, strict=strict)

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return f"<tc_ir.Graph {self.name}: {len(self.inputs)} inputs, {len(self.calls)} calls>"

    def __eq__(self, other: object) -> bool:
        # The text form is canonical and complete (held tensors included), so it is equality.
        return isinstance(other, Graph) and str(self) == str(other)

    __hash__ = None  # mutable


def _graphs_in(value: Any) -> list[Graph]:
    out: list[Graph] = []
    _collect(value, out, Graph)
    return out


@functools.lru_cache(maxsize=4096)
def _name_base(hint: str) -> str:
    base = _NAME_RE.sub("_", hint).strip("_") or "v"
    if base[0].isdigit() or keyword.iskeyword(base):
        base = "v_" + base
    return base


def default_name(target: Any) -> str:
    if isinstance(target, str):
        return target
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name.split("::")[1]
    return getattr(target, "__name__", "call")


def _meta_value(value: Any) -> Any:
    if isinstance(value, Node):
        if isinstance(value.spec, TensorSpec):
            return value.spec.meta_tensor()
        raise _CannotInfer
    if isinstance(value, Graph):
        raise _CannotInfer
    return value


class _CannotInfer(Exception):
    pass


def infer_spec(target: Any, args: tuple, kwargs: dict) -> Any:
    """Run ``target`` on meta tensors to learn the spec of its result; None if that fails."""
    inputs = [n for n in nodes_in((args, kwargs)) if isinstance(n.spec, TensorSpec)]
    if any(not n.spec.is_static for n in inputs):
        return None
    if not inputs and not isinstance(target, torch._ops.OpOverload):
        # A Python function of no tensor could do anything (set grad mode, print): never run it.
        return None
    try:
        meta_args, meta_kwargs = map_structure((args, kwargs), _meta_value)
        fn = getattr(meta_args[0], target) if isinstance(target, str) else target
        result = fn(*meta_args[1:], **meta_kwargs) if isinstance(target, str) else fn(*meta_args, **meta_kwargs)
    except Exception:
        return None
    device = inputs[0].spec.device if inputs else _device_arg(kwargs)
    return _respec(result, device)


def _device_arg(kwargs: dict) -> torch.device:
    return torch.device(kwargs.get("device") or "cpu")


def _respec(result: Any, device: torch.device) -> Any:
    if isinstance(result, torch.Tensor):
        spec = spec_of(result)
        return spec.with_(device=device if result.device.type == "meta" else result.device)
    if isinstance(result, (tuple, list)) and result:
        specs = tuple(_respec(r, device) for r in result)
        return specs if all(s is not None for s in specs) else None
    if isinstance(result, (bool, int, float)):
        return ScalarSpec(type(result))
    return None
