"""The generated Python wrapper: allocate, launch kernels and extern calls, free, return.

Buffers freed after their last use are reused by later allocations of the same layout
(memory planning); the source is plain Python a user can read in ``compiled.source``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import attrs
import sympy
import torch
from torch._C._dynamo.guards import TensorGuards

import tc_ir

from . import memory
from .codegen.common import pointer_name
from .codegen.triton import size_bucket
from .decompositions import EXTERN_PREFERRED
from .graph_lowering import LoweredGraph, RuntimeValue
from .inplace import InplacePlan
from .ir import BufferValue, ComputedBuffer, ExternCall
from .scheduler import Group, Schedule, reads_of
from .symbolic import py_expr, py_tuple


@attrs.define
class KernelCall:
    """One launch of a generated kernel, as the wrapper sees it."""

    name: str  # the wrapper's name for the loaded kernel
    args: list  # buffer names: inputs then outputs
    sizes: list  # names of symbolic sizes
    launch: str  # a line of Python launching it
    # buffers whose ``ptr_<name>`` the launch line reads: ``data_ptr()`` is called once per buffer
    # and call, before its first launch, not once per launch reading it
    pointers: list = attrs.field(factory=list)


def render_value(value: Any, layouts: dict) -> str:
    if isinstance(value, BufferValue):
        base = layouts.get(value.name)
        if base is not None and tuple(base[0]) == tuple(value.shape) and tuple(base[1]) == tuple(value.stride) \
                and value.offset == 0:
            return value.name
        if value.offset == 0:  # as_strided keeps the base's storage offset when given none
            return f"{value.name}.as_strided({_tup(value.shape)}, {_tup(value.stride)})"
        return (f"{value.name}.as_strided({_tup(value.shape)}, {_tup(value.stride)}, "
                f"{value.name}.storage_offset() + {py_expr(value.offset)})")
    if isinstance(value, RuntimeValue):
        return value.name
    if isinstance(value, sympy.Expr):  # a size: evaluated over the sizes bound at the top of the call
        return py_expr(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(render_value(v, layouts) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {render_value(v, layouts)}" for k, v in value.items()) + "}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    raise TypeError(f"cannot write {type(value).__name__} into the wrapper")


def _tup(values) -> str:
    return py_tuple(values)


def generate(lowered: LoweredGraph, sched: Schedule, calls: dict, extern_names: dict,
             guarded: frozenset = frozenset(), writes: InplacePlan | None = None) -> str:
    """The wrapper source. ``calls`` maps each Group to its KernelCall; ``extern_names`` maps
    extern targets to the global names the wrapper calls them by; ``guarded`` holds the
    positions of inputs whose layout the caller has checked already; ``writes`` the outputs
    written into input buffers (inplace.py).

    The body is a list of chunks, one per step; :func:`memory.free_dead` then deletes every
    local after the last chunk that reads it, so nothing lives longer than its last use."""
    layouts = _layouts(lowered)
    chunks = [_prologue(lowered, layouts, guarded)]
    pointers: set[str] = set()
    last_use = _last_uses(sched)
    keep = set(lowered.output_buffers) | _passed_to_externs(sched)
    allocated = lowered.own & sched.stored
    free = memory.FreePool()
    writes = writes or InplacePlan()
    for position, step in enumerate(sched.steps):
        body: list[str] = []
        if isinstance(step, Group):
            for m in step.members:
                if m.name in writes.buffers:
                    body.append(f"{m.name} = {writes.buffers[m.name]}  # in place: the input's new value")
                elif m.name in sched.stored:
                    body.append(_allocate(m, free))
            body += _hoist_pointers(calls[step], pointers)
            body.append(calls[step].launch)
        elif step.name in writes.externs:
            body += _extern_inplace(step, layouts, extern_names, writes.externs[step.name][1])
        else:
            body += _extern(step, layouts, extern_names)
        for name in sorted(n for n, p in last_use.items() if p == position):
            if name in keep or name not in layouts or name not in allocated:
                continue
            free.add(name, layouts[name])
        free.next_step()  # large dead buffers: the next step or never; small ones wait (memory.FreePool)
        chunks.append(body)
    outputs = tc_ir.map_structure(lowered.outputs, lambda v: v)
    chunks.append([f"return {render_value(outputs, layouts)}"])
    body = memory.free_dead(chunks)
    return "\n".join(["def call(args):"] + ["    " + line for line in body]) + "\n"


def _prologue(lowered: LoweredGraph, layouts: dict, guarded: frozenset) -> list[str]:
    """Unpack the inputs (and drop a boxed caller's list, so inputs can die early), lay them
    out as compiled, draw the random ops' seeds."""
    body: list[str] = []
    names = [i.name for i in lowered.inputs]
    if names:
        body.append(f"{', '.join(names)}{',' if len(names) == 1 else ''} = args")
        body.append("if args.__class__ is list:  # boxed call: the caller handed its references over")
        body.append("    args.clear()")
    body += _bind_sizes(lowered, layouts)
    checks, checked = [], []
    for position, inp in enumerate(lowered.inputs):
        if inp.name in layouts and position not in guarded:
            shape, stride, _, _ = layouts[inp.name]
            # the common case (the compiled layout) costs two tuple compares, no call
            checks.append(f"if {_not_laid_out(inp.name, shape, stride)}:")
            want = f", {_shape_text(shape)!r}" if any(isinstance(d, sympy.Expr) for d in shape) else ""
            checks.append(f"    {inp.name} = _layout({inp.name}, {_tup(shape)}, {_tup(stride)}{want})")
            checked.append(inp.name)
    if len(checked) >= LayoutBatch.MIN:
        names = ", ".join(checked)
        checks = [f"if not _lb.check({names}):"] + ["    " + c for c in checks] + [f"    _lb.learn({names})"]
    return body + checks + _draw_seeds(lowered)


class LayoutBatch:
    """The input layout checks of a wrapper with many inputs (an optimizer step's hundreds), in
    one call of torch's C++ ``TensorGuards``: built from the inputs of the first call once they
    passed the checks (or were laid out), so passing it means the same sizes and strides, where
    each check passes too. It also compares type, dtype, device, ``requires_grad`` and dispatch
    keys: where any differs, the per-input checks run as without it.

    ``TensorGuards.check`` fails whenever one tensor is passed twice, so an input that was, when
    learned, the same tensor as an earlier one (tied weights: GPT-2's ``lm_head.weight`` is
    ``wte.weight``) is left out of it and checked by identity with that earlier input instead.
    With it in, the batch failed on every call."""

    MIN = 4  # below this, the one C++ call saves less than it costs
    __slots__ = ("guards", "learned", "repeats", "pick")

    def __init__(self):
        self.guards, self.learned = None, False
        self.repeats: tuple[tuple[int, int], ...] = ()  # (position, the earlier position it repeats)
        self.pick: Callable | None = None  # the positions the batch checks, where some repeat

    def check(self, *tensors: torch.Tensor) -> bool:
        if self.guards is None:
            return False
        for i, j in self.repeats:
            if tensors[i] is not tensors[j]:
                return False
        return self.guards.check(*(self.pick(tensors) if self.pick else tensors))

    def learn(self, *tensors: torch.Tensor) -> None:
        if self.learned:
            return
        self.learned = True
        first: dict[int, int] = {}  # id of a tensor -> the first position it is at
        for i, t in enumerate(tensors):
            j = first.setdefault(id(t), i)
            if j != i:
                self.repeats += ((i, j),)
        repeated = {i for i, _ in self.repeats}
        keep = [i for i in range(len(tensors)) if i not in repeated]
        if len(keep) < 2:
            return
        if repeated:
            self.pick = operator.itemgetter(*keep)
            tensors = self.pick(tensors)
        try:
            self.guards = TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                                       dynamic_dims_strides=[list(t.stride()) for t in tensors])
        except Exception:  # an input TensorGuards cannot describe: the per-input checks stay
            self.guards = None


