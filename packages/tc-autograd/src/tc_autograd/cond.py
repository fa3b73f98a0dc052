"""``tc_ir.ops.cond`` in the fake trace: one ``cond`` node over functional ATen sub-graphs.

The predicate is a fake tensor, so the branch cannot be chosen while tracing. Instead each
branch's torch-level sub-graph is traced on its own (same recorder, same decompositions) into an
ATen sub-graph, and one ``cond(pred, true_graph, false_graph, operands)`` node is recorded; its
fake results are made from the output specs, which both branches must agree on.

Training: when an operand requires grad, the cond runs inside a ``torch.autograd.Function`` at
trace time. Its backward records a second ``cond`` on the same predicate whose branches are the
branches' *joint* sub-graphs (operands and output cotangents in, operand gradients out): each
branch's forward is recomputed inside the backward branch, so nothing a branch computes has to
be saved across the two conds — only the predicate and the operands.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

import attrs
import torch

import tc_ir

from . import passes
from .trace import Recorder, clean_spec, interpret_unwrapped


def bind_higher_order(graph: tc_ir.Graph, rec: Recorder) -> tc_ir.Graph:
    """``graph``, or a copy whose cond nodes call :func:`trace_cond` when the interpreter runs them."""
    if not any(n.target is tc_ir.ops.cond for n in graph.calls):
        return graph
    graph = graph.copy()
    for node in graph.calls:
        if node.target is tc_ir.ops.cond:
            true_graph, false_graph = _branches(node)
            node.target = functools.partial(trace_cond, rec, true_graph, false_graph)
    return graph


def _branches(node: tc_ir.Node) -> tuple[tc_ir.Graph, tc_ir.Graph]:
    names = ("pred", "true_fn", "false_fn", "operands")
    args = list(node.args) + [node.kwargs.get(k) for k in names[len(node.args):]]
    if not (isinstance(args[1], tc_ir.Graph) and isinstance(args[2], tc_ir.Graph)):
        raise TypeError(f"tc_autograd: cond node %{node.name} needs two tc_ir.Graph branches")
    return args[1], args[2]


@attrs.frozen
class Branch:
    """One traced branch: its ATen sub-graph and the specs of what it returns."""

    graph: tc_ir.Graph
    specs: tuple
    single: bool  # the branch returned one tensor, not a tuple


def trace_cond(rec: Recorder, true_graph: tc_ir.Graph, false_graph: tc_ir.Graph, pred: Any,
               true_fn: Any = None, false_fn: Any = None, operands: Sequence[Any] = ()) -> Any:
    operands = tuple(operands)
    if not isinstance(pred, torch.Tensor):  # a Python bool is known now: inline the branch taken
        return interpret_unwrapped(bind_higher_order(true_graph if pred else false_graph, rec), operands)
    if pred.numel() != 1:
        raise ValueError(f"tc_autograd: cond's predicate must have one element, got shape {tuple(pred.shape)}")
    stem = rec.subgraph_name("cond")
    branches = [trace_branch(rec, g, operands, f"{stem}_{side}") for side, g in (("true", true_graph), ("false", false_graph))]
    _check_agree(stem, *branches)
    wrt = [i for i, o in enumerate(operands) if isinstance(o, torch.Tensor) and o.requires_grad]
    if not (torch.is_grad_enabled() and wrt):
        return _unflatten(emit_cond(rec, pred, branches, operands), branches[0].single)
    backward = [trace_branch_backward(rec, g, operands, wrt, branches[0].specs, f"{stem}_{side}_bw")
                for side, g in (("true", true_graph), ("false", false_graph))]
    plan = _CondPlan(rec, pred, branches, backward, wrt)
    return _unflatten(_CondFunction.apply(plan, *operands), branches[0].single)


def emit_cond(rec: Recorder, pred: torch.Tensor, branches: Sequence[Branch], operands: Sequence[Any]) -> tuple:
    """Record one cond node; return fake tensors standing for its results."""
    return _emit(rec, rec.node_of(pred), branches, tuple(rec.node_of(o) for o in operands), branches[0].specs,
                 branches[0].single)


def _emit(rec: Recorder, pred: tc_ir.Node, branches: Sequence[Branch], operands: tuple, specs: tuple,
          single: bool) -> tuple:
    spec = specs[0] if single else specs
    node = rec.graph.call(tc_ir.ops.cond, pred, branches[0].graph, branches[1].graph, operands, spec=spec)
    with rec.pausing():
        outs = tuple(torch.empty_strided(s.shape, s.stride, dtype=s.dtype, device=s.device) for s in specs)
    for i, out in enumerate(outs):
        rec.table.fresh(out, node if single else rec.emit(operator.getitem, node, i, spec=specs[i]))
    return outs


# ---- tracing one branch ------------------------------------------------------------------------
def _operand_fakes(rec: Recorder, graph: tc_ir.Graph, operands: Sequence[Any], wrt: Sequence[int] = ()) -> list:
    """Fresh fakes for a branch's operands (inputs of its sub-graph); ``wrt`` ones require grad."""
    fakes = []
    for i, o in enumerate(operands):
        if not isinstance(o, torch.Tensor):
            graph.input(f"arg{i}", tc_ir.spec_of(o))
            fakes.append(o)
            continue
        with rec.pausing():
            fake = torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device=o.device)
        rec.table.fresh(fake, graph.input(f"arg{i}", clean_spec(fake)), input_index=i)
        fakes.append(fake.requires_grad_(i in wrt))
    return fakes


