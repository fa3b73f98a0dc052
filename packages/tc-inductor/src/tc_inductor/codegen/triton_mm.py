"""Triton matmul templates for ``mm``/``addmm``/``bmm`` with their pointwise consumers fused.

Outside max-autotune a matmul is an extern call (cuBLAS through torch) and its epilogue (bias,
activation, residual, cast) one generated pointwise kernel after it. This pass, run on a
schedule, may replace the pair by one template kernel: ``tl.dot`` over K blocks into an fp32
accumulator, then the epilogue kernel's statements, rendered by the ordinary Triton writer with
its ``x0, x1 (, x2)`` variables bound to the output tile, so the product never goes to memory.

When it applies (``Options.mm_template``):
  * ``"auto"``: under ``max_autotune`` on CUDA tensors only; a few block configs are benchmarked
    (``triton.testing.do_bench``, median) against the extern call plus its epilogue kernel, at
    compile time, and the fastest wins. The choice lives in the compiled record, so the
    graph cache (keyed by graph, input specs, device and options) keeps it.
  * ``"always"`` (tests): the template with its heuristic config, also on CPU tensors (Triton
    interpreter); ``"autotune"`` (tests): benchmark on any device (CPU: a wall-clock median);
    ``"never"``: extern calls only.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import time
import warnings
from typing import Any

import attrs
import sympy
import torch

import tc_ir

from .. import kir
from ..ir import BufferValue, ComputedBuffer, ExternCall, strided_index
from ..kir import Ops, UOp
from ..scheduler import Group, Schedule, build_kernel, reads_of
from .common import Scope
from .registry import register_backend
from .triton import INT32_LIMIT, TritonKernelWriter, bf16_helper, next_pow2

aten = torch.ops.aten
log = tc_ir.logs.get_logger("fusion")
perf = tc_ir.logs.get_logger("perf_hints")
MATMULS = {aten.mm.default, aten.addmm.default, aten.bmm.default}
DOT_DTYPES = {torch.float32, torch.bfloat16, torch.float16}
ACC = UOp(Ops.REDUCED, torch.float32, (), "acc")  # the accumulator tile, by name


@attrs.define(eq=False)
class TemplateGroup(Group):
    """A matmul extern call and the kernel of its epilogue, run as one template kernel.
    ``members`` are the epilogue's buffers, after a stand-in for the product when it is stored."""

    extern: Any = None
    epilogue: Any = None  # the Group fused in, or None
    config: Any = None  # the autotuned launch config, or None for the heuristic one


# ---- choosing what to fuse ------------------------------------------------------------------------

def mode(opts: Any, device: Any) -> str:
    """"template", "autotune" or "extern" for a matmul on ``device`` under ``opts``."""
    choice = opts.get("mm_template", "auto")
    if choice == "always":
        return "template"
    if choice == "autotune":
        return "autotune"
    if choice == "auto" and opts.get("max_autotune") and torch.device(device).type == "cuda":
        return "autotune"
    return "extern"


def fuse_templates(lowered: Any, sched: Schedule, opts: Any, dtypes: dict) -> Schedule:
    """``sched`` with each eligible matmul extern (and its epilogue kernel) as a TemplateGroup."""
    steps = list(sched.steps)
    if getattr(lowered, "size_plan", None):  # templates are generated for static shapes only
        return sched
    if not any(isinstance(s, ExternCall) and s.target in MATMULS for s in steps):
        return sched
    stored, decisions = set(sched.stored), list(sched.log)
    for extern in [s for s in steps if isinstance(s, ExternCall) and s.target in MATMULS]:
        how = mode(opts, extern.outputs.device) if isinstance(extern.outputs, BufferValue) else "extern"
        if how == "extern" or _ineligible(extern):
            continue
        epilogue = _epilogue_of(extern, steps, lowered)
        template = _template_group(extern, epilogue, steps, lowered, stored)
        if template is None:
            continue
        kernel = template_kernel(template, stored, dtypes, opts)
        if how == "autotune":
            try:
                config = autotune(template, kernel, lowered, opts, dtypes, stored)
            except Exception as e:  # benchmarking must never fail a compile: keep the extern call
                perf.debug("autotuning matmul %s failed (%s: %s)", extern.name, type(e).__name__, e)
                config = None
            if config is None:
                decisions.append(f"matmul {extern.name}: the extern call (+ epilogue kernel) is fastest")
                continue
            template.config = config
        steps[steps.index(template.epilogue or extern)] = template
        if template.epilogue is not None:
            steps.remove(extern)
        decisions.append(f"matmul {extern.name} as a Triton template"
                         + (f" with epilogue kernel {epilogue.id} fused" if epilogue else ""))
    for line in decisions[len(sched.log):]:
        log.debug("%s", line)
    return Schedule(steps, stored, decisions)


