"""Aligned GEMMs (option ``pad_mm_operands``): every large GEMM of unaligned M, N or K is computed
on zero-padded operands and its result sliced back (``pad_gemm_dims``, run on the graph before
lowering).

cuBLAS runs its fast GEMM kernels only when the matrices are 16-byte aligned. With torch 2.11's
cuBLAS on an H100, a bf16 GEMM whose M, N or K is not a multiple of 8 runs an unaligned kernel
(``..._align1``) whatever its leading dims: GPT-2's LM head ``[4096, 768] @ [768, 50257]`` took
3.3 ms, and 3.25 ms when only its rows were given a padded stride; with N padded to 50264, 0.5 ms.
So the dims themselves are padded: operands with zeros (a padded K adds 0 to every sum; padded M
rows and N columns are cut off), one pad kernel per operand (fused into its producer when that is
computed, e.g. the autocast cast of a weight). Aligned dims make aligned rows, so no buffer needs a
padded row stride.

Whether that pays depends on the device and its cuBLAS, so "auto" measures it (``_pays``): once per
GEMM (device, op, operand layouts), the GEMM as it is against its padded form (pads included), each
run as a small graph on example tensors; the padded form is taken only when it is at least 10%
faster. On the H200 with torch 2.11 (2026-12-03) GPT-2's unaligned LM head measured 3.35 ms as
it is and 0.98 ms padded in row chunks (copies included).

A result read inside the graph is a slice (a strided view) of the padded product that kernels
read in place. A result that is a graph output (or is mutated) must be a tensor of eager's
contiguous layout: it is computed by :func:`gemm_rows_out` in chunks of rows, each chunk's padded
product written into one reusable workspace and copied into its rows of the output, so the extra
memory is one chunk (at most ``WORKSPACE_BYTES``), not a second product (GPT-2's logits: 0.8 GB).
"""

from __future__ import annotations

import math
from typing import Any

import torch

import tc_ir
from tc_ir import Node, TensorSpec
from tc_ir.aliasing import aliases, escaping

from .decompositions import EXTERN_PREFERRED

aten = torch.ops.aten
perf = tc_ir.logs.get_logger("perf_hints")

ALIGN_BYTES = 16
# "auto" pads only where it pays: dims of at least 64 elements (the padding, at most 7 bf16 rows
# or columns, then costs at most ~11% of the work; 0.01% at 50257) and GEMMs touching a tensor of
# at least 1 MiB (below that a GEMM is bound by its launch, and the pad copies would cost more
# than the unaligned kernel loses).
MIN_ROW_ELEMENTS = 64
MIN_BYTES = 1 << 20
# A chunked GEMM (gemm_rows_out) holds at most this much workspace, but takes at least
# MIN_CHUNK_ROWS rows a chunk: below ~1k rows a GEMM fills an H100's 132 SMs with fewer tiles and
# the chunks' extra launches start to show. GPT-2's logits: 1024 rows of 50264, 98 MiB (1/8 of them).
WORKSPACE_BYTES = 64 << 20
MIN_CHUNK_ROWS = 1024

# Positions of the two GEMM operands (an addmm's bias is not read as a GEMM matrix).
GEMM_OPERANDS = {aten.mm.default: (0, 1), aten.addmm.default: (1, 2), aten.bmm.default: (0, 1),
                 aten.baddbmm.default: (1, 2)}
_KINDS = {aten.mm.default: "mm", aten.addmm.default: "addmm", aten.bmm.default: "bmm",
          aten.baddbmm.default: "baddbmm"}

def mode(options: Any) -> str:
    return options.get("pad_mm_operands", "auto")


def _static(*values) -> bool:
    return all(isinstance(v, int) for vs in values for v in vs)


def _mutated(node: Node) -> bool:
    users = list(node.users)
    while users:
        user = users.pop()
        if user.op == "call" and tc_ir.is_mutating(user.target):
            return True
        if user.op == "call" and aliases(user):
            users += list(user.users)
    return False


# ---- padded GEMM dims ---------------------------------------------------------------------------

_TRANSPOSES = {aten.t.default, aten.transpose.int, aten.permute.default}
_PADDED_GEMMS = tuple(_KINDS)


