"""Graph → graph rewrites run before lowering (pure: each returns a new graph).

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
    for rewrite_pass in (fold_bias_into_addmm,):
        graph = rewrite_pass(graph)
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
                and isinstance(bias, Node) and list(mm.users) == [add] and not mm.is_output):
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
