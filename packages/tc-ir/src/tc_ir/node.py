"""Graph values: one mutable ``Node`` class whose use-def links stay right when its args change."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .graph import Graph

# What a node is: a graph input, a named tensor the graph holds (parameter or constant), or a call.
NODE_OPS = ("input", "param", "constant", "call")


def map_structure(value: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every leaf of nested tuples/lists/dicts/slices, keeping the structure."""
    cls = value.__class__
    if cls in _ATOMS:  # the common leaves, without the isinstance tests below
        return fn(value)
    if cls is tuple or cls is list:  # args: mapped in one comprehension, atoms without a call
        return cls([fn(v) if v.__class__ in _ATOMS else map_structure(v, fn) for v in value])
    if isinstance(value, torch.Size):  # holds only sizes: a leaf
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(map_structure(v, fn) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(map_structure(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: map_structure(v, fn) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(*(map_structure(v, fn) for v in (value.start, value.stop, value.step)))
    return fn(value)


def leaves(value: Any) -> Iterator[Any]:
    """Every leaf of a nested structure, in order."""
    out: list[Any] = []
    _collect(value, out, None)
    return iter(out)


def nodes_in(value: Any) -> list[Node]:
    """The nodes among the leaves of ``value``, in order (repeats kept)."""
    out: list[Node] = []
    _collect(value, out, Node)
    return out


def _collect(value: Any, out: list, only: type | None) -> None:
    """Append the leaves of ``value`` (those of class ``only``, when given) to ``out``.

    A list is built rather than a generator chained through every level: graph passes walk the
    args of every node many times, and nested generators cost a frame per level per leaf."""
    cls = value.__class__
    if cls in _ATOMS:
        if only is None or cls is only:
            out.append(value)
    elif (cls is tuple or cls is list) or (isinstance(value, (tuple, list)) and not isinstance(value, torch.Size)):
        for v in value:
            vcls = v.__class__
            if vcls in _ATOMS:
                if only is None or vcls is only:
                    out.append(v)
            else:
                _collect(v, out, only)
    elif isinstance(value, dict):
        for v in value.values():
            _collect(v, out, only)
    elif isinstance(value, slice):
        _collect((value.start, value.stop, value.step), out, only)
    elif only is None or isinstance(value, only):
        out.append(value)


class Node:
    """One value of a :class:`~tc_ir.Graph`.

    ``op`` is one of ``NODE_OPS``. For ``call`` nodes ``target`` is a torch function, an
    ``operator`` function, a ``torch.ops`` overload, a tensor method name (a ``str``), or a
    higher-order op such as :func:`tc_ir.ops.cond` whose args hold sub-graphs. For ``input``
    nodes it is ``None``; for ``param``/``constant`` nodes it is the name the value is stored
    under in ``graph.tensors``. ``users`` lists the nodes whose args read this one, and is kept
    current by the ``args``/``kwargs`` setters.
    """

    __slots__ = ("graph", "name", "op", "target", "spec", "meta", "users", "_args", "_kwargs", "_inputs")

    def __init__(self, graph: Graph, name: str, op: str, target: Any, args: tuple, kwargs: dict, spec: Any):
        self.graph, self.name, self.op, self.target, self.spec = graph, name, op, target, spec
        self.meta: dict[str, Any] = {}
        self.users: dict[Node, None] = {}
        self._args: tuple = ()
        self._kwargs: dict = {}
        self._inputs: tuple[Node, ...] = ()
        self._set_inputs(tuple(args), dict(kwargs))

    @property
    def args(self) -> tuple:
        return self._args

    @args.setter
    def args(self, value: tuple) -> None:
        self._set_inputs(tuple(value), self._kwargs)

    @property
    def kwargs(self) -> dict:
        return self._kwargs

    @kwargs.setter
    def kwargs(self, value: dict) -> None:
        self._set_inputs(self._args, dict(value))

    @property
    def inputs(self) -> list[Node]:
        """The nodes this node reads, in order, each once."""
        return list(self._inputs)

    def _set_inputs(self, args: tuple, kwargs: dict) -> None:
        # The inputs are found once per change of args, not on every read: passes read them
        # far more often than they change them.
        for old in self._inputs:
            old.users.pop(self, None)
        self._args, self._kwargs = args, kwargs
        self._inputs = tuple(dict.fromkeys(nodes_in((args, kwargs))))
        for new in self._inputs:
            new.users[self] = None

    def replace_input(self, old: Node, new: Any) -> None:
        swap = lambda v: new if v is old else v  # noqa: E731
        self._set_inputs(map_structure(self._args, swap), map_structure(self._kwargs, swap))

    def replace_all_uses_with(self, new: Any) -> list[Node]:
        """Point every user (and the graph's output) at ``new``; returns the users changed."""
        changed = list(self.users)
        for user in changed:
            user.replace_input(self, new)
        self.graph.replace_output(self, new)
        return changed

    @property
    def is_output(self) -> bool:
        return self in self.graph.output_nodes

    def __repr__(self) -> str:
        return f"%{self.name}"


# Classes that are leaves and never containers: tested by exact class, ahead of isinstance.
_ATOMS = frozenset({Node, int, float, bool, str, type(None), torch.dtype, torch.device})