def _ineligible(extern: ExternCall) -> bool:
    out = extern.outputs
    tensors = [a for a in extern.args if isinstance(a, BufferValue)]
    a, b = extern.args[-2], extern.args[-1]
    if not (isinstance(a, BufferValue) and isinstance(b, BufferValue) and a.dtype == b.dtype == out.dtype):
        return True
    if out.dtype not in DOT_DTYPES or 1 in out.shape or 0 in a.shape or 0 in b.shape:
        return True
    static = all(isinstance(v, int) for t in tensors + [out] for v in (*t.shape, *t.stride, t.offset))
    if extern.target is aten.addmm.default:
        bias = extern.args[0]
        if not isinstance(bias, BufferValue) or bias.dtype not in kir.KERNEL_DTYPES or len(extern.args) != 3:
            return True
    return not static or set(extern.kwargs) - {"beta", "alpha"}


def _epilogue_of(extern: ExternCall, steps: list, lowered: Any) -> Group | None:
    """The pointwise kernel right over the product's elements that reads it, if one does."""
    out = extern.outputs
    for step in steps[steps.index(extern) + 1:]:
        if isinstance(step, ExternCall) and step.mutates:
            return None  # nothing moves across a mutation
        if isinstance(step, Group) and not step.r and step.x == tuple(out.shape) \
                and any(out.name in reads_of(m) for m in step.members):
            return step
    return None


def _template_group(extern: ExternCall, epilogue: Group | None, steps: list, lowered: Any,
                    stored: set) -> TemplateGroup | None:
    out = extern.outputs
    at = steps.index(epilogue) if epilogue is not None else steps.index(extern)
    others = [s for s in steps if s is not epilogue and s is not extern and out.name in _reads(s)]
    if any(steps.index(s) < at for s in others):
        epilogue, at = None, steps.index(extern)  # someone needs the product before the epilogue
    if epilogue is not None and not _reads_own_element(epilogue, out):
        epilogue = None
    keep = epilogue is None or bool(others) or out.name in lowered.output_buffers
    members = list(epilogue.members) if epilogue is not None else []
    if keep:
        stored.add(out.name)
        members.insert(0, _product_buffer(extern))
    x = tuple(out.shape)
    return TemplateGroup(-1 - steps.index(extern), members, x, (), out.device, True, extern, epilogue)


def _reads(step: Any) -> set[str]:
    members = step.members if isinstance(step, Group) else [step]
    return set().union(*(reads_of(m) for m in members))


def _reads_own_element(group: Group, out: BufferValue) -> bool:
    """Whether every read of the product in ``group`` is of the element being computed."""
    want = strided_index(kir.xvars(len(out.shape)), out.stride)
    for m in group.members:
        index = tuple(kir.xvars(len(m.shape)))
        for u in m.body(index, ()).toposort():
            if u.op is Ops.LOAD and u.arg[0] == out.name and (u.arg[1] != want or u.src):
                return False
    return True


def _product_buffer(extern: ExternCall) -> ComputedBuffer:
    """A stand-in for the product: its layout (the wrapper allocates it) and what it reads."""
    out = extern.outputs
    args = [a for a in extern.args if isinstance(a, BufferValue)]

    def body(index, rindex):
        loads = [kir.load(a.name, sympy.Integer(0), a.dtype) for a in args]
        return loads[-1] if len(loads) == 1 else UOp(Ops.ADD, loads[0].dtype, tuple(loads[:2]))

    return ComputedBuffer(out.name, out.shape, out.stride, out.dtype, out.device, body)


