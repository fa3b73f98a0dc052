"""Scheduling and fusion: computed buffers grouped into kernels over the dependency DAG.

A kernel iterates ``x`` (kept dims) by ``r`` (reduced dims). A buffer joins a kernel when its
iteration space fits (a pointwise buffer over ``x + r`` runs inside the reduction loop, one over
``x`` after it), every read of a buffer of that kernel is of the element the same iteration
wrote (so the value is used directly, never re-read from memory) or of a pointwise buffer's
element at the start of the row (recomputed there from its inputs), and the joint DAG stays
acyclic. Buffers read only inside their kernel are never stored.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

import attrs
import sympy
import torch

import tc_ir

from . import kir
from .graph_lowering import LoweredGraph
from .ir import BufferValue, ComputedBuffer, ExternCall
from .kir import GroupOp, Ops, UOp
from .symbolic import size_symbols

log = tc_ir.logs.get_logger("fusion")


def squeeze(sizes) -> tuple:
    return tuple(s for s in sizes if s != 1)


@attrs.define(eq=False, repr=False)
class Group:
    """Buffers that become one kernel."""

    id: int
    members: list
    x: tuple
    r: tuple
    device: Any
    closed: bool = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}: {len(self.members)} buffers, x={list(self.x)} r={list(self.r)}>"

    def key_of(self, buf: ComputedBuffer) -> tuple | None:
        """(x, r) of this group with ``buf`` added, or None when it does not fit."""
        if buf.device != self.device:
            return None
        if buf.is_reduction:
            bx, br = squeeze(buf.shape), squeeze(buf.rranges)
            if self.r:
                return (self.x, self.r) if (bx, br) == (self.x, self.r) else None
            pointwise_only = all(not m.is_reduction for m in self.members)
            return (bx, br) if pointwise_only and self.x == bx + br and br else None
        s = squeeze(buf.shape)
        if self.r:
            return (self.x, self.r) if s in (self.x + self.r, self.x) else None
        return (self.x, self.r) if s == self.x else None


class Dag:
    """The steps' dependency DAG: an edge from each step to the steps that read what it wrote.
    Plain dicts: networkx cost ~0.16 s of CPU to import in each compiling process, and more in
    its ``has_path`` per fusion candidate."""

    def __init__(self) -> None:
        self.users: dict[Any, dict[Any, None]] = {}  # step -> the steps after it (an ordered set)

    def add_node(self, step: Any) -> None:
        self.users.setdefault(step, {})

    def add_edge(self, step: Any, user: Any) -> None:
        self.add_node(user)
        self.users.setdefault(step, {})[user] = None

    def add_edges_from(self, edges: Iterable[tuple[Any, Any]]) -> None:
        for step, user in edges:
            self.add_edge(step, user)

    def has_path(self, source: Any, target: Any) -> bool:
        seen, todo = {source}, [source]
        while todo:
            step = todo.pop()
            if step is target:
                return True
            for user in self.users[step]:
                if user not in seen:
                    seen.add(user)
                    todo.append(user)
        return False

    def topological_order(self, first: list) -> list:
        """Every step after those it reads, the earliest in ``first`` (all the steps) whenever
        several are ready: Kahn's algorithm with a heap of positions in ``first``."""
        position = {step: i for i, step in enumerate(first)}
        waiting = dict.fromkeys(self.users, 0)  # step -> how many steps before it are not placed
        for users in self.users.values():
            for user in users:
                waiting[user] += 1
        ready = [position[step] for step, n in waiting.items() if n == 0]
        heapq.heapify(ready)
        placed = []
        while ready:
            step = first[heapq.heappop(ready)]
            placed.append(step)
            for user in self.users[step]:
                waiting[user] -= 1
                if waiting[user] == 0:
                    heapq.heappush(ready, position[user])
        if len(placed) != len(self.users):
            raise AssertionError("tc_inductor: the schedule's dependency graph has a cycle")
        return placed


@attrs.define
class Schedule:
    steps: list  # Group | ExternCall in run order
    stored: set  # buffer names written to memory
    log: list  # fusion decisions, as text


def reads_of(step: Any) -> set[str]:
    return _reads_and_random(step)[0]