def _bind_sizes(lowered: LoweredGraph, layouts: dict) -> list[str]:
    """Each size symbol as a local int, read from the input dim (or int input) that is it; a
    size below 2 is refused (kernels were compiled for sizes >= 2: 0 and 1 are specialised by
    the caller), and an int input that is an expression of sizes is checked against it."""
    if not lowered.size_plan:
        return []
    names = [inp.name for inp in lowered.inputs]
    body = [f"{symbol.name} = {names[pos]}" + ("" if dim < 0 else f".shape[{dim}]")
            for symbol, (pos, dim) in lowered.size_plan.items()]
    sizes = [symbol.name for symbol in lowered.size_plan]
    body.append(f"if {' or '.join(f'{n} < 2' for n in sizes)}:")
    body.append(f"    _bad_sizes({{{', '.join(f'{n!r}: {n}' for n in sizes)}}})")
    for position, inp in enumerate(lowered.inputs):
        expr = getattr(inp.spec, "expr", None)
        if isinstance(expr, sympy.Expr) and lowered.size_plan.get(expr) != (position, -1):
            body.append(f"if {inp.name} != {py_expr(expr)}:")
            body.append(f"    _bad_sizes({{{inp.name!r}: {inp.name}}}, {str(expr)!r})")
    return body


def _shape_text(shape: tuple) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _hoist_pointers(call: KernelCall, done: set) -> list[str]:
    """``ptr_<name> = <name>.data_ptr()`` for the launch's buffers not read before. Each name is
    bound once in the straight-line wrapper (inputs are laid out before any launch, extern
    results right after their call), so its pointer stays valid for the rest of the call."""
    new = [name for name in dict.fromkeys(call.pointers) if name not in done]
    done.update(new)
    return [f"{pointer_name(name)} = {name}.data_ptr()" for name in new]


