"""Pass utilities. Each pass is a pure function: it returns a new graph and leaves its input alone."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from .aliasing import escaping
from .graph import Graph
from .node import Node, map_structure
from .targets import TargetError, is_pure, target_name
from .text import format_value

if TYPE_CHECKING:
    import networkx as nx


def node_is_pure(node: Node) -> bool:
    """A call that may be removed when unused and merged with an identical call."""
    if node.op != "call" or not is_pure(node.target):
        return False
    subgraphs = [a for a in node.args if isinstance(a, Graph)]
    return all(node_is_pure(inner) for g in subgraphs for inner in g.calls)


def dce(graph: Graph, *, inplace: bool = False) -> Graph:
    """Remove pure calls whose results nothing reads (held values too, when unread).

    ``inplace=True`` changes ``graph`` itself and returns it: for a pipeline of passes that
    owns its graph (one copy for the pipeline, not one per pass)."""
    if not inplace:
        graph = graph.copy()
    for node in reversed(graph.nodes):
        unused = not node.users and node not in graph.output_nodes
        if unused and (node_is_pure(node) or node.op in ("param", "constant")):
            graph.erase(node)
    return graph


def cse(graph: Graph, *, inplace: bool = False) -> Graph:
    """Merge pure calls of the same target on the same args into the first of them
    (``inplace`` as for :func:`dce`).

    Two calls whose memory outputs may share (:func:`~tc_ir.aliasing.escaping`) are not merged:
    eager returns them as distinct tensors, and merged, an in-place write to one output (a
    gradient accumulated into ``.grad``, ``clip_grad_norm_``) would change the other."""
    if not inplace:
        graph = graph.copy()
    outputs = escaping(graph.output_nodes)
    seen: dict[str, Node] = {}
    for node in list(graph.nodes):
        if not node_is_pure(node):
            continue
        try:
            name = target_name(node.target)
        except TargetError:  # no exact name: it cannot be told apart from another target, so keep it
            continue
        key = f"{name}({format_value(node.args)}, {format_value(node.kwargs)})"
        if key in seen:
            kept = seen[key]
            if node in outputs and kept in outputs:
                continue
            node.replace_all_uses_with(kept)
            graph.erase(node)
            if node in outputs:  # the kept call (and what it views) is an output's memory now
                outputs |= escaping([kept])
        else:
            seen[key] = node
    return graph


def topo_sort(graph: Graph) -> Graph:
    """Reorder nodes so every use follows its definition, keeping the given order where legal."""
    graph = graph.copy()
    position = {node: i for i, node in enumerate(graph.nodes)}
    waiting = {node: len(node.inputs) for node in graph.nodes}
    ready = [(position[n], n.name) for n, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    by_name = {n.name: n for n in graph.nodes}
    order: list[Node] = []
    while ready:
        node = by_name[heapq.heappop(ready)[1]]
        order.append(node)
        for user in node.users:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (position[user], user.name))
    if len(order) != len(graph.nodes):
        stuck = sorted(n.name for n, count in waiting.items() if count > 0)
        raise ValueError(f"graph {graph.name} has a cycle through {stuck}")
    graph.nodes[:] = order
    return graph


def dependency_graph(graph: Graph) -> nx.DiGraph:
    """The data-flow DAG as networkx: one vertex per node, an edge from each input to its user."""
    # imported here: networkx costs ~0.2 s of CPU and only a compile needs it (warm starts skip it)
    import networkx as nx

    dag = nx.DiGraph()
    dag.add_nodes_from(graph.nodes)
    dag.add_edges_from((used, node) for node in graph.nodes for used in node.inputs)
    return dag


def extract(graph: Graph, nodes: Iterable[Node], name: str = "extracted") -> Graph:
    """A new graph computing ``nodes`` (kept in graph order).

    Values read from outside the set become inputs (named as in ``graph``); values of the set
    read outside it, or returned by ``graph``, become the outputs, as a tuple. The names of the
    original nodes are in ``meta["inputs_from"]`` and ``meta["outputs_to"]``.
    """
    chosen = set(nodes)
    inside = [n for n in graph.nodes if n in chosen]
    new = Graph(name)
    mapping: dict[Node, Node] = {}

    def remap(value: Any) -> Any:
        if isinstance(value, Node) and value not in mapping:
            mapping[value] = new.input(value.name, value.spec)
        return mapping.get(value, value) if isinstance(value, Node) else value

    for node in inside:
        if node.op in ("param", "constant"):
            mapping[node] = new._hold(node.target, node.op, graph.tensors[node.target])
            continue
        if node.op == "input":
            remap(node)
            continue
        args, kwargs = map_structure((node.args, node.kwargs), remap)
        mapping[node] = new._add(node.name, "call", node.target, args, kwargs, node.spec)
    escaping = [n for n in inside if n in graph.output_nodes or any(u not in chosen for u in n.users)]
    new.output(tuple(mapping[n] for n in escaping))
    new.meta["inputs_from"] = [n.name for n in new.inputs]
    new.meta["outputs_to"] = [n.name for n in escaping]
    return new


def lift_held(graph: Graph) -> tuple[Graph, list[Any]]:
    """Turn held tensors (``param``/``constant`` nodes) into inputs after the existing ones.

    Returns the new graph and the held values, in the order of the new inputs, so a caller
    runs it as ``fn(*inputs, *values)``. Lifted inputs carry ``meta["static"] = True`` (their
    storage does not change between calls) and ``meta["held"]`` (the key they were held under).
    """
    graph = graph.copy()
    held = [n for n in graph.nodes if n.op in ("param", "constant") and isinstance(graph.tensors[n.target], torch.Tensor)]
    inputs = graph.inputs
    after = graph.nodes.index(inputs[-1]) + 1 if inputs else 0
    values = []
    for node in held:
        graph._insert_at = after
        lifted = graph.input(node.name + "_in", node.spec)
        graph._insert_at = None
        after += 1
        lifted.meta.update(static=True, held=node.target)
        values.append(graph.tensors[node.target])
        node.replace_all_uses_with(lifted)
        graph.erase(node)
    return graph, values