def _reads_and_random(step: Any) -> tuple[set[str], bool]:
    """The buffers ``step`` reads, and whether it draws random numbers."""
    if isinstance(step, ExternCall):
        return {v.name for v in tc_ir.leaves((step.args, step.kwargs)) if isinstance(v, BufferValue)}, False
    ops = step.body(kir.xvars(len(step.shape)), kir.rvars(len(step.rranges))).toposort()
    return {u.arg[0] for u in ops if u.op is Ops.LOAD}, any(u.op in GroupOp.Random for u in ops)


def dead_code(lowered: LoweredGraph) -> list:
    """Drop computed buffers nothing reads (a declined lowering can leave some behind)."""
    live = set(lowered.output_buffers)
    kept = []
    for step in reversed(lowered.steps):
        if isinstance(step, ComputedBuffer) and step.name not in live:
            continue
        live |= reads_of(step)
        if isinstance(step, ExternCall):
            live |= _extern_output_names(step)
        kept.append(step)
    return kept[::-1]


def _extern_output_names(step: ExternCall) -> set[str]:
    return {v.name for v in tc_ir.leaves(step.outputs) if isinstance(v, BufferValue)}


def schedule(lowered: LoweredGraph, options: dict) -> Schedule:
    steps = dead_code(lowered)
    dag = Dag()
    writer: dict[str, Any] = {}  # buffer name -> Group | ExternCall
    reads: dict[str, set[str]] = {}
    order: list = []
    decisions: list[str] = []
    randoms: set[str] = set()  # buffers that draw random numbers
    fuse = options.get("fusion", True)
    for step in steps:
        step_reads, random = _reads_and_random(step)
        producers = {writer[b] for b in step_reads if b in writer}
        if isinstance(step, ExternCall):
            _add_extern(dag, step, producers, order, writer)
            reads[step.name] = step_reads
            continue
        reads[step.name] = step_reads
        if random:
            randoms.add(step.name)
        group = _choose_group(dag, step, producers, order, decisions, reads, writer, randoms) if fuse else None
        if group is None:
            group = Group(len(order), [], squeeze(step.shape) if not step.is_reduction else squeeze(step.shape),
                          squeeze(step.rranges) if step.is_reduction else (), step.device)
            order.append(group)
            dag.add_node(group)
        group.members.append(step)
        writer[step.name] = group
        dag.add_edges_from((p, group) for p in producers if p is not group)
    stored = _stored_buffers(order, reads, lowered.output_buffers)
    run_order = dag.topological_order(order)
    for line in decisions:
        log.debug("%s", line)
    return Schedule(run_order, stored, decisions)


def _add_extern(dag: Dag, step: ExternCall, producers: set, order: list, writer: dict) -> None:
    dag.add_node(step)
    dag.add_edges_from((p, step) for p in producers)
    if step.mutates:  # a barrier: everything before runs first, nothing fuses across it
        dag.add_edges_from((p, step) for p in order)
        for p in order:
            if isinstance(p, Group):
                p.closed = True
        step.barrier_after = True
    if any(getattr(p, "barrier_after", False) for p in order):
        last = [p for p in order if getattr(p, "barrier_after", False)][-1]
        if last is not step:
            dag.add_edge(last, step)
    order.append(step)
    for name in _extern_output_names(step):
        writer[name] = step


def _choose_group(dag: Dag, buf: ComputedBuffer, producers: set, order: list, decisions: list,
                  reads: dict, writer: dict, randoms: frozenset | set = frozenset()) -> Group | None:
    """The open kernel ``buf`` joins: one that computes its inputs, else (horizontally) one of
    its shape; one drawing random numbers only while the kernel draws fewer than
    ``MAX_HORIZONTAL_DRAWS``."""
    barrier = [p for p in order if getattr(p, "barrier_after", False)]
    if barrier:
        producers = producers | {barrier[-1]}
    candidates = [g for g in reversed(order) if isinstance(g, Group) and not g.closed and (
        g in producers or buf.name not in randoms
        or sum(m.name in randoms for m in g.members) < MAX_HORIZONTAL_DRAWS)]
    candidates.sort(key=lambda g: g not in producers)  # consumers of a kernel first, then horizontal
    for group in candidates:
        key = group.key_of(buf)
        if key is None:
            continue
        why = _illegal(dag, group, buf, producers, key) or _unprofitable(group, buf, producers, reads, writer)
        if why:
            decisions.append(f"not fusing {buf.name} into kernel {group.id}: {why}")
            continue
        kind = "consumer" if group in producers else "horizontal"
        decisions.append(f"fusing {buf.name} into kernel {group.id} ({kind}, x={list(key[0])} r={list(key[1])})")
        if not group.r and key[1]:
            group.x, group.r = key
        return group
    if barrier:
        dag.add_node(barrier[-1])
    return None