# ---- the kernel -----------------------------------------------------------------------------------

def product_value(extern: ExternCall) -> UOp:
    """The product at the tile's element, as the extern call would store it (rounded)."""
    out = extern.outputs
    xs = kir.xvars(len(out.shape))
    value = ACC
    if extern.target is aten.addmm.default:
        bias = extern.args[0]
        beta, alpha = extern.kwargs.get("beta", 1), extern.kwargs.get("alpha", 1)
        pad = len(out.shape) - len(bias.shape)
        index = tuple(sympy.Integer(0) if n == 1 else xs[pad + i] for i, n in enumerate(bias.shape))
        if alpha != 1:
            value = kir.binary(Ops.MUL, value, kir.const(float(alpha), torch.float32))
        if beta != 0:
            term = kir.cast(bias.load(index), torch.float32)
            if beta != 1:
                term = kir.binary(Ops.MUL, term, kir.const(float(beta), torch.float32))
            value = kir.binary(Ops.ADD, value, term)
    return kir.round_to(value, out.dtype)


def template_kernel(group: TemplateGroup, stored: set, dtypes: dict, opts: Any) -> kir.Kernel:
    """The epilogue as a kir.Kernel over the output tile, reading the accumulator for the product."""
    extern, out = group.extern, group.extern.outputs
    product = product_value(extern)
    stmts: list = []
    if out.name in stored:
        stmts.append(kir.Store(out.name, strided_index(kir.xvars(len(out.shape)), out.stride), product, out.dtype))
    if group.epilogue is not None:
        epi = build_kernel(group.epilogue, stored, dtypes, opts)
        for stage in epi.stages:
            stmts += [attrs.evolve(s, value=_replace_product(s.value, out.name, product)) for s in stage.inner + stage.outer]
    loads: dict[str, None] = {}
    for s in stmts:
        loads.update({name: None for name in kir.buffer_reads(s.value)})
    inputs = tuple((n, dtypes[n] if n in dtypes else _dtype_of(extern, n)) for n in loads)
    outputs = tuple(dict((s.buffer, s.dtype) for s in stmts).items())
    return kir.Kernel(tuple(out.shape), (), (kir.Stage(tuple(stmts), ()),), inputs, outputs, ())


def _dtype_of(extern: ExternCall, name: str) -> torch.dtype:
    return next(a.dtype for a in extern.args if isinstance(a, BufferValue) and a.name == name)


def _replace_product(value: UOp, name: str, product: UOp) -> UOp:
    memo: dict[UOp, UOp] = {}

    def visit(u: UOp) -> UOp:
        if u not in memo:
            if u.op is Ops.LOAD and u.arg[0] == name:
                memo[u] = kir.cast(product, u.dtype)
            else:
                src = tuple(visit(s) for s in u.src)
                memo[u] = u if src == u.src else UOp(u.op, u.dtype, src, u.arg)
        return memo[u]

    return visit(value)


class _EpilogueWriter(TritonKernelWriter):
    """The pointwise writer over a 2-D output tile: indices through x0, x1 (no flat offsets)."""

    def flat_offset(self, expr: sympy.Expr) -> str | None:
        return None


