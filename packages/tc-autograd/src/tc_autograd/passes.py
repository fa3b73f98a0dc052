"""Graph -> graph clean-ups run on traced ATen graphs, as a readable pipeline."""

from __future__ import annotations

from collections.abc import Callable

import torch

import tc_ir

aten = torch.ops.aten

# Ops that only exist for autograd's bookkeeping; in a functional graph they are the identity.
IDENTITY_OPS = {aten.detach.default, aten.alias.default, aten.lift_fresh.default}


def drop_identities(graph: tc_ir.Graph, *, inplace: bool = False) -> tc_ir.Graph:
    """Replace detach/alias calls with their input (``inplace`` as for ``tc_ir.dce``)."""
    if not inplace:
        graph = graph.copy()
    for node in list(graph.nodes):
        if node.op == "call" and node.target in IDENTITY_OPS:
            node.replace_all_uses_with(node.args[0])
            graph.erase(node)
    return graph


# Each step takes ``inplace=True``: clean copies the graph once, not once per step.
PIPELINE: list[Callable[..., tc_ir.Graph]] = [drop_identities, tc_ir.dce, tc_ir.cse, tc_ir.dce]


def clean(graph: tc_ir.Graph) -> tc_ir.Graph:
    """The PIPELINE's steps on a copy of ``graph`` (``graph`` itself is left alone)."""
    graph = graph.copy()
    for step in PIPELINE:
        graph = step(graph, inplace=True)
    return graph
