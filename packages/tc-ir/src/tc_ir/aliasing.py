"""Which calls may return (part of) an operand's memory, and which nodes an output's memory may be.

Passes that merge or move values ask these: two outputs that eager returns as distinct tensors
must not come back sharing memory (an in-place write to one would show in the other), and a value
whose memory escapes as an output cannot be laid out as a pass likes.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .node import Node, leaves
from .spec import TensorSpec

# Copying views: a back end may lower them as views of their source (tc_inductor does, and reads
# them in place), so they count as aliasing here.
COPY_VIEWS = {"_unsafe_view", "view_copy", "permute_copy", "t_copy", "transpose_copy", "expand_copy",
              "unsqueeze_copy", "squeeze_copy", "slice_copy", "select_copy", "alias_copy", "_reshape_copy"}


def is_view(target: object) -> bool:
    """Whether an ATen op's result may share memory with an operand (per its schema), or is a
    copying view."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    if schema.name.split("::")[-1] in COPY_VIEWS:
        return True
    return not schema.is_mutable and any(r.alias_info is not None for r in schema.returns)


def aliases(node: Node) -> bool:
    """Whether the value of call ``node`` may share storage with an operand: a view op's does,
    except a ``to`` that converts (another dtype or device: always a new tensor; the autocast
    casts around batch norm are such)."""
    if not is_view(node.target):
        return False
    if node.target.overloadpacket is not torch.ops.aten.to or not node.args:
        return True
    source, spec = node.args[0], node.spec
    if not isinstance(source, Node) or not isinstance(source.spec, TensorSpec) or not isinstance(spec, TensorSpec):
        return True
    return source.spec.dtype == spec.dtype and torch.device(source.spec.device) == torch.device(spec.device)


def escaping(roots: Iterable[Node]) -> set[Node]:
    """Nodes whose storage one of ``roots`` (outputs) may share: the roots, and what they view.
    A call that is not an ATen op (cond, getitem) may return its operands, so those escape too."""
    pending = list(roots)
    seen: set[Node] = set()
    while pending:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op == "call" and (not isinstance(node.target, torch._ops.OpOverload) or aliases(node)):
            pending += [v for v in leaves((node.args, node.kwargs)) if isinstance(v, Node)]
    return seen