def _run_branch(rec: Recorder, graph: tc_ir.Graph, fakes: list, name: str) -> tuple[list, bool]:
    outs = interpret_unwrapped(bind_higher_order(graph, rec), fakes)
    single = isinstance(outs, torch.Tensor)
    flat = [outs] if single else list(outs) if isinstance(outs, (tuple, list)) else [outs]
    if not all(isinstance(o, torch.Tensor) for o in flat):
        raise TypeError(f"tc_autograd: cond branch {graph.name} must return tensors, got {type(outs).__name__}")
    if rec.table.mutated_inputs():
        raise NotImplementedError(f"tc_autograd: cond branch {graph.name} writes to its operands in place")
    return flat, single


def _fresh_output(rec: Recorder, out: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor of its own: a branch result never aliases an operand or has odd strides."""
    rec.node_of(out)
    if rec.table.alias(out).storage.input_index is not None:
        return out.clone(memory_format=torch.contiguous_format)
    return out.contiguous()


def trace_branch(rec: Recorder, graph: tc_ir.Graph, operands: Sequence[Any], name: str) -> Branch:
    """The functional ATen sub-graph of one branch, taking the operands as its inputs."""
    sub = tc_ir.Graph(name)
    with rec.tracing_into(sub), torch.no_grad():
        flat, single = _run_branch(rec, graph, _operand_fakes(rec, sub, operands), name)
        flat = [_fresh_output(rec, o) for o in flat]
        sub.output(rec.node_of(flat[0]) if single else tuple(rec.node_of(o) for o in flat))
    return Branch(passes.clean(sub), tuple(clean_spec(o) for o in flat), single)


def differentiable(spec: tc_ir.TensorSpec) -> bool:
    return spec.dtype.is_floating_point or spec.dtype.is_complex


def trace_branch_backward(rec: Recorder, graph: tc_ir.Graph, operands: Sequence[Any], wrt: list[int],
                          out_specs: tuple, name: str) -> Branch:
    """A branch's joint sub-graph: (operands, cotangents of float outputs) -> grads of ``wrt``.

    The branch's forward is recomputed inside it, so the forward cond saves nothing of its own.
    """
    sub = tc_ir.Graph(name)
    with rec.tracing_into(sub), torch.enable_grad():
        fakes = _operand_fakes(rec, sub, operands, wrt)
        tangents = {}
        for k, spec in enumerate(out_specs):
            if differentiable(spec):
                with rec.pausing():
                    tangents[k] = torch.empty(spec.shape, dtype=spec.dtype, device=spec.device)
                rec.table.fresh(tangents[k], sub.input(f"tangent_{k}", spec))
        flat, _ = _run_branch(rec, graph, fakes, name)
        pairs = [(o, tangents[k]) for k, o in enumerate(flat) if k in tangents and o.requires_grad]
        inputs = [fakes[i] for i in wrt]
        grads = (torch.autograd.grad([o for o, _ in pairs], inputs, [t for _, t in pairs], allow_unused=True)
                 if pairs else [None] * len(inputs))
        with torch.no_grad():
            grads = [torch.zeros_like(x) if g is None else g.contiguous() for g, x in zip(grads, inputs)]
        sub.output(tuple(rec.node_of(g) for g in grads))
    return Branch(passes.clean(sub), tuple(clean_spec(g) for g in grads), False)


def _check_agree(stem: str, true: Branch, false: Branch) -> None:
    def shown(b: Branch) -> str:
        return ", ".join(str(s) for s in b.specs) + ("" if b.single else " (tuple)")

    same = true.single == false.single and len(true.specs) == len(false.specs) and all(
        (a.shape, a.dtype, a.device) == (b.shape, b.dtype, b.device) for a, b in zip(true.specs, false.specs))
    if not same:
        raise ValueError(f"tc_autograd: the branches of {stem} return different things: "
                         f"true gives {shown(true)}, false gives {shown(false)}")


def _unflatten(outs: tuple, single: bool) -> Any:
    return outs[0] if single else tuple(outs)


# ---- training: the cond's backward is another cond on the same predicate ----------------------
@attrs.define
class _CondPlan:
    rec: Recorder
    pred: torch.Tensor
    forward: list[Branch]
    backward: list[Branch]
    wrt: list[int]


class _CondFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, plan: _CondPlan, *operands: Any) -> tuple:
        rec = plan.rec
        ctx.plan, ctx.pred = plan, rec.node_of(plan.pred)
        ctx.operands = tuple(rec.node_of(o) for o in operands)  # the values as of now
        outs = _emit(rec, ctx.pred, plan.forward, ctx.operands, plan.forward[0].specs, plan.forward[0].single)
        ctx.mark_non_differentiable(*[o for o, s in zip(outs, plan.forward[0].specs) if not differentiable(s)])
        return outs

    @staticmethod
    def backward(ctx, *cotangents: torch.Tensor) -> tuple:
        plan, rec = ctx.plan, ctx.plan.rec
        specs = plan.forward[0].specs
        tangents = tuple(rec.node_of(c.contiguous()) for c, s in zip(cotangents, specs) if differentiable(s))
        grads = _emit(rec, ctx.pred, plan.backward, ctx.operands + tangents, plan.backward[0].specs, False)
        by_operand = dict(zip(plan.wrt, grads))
        return (None,) + tuple(by_operand.get(i) for i in range(len(ctx.operands)))