def generate(group: TemplateGroup, kernel: kir.Kernel, device: Any) -> str:
    """The template's Triton source (block sizes are launch constants)."""
    extern = group.extern
    interpret = torch.device(device).type != "cuda"
    writer = _EpilogueWriter(kernel, "kernel", interpret)
    writer.base_mask = writer.xmask = "xmask"
    writer.shape = "[BLOCK_M, BLOCK_N]"
    lines: list[str] = []
    scope = Scope()  # values shared by the stores (the product, a loaded bias) are computed once
    for stage in kernel.stages:
        for s in stage.inner:
            writer.store(s, scope, lines, "xmask", "[BLOCK_M, BLOCK_N]")
    batched = extern.target is aten.bmm.default
    wide = _needs_int64(extern)
    params = ["a_ptr", "b_ptr"] + [writer.params[n] for n, _ in kernel.inputs + kernel.outputs]
    body = _MAINLOOP.format(
        precision=_precision(extern.outputs.dtype, device),
        # the interpreter's numpy has no bf16 dot: it would multiply the raw bits
        upcast=".to(tl.float32)" if interpret and extern.outputs.dtype in kir.LOW_PRECISION else "", idx=".to(tl.int64)" if wide else "",
        batch="tl.program_id(1)" + (".to(tl.int64)" if wide else "") if batched else "0",
        tiles=("x0 = tl.full([BLOCK_M, 1], 0, tl.int32) + pid_b\nx1 = rm[:, None]\nx2 = rn[None, :]" if batched
               else "x0 = rm[:, None]\nx1 = rn[None, :]"))
    mask = "(x1 < M) & (x2 < N)" if batched else "(x0 < M) & (x1 < N)"
    text = (f"def kernel({', '.join(params)}, M, N, K: tl.constexpr, stride_ab, stride_am, stride_ak, stride_bb, stride_bk, "
            f"stride_bn, {''.join(a + ', ' for a in writer.seed_args.values())}"
            "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):\n"
            + "".join(f"    {line}\n" for line in body.splitlines() + [f"xmask = {mask}"] + lines))
    digest = hashlib.sha256(text.encode()).hexdigest()[:6]
    name = f"tc_mm_{_op_name(extern)}_{digest}"
    return HEADER + bf16_helper(text, interpret) + writer.decorator() + text.replace("def kernel(", f"def {name}(", 1)


HEADER = '''import triton
import triton.language as tl
from triton.language.extra import libdevice


'''

# Grouped tile order (GROUP_M rows of tiles share B's columns in L2); masks for odd M/N/K.
_MAINLOOP = '''pid = tl.program_id(0)
pid_b = {batch}
grid_m = tl.cdiv(M, BLOCK_M)
grid_n = tl.cdiv(N, BLOCK_N)
width = GROUP_M * grid_n
group_id = pid // width
group_size = tl.minimum(grid_m - group_id * GROUP_M, GROUP_M)
pid_m = group_id * GROUP_M + (pid % group_size)
pid_n = (pid % width) // group_size
rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){idx}
rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)){idx}
rk = tl.arange(0, BLOCK_K)
a_ptrs = a_ptr + pid_b * stride_ab + rm[:, None] * stride_am + rk[None, :] * stride_ak
b_ptrs = b_ptr + pid_b * stride_bb + rk[:, None] * stride_bk + rn[None, :] * stride_bn
acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
for k in range(0, K, BLOCK_K):
    kk = k + rk
    a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
    b = tl.load(b_ptrs, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
    acc += tl.dot(a{upcast}, b{upcast}{precision}, out_dtype=tl.float32)
    a_ptrs += BLOCK_K * stride_ak
    b_ptrs += BLOCK_K * stride_bk
{tiles}'''


def _op_name(extern: ExternCall) -> str:
    return {aten.mm.default: "mm", aten.addmm.default: "addmm", aten.bmm.default: "bmm"}[extern.target]


def _precision(dtype: torch.dtype, device: Any) -> str:
    """fp32 inputs use TF32 where torch's matmuls would (``torch.backends.cuda.matmul.allow_tf32``)."""
    if dtype != torch.float32:
        return ""
    return ', input_precision="tf32"' if allow_tf32(device) else ', input_precision="ieee"'


def allow_tf32(device: Any = "cuda") -> bool:
    if torch.device(device).type != "cuda":
        return False
    with warnings.catch_warnings():  # newer torch prefers fp32_precision; the flag still reads right
        warnings.simplefilter("ignore")
        return bool(torch.backends.cuda.matmul.allow_tf32)


def _needs_int64(extern: ExternCall) -> bool:
    tensors = [a for a in extern.args if isinstance(a, BufferValue)] + [extern.outputs]
    return any(math.prod(t.shape) + t.offset >= INT32_LIMIT for t in tensors)


