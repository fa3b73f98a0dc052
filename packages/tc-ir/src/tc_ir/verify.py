"""The verifier: every inconsistency a pass can leave behind, reported with the node's name."""

from __future__ import annotations

from typing import Any

from .graph import Graph, infer_spec
from .node import NODE_OPS, Node, leaves, nodes_in
from .spec import ScalarSpec, TensorSpec, spec_of
from .targets import TargetError, target_name
from .text import format_value


class VerifyError(ValueError):
    """A graph that breaks an IR invariant; the message names the graph, the node and the rule."""


def verify(graph: Graph, check_specs: bool = True) -> None:
    """Check ``graph`` and its sub-graphs; raise :class:`VerifyError` at the first problem.

    Checks: unique, well-formed names; every use defined earlier in the same graph (topological
    order); use-def links consistent; targets that resolve from their text name; held values
    present; specs of well-formed kinds, and (``check_specs``) equal to what the target gives
    on meta tensors where sizes are static.
    """
    names = [graph.name] + [g.name for g in graph.subgraphs()]
    if len(set(names)) != len(names):
        raise VerifyError(f"graph {graph.name}: sub-graph names are not unique: {names}")
    for g in [graph, *graph.subgraphs()]:
        _verify_one(g, check_specs)


def _fail(graph: Graph, node: Node | None, message: str) -> None:
    where = f"graph {graph.name}" + (f", node %{node.name}" if node is not None else "")
    raise VerifyError(f"{where}: {message}")


def _verify_one(graph: Graph, check_specs: bool) -> None:
    defined: set[Node] = set()
    seen_names: set[str] = set()
    for node in graph.nodes:
        _check_identity(graph, node, seen_names)
        for used in node.inputs:
            _check_use(graph, node, used, defined)
        for user in node.users:
            if user.graph is not graph or user not in user.graph.nodes or node not in user.inputs:
                _fail(graph, node, f"users lists %{user.name}, which does not read it")
        _check_node_kind(graph, node, check_specs)
        defined.add(node)
    for out in nodes_in(graph.outputs):
        if out not in defined:
            _fail(graph, out, "is returned but not defined in this graph")
    _check_printable(graph, None, graph.outputs)


def _check_identity(graph: Graph, node: Node, seen: set[str]) -> None:
    if node.graph is not graph:
        _fail(graph, node, "belongs to another graph")
    if not node.name.isidentifier():
        _fail(graph, node, "name is not an identifier")
    if node.name in seen:
        _fail(graph, node, "name is defined twice")
    seen.add(node.name)
    if node.op not in NODE_OPS:
        _fail(graph, node, f"unknown op {node.op!r}; expected one of {NODE_OPS}")


def _check_use(graph: Graph, node: Node, used: Node, defined: set[Node]) -> None:
    if used.graph is not graph:
        _fail(graph, node, f"reads %{used.name} of graph {used.graph.name}")
    if used not in defined:
        _fail(graph, node, f"reads %{used.name} before it is defined (not in topological order)")
    if node not in used.users:
        _fail(graph, node, f"reads %{used.name}, whose users do not list it")


def _check_node_kind(graph: Graph, node: Node, check_specs: bool) -> None:
    if not _spec_well_formed(node.spec):
        _fail(graph, node, f"spec {node.spec!r} is not a TensorSpec, ScalarSpec, tuple of them or None")
    if node.op in ("param", "constant"):
        if node.target not in graph.tensors:
            _fail(graph, node, f"holds {node.target!r}, which is not in graph.tensors")
        elif node.spec != spec_of(graph.tensors[node.target]):
            _fail(graph, node, f"spec {node.spec} differs from the held value's {spec_of(graph.tensors[node.target])}")
    if node.op != "call":
        return
    try:
        target_name(node.target)  # raises unless the target has an exact name (no import, no load)
    except TargetError as e:
        _fail(graph, node, f"target does not resolve: {e}")
    _check_printable(graph, node, (node.args, node.kwargs))
    if check_specs and isinstance(node.spec, (TensorSpec, tuple)):
        _check_spec(graph, node)


def _spec_well_formed(spec: Any) -> bool:
    if isinstance(spec, tuple):
        return all(_spec_well_formed(s) for s in spec)
    return spec is None or isinstance(spec, (TensorSpec, ScalarSpec))


def _check_printable(graph: Graph, node: Node | None, value: Any) -> None:
    for leaf in leaves(value):
        try:
            format_value(leaf)
        except TypeError as e:
            _fail(graph, node, str(e))


def _check_spec(graph: Graph, node: Node) -> None:
    inferred = infer_spec(node.target, node.args, node.kwargs)
    if inferred is None:
        return
    if _comparable(inferred) != _comparable(node.spec):
        _fail(graph, node, f"spec says {_show(node.spec)} but {target_name(node.target)} gives {_show(inferred)}")


def _comparable(spec: Any) -> Any:
    # requires_grad and strides depend on autograd state and eager's layout choices.
    if isinstance(spec, tuple):
        return tuple(_comparable(s) for s in spec)
    if isinstance(spec, TensorSpec):
        return spec.shape, spec.dtype
    return spec


def _show(spec: Any) -> str:
    if isinstance(spec, tuple):
        return "(" + ", ".join(_show(s) for s in spec) + ")"
    return str(spec)


__all__ = ["verify", "VerifyError"]