def _illegal(dag: Dag, group: Group, buf: ComputedBuffer, producers: set, key: tuple) -> str | None:
    for p in producers:
        if p is not group and dag.has_path(group, p):
            return f"would create a cycle through {getattr(p, 'name', None) or f'kernel {p.id}'}"
    members = {m.name: m for m in group.members}
    x, r = key
    return _unservable(node_value(buf, x, r), members, x, r, MAX_RECOMPUTE_DEPTH)


# How deep a read of one member at another element may recompute members that it reads there.
MAX_RECOMPUTE_DEPTH = 4


def _unservable(value: UOp, members: dict, x: tuple, r: tuple, depth: int) -> str | None:
    """Why ``value`` cannot be computed in a kernel of ``members`` over (x, r), or None: each
    read of a member must be of the element the same iteration computes, or of a pointwise
    member's element at this row's start, which is recomputed there (_served)."""
    for u in value.toposort():
        if u.op is not Ops.LOAD or u.arg[0] not in members:
            continue
        served = _served(u, members[u.arg[0]], x, r)
        if served is None or (served != () and depth == 0):
            return f"reads {u.arg[0]} at another element than the one this iteration computes"
        if served != ():
            why = _unservable(members[u.arg[0]].body(served, ()), members, x, r, depth - 1)
            if why:
                return why
    return None


def _served(load: UOp, m: ComputedBuffer, x: tuple, r: tuple) -> tuple | None:
    """How a kernel over (x, r) serves ``load``, a read of its member ``m``: ``()`` when it reads
    the element the iteration computes (the value itself); the index of the element to
    recompute when it reads the element with every reduction variable at 0 (a row's first
    value, by which moments are shifted: lowering/reductions.py), and ``m`` is pointwise;
    else None (the member is stored and read by a later kernel)."""
    if load.src:
        return None
    index = member_index(m, x, r)[0]
    if m.store_index(index) == load.arg[1]:
        return ()
    if m.is_reduction or not r:
        return None
    first = dict.fromkeys(kir.rvars(len(r)), sympy.Integer(0))
    start = tuple(sympy.sympify(i).subs(first) for i in index)
    return start if start != index and sympy.expand(m.store_index(start) - load.arg[1]) == 0 else None


def recomputed(group: Group) -> set[str]:
    """The members that ``group``'s kernel recomputes at other elements than their own
    (_served). Their inputs are read there too, at elements other iterations (other GPU threads)
    may already have written: none of them may be stored over one of its inputs in place."""
    found: set[str] = set()
    if not group.r:  # (no row to start: nothing is recomputed)
        return found
    members = {m.name: m for m in group.members}

    def visit(value: UOp) -> None:
        for u in value.toposort():
            if u.op is Ops.LOAD and u.arg[0] in members:
                served = _served(u, members[u.arg[0]], group.x, group.r)
                if served and u.arg[0] not in found:  # (an index: recomputed there)
                    found.add(u.arg[0])
                    visit(members[u.arg[0]].body(served, ()))

    for m in group.members:
        visit(node_value(m, group.x, group.r))
    return found


# Random draws a kernel takes from horizontal fusion. A dropout mask reads nothing but its seed,
# so every mask of a forward could join one kernel: GPT-2's and BERT's training forwards on the
# H100 drew 24 masks in their first kernel, whose 24 Philox generators took Triton 11-13 s to
# compile (the whole cold compile waited on it), each mask made long before its layer used it.
MAX_HORIZONTAL_DRAWS = 4

