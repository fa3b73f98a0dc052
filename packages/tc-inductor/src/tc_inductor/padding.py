"""Aligned GEMMs (option ``pad_mm_operands``): padded dims (``pad_gemm_dims``, at the end of this
module, run before lowering), then padded row strides for what is still unaligned.

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
from tc_ir import Node, TensorSpec

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


# ---- padded GEMM dims ---------------------------------------------------------------------------
# A padded row stride is not always enough: with torch 2.11's cuBLAS on an H100, a bf16 GEMM whose
# M, N or K is not a multiple of 8 runs an unaligned kernel whatever its leading dims (GPT-2's
# [4096, 768] @ [768, 50257]: 3.3 ms; with N padded to 50264: 0.5 ms). So before lowering, each
# large GEMM gets operands padded to aligned dims (zeros: a padded K adds 0 to every sum) and its
# result is sliced back: one pad kernel per operand (fused into its producer when computed, e.g. the
# autocast cast of a weight) and, for a result that reaches a graph output, one copy into eager's
# contiguous layout.

_TRANSPOSES = {aten.t.default, aten.transpose.int, aten.permute.default}
_PADDED_GEMMS = (aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default)


def pad_gemm_dims(graph: tc_ir.Graph, how: str) -> tc_ir.Graph:
    """``graph`` with every large GEMM (``mm``, ``addmm``, ``bmm``, ``baddbmm``) of unaligned M, N or K
    computed on padded operands and sliced back (see above); unchanged under "never"."""
    if how == "never" or not any(_gemm_pads(n, how) for n in graph.calls):
        return graph
    graph = graph.copy()
    outputs = escaping([v for v in tc_ir.leaves(graph.outputs) if isinstance(v, Node)])
    memo: dict = {}
    for node in list(graph.calls):
        pads = _gemm_pads(node, how)
        if not pads:
            continue
        with graph.inserting_before(node):
            new = _padded_gemm(graph, node, *pads, memo)
            if node in outputs or _mutated(node):  # outputs keep eager's (contiguous) layout
                new = graph.call(aten.clone.default, new, kwargs={"memory_format": torch.contiguous_format})
        node.replace_all_uses_with(new)
        graph.replace_output(node, new)
        graph.erase(node)
    return graph


def _gemm_pads(node: Node, how: str) -> tuple | None:
    """((M, K, N), (M, K, N) padded) of a GEMM worth padding, else None."""
    if node.op != "call" or node.target not in _PADDED_GEMMS:
        return None
    a, b = (node.args[i] for i in GEMM_OPERANDS[node.target])
    specs = [getattr(v, "spec", None) for v in (a, b, node)]
    if not all(isinstance(s, TensorSpec) and _static(s.shape) for s in specs):
        return None
    out = specs[2]
    if out.dtype.itemsize not in (2, 4) or any(s.dtype != out.dtype for s in specs[:2]):
        return None
    if how == "auto" and (torch.device(out.device).type != "cuda" or max(
            math.prod(s.shape) * out.dtype.itemsize for s in specs) < MIN_BYTES):
        return None
    m, k, n = specs[0].shape[-2], specs[0].shape[-1], specs[1].shape[-1]
    per_row = ALIGN_BYTES // out.dtype.itemsize
    padded = tuple(-(-d // per_row) * per_row if d >= MIN_ROW_ELEMENTS or how == "always" else d for d in (m, k, n))
    return ((m, k, n), padded) if padded != (m, k, n) and min(m, k, n) > 0 else None


def _padded_gemm(graph: tc_ir.Graph, node: Node, dims: tuple, padded: tuple, memo: dict) -> Node:
    (m, _, n), (mp, kp, np_) = dims, padded
    i, j = GEMM_OPERANDS[node.target]
    args = list(node.args)
    args[i] = _pad_dim(graph, _pad_dim(graph, args[i], -2, mp, memo), -1, kp, memo)
    args[j] = _pad_dim(graph, _pad_dim(graph, args[j], -2, kp, memo), -1, np_, memo)
    if i == 1 and isinstance(args[0], Node):  # addmm/baddbmm: the bias broadcasts to [..., M, N]
        bias_shape = tuple(args[0].spec.shape)
        if bias_shape and bias_shape[-1] == n:
            args[0] = _pad_dim(graph, args[0], -1, np_, memo)
        if len(bias_shape) >= 2 and bias_shape[-2] == m:
            args[0] = _pad_dim(graph, args[0], -2, mp, memo)
    result = graph.call(node.target, *args, kwargs=dict(node.kwargs))
    rank = len(node.spec.shape)
    if mp != m:
        result = graph.call(aten.slice.Tensor, result, rank - 2, 0, m)
    if np_ != n:
        result = graph.call(aten.slice.Tensor, result, rank - 1, 0, n)
    return result


def _pad_dim(graph: tc_ir.Graph, value: Node, dim: int, size: int, memo: dict) -> Node:
    """``value`` zero-padded to ``size`` along ``dim`` (shared by every GEMM that needs it). A
    transposed view is padded at its base, so a matrix and its transpose share one padded copy
    (the backward's ``grad_logits @ W`` and ``grad_logits.t() @ h``)."""
    shape = tuple(value.spec.shape)
    dim %= len(shape)
    if shape[dim] == size:
        return value
    key = (value, dim, size)
    if key not in memo:
        if value.op == "call" and value.target in _TRANSPOSES and isinstance(value.args[0], Node):
            base_dim = _transposed_dim(value, dim)
            base = _pad_dim(graph, value.args[0], base_dim, size, memo)
            memo[key] = graph.call(value.target, base, *value.args[1:])
        else:
            pad = [0, 0] * (len(shape) - 1 - dim) + [0, size - shape[dim]]
            memo[key] = graph.call(aten.constant_pad_nd.default, value, pad, 0.0)
    return memo[key]


def _transposed_dim(view: Node, dim: int) -> int:
    """The dim of the base that dim ``dim`` of a ``t``/``transpose``/``permute`` view reads."""
    rank = len(view.spec.shape)
    if view.target is aten.t.default:
        return rank - 1 - dim if rank == 2 else dim
    if view.target is aten.transpose.int:
        d0, d1 = (d % rank for d in view.args[1:3])
        return d1 if dim == d0 else d0 if dim == d1 else dim
    return view.args[1][dim] % rank
