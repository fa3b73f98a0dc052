"""Splitting a joint graph into a forward graph and a backward graph.

Both strategies choose a set of *saved* nodes: the forward graph computes the user's values plus
the saved nodes from the primal inputs; the backward graph computes the grads from the saved
nodes plus the tangents, recomputing anything else it needs.

``save_all`` saves every forward value the backward reads. ``min_cut`` solves a minimum s-t cut
over the data-flow graph (:mod:`tc_autograd.mincut`), as AOTAutograd does: each node is split
into an in/out pair joined by an edge costing its size in bytes, so the cut edges are the saved
nodes. Nodes whose op is expensive (matmul, convolution, reductions) or random are tied to the
source: if the backward needs them they are saved, never recomputed; cheap pointwise and view ops
are free to be recomputed in the backward instead of saved. The backward graph places each
recomputed node just before its first use (:func:`~tc_autograd.checkpoint.backward_order`).

Both honour checkpoint regions (:mod:`tc_autograd.checkpoint`): a node tagged
``meta["recompute"]`` that :func:`~tc_autograd.checkpoint.must_recompute` names is never saved
(``save_all`` treats it as backward work; ``min_cut`` neither ties it to the source nor lets the
cut cross it at a cost below ``UNSAVABLE``), so the backward recomputes it from the region's inputs;
``min_cut`` ties the regions' results read outside them to the source (saved when needed).
"""

from __future__ import annotations

import math
import operator
from typing import Any

import attrs
import sympy
import torch

import tc_ir

from .checkpoint import backward_order, classify, must_recompute
from .functionalize import is_view_op
from .mincut import FlowGraph

aten = torch.ops.aten

# Cheap to recompute even though not tagged pointwise (shape-only or data movement).
CHEAP_OPS = {aten._to_copy.default, aten.clone.default, aten.copy.default, aten.full.default,
             aten.zeros.default, aten.ones.default, aten.scalar_tensor.default, aten.zeros_like.default,
             aten.ones_like.default, aten.full_like.default, aten.empty_like.default, aten.where.self,
             aten.expand.default, aten.slice_scatter.default, aten.select_scatter.default}


# Added to the cost of saving a checkpointed value: more than any real set of activations.
UNSAVABLE = 2**62

SOURCE, SINK = 0, 1  # the flow graph's vertices; node i's pair is 2 + 2i (in) and 3 + 2i (out)


def is_recomputable(node: tc_ir.Node) -> bool:
    target = node.target
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload) or tc_ir.is_random(target):
        return False
    return target in CHEAP_OPS or torch.Tag.pointwise in target.tags or is_view_op(target)


def nbytes(node: tc_ir.Node) -> int | float:
    """Bytes kept alive by saving ``node``; infinite for values that cannot be saved (tuples)."""
    spec = node.spec
    if not isinstance(spec, tc_ir.TensorSpec):
        return math.inf
    if spec.is_static:
        return spec.numel * spec.dtype.itemsize
    hints = node.graph.meta.get("size_hints")  # a symbolic trace: weigh at the sizes traced
    if not hints:
        return math.inf
    return int(sympy.sympify(spec.numel).xreplace(hints)) * spec.dtype.itemsize


@attrs.define
class Partition:
    forward: tc_ir.Graph
    backward: tc_ir.Graph
    saved: list[tc_ir.Node]       # nodes of the joint graph, in the order the forward returns them

    def saved_bytes(self) -> int:
        return sum(nbytes(n) for n in self.saved)

    def saved_summary(self) -> str:
        lines = [f"saved for backward: {len(self.saved)} tensors, {self.saved_bytes()} bytes"]
        lines += [f"  %{n.name}: {n.spec}  {nbytes(n)} B" for n in self.saved]
        return "\n".join(lines)


def _ancestors(nodes: list[tc_ir.Node], stop: set = frozenset()) -> set[tc_ir.Node]:
    """``nodes`` and what they read, transitively, not looking past ``stop`` (walked through the
    nodes' own links: a networkx copy of the graph cost more to build than the walk)."""
    found, todo = set(), list(nodes)
    while todo:
        node = todo.pop()
        if node in found:
            continue
        found.add(node)
        if node not in stop:
            todo.extend(node.inputs)
    return found


def _descendants(nodes: list[tc_ir.Node]) -> set[tc_ir.Node]:
    """What reads ``nodes``, transitively (``nodes`` not included unless reached)."""
    found: set[tc_ir.Node] = set()
    todo = [u for n in nodes for u in n.users]
    while todo:
        node = todo.pop()
        if node not in found:
            found.add(node)
            todo.extend(node.users)
    return found


def _roles(joint: tc_ir.Graph) -> tuple[list[tc_ir.Node], list[tc_ir.Node]]:
    primals = [n for n in joint.inputs if n.meta.get("role") == "primal"]
    tangents = [n for n in joint.inputs if n.meta.get("role") == "tangent"]
    return primals, tangents