def _draw_seeds(lowered: LoweredGraph) -> list[str]:
    """Fresh seeds for the graph's random ops, one int64 each, from torch's generator for the
    device: every call draws new numbers and ``torch.manual_seed`` makes runs repeat. (On CUDA
    this is a device-side draw, so a captured CUDA graph draws again on each replay.)"""
    return [f"{name} = randint({-2**63}, {2**63 - 1}, ({slots},), dtype=torch.int64, device={device_name(device)})"
            for name, (device, slots) in sorted(lowered.seeds.items())]


def _allocate(buf: ComputedBuffer, free: memory.FreePool) -> str:
    if isinstance(buf, ComputedBuffer) and buf.view is not None:  # allocated as the graph sees it
        buf = buf.value()
    reuse = free.take(buf.shape, buf.stride, buf.dtype, buf.device)
    if reuse is not None:
        return f"{buf.name} = {reuse}  # reuse"
    return (f"{buf.name} = empty_strided({_tup(buf.shape)}, {_tup(buf.stride)}, dtype={buf.dtype}, "
            f"device={device_name(buf.device)})")


def bad_sizes(sizes: dict, want: str | None = None) -> None:
    """Raise for sizes a symbolic graph was not compiled for (the caller falls back)."""
    got = ", ".join(f"{k}={v}" for k, v in sizes.items())
    if want is not None:
        raise ValueError(f"tc_inductor: compiled for an int equal to {want}, got {got}")
    raise ValueError(f"tc_inductor: compiled for sizes >= 2 (0 and 1 are specialised), got {got}")


def device_name(device: Any) -> str:
    """The wrapper global holding ``device`` (a torch.device made once, not parsed per call)."""
    device = torch.device(device)
    return f"device_{device.type}{'' if device.index is None else device.index}"


def wrapper_devices(lowered: LoweredGraph) -> list[str]:
    devices = {str(torch.device(step.device)) for step in lowered.steps if isinstance(step, ComputedBuffer)}
    return sorted(devices | {str(device) for device, _ in lowered.seeds.values()})


def wrapper_globals(devices: list[str]) -> dict:
    """Names the generated source reads besides kernels, extern targets and constants: bound
    once, when the wrapper is loaded."""
    env: dict[str, Any] = {"empty_strided": torch.empty_strided, "randint": torch.randint,
                           "_bad_sizes": bad_sizes, "size_bucket": size_bucket, "_lb": LayoutBatch()}
    env.update({device_name(d): torch.device(d) for d in devices})
    return env


def _extern(step: ExternCall, layouts: dict, extern_names: dict) -> list[str]:
    args = ", ".join(render_value(a, layouts) for a in step.args)
    kwargs = ", ".join(f"{k}={render_value(v, layouts)}" for k, v in step.kwargs.items())
    call = f"{extern_names[step.name]}({', '.join(p for p in (args, kwargs) if p)})"
    lines = [f"{step.name} = {call}  # {step.reason}"]
    sources = [v.name for v in tc_ir.leaves((step.args, step.kwargs)) if isinstance(v, (BufferValue, RuntimeValue))]
    if sources and not _allocates(step.target):
        lines.append(f"{step.name} = _own_memory({step.name}, {', '.join(dict.fromkeys(sources))})")
    if isinstance(step.outputs, BufferValue):
        lines += _checked_layout(step.name, step.name, step.outputs)
    elif isinstance(step.outputs, tuple):
        for i, out in enumerate(step.outputs):
            if isinstance(out, BufferValue):
                lines += _checked_layout(out.name, f"{step.name}[{i}]", out)
            else:
                lines.append(f"{out.name} = {step.name}[{i}]")
    return lines


