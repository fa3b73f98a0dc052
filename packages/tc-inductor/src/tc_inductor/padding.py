"""Padded row strides for matmul operands and results (option ``pad_mm_operands``).

cuBLAS runs its fast GEMM kernels only when every matrix's leading dimension is a multiple of
16 bytes. A bf16 matrix of 50257 columns (GPT-2's vocabulary) has rows of 100514 bytes, so each
GEMM touching it falls back to an unaligned kernel (``..._align1``), about 5x slower on an H200.
Here we give such matrices a padded row stride (rounded up to 16 bytes); the padding is never
read, and values are unchanged. Which values, decided over the graph before lowering:

- a computed value that an ``mm``/``addmm``/``bmm``/``baddbmm``/``_scaled_mm`` reads (directly or
  through views): the buffer it is stored in gets padded strides, and generated kernels write and
  read it through them;
- the result of such a matmul: allocated padded by the wrapper and computed by the ``out=``
  overload, so the GEMM writes an aligned C;
- a graph input such a matmul reads: copied once into a padded buffer, before the first matmul
  that needs it (one read + write; the aligned GEMM saves far more at these sizes).

Never a value whose storage can reach a graph output (through views): outputs keep the strides
eager gives them.
"""

from __future__ import annotations

import math
from typing import Any

import torch

import tc_ir
from tc_ir import Node

from .ir import is_dense

aten = torch.ops.aten

ALIGN_BYTES = 16
# "auto" pads only where it pays: rows of at least 64 elements (the padding, at most 15 bytes a
# row, then costs at most ~11% of the memory; 0.01% at 50257 columns) and tensors of at least
# 1 MiB (below that a GEMM is bound by its launch and the input copy would cost more than the
# unaligned kernel loses).
MIN_ROW_ELEMENTS = 64
MIN_BYTES = 1 << 20

MATMUL_OUT = {aten.mm.default: aten.mm.out, aten.addmm.default: aten.addmm.out,
              aten.bmm.default: aten.bmm.out, aten.baddbmm.default: aten.baddbmm.out}
# Positions of the two GEMM operands (an addmm's bias is not read as a GEMM matrix).
GEMM_OPERANDS = {aten.mm.default: (0, 1), aten.addmm.default: (1, 2), aten.bmm.default: (0, 1),
                 aten.baddbmm.default: (1, 2)}
if hasattr(aten, "_scaled_mm"):  # fp8 operands are 1 byte, so in practice only bf16/fp32 ones pad
    GEMM_OPERANDS[aten._scaled_mm.default] = (0, 1)

# Copying views: lowered as views of their source (a window on it when an extern reads them).
_COPY_VIEWS = {"_unsafe_view", "view_copy", "permute_copy", "t_copy", "transpose_copy", "expand_copy",
               "unsqueeze_copy", "squeeze_copy", "slice_copy", "select_copy", "alias_copy", "_reshape_copy"}


def mode(options: Any) -> str:
    return options.get("pad_mm_operands", "auto")


def padded_stride(shape: tuple, stride: tuple, dtype: torch.dtype, device: Any, how: str) -> tuple | None:
    """``stride`` with the innermost dim's rows rounded up to 16 bytes, or None where ``how``
    ("auto", "always", "never") leaves this layout alone: already aligned, not dense, not a
    2- or 4-byte dtype, and under "auto" not on CUDA or below the size thresholds."""
    if how == "never" or dtype.itemsize not in (2, 4) or not _static(shape, stride):
        return None
    order = sorted(range(len(shape)), key=lambda d: (stride[d], -d))  # innermost first
    if not order or stride[order[0]] != 1 or not is_dense(shape, stride):
        return None
    inner = order[0]
    row = shape[inner]
    if row < 2 or row * dtype.itemsize % ALIGN_BYTES == 0 or math.prod(shape) == row:
        return None
    if how == "auto" and (torch.device(device).type != "cuda" or row < MIN_ROW_ELEMENTS
                          or math.prod(shape) * dtype.itemsize < MIN_BYTES):
        return None
    per_row = ALIGN_BYTES // math.gcd(ALIGN_BYTES, dtype.itemsize)
    new = list(stride)
    running = -(-row // per_row) * per_row
    for d in order[1:]:
        new[d] = running
        running *= max(shape[d], 1)
    return tuple(new)


def _static(*values) -> bool:
    return all(isinstance(v, int) for vs in values for v in vs)


def candidates(graph: tc_ir.Graph, how: str) -> set[Node]:
    """Nodes whose value may be stored padded: the (pre-view) bases of matmul operands, inputs
    included, and matmul results; none that reaches an output or is written in place."""
    if how == "never":
        return set()
    escaping_nodes = escaping([v for v in tc_ir.leaves(graph.outputs) if isinstance(v, Node)])
    found: set[Node] = set()
    for node in graph.calls:
        positions = GEMM_OPERANDS.get(node.target, ())
        for i in positions:
            if i < len(node.args) and isinstance(node.args[i], Node):
                found.add(_view_base(node.args[i]))
        if node.target in MATMUL_OUT:
            found.add(node)
    return {n for n in found if n.op in ("input", "call") and n not in escaping_nodes and not _mutated(n)}


def is_view(target: Any) -> bool:
    if not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    if schema.name.split("::")[-1] in _COPY_VIEWS:
        return True
    return not schema.is_mutable and any(r.alias_info is not None for r in schema.returns)


def _view_base(node: Node) -> Node:
    while node.op == "call" and is_view(node.target) and node.args and isinstance(node.args[0], Node):
        node = node.args[0]
    return node


def escaping(roots: list[Node]) -> set[Node]:
    """Nodes whose storage one of ``roots`` (outputs) may share: the roots, and what they view.
    A call that is not an ATen op (cond, getitem) may return its operands, so those escape too."""
    pending = list(roots)
    seen: set[Node] = set()
    while pending:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op == "call" and (is_view(node.target) or not isinstance(node.target, torch._ops.OpOverload)):
            pending += [v for v in tc_ir.leaves((node.args, node.kwargs)) if isinstance(v, Node)]
    return seen


def _mutated(node: Node) -> bool:
    users = list(node.users)
    while users:
        user = users.pop()
        if user.op == "call" and tc_ir.is_mutating(user.target):
            return True
        if user.op == "call" and is_view(user.target):
            users += list(user.users)
    return False