def save_all(joint: tc_ir.Graph) -> list[tc_ir.Node]:
    """Save every value the forward computes that the backward reads."""
    values, grads = joint.outputs
    primals, _ = _roles(joint)
    forward = _ancestors(tc_ir.nodes_in(values)) | set(primals)
    # Results of multi-output ops computed in the forward are forward values too (a tuple cannot be saved).
    forward |= {u for n in list(forward) for u in n.users if u.target is operator.getitem}
    forward -= must_recompute(joint)  # checkpointed: the backward recomputes them from what is saved
    backward = _ancestors(tc_ir.nodes_in(grads), stop=forward) - forward
    read = set(tc_ir.nodes_in(grads)) | {n for n in backward for n in n.inputs}
    return [n for n in joint.nodes if n in forward and n in read and n.op not in ("param", "constant")]


def min_cut(joint: tc_ir.Graph) -> list[tc_ir.Node]:
    """Save the fewest bytes that let the backward recompute the rest."""
    values, grads = joint.outputs
    primals, tangents = _roles(joint)
    forward = _ancestors(tc_ir.nodes_in(values))
    needs_tangent = set(tangents) | _descendants(tangents)
    banned, boundary = classify(joint)
    index = {node: 2 + 2 * i for i, node in enumerate(joint.nodes)}  # its "in" vertex; "out" is + 1
    flow = FlowGraph(2 + 2 * len(index))
    for node, v_in in index.items():
        if node in needs_tangent:
            flow.add_edge(v_in, SINK)
        if node in primals or node in boundary or (node in forward and node.op == "call"
                                                   and not is_recomputable(node) and node not in banned):
            flow.add_edge(SOURCE, v_in)
        # One byte more for non-inputs: on a tie, save the input (alive anyway) over a copy of it.
        weight = nbytes(node) + (0 if node.op == "input" else 1)
        if node in banned and weight != math.inf:
            # Checkpointed: saved only where nothing else can be (a size input feeding the region
            # in a symbolic trace cannot be saved), so the cut falls on the region's inputs.
            weight += UNSAVABLE
        flow.add_edge(v_in, v_in + 1, weight)
        for user in node.users:
            flow.add_edge(v_in + 1, index[user])
    for grad in tc_ir.nodes_in(grads):
        flow.add_edge(index[grad] + 1, SINK)
    sink_side = flow.sink_side(SOURCE, SINK)
    return [n for n, v_in in index.items() if v_in not in sink_side and v_in + 1 in sink_side]


STRATEGIES = {"min_cut": min_cut, "save_all": save_all}


def partition(joint: tc_ir.Graph, strategy: str = "min_cut") -> Partition:
    """Split ``joint`` (outputs ``(values, grads)``) into forward and backward graphs."""
    if strategy not in STRATEGIES:
        raise ValueError(f"tc_autograd: partition must be one of {sorted(STRATEGIES)}, got {strategy!r}")
    saved = STRATEGIES[strategy](joint)
    values, grads = joint.outputs
    primals, tangents = _roles(joint)
    forward = subgraph(joint, f"{joint.name}_forward", primals, tuple(values) + tuple(saved))
    # each recomputed node goes just before its first use, not all at the backward's start
    backward = subgraph(joint, f"{joint.name}_backward", saved + tangents, grads, backward_order(joint, saved))
    return Partition(tc_ir.dce(forward, inplace=True), tc_ir.dce(backward, inplace=True), saved)


def subgraph(graph: tc_ir.Graph, name: str, inputs: list[tc_ir.Node], outputs: Any,
             order: list[tc_ir.Node] | None = None) -> tc_ir.Graph:
    """A graph taking ``inputs`` (in order) and computing ``outputs`` from them with ``graph``'s
    nodes, in ``graph``'s order or in ``order`` (a topological order of its nodes)."""
    needed = _ancestors(tc_ir.nodes_in(outputs), stop=set(inputs))
    new = tc_ir.Graph(name)
    mapping: dict[tc_ir.Node, tc_ir.Node] = {}
    for node in inputs:
        mapping[node] = new.input(node.name, node.spec)
        mapping[node].meta.update(node.meta)
    for node in order or graph.nodes:
        if node not in needed or node in mapping:
            continue
        if node.op == "input":
            raise ValueError(f"tc_autograd: {name} needs %{node.name}, which is not among its inputs")
        if node.op in ("param", "constant"):
            mapping[node] = new._hold(node.target, node.op, graph.tensors[node.target])
            continue
        swap = lambda v: mapping.get(v, v) if isinstance(v, tc_ir.Node) else v  # noqa: E731
        args, kwargs = tc_ir.map_structure((node.args, node.kwargs), swap)
        mapping[node] = new.call(node.target, *args, kwargs=kwargs, spec=node.spec, name=node.name)
    new.output(tc_ir.map_structure(outputs, lambda v: mapping[v] if isinstance(v, tc_ir.Node) else v))
    return new