def _extern_inplace(step: ExternCall, layouts: dict, extern_names: dict, mapping: dict) -> list[str]:
    """The in-place overload (inplace.py), then each result named as the input it wrote."""
    args = [render_value(a, layouts) for a in step.args] + [f"{k}={render_value(v, layouts)}" for k, v in step.kwargs.items()]
    lines = [f"{extern_names[step.name]}({', '.join(args)})  # in place: {step.reason}"]
    return lines + [f"{out} = {source}" for out, source in mapping.items()]


def _allocates(target: Any) -> bool:
    """Extern targets known to return new memory: vendor kernels (mm, conv, attention) and the
    functional ``_foreach_*`` ops (a list result per call: checking it would cost per tensor)."""
    if target in EXTERN_PREFERRED:
        return True
    name = getattr(target, "__name__", "")
    return name.startswith("_foreach_") and not tc_ir.is_mutating(target)


def _checked_layout(name: str, value: str, out: BufferValue) -> list[str]:
    """``name = value`` in the layout later code was compiled for; a copy only when it differs."""
    shape, stride = _tup(out.shape), _tup(out.stride)
    first = [] if name == value else [f"{name} = {value}"]
    # Vendor kernels may return None where their meta kernel promises a tensor (cuDNN attention's
    # optional outputs on CUDA): nothing to lay out then.
    return first + [f"if {name} is not None and ({_not_laid_out(name, out.shape, out.stride)}):",
                    f"    {name} = _layout({name}, {shape}, {stride})"]


def _not_laid_out(name: str, shape: tuple, stride: tuple) -> str:
    """The test that ``name`` is not in the layout compiled for: another shape, or another stride
    on a dim of size > 1. A size-1 dim's stride never moves an index, and libraries set it freely
    (cuDNN's weight gradient of a 1x1 convolution): comparing it sent such results through
    ``_layout`` on every call, to be returned unchanged. The common case costs one or two tuple
    compares; the shape comes first, so the strides are read only at the compiled rank."""
    kept = [i for i, n in enumerate(shape) if not (isinstance(n, int) and n == 1)]
    if len(kept) == len(shape):
        return f"{name}.stride() != {_tup(stride)} or {name}.shape != {_tup(shape)}"
    test = f"{name}.shape != {_tup(shape)}"
    if kept:
        test += f" or (_st := {name}.stride())[{kept[0]}] != {py_expr(stride[kept[0]])}"
        test += "".join(f" or _st[{i}] != {py_expr(stride[i])}" for i in kept[1:])
    return test


def _layouts(lowered: LoweredGraph) -> dict:
    layouts = {}
    for inp in lowered.inputs:
        spec = inp.spec
        if isinstance(spec, tc_ir.TensorSpec) and (spec.is_static or lowered.size_plan):
            layouts[inp.name] = (spec.shape, spec.stride, spec.dtype, spec.device)
    for step in lowered.steps:
        if isinstance(step, ComputedBuffer):
            shape, stride = step.view or (step.shape, step.stride)
            layouts[step.name] = (shape, stride, step.dtype, step.device)
        elif isinstance(step, ExternCall):
            for out in tc_ir.leaves(step.outputs):
                if isinstance(out, BufferValue):
                    layouts[out.name] = (out.shape, out.stride, out.dtype, out.device)
    for name, value in lowered.constants.items():
        layouts[name] = (tuple(value.shape), tuple(value.stride()), value.dtype, value.device)
    return layouts


def _last_uses(sched: Schedule) -> dict[str, int]:
    last: dict[str, int] = {}
    for position, step in enumerate(sched.steps):
        members = step.members if isinstance(step, Group) else [step]
        for m in members:
            for name in reads_of(m):
                last[name] = position
            if isinstance(m, ComputedBuffer):
                last.setdefault(m.name, position)
    return last


def _passed_to_externs(sched: Schedule) -> set[str]:
    """Buffers an extern call may return a view of (those must never be reused)."""
    return {name for step in sched.steps if isinstance(step, ExternCall) and _may_alias(step.target)
            for name in reads_of(step)}


def _may_alias(target: Any) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)
