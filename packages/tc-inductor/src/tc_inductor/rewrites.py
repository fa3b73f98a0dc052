"""Graph → graph rewrites run before lowering (pure: each returns a new graph).

``prims_to_aten``: torch's decompositions leave some ``prims`` ops behind (batch norm's gives
``prims.var``, ``prims.sum``, ``prims.div``, ``prims.broadcast_in_dim``). Prims have no kernels of
their own: run as extern calls they go through Python reference code on every call (measured:
half of a small ResNet training step's CPU time). Each becomes the ATen op that has a lowering.

``fold_bias_into_addmm``: ``mm(a, b) + bias`` becomes ``addmm(bias, a, b)``, so the vendor
GEMM adds the bias in its epilogue and the only generated kernel left is what follows (an
activation), instead of a separate bias-add pass over the product.
"""

from __future__ import annotations

import torch

import tc_ir
from tc_ir import Node, TensorSpec

aten = torch.ops.aten


def rewrite(graph: tc_ir.Graph) -> tc_ir.Graph:
    """Every rewrite, in order (a readable list, like the pipeline in compile.py)."""
    for rewrite_pass in (prims_to_aten, fold_bias_into_addmm):
        graph = rewrite_pass(graph)
    return graph


prims = torch.ops.prims


def _prim_div(g: tc_ir.Graph, n: Node) -> Node:
    a, b = n.args
    floating = isinstance(n.spec, TensorSpec) and n.spec.dtype.is_floating_point
    if floating:
        return g.call(aten.div.Tensor, a, b, spec=n.spec)
    return g.call(aten.div.Tensor_mode, a, b, kwargs={"rounding_mode": "trunc"}, spec=n.spec)


def _prim_sum(g: tc_ir.Graph, n: Node) -> Node | None:
    x, dims = n.args[:2]
    dtype = n.kwargs.get("output_dtype")
    return g.call(aten.sum.dim_IntList, x, list(dims), False, kwargs={"dtype": dtype} if dtype else {}, spec=n.spec)


def _prim_var(g: tc_ir.Graph, n: Node) -> Node | None:
    x, dims, correction = (*n.args, n.kwargs.get("correction"))[:3]
    if n.kwargs.get("output_dtype") is not None:
        return None
    return g.call(aten.var.correction, x, list(dims), kwargs={"correction": correction, "keepdim": False}, spec=n.spec)


def _prim_broadcast_in_dim(g: tc_ir.Graph, n: Node) -> Node | None:
    x, shape, kept = n.args
    if not isinstance(x, Node) or not isinstance(x.spec, TensorSpec):
        return None
    value = x
    for dim in range(len(shape)):
        if dim not in kept:
            value = g.call(aten.unsqueeze.default, value, dim)
    return g.call(aten.expand.default, value, list(shape), spec=n.spec)


def _prim_convert_element_type(g: tc_ir.Graph, n: Node) -> Node:
    x, dtype = n.args
    return g.call(aten._to_copy.default, x, kwargs={"dtype": dtype}, spec=n.spec)


# prims overload -> rule building its ATen replacement before the node (None: leave it alone).
PRIM_RULES = {
    prims.div.default: _prim_div,
    prims.sum.default: _prim_sum,
    prims.var.default: _prim_var,
    prims.broadcast_in_dim.default: _prim_broadcast_in_dim,
    prims.convert_element_type.default: _prim_convert_element_type,
}


def prims_to_aten(graph: tc_ir.Graph) -> tc_ir.Graph:
    if not any(n.target in PRIM_RULES for n in graph.calls):
        return graph
    graph = graph.copy()
    for node in list(graph.calls):
        rule = PRIM_RULES.get(node.target)
        if rule is None:
            continue
        with graph.inserting_before(node):
            replacement = rule(graph, node)
        if replacement is not None:
            node.replace_all_uses_with(replacement)
            graph.erase(node)
    return graph


def fold_bias_into_addmm(graph: tc_ir.Graph) -> tc_ir.Graph:
    if not any(n.target is aten.mm.default for n in graph.calls):
        return graph
    graph = graph.copy()
    for add in list(graph.calls):
        found = _mm_plus_bias(add)
        if found is None:
            continue
        mm, bias = found
        with graph.inserting_before(add):
            addmm = graph.call(aten.addmm.default, bias, *mm.args, spec=add.spec)
        add.replace_all_uses_with(addmm)
        graph.erase(add)
        graph.erase(mm)
    return graph


def _mm_plus_bias(add: Node) -> tuple[Node, Node] | None:
    """(mm, bias) when ``add`` is ``mm(a, b) + bias`` that addmm computes the same way."""
    if add.target is not aten.add.Tensor or add.kwargs.get("alpha", 1) != 1 or len(add.args) != 2:
        return None
    for mm, bias in (add.args, add.args[::-1]):
        if not (isinstance(mm, Node) and mm.op == "call" and mm.target is aten.mm.default
                and isinstance(bias, Node) and bias is not mm and list(mm.users) == [add] and not mm.is_output):
            continue
        out, b = mm.spec, bias.spec
        if not (isinstance(out, TensorSpec) and isinstance(b, TensorSpec) and isinstance(add.spec, TensorSpec)):
            continue
        if b.dtype != out.dtype or add.spec.dtype != out.dtype or tuple(add.spec.shape) != tuple(out.shape):
            continue
        if b.device != out.device or len(b.shape) > 2 or not _broadcasts(b.shape, out.shape):
            continue
        return mm, bias
    return None


def _broadcasts(small: tuple, big: tuple) -> bool:
    return all(s == 1 or s == t for s, t in zip(reversed(small), reversed(big)))
