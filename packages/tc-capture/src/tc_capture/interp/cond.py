"""``tc_ir.ops.cond(pred, true_fn, false_fn, operands)``: one node holding two sub-graphs."""

from __future__ import annotations

import tc_ir

from .base import Unsupported, call_function
from .record import _spec, wrap_result
from .subgraphs import lift_to, trace_sub
from .variables import Const, ListV, TensorV, TupleV, V


def capture_cond(f, args, kwargs) -> V:
    """``tc_ir.ops.cond`` / ``torch.cond``: a bool predicate takes its branch; a tensor one records
    one node over two sub-graphs, their closed-over tensors lifted into the operands."""
    names = ("pred", "true_fn", "false_fn", "operands")
    bound = {"operands": TupleV([]), **dict(zip(names, args)), **kwargs}
    if set(bound) != set(names) or not isinstance(bound["operands"], (ListV, TupleV)):
        raise Unsupported("cond takes (pred, true_fn, false_fn, operands: tuple or list)")
    pred, true_fn, false_fn, operands = (bound[n] for n in names)
    ops = list(operands.items)
    if isinstance(pred, Const):  # a Python bool: guarded, so just take the branch
        return call_function(f, true_fn if pred.value else false_fn, ops, {})
    if not isinstance(pred, TensorV) or pred.fake.numel() != 1 or not all(isinstance(o, TensorV) for o in ops):
        raise Unsupported("cond needs a one-element tensor or bool predicate and tensor operands")
    try:
        true, out_true = _branch(f, "true_graph", true_fn, ops)
        false, out_false = _branch(f, "false_graph", false_fn, ops)
    except Unsupported as e:  # the whole cond runs in Python (not compiled as a frame of its own)
        raise Unsupported(f"cond: {e.reason}") from e
    _check_agree(out_true, out_false)
    free = list(dict.fromkeys([*true.free, *false.free]))
    lift_to(true, free)
    lift_to(false, free)
    node = f.session.graph.call(tc_ir.ops.cond, pred.node, true.graph, false.graph, [o.node for o in ops] + free,
                                spec=_spec(out_true))
    result = wrap_result(f.session, node, out_true)
    return ListV(list(result.items)) if isinstance(true.result, ListV) else result


def _branch(f, name: str, fn: V, ops: list[TensorV]):
    sub = trace_sub(f, name, ops, lambda inner: call_function(f, fn, inner, {}))
    result, graph = sub.result, sub.graph
    outs = result.items if isinstance(result, (TupleV, ListV)) else [result]
    if not outs or not all(isinstance(o, TensorV) and o.node.graph is graph and o.node.op != "input" for o in outs):
        raise Unsupported("cond branches must return tensors computed inside them (not an operand as is)")
    structure = [o.node for o in outs]
    graph.output(structure[0] if not isinstance(result, (TupleV, ListV)) else tuple(structure))
    fakes = outs[0].fake if not isinstance(result, (TupleV, ListV)) else tuple(o.fake for o in outs)
    return sub, fakes


def _check_agree(a, b) -> None:
    flat_a, flat_b = ([a], [b]) if not isinstance(a, tuple) else (list(a), list(b) if isinstance(b, tuple) else None)
    if flat_b is None or isinstance(b, tuple) != isinstance(a, tuple) or len(flat_a) != len(flat_b) or any(
            (x.shape, x.dtype, x.device) != (y.shape, y.dtype, y.device) for x, y in zip(flat_a, flat_b)):
        raise Unsupported("cond branches return different structures, shapes or dtypes")