# ---- configs, launching ---------------------------------------------------------------------------

def dims(extern: ExternCall) -> tuple[int, int, int, int]:
    """(batch, M, N, K)."""
    a, b = extern.args[-2], extern.args[-1]
    batch = a.shape[0] if len(a.shape) == 3 else 1
    return batch, a.shape[-2], b.shape[-1], a.shape[-1]


def heuristic_config(extern: ExternCall, interpret: bool) -> dict:
    _, m, n, k = dims(extern)
    if interpret:
        return {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 8, "num_warps": 4, "num_stages": 1}
    bm, bn = min(128, max(16, next_pow2(m))), min(128, max(16, next_pow2(n)))
    bk = 64 if extern.outputs.dtype != torch.float32 else 32
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": min(bk, max(16, next_pow2(k))), "GROUP_M": 8,
            "num_warps": 8 if bm * bn >= 128 * 128 else 4, "num_stages": 3}


def autotune_configs(extern: ExternCall, interpret: bool) -> list[dict]:
    if interpret:
        return [heuristic_config(extern, True), {**heuristic_config(extern, True), "BLOCK_M": 32, "BLOCK_K": 32}]
    _, m, n, k = dims(extern)
    low = extern.outputs.dtype != torch.float32
    shapes = [(64, 64, 32, 4, 4), (64, 128, 32, 4, 4), (128, 64, 32, 4, 4), (128, 128, 32, 8, 3),
              (128, 128, 64, 8, 3), (64, 64, 64, 4, 3), (32, 64, 32, 4, 4)]
    if low:
        shapes += [(128, 256, 64, 8, 3), (64, 128, 64, 4, 4)]
    configs = [heuristic_config(extern, False)]
    for bm, bn, bk, warps, stages in shapes:
        bm, bn, bk = min(bm, max(16, next_pow2(m))), min(bn, max(16, next_pow2(n))), min(bk, max(16, next_pow2(k)))
        config = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": warps, "num_stages": stages}
        if config not in configs:
            configs.append(config)
    return configs


def launch_args(group: TemplateGroup, kernel: kir.Kernel) -> tuple[list, list[int]]:
    """(buffer operands, integer arguments) of a launch, in the kernel's order."""
    extern = group.extern
    a, b = extern.args[-2], extern.args[-1]
    buffers = [a, b] + [n for n, _ in kernel.inputs + kernel.outputs]
    _, m, n, k = dims(extern)
    sa = (a.stride[0] if len(a.shape) == 3 else 0, a.stride[-2], a.stride[-1])
    sb = (b.stride[0] if len(b.shape) == 3 else 0, b.stride[-2], b.stride[-1])
    return buffers, [m, n, k, *sa, *sb] + [slot for _, slot in kernel.seeds]


