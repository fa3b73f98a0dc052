"""``tc_ir.ops.cond(pred, true_fn, false_fn, operands)``: one node holding two sub-graphs."""

from __future__ import annotations

import tc_ir

from .base import Unsupported, call_function
from .record import _spec, wrap_result
from .variables import Const, ListV, TensorV, TupleV, V


def capture_cond(f, args, kwargs) -> V:
    names = ("pred", "true_fn", "false_fn", "operands")
    bound = dict(zip(names, args), **kwargs)
    pred, true_fn, false_fn, operands = (bound[n] for n in names)
    ops = list(operands.items) if isinstance(operands, (ListV, TupleV)) else []
    if isinstance(pred, Const):  # a Python bool: guarded, so just take the branch
        return call_function(f, true_fn if pred.value else false_fn, ops, {})
    if not isinstance(pred, TensorV) or not all(isinstance(o, TensorV) for o in ops):
        raise Unsupported("cond needs a tensor or bool predicate and tensor operands")
    g_true, out_true = _branch(f, "true_graph", true_fn, ops)
    g_false, _ = _branch(f, "false_graph", false_fn, ops)
    outer = f.session.graph
    node = outer.call(tc_ir.ops.cond, pred.node, g_true, g_false, [o.node for o in ops], spec=_spec(out_true))
    return wrap_result(f.session, node, out_true)


def _branch(f, name: str, fn: V, ops: list[TensorV]):
    session = f.session
    outer = session.graph
    sub = tc_ir.Graph(name)
    inner = [TensorV(sub.input(f"arg{i}", o.node.spec), o.fake) for i, o in enumerate(ops)]
    session.graph = sub
    try:
        result = call_function(f, fn, inner, {})
    finally:
        session.graph = outer
    outs = result.items if isinstance(result, (TupleV, ListV)) else [result]
    if not all(isinstance(o, TensorV) and o.node.graph is sub for o in outs):
        raise Unsupported("cond branches must return tensors computed from their operands")
    if len(sub.inputs) != len(ops) or any(n.graph is not sub for c in sub.calls for n in c.inputs):
        raise Unsupported("cond branches may only read their operands (no closed-over tensors)")
    structure = [o.node for o in outs]
    sub.output(structure[0] if not isinstance(result, (TupleV, ListV)) else tuple(structure))
    fakes = outs[0].fake if not isinstance(result, (TupleV, ListV)) else tuple(o.fake for o in outs)
    return sub, fakes