def pad_gemm_dims(graph: tc_ir.Graph, how: str) -> tc_ir.Graph:
    """``graph`` with every large GEMM (``mm``, ``addmm``, ``bmm``, ``baddbmm``) of unaligned M, N or K
    computed on padded operands (see the module docstring); unchanged under "never"."""
    if how == "never" or not any(_gemm_pads(n, how) for n in graph.calls):
        return graph
    graph = graph.copy()
    outputs = escaping([v for v in tc_ir.leaves(graph.outputs) if isinstance(v, Node)])
    memo: dict = {}
    for node in list(graph.calls):
        pads = _gemm_pads(node, how)
        # outputs keep eager's (contiguous) layout: computed into it chunk by chunk
        into_rows = bool(pads) and (node in outputs or _mutated(node))
        if not pads or how == "auto" and not _pays(node, *pads, into_rows):
            continue
        with graph.inserting_before(node):
            new = _padded_gemm(graph, node, *pads, memo, into_rows=into_rows)
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


def _padded_gemm(graph: tc_ir.Graph, node: Node, dims: tuple, padded: tuple, memo: dict, into_rows: bool) -> Node:
    (m, _, n), (mp, kp, np_) = dims, padded
    i, j = GEMM_OPERANDS[node.target]
    a, b = node.args[i], node.args[j]
    if into_rows:
        # gemm_rows_out splits off the last (< 8) rows and columns instead: M and N are padded
        # only where they are the operand's contiguous dim (its leading dim), as K always is
        mp = mp if a.spec.stride[-2] == 1 and a.spec.shape[-1] != 1 else m
        np_ = np_ if b.spec.stride[-1] == 1 and b.spec.shape[-2] != 1 else n
    args = list(node.args)
    args[i] = _pad_dim(graph, _pad_dim(graph, a, -2, mp, memo), -1, kp, memo)
    args[j] = _pad_dim(graph, _pad_dim(graph, b, -2, kp, memo), -1, np_, memo)
    if i == 1 and isinstance(args[0], Node):  # addmm/baddbmm: the bias broadcasts to [..., M, N]
        bias_shape = tuple(args[0].spec.shape)
        if bias_shape and bias_shape[-1] == n:
            args[0] = _pad_dim(graph, args[0], -1, np_, memo)
        if len(bias_shape) >= 2 and bias_shape[-2] == m:
            args[0] = _pad_dim(graph, args[0], -2, mp, memo)
    if into_rows:
        alpha, beta = node.kwargs.get("alpha", 1), node.kwargs.get("beta", 1)
        batches, rows = chunking(tuple(node.spec.shape[:-2]), mp, np_, node.spec.dtype.itemsize)
        return graph.call(gemm_rows_out_op, _KINDS[node.target], args[i], args[j], args[0] if i == 1 else None,
                          m, n, float(alpha), float(beta), batches, rows, spec=node.spec)
    result = graph.call(node.target, *args, kwargs=dict(node.kwargs))
    rank = len(node.spec.shape)
    if mp != m:
        result = graph.call(aten.slice.Tensor, result, rank - 2, 0, m)
    if np_ != n:
        result = graph.call(aten.slice.Tensor, result, rank - 1, 0, n)
    return result


# ---- does padding pay on this device? ------------------------------------------------------------

PAY_RATIO = 0.9  # the padded form must take at most this share of the plain GEMM's time
_MEASURED: dict[tuple, bool] = {}  # per process; a compiled graph's cache entry keeps its choice


def _pays(node: Node, dims: tuple, padded: tuple, into_rows: bool) -> bool:
    """Is ``node`` padded as ``_padded_gemm`` would pad it faster than as it is, measured on its
    device with example operands of its layouts (once per device, op and layouts)?"""
    device = torch.device(node.spec.device)
    operands = list({id(a): a for a in node.args if isinstance(a, Node)}.values())
    key = (_device_name(device), node.target, tuple(_layout(a) for a in operands),
           tuple(repr(a) for a in node.args if not isinstance(a, Node)), repr(sorted(node.kwargs.items())), into_rows)
    if key not in _MEASURED:
        _MEASURED[key] = _measure(node, operands, dims, padded, into_rows, device)
    return _MEASURED[key]


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def _layout(v: Node) -> tuple:
    return tuple(v.spec.shape), tuple(v.spec.stride), v.spec.dtype