# Buffer arguments of one fused kernel: an optimizer's same-shape parameters (74 of GPT-2's are
# [768]) would otherwise make one kernel of ~600 pointers (CUDA passes kernel arguments in 4 KB);
# combo.py launches the pieces together anyway.
MAX_KERNEL_BUFFERS = 256


def _unprofitable(group: Group, buf: ComputedBuffer, producers: set, reads: dict, writer: dict) -> str | None:
    """Horizontal fusion of reductions pays only when they read a buffer in common, or wait for
    the same kernels (the final kernels of split reductions whose partials one kernel wrote).
    Otherwise the kernel saves a launch but waits for its last member's inputs, and in a
    backward pass it gathers every layer's weight-gradient reductions into one long kernel at
    the end."""
    if _buffers(group, buf, reads) >= MAX_KERNEL_BUFFERS:
        return f"a kernel of over {MAX_KERNEL_BUFFERS} buffers"
    if group in producers or not (buf.is_reduction or group.r):
        return None
    mine = reads[buf.name]
    if not mine or any(mine & reads[m.name] for m in group.members):  # (a fill waits for nothing)
        return None
    theirs = set().union(*(reads[m.name] for m in group.members))
    if producers and producers == _writers(theirs, writer):
        return None
    return "independent reductions that read no buffer in common"


def _writers(names: set, writer: dict) -> set:
    """The steps that write ``names`` (graph inputs and constants have none: ready at the start)."""
    return {writer[n] for n in names if n in writer}


def _buffers(group: Group, buf: ComputedBuffer, reads: dict) -> int:
    """How many buffers ``group`` with ``buf`` added reads or writes (counted exactly only
    when the sum of the parts could reach the limit)."""
    bound = len(reads[buf.name]) + sum(len(reads[m.name]) + 1 for m in group.members)
    if bound < MAX_KERNEL_BUFFERS:
        return bound
    return len(set().union(reads[buf.name], *(reads[m.name] | {m.name} for m in group.members)))


def _is_outer(m: ComputedBuffer, x: tuple, r: tuple) -> bool:
    return bool(r) and not m.is_reduction and squeeze(m.shape) == x


def member_index(m: ComputedBuffer, x: tuple, r: tuple) -> tuple[tuple, tuple]:
    """The (index, rindex) of member ``m`` in terms of the kernel's x0.. and r0.. variables."""
    xv, rv = list(kir.xvars(len(x))), list(kir.rvars(len(r)))
    if m.is_reduction:
        lanes, rlanes = iter(xv), iter(rv)
        index = tuple(sympy.Integer(0) if s == 1 else next(lanes) for s in m.shape)
        rindex = tuple(sympy.Integer(0) if s == 1 else next(rlanes) for s in m.rranges)
        return index, rindex
    lanes = iter(xv + rv if squeeze(m.shape) == x + r else xv)
    return tuple(sympy.Integer(0) if s == 1 else next(lanes) for s in m.shape), ()


def node_value(m: ComputedBuffer, x: tuple, r: tuple) -> UOp:
    index, rindex = member_index(m, x, r)
    return m.body(index, rindex)


def _stored_buffers(order: list, reads: dict, outputs: set) -> set[str]:
    stored = set(outputs)
    group_of = {m.name: g for g in order if isinstance(g, Group) for m in g.members}
    for step in order:
        members = step.members if isinstance(step, Group) else [step]
        for m in members:
            for name in reads[m.name]:
                if name in group_of and group_of[name] is not step:
                    stored.add(name)
    return stored


# ---- a group as a kernel ------------------------------------------------------------------------

