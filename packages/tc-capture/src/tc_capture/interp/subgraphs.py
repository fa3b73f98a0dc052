"""Sub-graphs of higher-order ops (``cond`` branches, an ``autograd.Function``'s forward and
backward): a Python callable traced into a ``tc_ir.Graph`` of its own.

The callable may read tensors from outside its operands — a closed-over activation, a parameter
or a global read for the first time inside it. Those are *lifted*: each becomes an input of the
sub-graph after the declared operands, and the caller passes the outer value in that position
(``Sub.free``). A tensor first read inside the sub-graph is a graph input made while the sub-graph
was current; it is moved to the enclosing graph (one level per nesting; the frame's root graph
sorts its inputs by ``session.inputs`` order when the region is built).

A sub-graph runs zero or one times per call (a branch) or at a time of autograd's choosing (a
backward), so effects the interpreter would replay after the region — attribute, global and
container writes, in-place tensor writes — are refused: a break, never a replay at the wrong time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tc_ir

from .base import Unsupported
from .variables import TensorV, V


@dataclass
class Sub:
    graph: tc_ir.Graph
    result: V  # what the callable returned, as values of ``graph``
    free: list  # outer nodes read by the sub-graph: its inputs after the declared ones, in order


def trace_sub(f, name: str, declared: list[TensorV], body: Callable[[list[TensorV]], V]) -> Sub:
    """Trace ``body(inner)`` into a new graph whose first inputs stand for ``declared``."""
    session = f.session
    outer, n_inputs, n_effects = session.graph, len(session.inputs), _effects(session)
    sub = tc_ir.Graph(name)
    inner = [TensorV(sub.input(f"arg{i}", t.node.spec), t.fake) for i, t in enumerate(declared)]
    session.graph = sub
    try:
        result = body(inner)
    finally:
        session.graph = outer
    if _effects(session) != n_effects:
        raise Unsupported(f"{name} has side effects (attribute, global or container writes)")
    _refuse_in_place(sub, name)
    free = _move_new_inputs(session, sub, outer, n_inputs) + _foreign_reads(sub)
    return Sub(sub, result, _lift(sub, len(declared), free))


def lift_to(sub: Sub, free: list) -> None:
    """Make ``sub``'s lifted inputs exactly ``free`` (a superset of ``sub.free``, in its order):
    the branches of one ``cond`` take the same operands."""
    have = dict(zip(sub.free, sub.graph.inputs[len(sub.graph.inputs) - len(sub.free):]))
    declared = sub.graph.inputs[:len(sub.graph.inputs) - len(sub.free)]
    lifted = [have[n] if n in have else sub.graph.input(f"free_{n.name}", n.spec) for n in free]
    _order_inputs(sub.graph, declared + lifted)
    sub.free = list(free)


def _effects(session) -> tuple:
    return (len(session.side_effects), len(session.mutated), len(session.global_writes), len(session.attr_writes))


def _refuse_in_place(sub: tc_ir.Graph, name: str) -> None:
    for node in sub.calls:
        target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        if target.endswith("_") and not target.endswith("__") and target != "_":
            raise Unsupported(f"{name} writes to a tensor in place ({target})")
        if "out" in node.kwargs:
            raise Unsupported(f"{name} writes to a tensor in place (out=)")
        if target == "setitem" and node.args and getattr(node.args[0], "op", None) == "input":
            raise Unsupported(f"{name} writes to one of its inputs (setitem)")


def _move_new_inputs(session, sub: tc_ir.Graph, outer: tc_ir.Graph, first: int) -> list:
    """Graph inputs the session made while ``sub`` was current become inputs of ``outer``."""
    moved = []
    for i in range(first, len(session.inputs)):
        node, source, value = session.inputs[i]
        if node.graph is not sub:
            continue
        up = outer.input(node.name, node.spec)
        up.meta.update(node.meta)
        node.meta.pop("source", None)
        session.inputs[i] = (up, source, value)
        session.real_inputs[id(up)] = session.real_inputs.pop(id(node), value)
        known = session.by_source.get(source.expr)
        if isinstance(known, TensorV) and known.node is node:
            known.node = up
        moved.append((node, up))
    return moved


def _foreign_reads(sub: tc_ir.Graph) -> list:
    found: dict = {}
    for node in sub.calls:
        for n in node.inputs:
            if n.graph is not sub:
                found.setdefault(n, None)
    return [(None, n) for n in found]


def _lift(sub: tc_ir.Graph, n_declared: int, pairs: list) -> list:
    """Each (inner input or None, outer node) becomes an input of ``sub`` after the declared ones."""
    free, lifted = [], []
    for inner, outer_node in pairs:
        if outer_node in free:
            continue
        if inner is None:
            inner = sub.input(f"free_{outer_node.name}", outer_node.spec)
            for user in [u for u in outer_node.users if u.graph is sub]:
                user.replace_input(outer_node, inner)
        free.append(outer_node)
        lifted.append(inner)
    _order_inputs(sub, sub.inputs[:n_declared] + lifted)
    return free


def _order_inputs(sub: tc_ir.Graph, inputs: list) -> None:
    sub.nodes[:] = inputs + [n for n in sub.nodes if n.op != "input"]