def grid(group: TemplateGroup, config: dict) -> tuple[int, int, int]:
    batch, m, n, _ = dims(group.extern)
    return (-(-m // config["BLOCK_M"]) * -(-n // config["BLOCK_N"]), batch, 1)


def launch_line(name: str, group: TemplateGroup, kernel: kir.Kernel, config: dict, layouts: dict) -> str:
    from ..wrapper import render_value

    buffers, ints = launch_args(group, kernel)
    args = [render_value(v, layouts) if isinstance(v, BufferValue) else v for v in buffers] + [str(i) for i in ints]
    consts = ", ".join(f"{k}={v}" for k, v in config.items())
    return f"{name}[{grid(group, config)}]({', '.join(args)}, {consts})  # Triton matmul template"


class TritonMatmulBackend:
    """Builds and loads template kernels (chosen by ``fuse_templates``, never by device)."""

    name = "triton_mm"

    def start(self, record: dict, options: Any) -> None:
        pass  # compiled at the first launch (or while autotuning)

    def load(self, record: dict, options: Any):
        from .triton import TritonBackend

        return TritonBackend()._kernel(record)


register_backend("triton_mm", lambda device, options: False, TritonMatmulBackend())


# ---- autotuning -----------------------------------------------------------------------------------

def autotune(group: TemplateGroup, kernel: kir.Kernel, lowered: Any, opts: Any, dtypes: dict,
             stored: set) -> dict | None:
    """The fastest template config, or None when the extern call (+ epilogue kernel) is faster."""
    from ..wrapper import _layouts

    device = group.device
    interpret = torch.device(device).type != "cuda"
    tensors = _example_tensors(_layouts(lowered), group, kernel)
    record = {"source": generate(group, kernel, device), "meta": {"interpret": interpret}}
    fn = TritonMatmulBackend().load(record, opts)
    buffers, ints = launch_args(group, kernel)
    args = [_operand(tensors, v) for v in buffers] + ints
    baseline = bench(_extern_runner(group, tensors, opts, dtypes, stored), device)
    best, best_time = None, baseline
    for config in autotune_configs(group.extern, interpret):
        try:
            elapsed = bench(lambda config=config: fn[grid(group, config)](*args, **config), device)
        except Exception as e:  # a config that does not compile (shared memory) is skipped
            perf.debug("matmul template config %s failed: %s: %s", config, type(e).__name__, e)
            continue
        perf.debug("matmul %s config %s: %.4f ms (extern %.4f ms)", group.extern.name, config, elapsed, baseline)
        if elapsed < best_time:
            best, best_time = config, elapsed
    return best


def bench(fn, device: Any, warmup: int = 10, rep: int = 50) -> float:
    """Median milliseconds of ``fn``: ``do_bench`` (``warmup`` and ``rep`` in ms) on a GPU, a
    wall clock (tests) elsewhere."""
    if torch.device(device).type == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _example_tensors(layouts: dict, group: TemplateGroup, kernel: kir.Kernel) -> dict:
    names = {v.name for v in group.extern.args if isinstance(v, BufferValue)}
    names |= {n for n, _ in kernel.inputs + kernel.outputs} | {group.extern.outputs.name}
    out = {}
    for name in names:
        shape, stride, dtype, device = layouts[name]
        t = torch.empty_strided(tuple(shape), tuple(stride), dtype=dtype, device=device)
        if dtype.is_floating_point:
            t.normal_()
        else:
            t.zero_()  # indices stay in range
        out[name] = t
    return out


def _operand(tensors: dict, v: Any) -> torch.Tensor:
    if isinstance(v, BufferValue):
        base = tensors[v.name]
        return base.as_strided(tuple(v.shape), tuple(v.stride), base.storage_offset() + v.offset)
    return tensors[v]


def _extern_runner(group: TemplateGroup, tensors: dict, opts: Any, dtypes: dict, stored: set):
    """The path the template competes with: the extern call, then the epilogue kernel."""
    extern = group.extern
    args = [_operand(tensors, a) if isinstance(a, BufferValue) else a for a in extern.args]
    epilogue = _epilogue_runner(group.epilogue, tensors, opts, dtypes, stored) if group.epilogue else None

    def run():
        tensors[extern.outputs.name] = extern.target(*args, **extern.kwargs)
        if epilogue is not None:
            epilogue()

    return run


def _epilogue_runner(epilogue: Group, tensors: dict, opts: Any, dtypes: dict, stored: set):
    from .registry import choose_backend
    from .triton import TritonBackend

    kernel = build_kernel(epilogue, stored, dtypes, opts)
    backend = choose_backend(epilogue.device, opts)
    if not isinstance(backend, TritonBackend):
        return lambda: None
    record = {"source": backend.generate(kernel, "kernel", opts, epilogue.device),
              "meta": backend.metadata(kernel, opts, epilogue.device)}
    fn = backend._kernel(record)
    names = [n for n, _ in kernel.inputs + kernel.outputs]
    xnumel = math.prod(kernel.xranges)
    consts = {} if record["meta"]["autotune"] else {k: v for k, v in record["meta"]["config"].items()}

    def run():
        block = consts.get("XBLOCK")
        launch_grid = (-(-xnumel // block),) if block else (lambda meta: (-(-xnumel // meta["XBLOCK"]),))
        fn[launch_grid](*[tensors[n] for n in names], xnumel, **consts)

    return run