def build_kernel(group: Group, stored: set, dtypes: dict, options: dict) -> kir.Kernel:
    """The kir.Kernel of a group: member values in kernel variables, in-kernel reads replaced by
    the values themselves, statements placed in stages by what they wait for."""
    x, r = group.x, group.r
    values: dict[str, UOp] = {}
    levels: dict[str, int] = {}
    emulate = options.get("emulate_precision_casts", False)
    stmts: list[tuple[int, Any]] = []
    reductions = 0
    members = {m.name: m for m in group.members}
    for m in group.members:
        raw = node_value(m, x, r)
        value, need = _substitute(raw, values, levels, members, x, r, emulate)
        if m.is_reduction or not r or not _is_outer(m, x, r):
            level = need + (need % 2)  # inside a loop: the next even level
        else:
            level = max(need, 1) + (1 - max(need, 1) % 2)  # after a loop: an odd level
        index = m.store_index(member_index(m, x, r)[0])
        if m.is_reduction:
            # named by position, not by buffer: the same reduction in every layer is one kernel
            name, reductions = f"red{reductions}", reductions + 1
            acc_dtype = kir.compute_dtype(m.dtype)
            stmts.append((level, kir.Reduce(name, m.reduction_type, value, acc_dtype)))
            result = UOp(Ops.REDUCED, acc_dtype, (), name)
            levels[m.name] = level + 1
            if m.name in stored:
                stmts.append((level + 1, kir.Store(m.name, index, result, m.dtype)))
        else:
            result = kir.round_to(value, m.dtype) if emulate else value
            levels[m.name] = level
            if m.name in stored:
                stmts.append((level, kir.Store(m.name, index, value, m.dtype)))
        values[m.name] = (index, result)
    return _assemble(x, r, stmts, dtypes)


def _substitute(value: UOp, values: dict, levels: dict, members: dict, x: tuple, r: tuple,
                emulate: bool) -> tuple[UOp, int]:
    """Replace loads of in-kernel buffers by their values, or by their values recomputed at the
    element read (_served); also the level the value waits for."""
    need = 0
    memo: dict[UOp, UOp] = {}

    def visit(u: UOp) -> UOp:
        nonlocal need
        if u in memo:
            return memo[u]
        served = _served(u, members[u.arg[0]], x, r) if u.op is Ops.LOAD and u.arg[0] in values else None
        if served == ():
            need = max(need, levels[u.arg[0]])
            out = kir.cast(values[u.arg[0]][1], u.dtype)
        elif served is not None:
            m = members[u.arg[0]]
            again = visit(m.body(served, ()))
            out = kir.cast(kir.round_to(again, m.dtype) if emulate else again, u.dtype)
        else:
            src = tuple(visit(s) for s in u.src)
            out = u if src == u.src else UOp(u.op, u.dtype, src, u.arg)
        memo[u] = out
        return out

    return visit(value), need


def _assemble(x: tuple, r: tuple, stmts: list, dtypes: dict) -> kir.Kernel:
    top = max((lvl for lvl, _ in stmts), default=0)
    stages = []
    for k in range(top // 2 + 1):
        inner = tuple(s for lvl, s in stmts if lvl == 2 * k)
        outer = tuple(s for lvl, s in stmts if lvl == 2 * k + 1)
        if inner or outer:
            stages.append(kir.Stage(inner, outer))
    loads: dict[str, None] = {}
    outs: dict[str, torch.dtype] = {}
    for stage in stages:
        for s in stage.inner + stage.outer:
            for name in kir.buffer_reads(s.value):
                loads.setdefault(name, None)
            if isinstance(s, kir.Store):
                outs[s.buffer] = s.dtype
    inputs = tuple((name, dtypes[name]) for name in loads)
    return kir.Kernel(tuple(x), tuple(r), tuple(stages), inputs, tuple(outs.items()), _size_args(x, r, stages))


def _size_args(x: tuple, r: tuple, stages: list) -> tuple:
    """Names of the size symbols a kernel reads (its int64 size arguments): in its ranges, and in
    any index, index value or bounds check of its statements (a slice of an [s0, s1] input reads
    row ``x0 * s1`` over a range of 3 columns)."""
    exprs = list(x + r)
    for stage in stages:
        for stmt in stage.inner + stage.outer:
            exprs.append(getattr(stmt, "index", 0))
            for u in stmt.value.toposort():
                if u.op is Ops.LOAD:
                    exprs.append(u.arg[1])
                elif u.op is Ops.INDEX:
                    exprs.append(u.arg)
                elif u.op is Ops.CHECK_INDEX:
                    exprs.append(u.arg[0])
    return tuple(sorted({s.name for e in exprs for s in size_symbols(e)}))