def _measure(node: Node, operands: list, dims: tuple, padded: tuple, into_rows: bool, device) -> bool:
    from .codegen.triton_mm import bench

    graphs = gemm_graphs(node, operands, dims, padded, into_rows)
    try:
        tensors = [_example(a.spec) for a in operands]
        plain, padded_ms = (bench(lambda g=g: tc_ir.interpret(g, tensors), device, warmup=3, rep=15) for g in graphs)
    except (RuntimeError, torch.cuda.OutOfMemoryError) as e:  # no room to measure: the GEMM stays as it is
        perf.debug("padding %s not measured: %s", node.name, e)
        return False
    perf.debug("%s: %.3f ms as it is, %.3f ms padded", node.name, plain, padded_ms)
    return padded_ms <= PAY_RATIO * plain


def gemm_graphs(node: Node, operands: list, dims: tuple, padded: tuple, into_rows: bool) -> list[tc_ir.Graph]:
    """Two graphs of ``node`` alone, its operands their inputs: as it is, and padded."""
    graphs = []
    for padding in (False, True):
        graph = tc_ir.Graph("padded_gemm" if padding else "gemm")
        inputs = {id(a): graph.input(a.name, a.spec) for a in operands}
        args = [inputs[id(a)] if isinstance(a, Node) else a for a in node.args]
        gemm = graph.call(node.target, *args, kwargs=dict(node.kwargs), spec=node.spec)
        if padding:
            graph.output(_padded_gemm(graph, gemm, dims, padded, {}, into_rows))
            graph.erase(gemm)
        else:
            graph.output(gemm)
        graphs.append(graph)
    return graphs


def _example(spec: TensorSpec) -> torch.Tensor:
    """Random values in ``spec``'s layout (broadcast strides included: the storage is filled)."""
    shape, stride = tuple(spec.shape), tuple(spec.stride)
    storage = torch.empty(1 + sum((d - 1) * st for d, st in zip(shape, stride) if d), dtype=spec.dtype,
                          device=spec.device)
    storage.normal_() if spec.dtype.is_floating_point else storage.zero_()
    return storage.as_strided(shape, stride)


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


# ---- a padded GEMM computed into eager's layout, a chunk of rows at a time ------------------------

