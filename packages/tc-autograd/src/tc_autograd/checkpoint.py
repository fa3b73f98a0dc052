"""Activation checkpointing: regions whose forward values the backward recomputes, never saves.

A torch-level node carrying ``meta["recompute"] = region`` (capture tags every op traced inside a
``torch.utils.checkpoint.checkpoint(fn, ..., use_reentrant=False)`` call this way; a hand-built
graph may do the same) belongs to a checkpoint region. While tracing, :func:`bind_recompute` wraps
each tagged node's target so that every ATen node recorded while it runs carries the same tag in
the joint graph. The partitioner then asks :func:`must_recompute` which joint nodes it may not
save: the cut falls on the region's inputs, and the backward graph recomputes the region from
them, as eager's checkpoint does.

Two kinds of tagged nodes stay savable:

* **Random ops** (``bernoulli``, ``native_dropout``, ``rand_like``...) and the items of their
  results: the forward's draw is saved (a dropout mask), so the recomputed region reads the very
  values the forward used. Eager's checkpoint gets the same values by restoring the RNG state
  before its recompute; tc does not thread seeds into its graphs, so it saves the draw instead
  (a boolean mask for dropout, a quarter of the activation it would otherwise keep).
* **Boundary values**: a region's results read by forward ops outside the region (the next
  layer, another region, the user's outputs). They are saved when the backward needs anything
  computed from them, as eager's checkpoint keeps each region's inputs: so each region is
  recomputed from its own inputs, and the backward graph places each recomputed node just
  before its first use (:func:`backward_order`), so one region's activations are alive at a time.
"""

from __future__ import annotations

import operator
from typing import Any

import tc_ir

from .trace import Recorder

TAG = "recompute"


def bind_recompute(graph: tc_ir.Graph, rec: Recorder) -> tc_ir.Graph:
    """``graph``, or a copy whose tagged nodes tag the ATen nodes their interpretation records."""
    if not any(TAG in n.meta for n in graph.calls):
        return graph
    graph = graph.copy()
    for node in graph.calls:
        if TAG in node.meta:
            node.target = InRegion(rec, node.target, node.meta[TAG])
    return graph


class InRegion:
    """A node's target, run so that the nodes the recorder adds meanwhile get the region's tag."""

    def __init__(self, rec: Recorder, target: Any, region: Any):
        self.rec, self.target, self.region = rec, target, region

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        graph = self.rec.graph
        start = len(graph.nodes)  # the recorder only appends while tracing
        try:
            if isinstance(self.target, str):
                return getattr(args[0], self.target)(*args[1:], **kwargs)
            return self.target(*args, **kwargs)
        finally:
            for node in graph.nodes[start:]:
                if node.op == "call":
                    node.meta[TAG] = self.region

    def __repr__(self) -> str:
        return f"{self.target!r} (checkpoint region {self.region})"


def must_recompute(joint: tc_ir.Graph) -> set[tc_ir.Node]:
    """The joint graph's checkpointed nodes the backward must recompute rather than read saved."""
    return classify(joint)[0]


def classify(joint: tc_ir.Graph) -> tuple[set[tc_ir.Node], set[tc_ir.Node]]:
    """``(recompute, boundary)``: checkpointed nodes never saved, and the regions' results read
    by forward ops outside their region (or returned), which are saved when the backward needs
    them, as eager keeps a region's inputs: each region is then recomputed from its own inputs,
    just before its own backward, never from the start of the network."""
    values = set(tc_ir.nodes_in(joint.outputs[0]))
    forward = recorded_in_forward(joint)
    banned: set[tc_ir.Node] = set()
    boundary: set[tc_ir.Node] = set()
    for node in joint.nodes:  # in order: a getitem sees whether its tuple was banned
        region = node.meta.get(TAG)
        if region is None or node.op != "call":
            continue
        if tc_ir.is_random(node.target):
            continue  # the forward's draw is saved: the recompute must read the same values
        if node.target is operator.getitem and node.args[0] not in banned:
            continue  # an item of a saved random op's result (the dropout mask)
        if node in values or any(u in forward and u.meta.get(TAG) != region for u in node.users):
            boundary.add(node)
        else:
            banned.add(node)
    return banned, boundary


def recorded_in_forward(joint: tc_ir.Graph) -> set[tc_ir.Node]:
    """Nodes the forward's interpretation recorded: the joint trace adds the tangent inputs once
    the forward is done, and every backward op after them (clean-ups keep the order)."""
    forward = set()
    for node in joint.nodes:
        if node.meta.get("role") == "tangent":
            break
        forward.add(node)
    return forward


def backward_order(joint: tc_ir.Graph, saved: list[tc_ir.Node]) -> list[tc_ir.Node]:
    """The joint graph's nodes with each forward node the backward recomputes (not ``saved``)
    moved to just before its first backward user (forward nodes nothing in the backward reads
    go last): the backward graph then recomputes a region when its gradients are due, not all
    regions at its start."""
    placed: set[tc_ir.Node] = set(saved)  # the backward's inputs
    forward = recorded_in_forward(joint) - placed
    position = {n: i for i, n in enumerate(joint.nodes)}
    order: list[tc_ir.Node] = list(saved)
    for node in joint.nodes:
        if node in forward or node in placed:
            continue
        pulled, todo = set(), [i for i in node.inputs if i in forward and i not in placed]
        while todo:
            item = todo.pop()
            if item not in pulled:
                pulled.add(item)
                todo.extend(i for i in item.inputs if i in forward and i not in placed)
        order.extend(sorted(pulled, key=position.__getitem__))
        placed |= pulled
        order.append(node)
    return order + [n for n in joint.nodes if n in forward and n not in placed]
