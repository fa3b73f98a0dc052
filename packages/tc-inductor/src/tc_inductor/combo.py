"""Multi-tensor kernels: many small independent pointwise kernels launched as one.

An optimizer step over N parameters fuses into one pointwise kernel per parameter (its update
and its state, ``lowering/foreach.py``), each over that parameter's shape: N launches of a
microsecond's work. Consecutive kernels of the schedule that do not read each other's results
are combined here into a :class:`ComboGroup`, generated as ONE kernel:

* Triton: one launch whose programs are split across the parts by ranges of ``program_id``
  (``if pid < 4: part0(...) elif pid < 9: part1(...)``), every part a ``@triton.jit`` helper
  over its own shape (shared by parts with the same body), one ``XBLOCK`` for all;
* C++: one function calling each part's function in turn (OpenMP inside each part).

Only static, pointwise, non-empty kernels without random seeds or checked indices are
combined, at most ``MAX_POINTERS`` buffer arguments a kernel (so it takes ``ceil(N / ~30)``
launches for an AdamW step). The schedule's order is kept (a combo runs where its first part
ran: the parts are consecutive and independent), so reading and writing in place stays as the
in-place planner decided for the combo's members as one step.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any

import attrs
import torch

from . import kir
from .codegen import choose_backend
from .codegen import cpp as cpp_codegen
from .codegen import triton as triton_codegen
from .ir import ComputedBuffer
from .scheduler import Group, Schedule, reads_of

MAX_POINTERS = 256  # buffer arguments of one combined kernel (launch cost, compile time, CUDA's 4 KB)


@attrs.define(eq=False, repr=False)
class ComboGroup(Group):
    """Groups launched as one kernel; ``members`` are all their buffers (for the wrapper and
    the in-place planner, which treat the combo as one step)."""

    parts: list = attrs.Factory(list)  # of Group
    kernels: list = attrs.Factory(list)  # of kir.Kernel, one per part


def combine(sched: Schedule, kernel_of: Callable[[Group], kir.Kernel], options: Any) -> Schedule:
    """``sched`` with runs of consecutive independent pointwise kernels as ComboGroups."""
    if not options.get("fusion", True):
        return sched
    steps: list = []
    run: list[tuple[Group, kir.Kernel | None]] = []  # None: an empty kernel, carried as members only
    written: set[str] = set()

    def flush() -> None:
        parts = [(g, k) for g, k in run if k is not None]
        if len(parts) > 1:
            members = [m for g, _ in run for m in g.members]
            steps.append(ComboGroup(parts[0][0].id, members, (), (), parts[0][0].device, True,
                                    [g for g, _ in parts], [k for _, k in parts]))
        else:
            steps.extend(g for g, _ in run)
        run.clear()
        written.clear()

    for step in sched.steps:
        if _empty(step):  # computes nothing: its buffers are allocated with the combo's
            if not run:
                steps.append(step)
            else:
                run.append((step, None))
            continue
        kernel = _eligible(step, kernel_of, options)
        if kernel is None:
            flush()
            steps.append(step)
            continue
        reads = set().union(*(reads_of(m) for m in step.members))
        if run and (reads & written or str(step.device) != str(run[0][0].device)
                    or _pointers([k for _, k in run if k is not None] + [kernel]) > MAX_POINTERS):
            flush()
        run.append((step, kernel))
        written.update(m.name for m in step.members)
    flush()
    return Schedule(steps, sched.stored, sched.log)


def _empty(step: Any) -> bool:
    return type(step) is Group and not step.r and any(s == 0 for s in step.x) and all(
        isinstance(m, ComputedBuffer) and not m.is_reduction for m in step.members)


def _eligible(step: Any, kernel_of: Callable, options: Any) -> kir.Kernel | None:
    if type(step) is not Group or step.r or not all(isinstance(m, ComputedBuffer) and not m.is_reduction
                                                     for m in step.members):
        return None
    if choose_backend(step.device, options).name not in ("cpp", "triton"):
        return None
    kernel = kernel_of(step)
    numel = triton_codegen._static_numel(kernel.xranges)
    if not numel or kernel.sizes or kernel.seeds or kir.has_index_checks(kernel) or not kernel.outputs:
        return None
    return kernel


def _pointers(kernels: list) -> int:
    inputs, outputs = _arguments(kernels)
    return len(inputs) + len(outputs)


def _arguments(kernels: list) -> tuple[list[tuple[str, torch.dtype]], list[tuple[str, torch.dtype]]]:
    """The combined kernel's buffer arguments: every part's inputs (once each), then outputs."""
    inputs = list(dict.fromkeys(i for k in kernels for i in k.inputs))
    outputs = list(dict.fromkeys(o for k in kernels for o in k.outputs))
    return inputs, outputs


# ---- code generation ---------------------------------------------------------------------------

def emit(step: ComboGroup, options: Any, kernels: list, by_source: dict) -> tuple[str, list[str], str, list[str]]:
    """Generate, record and start building the combined kernel of ``step``; returns (its name,
    buffer arguments, the wrapper's launch line, pointers the wrapper binds)."""
    backend = choose_backend(step.device, options)
    inputs, outputs = _arguments(step.kernels)
    args = [n for n, _ in inputs] + [n for n, _ in outputs]
    if backend.name == "triton":
        source, meta, grid = _triton(step, inputs, outputs)
    else:
        source, meta = _cpp(step, inputs, outputs), {"pointers": len(args), "sizes": 0, "seeds": 0, "checks": False}
    key = source + repr(meta)
    if key not in by_source:
        by_source[key] = f"k{len(by_source)}"
        kernels.append({"name": by_source[key], "backend": backend.name, "source": source, "meta": meta})
        backend.start(kernels[-1], options)
    name = by_source[key]
    if backend.name == "triton":
        consts = ", ".join(f"{k}={v}" for k, v in meta["config"].items())
        return name, args, f"{name}.launch({grid}, {', '.join(args)})  # TritonLauncher: grid, args; {consts},", []
    from .codegen.common import pointer_name

    return name, args, f"{name}({', '.join(pointer_name(a) for a in args)})", args


def _triton(step: ComboGroup, inputs: list, outputs: list) -> tuple[str, dict, int]:
    interpret = triton_codegen._interpreting(step.device)
    largest = max(step.kernels, key=lambda k: triton_codegen._static_numel(k.xranges))
    config = triton_codegen.heuristic_config(largest, interpret)
    xblock = config["XBLOCK"]
    params = {n: f"in_ptr{i}" for i, (n, _) in enumerate(inputs)} | {n: f"out_ptr{i}" for i, (n, _) in enumerate(outputs)}
    helpers: dict[str, str] = {}  # helper source -> name
    branches, start = [], 0
    for kernel in step.kernels:
        text = _PartWriter(kernel, interpret, config).generate()
        name = helpers.setdefault(text, f"_tc_part{len(helpers)}")
        blocks = -(-triton_codegen._static_numel(kernel.xranges) // xblock)
        call_args = [params[n] for n, _ in kernel.inputs + kernel.outputs]
        pid = f"pid - {start}" if start else "pid"
        keyword = "if" if not branches else "elif"
        branches.append(f"    {keyword} pid < {start + blocks}:\n        {name}({', '.join(call_args + [pid])}, XBLOCK)")
        start += blocks
    head = ", ".join([params[n] for n, _ in inputs + outputs] + ["XBLOCK: tl.constexpr"])
    body = f"def kernel({head}):\n    pid = tl.program_id(0)\n" + "\n".join(branches) + "\n"
    parts = "".join("@triton.jit\n" + text.replace("def part(", f"def {name}(", 1) + "\n\n" for text, name in helpers.items())
    digest = hashlib.sha256((parts + body).encode()).hexdigest()[:6]
    body = body.replace("def kernel(", f"def tc_combo{len(step.kernels)}_{digest}(", 1)
    source = triton_codegen.HEADER + triton_codegen.bf16_helper(parts, interpret) + parts + "@triton.jit\n" + body
    warmup = None if interpret else {
        "pointers": [str(dt).removeprefix("torch.") for _, dt in inputs + outputs], "ints": [],
        "device": torch.device(step.device).index or 0}
    meta = {"config": config, "bucketed": None, "autotune": False, "interpret": interpret, "warmup": warmup,
            "pointers": len(inputs) + len(outputs), "first_output": len(inputs),
            "device": torch.device(step.device).index or 0, "options": {}}
    return source, meta, start


class _PartWriter(triton_codegen.TritonKernelWriter):
    """One part of a combined Triton kernel: a helper over its own shape, its block given."""

    def __init__(self, kernel: kir.Kernel, interpret: bool, config: dict):
        super().__init__(kernel, "part", interpret, config)

    def signature(self) -> list[str]:
        k = self.kernel
        return [self.params[n] for n, _ in k.inputs + k.outputs] + ["pid", "XBLOCK: tl.constexpr"]

    def program_offset(self) -> str:
        return "pid * XBLOCK" if self.int32 else "pid.to(tl.int64) * XBLOCK"

    def pointwise_body(self) -> list[str]:
        return [f"xnumel = {math.prod(self.kernel.xranges)}"] + super().pointwise_body()


def _cpp(step: ComboGroup, inputs: list, outputs: list) -> str:
    index = {n: i for i, (n, _) in enumerate(inputs + outputs)}
    functions, seen, calls = [], {}, []
    for kernel in step.kernels:
        text = cpp_codegen.CppKernelWriter(kernel, "part").generate()
        name = seen.get(text)
        if name is None:
            name = seen[text] = f"tc_part{len(seen)}"
            functions.append(text.replace('extern "C" void part(', f"static void {name}(", 1))
        args = ", ".join(f"({cpp_codegen.CTYPES[d]}*)p{index[n]}" for n, d in kernel.inputs + kernel.outputs)
        calls.append(f"    {name}({args});")
    params = ", ".join(f"void* p{i}" for i in range(len(inputs) + len(outputs)))
    main = f'extern "C" void kernel({params}) {{\n' + "\n".join(calls) + "\n}\n"
    return cpp_codegen.PRELUDE + cpp_codegen.cpp_vecmath.declarations() + cpp_codegen.cpp_vecmath.EXPF + \
        "\n".join(functions) + "\n" + main