def chunking(batch: tuple, mp: int, np_: int, itemsize: int) -> tuple[int, int]:
    """(batches, rows) of one chunk of a ``[*batch, mp, np_]`` product: whole matrices while they
    fit ``WORKSPACE_BYTES``, else row blocks of one matrix: a multiple of 8 rows (each chunk's M
    stays aligned), as many as fit ``WORKSPACE_BYTES`` but, up to ``MIN_CHUNK_ROWS``, at least 1/8
    of the matrix's rows (a GEMM of few rows fills the GPU less)."""
    matrix = mp * np_ * itemsize
    if matrix <= WORKSPACE_BYTES:
        return max(1, min(math.prod(batch), WORKSPACE_BYTES // max(matrix, 1))), mp
    fit = WORKSPACE_BYTES // (np_ * itemsize) // 8 * 8
    rows = max(fit, min(MIN_CHUNK_ROWS, -(-mp // 64) * 8), 8)
    return 1, min(rows, mp)


def gemm_rows_out(kind: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, m: int, n: int,
                  alpha: float, beta: float, batches: int, rows: int) -> torch.Tensor:
    """``kind`` ("mm", "addmm", "bmm", "baddbmm") of operands ``a`` ``[..., Ma, Kp]`` and ``b``
    ``[..., Kp, Nb]`` (and ``bias``, broadcasting to ``[..., Ma, Nb]``; padded rows and columns
    beyond ``m``, ``n`` are zeros), returned as a new contiguous ``[..., m, n]`` tensor.

    The aligned block, the first ``Ma`` and ``Nb`` rounded down to 8 (16 bytes), is computed
    ``batches`` matrices x ``rows`` rows at a time into one contiguous workspace (an aligned C)
    and copied into the output's rows; the last (< 8) columns and rows, if unaligned, by one
    thin GEMM each."""
    batch = tuple(a.shape[:-2])
    per = max(1, ALIGN_BYTES // a.element_size())
    m_main = a.shape[-2] // per * per  # beyond m where a's rows are padded: those are cut off
    n_main = min(b.shape[-1] // per * per, -(-n // per) * per)
    out = a.new_empty((*batch, m, n))
    if out.numel() == 0:
        return out
    total = math.prod(batch)
    if m_main and n_main:
        space = _workspace(a, min(batches, total) * min(rows, m_main) * n_main)
        for b0 in range(0, total, batches) if batch else (None,):
            b1 = None if b0 is None else min(b0 + batches, total)
            for r0 in range(0, m_main, rows):
                r1 = min(r0 + rows, m_main)
                shape = (r1 - r0, n_main) if b0 is None else (b1 - b0, r1 - r0, n_main)
                chunk = space[:math.prod(shape)].view(shape)
                _gemm_into(kind, _part(a, b0, b1, r0, r1), _part(b, b0, b1, None, None, 0, n_main),
                           _part(bias, b0, b1, r0, r1, 0, n_main), alpha, beta, chunk)
                end = min(r1, m)
                cols = min(n, n_main)
                (out if b0 is None else out[b0:b1])[..., r0:end, :cols].copy_(chunk[..., :end - r0, :cols])
    if n_main < n:  # the last columns of every row
        out[..., n_main:].copy_(_gemm(kind, a[..., :m, :], _part(b, None, None, None, None, n_main, n),
                                      _part(bias, None, None, 0, m, n_main, n), alpha, beta))
    if m_main < m and n_main:  # the last rows
        out[..., m_main:, :n_main].copy_(_gemm(kind, a[..., m_main:m, :], _part(b, None, None, None, None, 0, n_main),
                                               _part(bias, None, None, m_main, m, 0, n_main), alpha, beta)[..., :n])
    return out


def _workspace(like: torch.Tensor, numel: int) -> torch.Tensor:
    return like.new_empty((numel,))


def _part(t: torch.Tensor | None, b0: int | None, b1: int | None, r0: int | None, r1: int | None,
          c0: int | None = None, c1: int | None = None) -> torch.Tensor | None:
    """Matrices ``b0:b1``, rows ``r0:r1`` and columns ``c0:c1`` of ``t``; a dim of size 1 broadcasts
    and is kept whole (a bias ``[N]``, ``[1, N]``, ``[M, 1]``, or ``[1, M, N]`` of a baddbmm)."""
    if t is None:
        return None
    if c0 is not None and t.dim() >= 1 and t.shape[-1] != 1:
        t = t[..., c0:c1]
    if r0 is not None and t.dim() >= 2 and t.shape[-2] != 1:
        t = t[..., r0:r1, :]
    if b0 is not None and t.dim() == 3 and t.shape[0] != 1:
        t = t[b0:b1]
    return t


def _gemm(kind: str, a, b, bias, alpha: float, beta: float) -> torch.Tensor:
    if kind in ("mm", "bmm"):
        return torch.matmul(a, b)
    fn = torch.addmm if kind == "addmm" else torch.baddbmm
    return fn(bias, a, b, beta=beta, alpha=alpha)


def _gemm_into(kind: str, a, b, bias, alpha: float, beta: float, out: torch.Tensor) -> None:
    if kind == "mm":
        torch.mm(a, b, out=out)
    elif kind == "bmm":
        torch.bmm(a, b, out=out)
    elif kind == "addmm":
        torch.addmm(bias, a, b, beta=beta, alpha=alpha, out=out)
    else:
        torch.baddbmm(bias, a, b, beta=beta, alpha=alpha, out=out)


def _gemm_rows_out_fake(kind, a, b, bias, m, n, alpha, beta, batches, rows):
    return a.new_empty((*a.shape[:-2], m, n))


# A torch op, so graphs, the tc_ir interpreter, FakeTensors and the compile cache (by its name,
# ``tc_inductor.gemm_rows_out.default``) see it as any ATen call; the lowering keeps it an extern call.
_op = torch.library.custom_op("tc_inductor::gemm_rows_out", mutates_args=())(gemm_rows_out)
_op.register_fake(_gemm_rows_out_fake)
gemm_rows_out_op = torch.ops.tc_inductor.gemm_rows_out.default
EXTERN_PREFERRED.add(gemm_rows_out_op)  # a vendor GEMM per chunk: never decomposed, returns new memory
