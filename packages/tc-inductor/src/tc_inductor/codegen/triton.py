"""The Triton backend: CUDA tensors, and CPU tensors under the Triton interpreter (for tests).

Pointwise kernels run one flat block of ``XBLOCK`` elements per program. Reduction kernels
run ``XBLOCK`` rows per program: *persistent* (the whole row in one ``RBLOCK`` tile, so every
stage reuses the loaded values) when rows are short, otherwise *looped* (one loop over the
row per stage). One config is chosen by heuristics; ``max_autotune`` benchmarks several.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import importlib.util
import json
import math
import os
import re
import threading
from pathlib import Path
from typing import Any

import sympy
import torch

import tc_ir

from .. import kir
from ..kir import Ops, UOp
from . import artifacts, build, cuda_launch, triton_compile, triton_load
from .build import cache_dir, ensure_file
from .common import Emitter, Scope, print_index
from .registry import register_backend
from .triton_launch import TritonLauncher, VerifiedLauncher

TL = {
    torch.float32: "tl.float32", torch.float64: "tl.float64", torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16", torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}
PERSISTENT_MAX = 1024  # longest row a persistent reduction holds in one tile (interpreter)
COLUMN_RBLOCK = 64  # rows a step of a column reduction (is_columnar)
PERSISTENT_MAX_GPU = 4096  # on a GPU: 8 values a thread at 16 warps (longer rows loop: §29)
MAX_ELEMENTS_A_THREAD = 8  # 16 is where Triton 3.6's ptxas miscompiled (benchmarks/NOTES.md §28)
INT32_LIMIT = 2**31 - 2**20  # index math in int32 when every offset stays below this

# unary ops: (expression on GPU, expression under the interpreter, which lacks libdevice)
_UNARY = {
    Ops.EXP: ("tl.exp({0})",) * 2, Ops.EXP2: ("tl.exp2({0})",) * 2, Ops.LOG: ("tl.log({0})",) * 2,
    Ops.LOG2: ("tl.log2({0})",) * 2, Ops.SQRT: ("tl.sqrt({0})",) * 2, Ops.RSQRT: ("tl.rsqrt({0})",) * 2,
    Ops.SIN: ("tl.sin({0})",) * 2, Ops.COS: ("tl.cos({0})",) * 2, Ops.ERF: ("tl.erf({0})",) * 2,
    Ops.FLOOR: ("tl.floor({0})",) * 2, Ops.CEIL: ("tl.ceil({0})",) * 2, Ops.SIGMOID: ("tl.sigmoid({0})",) * 2,
    Ops.EXPM1: ("libdevice.expm1({0})", "(tl.exp({0}) - 1)"),
    Ops.LOG1P: ("libdevice.log1p({0})", "tl.log(1 + {0})"),
    Ops.LOG10: ("libdevice.log10({0})", "(tl.log({0}) * 0.4342944819032518)"),
    Ops.TAN: ("libdevice.tan({0})", "(tl.sin({0}) / tl.cos({0}))"),
    Ops.TANH: ("libdevice.tanh({0})", "(2 * tl.sigmoid(2 * {0}) - 1)"),
    Ops.SINH: ("libdevice.sinh({0})", "((tl.exp({0}) - tl.exp(-{0})) * 0.5)"),
    Ops.COSH: ("libdevice.cosh({0})", "((tl.exp({0}) + tl.exp(-{0})) * 0.5)"),
    Ops.ASINH: ("libdevice.asinh({0})", "tl.where({0} < 0, -tl.log(-{0} + tl.sqrt({0} * {0} + 1)), tl.log({0} + tl.sqrt({0} * {0} + 1)))"),
    Ops.ACOSH: ("libdevice.acosh({0})", "tl.log({0} + tl.sqrt({0} * {0} - 1))"),
    Ops.ATANH: ("libdevice.atanh({0})", "(0.5 * tl.log((1 + {0}) / (1 - {0})))"),
    Ops.ERFC: ("libdevice.erfc({0})", "(1 - tl.erf({0}))"),
    Ops.TRUNC: ("libdevice.trunc({0})", "tl.where({0} < 0, tl.ceil({0}), tl.floor({0}))"),
    Ops.ROUND: ("libdevice.nearbyint({0})", None), Ops.ASIN: ("libdevice.asin({0})", None),
    Ops.ACOS: ("libdevice.acos({0})", None), Ops.ATAN: ("libdevice.atan({0})", None),
    Ops.ERFINV: ("libdevice.erfinv({0})", None), Ops.LGAMMA: ("libdevice.lgamma({0})", None),
}
_BINARY = {
    Ops.ADD: "{0} + {1}", Ops.SUB: "{0} - {1}", Ops.MUL: "{0} * {1}", Ops.TRUEDIV: "{0} / {1}",
    Ops.AND: "{0} & {1}", Ops.OR: "{0} | {1}", Ops.XOR: "{0} ^ {1}", Ops.BITAND: "{0} & {1}",
    Ops.BITOR: "{0} | {1}", Ops.BITXOR: "{0} ^ {1}", Ops.LSHIFT: "{0} << {1}", Ops.RSHIFT: "{0} >> {1}",
    Ops.LT: "{0} < {1}", Ops.LE: "{0} <= {1}", Ops.GT: "{0} > {1}", Ops.GE: "{0} >= {1}", Ops.EQ: "{0} == {1}",
    Ops.NE: "{0} != {1}",
}


_log = tc_ir.logs.get_logger("perf_hints")


class TritonUnsupported(NotImplementedError):
    pass


def _lit(value: Any, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "1" if value else "0"
    if dtype.is_floating_point:
        return f'float("{value}")' if not math.isfinite(value) else repr(float(value))
    return str(int(value))


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


class TritonKernelWriter:
    """One kernel's Triton source. ``config`` is the launch config when it is known at
    generation time (not autotuned): then masks whose block divides the size are left out."""

    def __init__(self, kernel: kir.Kernel, name: str, interpret: bool, config: dict | None = None):
        self.kernel, self.name, self.interpret = kernel, name, interpret
        self.params = {n: f"in_ptr{i}" for i, (n, _) in enumerate(kernel.inputs)}
        self.params.update({n: f"out_ptr{i}" for i, (n, _) in enumerate(kernel.outputs)})
        self.seed_args = {seed: f"seed{i}" for i, seed in enumerate(kernel.seeds)}
        self.dtypes = dict(kernel.inputs) | dict(kernel.outputs)
        self.emitter = Emitter(self.render, lambda u, var, text: f"{var} = {text}", self.masked)
        self.persistent = is_persistent(kernel, interpret)
        self.xmask = None if _divides(kernel.xranges, config, "XBLOCK") else "xmask"
        self.rmask = None if _divides(kernel.rranges, config, "RBLOCK") else "rmask"
        self.int32 = fits_int32(kernel)
        self.base_mask: str | None = self.xmask
        self.bucket_args = False  # autotuned over symbolic sizes: the autotune key is the size bucket
        self.rconst = interpret and not self.persistent  # see signature
        self.sixteens = _sixteens(kernel, self.rconst)  # element counts passed divided by 16

    def index(self, expr: sympy.Expr, args: list) -> str:
        flat = self.flat_offset(expr)
        if flat is not None:
            return flat
        text = print_index(expr, dict(zip(kir.indirect_names(expr), args)), "tl")
        if not any(s.name[0] in "xr" for s in sympy.sympify(expr).free_symbols):
            text += f" + tl.zeros({self.shape}, tl.int64)"  # a block pointer, so block masks apply
        return text

    def flat_offset(self, expr: sympy.Expr) -> str | None:
        """``xindex + c`` when a pointwise kernel reads or writes ``expr`` contiguously (no div/mod)."""
        k = self.kernel  # over symbolic sizes too: no int64 division and modulo per element
        if k.is_reduction or not k.xranges:
            return None
        return _flat_offset(expr, tuple(k.xranges))

    def mask_of(self, scope: Scope, base: str | None) -> str | None:
        masks, s = [], scope
        while s is not None:
            if s.mask:
                masks.append(s.mask)
            s = s.parent
        return _and(base, *masks)

    def eviction(self, expr: sympy.Expr) -> str:
        """Cache hints in reductions: rows stream through once, what every row reads stays."""
        if not self.kernel.is_reduction or self.interpret:
            return ""
        per_row = any(s.name.startswith("x") for s in sympy.sympify(expr).free_symbols)
        reread = not self.persistent and sum(1 for st in self.kernel.stages if st.inner) > 1
        return ", eviction_policy='evict_last'" if not per_row or reread else ", eviction_policy='evict_first'"

    def render(self, u: UOp, args: list, scope: Scope) -> str:
        op = u.op
        if op is Ops.LOAD:
            buf, expr = u.arg
            mask = self.mask_of(scope, self.base_mask)
            masked = f", {mask}, other=0" if mask else ""
            text = f"tl.load({self.params[buf]} + ({self.index(expr, args)}){masked}{self.eviction(expr)})"
            if self.dtypes[buf] in kir.LOW_PRECISION:
                text += ".to(tl.float32)"
            return text
        if op is Ops.CONST:
            if u.dtype.is_floating_point and u.arg == 0 and math.copysign(1.0, u.arg) < 0:
                # Triton makes every constant equal to 0 (and negation: 0 - x) +0.0; -1 * +0 is -0
                return f"(tl.full([1], -1.0, {TL[u.dtype]}) * 0.0)"
            return f"tl.full([1], {_lit(u.arg, u.dtype)}, {TL[u.dtype]})"
        if op is Ops.INDEX:
            return f"(tl.zeros([1], tl.int64) + {self.index(u.arg, args)})"
        if op is Ops.REDUCED:
            return u.arg
        if op is Ops.CHECK_INDEX:  # see CHECK_GPU / CHECK_INTERPRETED
            size, wraps = u.arg
            mask = self.mask_of(scope, self.base_mask) or "None"
            return f"_tc_check_index({args[0]}, {print_index(size, {}, 'tl')}, {wraps}, {mask})"
        if op is Ops.SEED:  # one scalar per kernel: every element of a random op shares its seed
            return f"tl.load({self.params[u.arg[0]]} + {self.seed_args[u.arg]})"
        if op in kir.GroupOp.Random:  # Philox4x32-10, as the C++ backend's tc_rand / tc_randn
            return f"tl.{op.name.lower()}({args[0]}, {args[1]})"
        if op is Ops.CAST:
            return f"({args[0]} != 0)" if u.dtype == torch.bool else self.cast(args[0], u.dtype)
        if op is Ops.WHERE:
            return f"tl.where({args[0]}, {args[1]}, {args[2]})"
        return self.math(u, args)

    def cast(self, value: str, dtype: torch.dtype) -> str:
        """``value`` converted to ``dtype``; to bfloat16 under the interpreter by ``_tc_bf16``
        (``BF16_INTERPRETED``), which rounds as the GPU does."""
        if self.interpret and dtype == torch.bfloat16:
            return f"_tc_bf16({value})"
        return f"{value}.to({TL[dtype]})"

    def math(self, u: UOp, args: list) -> str:
        op, src = u.op, u.src[0].dtype
        is_float, t = src.is_floating_point, TL[u.dtype]
        a = args[0]
        if op is Ops.NEG:  # Triton's unary minus is 0 - x, which makes -(+0.0) +0.0; * -1 is exact
            return f"({a} * -1.0)" if is_float else f"-{a}"
        if op is Ops.ABS:
            return f"tl.abs({a})" if u.dtype != torch.bool else a
        if op is Ops.RECIPROCAL:
            return f"1 / {a}"
        if op is Ops.SIGN:
            return f"(({a} > 0).to({t}) - ({a} < 0).to({t}))" if u.dtype != torch.bool else a
        if op is Ops.SIGNBIT:
            return f"(({a} < 0) | ((1 / {a}) < 0))" if is_float else f"({a} < 0)"
        if op is Ops.ISNAN:
            return f"({a} != {a})"
        if op is Ops.ISINF:
            return f"(tl.abs({a}) == float('inf'))" if is_float else f"({a} != {a})"
        if op is Ops.NOT:
            return f"({a} == 0)"
        if op is Ops.BITNOT:
            return f"~{a}"
        if op in _UNARY:
            gpu, interp = _UNARY[op]
            text = interp if self.interpret else gpu
            if text is None:
                raise TritonUnsupported(f"{op.name} under the Triton interpreter (no libdevice)")
            return text.format(a)
        b = args[1]
        if u.src[0].dtype == torch.bool and op in (Ops.ADD, Ops.MUL, Ops.MAX, Ops.MIN):
            return f"{a} | {b}" if op in (Ops.ADD, Ops.MAX) else f"{a} & {b}"
        if op in (Ops.MAX, Ops.MIN):
            fn = "tl.maximum" if op is Ops.MAX else "tl.minimum"
            return f"{fn}({a}, {b}, propagate_nan=tl.PropagateNan.ALL)" if is_float else f"{fn}({a}, {b})"
        if op is Ops.FLOORDIV:
            if is_float:
                return f"tl.floor({a} / {b})"
            return f"tl.where((({a} % {b}) != 0) & (({a} < 0) != ({b} < 0)), {a} // {b} - 1, {a} // {b})"
        if op is Ops.TRUNCDIV:
            return f"{a} // {b}" if not is_float else self.math(UOp(Ops.TRUNC, u.dtype, (u,)), [f"({a} / {b})"])
        if op is Ops.MOD:
            return f"tl.where((({a} % {b}) != 0) & ((({a} % {b}) < 0) != ({b} < 0)), ({a} % {b}) + {b}, {a} % {b})"
        if op is Ops.FMOD:
            return f"{a} % {b}"
        if op is Ops.POW:
            if self.interpret:
                if not is_float:
                    raise TritonUnsupported("integer pow under the interpreter")
                return (f"tl.where({b} == 0, 1.0, tl.where({a} == 0, tl.where({b} > 0, 0.0, float('inf')), "
                        f"tl.exp2({b} * tl.log2(tl.abs({a}))) * tl.where(({a} < 0) & (({b} % 2) != 0), -1.0, 1.0)))"
                        f".to({t})")
            if not is_float:
                return f"libdevice.pow({a}.to(tl.float64), {b}.to(tl.float64)).to({t})"
            return f"libdevice.pow({a}, {b})"
        if op is Ops.HYPOT:
            return f"tl.sqrt({a} * {a} + {b} * {b})"
        if op is Ops.COPYSIGN:
            return f"tl.where(({b} < 0) | ((1 / {b}) < 0), tl.abs({a}) * -1.0, tl.abs({a}))"
        if op is Ops.ATAN2 or op is Ops.NEXTAFTER:
            if self.interpret:
                raise TritonUnsupported(f"{op.name} under the Triton interpreter (no libdevice)")
            return f"libdevice.{op.name.lower()}({a}, {b})"
        if op in _BINARY:
            return "(" + _BINARY[op].format(a, b) + ")"
        raise TritonUnsupported(f"Triton backend cannot print {op}")

    def masked(self, emitter: Emitter, u: UOp, scope: Scope, lines: list) -> str:
        mask = emitter.value(u.src[0], scope, lines)
        other = emitter.value(u.src[2], scope, lines)
        body = emitter.value(u.src[1], Scope(scope, mask), lines)
        var = emitter.new_var()
        lines.append(f"{var} = tl.where({mask}, {body}, {other})")
        return var

    # ---- kernel text -----------------------------------------------------------------------------
    def _split(self, flat: str, prefix: str, sizes: tuple) -> list[str]:
        lines, n = [], len(sizes)
        for i, size in enumerate(sizes):
            inner = math.prod(sizes[i + 1:]) if _static_numel(sizes[i + 1:]) is not None else \
                sympy.Mul(*sizes[i + 1:])
            expr = flat if inner == 1 else f"({flat} // {print_index(sympy.sympify(inner), {}, 'tl')})"
            if i > 0:
                expr = f"({expr} % {print_index(sympy.sympify(size), {}, 'tl')})"
            lines.append(f"{prefix}{i} = {expr}")
        return lines if n else []

    def store(self, s: kir.Store, scope: Scope, lines: list, mask: str | None, shape: str) -> None:
        self.shape = shape
        v = self.emitter.value(s.value, scope, lines)
        if s.dtype in kir.LOW_PRECISION or s.value.dtype != s.dtype:
            v = self.cast(v, s.dtype)
        masked = f", {mask}" if mask else ""
        lines.append(f"tl.store({self.params[s.buffer]} + ({self.index(s.index, [])}), "
                     f"{_broadcast(v, s.value, s.dtype, shape)}{masked})")

    def signature(self) -> list[str]:
        k = self.kernel
        args = [self.params[n] for n, _ in k.inputs] + [self.params[n] for n, _ in k.outputs] + list(k.sizes)
        # the interpreter turns an int argument into a one-element block, which a loop bound cannot
        # be: there a run-time row length is a constexpr (the interpreter compiles nothing)
        rnumel = "rnumel: tl.constexpr" if self.rconst else "rnumel"
        args += [self.int_param("xnumel")] + ([self.int_param(rnumel)] if k.is_reduction else [])
        args += list(self.seed_args.values())
        args += ["xbucket", "rbucket"] if self.bucket_args else []
        args += ["XBLOCK: tl.constexpr"] + (["RBLOCK: tl.constexpr"] if k.is_reduction else [])
        return args

    def int_param(self, name: str) -> str:
        return f"{name}_16" if name in self.sixteens else name

    def unspecialised(self) -> list[str]:
        """The int parameters Triton must not specialise on their values: seed slots (a slot of 1
        would be compiled in as a constant, and one kernel launched from every layer must not
        assume any layer's slot) and, in a kernel over symbolic sizes, every size and element
        count: one compile then serves every size (Triton would otherwise compile again for each
        new combination of sizes equal to 1 or divisible by 16), and a kernel compiled ahead of
        time for one size is right for all (``TritonLauncher`` launches it directly)."""
        k = self.kernel
        names = list(self.seed_args.values()) + list(k.sizes)
        names += [self.int_param("xnumel")] if _static_numel(k.xranges) is None else []
        if k.is_reduction and not self.rconst and _static_numel(k.rranges) is None:
            names.append(self.int_param("rnumel"))
        return names

    def decorator(self) -> str:
        """``@triton.jit``, with the ints of :meth:`unspecialised` unspecialised. Kernels with
        checked indices compile with ``debug=True``: Triton drops ``device_assert`` otherwise
        (launched with ``sanitize_overflow=False``: ``launch_options``)."""
        names = self.unspecialised()
        args = [f"do_not_specialize={names}"] if names else []
        args += ["debug=True"] if kir.has_index_checks(self.kernel) else []
        return f"@triton.jit({', '.join(args)})\n" if args else "@triton.jit\n"

    def generate(self) -> str:
        body = self.reduction_body() if self.kernel.is_reduction else self.pointwise_body()
        # an element count known to be a multiple of 16 is passed divided by 16: unspecialised,
        # Triton would otherwise not know that masks are constant over 16 elements (vector access)
        body = [f"{n} = {n}_16 * 16" for n in self.sixteens] + body
        head = f"def {self.name}({', '.join(self.signature())}):"
        return head + "\n" + "\n".join("    " + line for line in body) + "\n"

    def pointwise_body(self) -> list[str]:
        self.base_mask = self.xmask
        lines = [f"xoffset = {self.program_offset()}",
                 "xindex = xoffset + tl.arange(0, XBLOCK)", "xmask = xindex < xnumel"]
        lines += self._split("xindex", "x", self.kernel.xranges)
        scope = Scope()
        for stage in self.kernel.stages:
            for s in stage.inner + stage.outer:
                self.store(s, scope, lines, self.xmask, "[XBLOCK]")
        return lines

    def program_offset(self) -> str:
        return "tl.program_id(0) * XBLOCK" if self.int32 else "tl.program_id(0).to(tl.int64) * XBLOCK"

    def reduction_body(self) -> list[str]:
        k = self.kernel
        lines = [f"xoffset = {self.program_offset()}",
                 "xindex = xoffset + tl.arange(0, XBLOCK)[:, None]", "xmask = xindex < xnumel",
                 "rbase = tl.arange(0, RBLOCK)[None, :]" + ("" if self.int32 else ".to(tl.int64)")]
        lines += self._split("xindex", "x", k.xranges)
        if self.persistent:
            lines += ["rindex = rbase", "rmask = rindex < rnumel"] + self._split("rindex", "r", k.rranges)
        # persistent: values of the row domain ([XBLOCK, RBLOCK], under rmask) are reused by later
        # stages' rows; a per-row value after a reduction ([XBLOCK, 1]) must not take one of them
        # (a load both sides read would broadcast the stored row value to the tile), while the rows
        # may reuse the per-row values: the row scope is a child of the per-row one
        shared = Scope()
        rows = Scope(shared)
        for stage in k.stages:
            lines += self.stage(stage, shared, rows)
        return lines

    def stage(self, stage: kir.Stage, shared: Scope, rows: Scope) -> list[str]:
        k = self.kernel
        self.base_mask = _and(self.xmask, self.rmask)
        out: list[str] = []
        reductions = [s for s in stage.inner if isinstance(s, kir.Reduce)]
        if stage.inner:
            if self.persistent:
                body, scope = out, rows
            else:
                for s in reductions:
                    out += self.accumulator(s)
                static = _static_numel(k.rranges)
                out.append(f"for roffset in range(0, {static if static is not None else 'rnumel'}, RBLOCK):")
                body, scope = [], Scope()
                body += ["rindex = roffset + rbase", "rmask = rindex < rnumel"] + self._split("rindex", "r", k.rranges)
            for s in stage.inner:
                if isinstance(s, kir.Store):
                    self.store(s, scope, body, _and(self.xmask, self.rmask), "[XBLOCK, RBLOCK]")
                else:
                    self.shape = "[XBLOCK, RBLOCK]"
                    v = self.emitter.value(s.value, scope, body)
                    if self.persistent:
                        out += self.accumulator(s)
                    body += self.accumulate(s, v)
            if not self.persistent:
                out += ["    " + line for line in body]
        for s in reductions:
            out += self.finish(s)
        self.base_mask = self.xmask
        for s in stage.outer:
            self.store(s, shared if self.persistent else Scope(), out, self.xmask, "[XBLOCK, 1]")
        return out

    def _init(self, s: kir.Reduce) -> str:
        dt = s.value.dtype if s.reduction_type.startswith("arg") else s.dtype
        lowest = "float('-inf')" if dt.is_floating_point else str(torch.iinfo(dt).min if dt != torch.bool else 0)
        highest = "float('inf')" if dt.is_floating_point else str(torch.iinfo(dt).max if dt != torch.bool else 1)
        return {"sum": "0", "prod": "1", "max": lowest, "min": highest, "any": "0", "all": "1",
                "argmax": lowest, "argmin": highest}[s.reduction_type]

    def accumulator(self, s: kir.Reduce) -> list[str]:
        dt = s.value.dtype if s.reduction_type.startswith("arg") else s.dtype
        lines = [f"acc_{s.name} = tl.full([XBLOCK, RBLOCK], {self._init(s)}, {TL[dt]})"]
        if s.reduction_type.startswith("arg"):
            lines.append(f"idx_{s.name} = tl.full([XBLOCK, RBLOCK], {2**62}, tl.int64)")
        return lines

    def accumulate(self, s: kir.Reduce, v: str) -> list[str]:
        acc, rt = f"acc_{s.name}", s.reduction_type
        mask = _and(self.xmask, self.rmask)
        val = _broadcast(v, s.value, s.value.dtype, "[XBLOCK, RBLOCK]")
        val = f"tl.where({mask}, {val}, {self._init(s)})" if mask else val
        if rt in ("argmax", "argmin"):
            return self._accumulate_arg(s, val)
        if s.dtype == torch.bool:
            op = "|" if rt in ("sum", "max", "any") else "&"
            return [f"{acc} = {acc} {op} ({val} != 0)"]
        nan = ", propagate_nan=tl.PropagateNan.ALL" if s.dtype.is_floating_point else ""  # as eager's
        combine = {"sum": f"{acc} + {val}", "prod": f"{acc} * {val}",
                   "max": f"tl.maximum({acc}, {val}{nan})", "min": f"tl.minimum({acc}, {val}{nan})",
                   "any": f"{acc} | ({val} != 0)", "all": f"{acc} & ({val} != 0)"}[rt]
        return [f"{acc} = {combine}"]

    def _accumulate_arg(self, s: kir.Reduce, val: str) -> list[str]:
        """A lane takes a value that beats its best so far, or ties it from an earlier index. As
        eager's, a NaN beats every number (the index of the first NaN wins), so a lane holding a
        NaN keeps it. Masked elements are the init (never NaN), so they never win."""
        acc, v, idx, n = f"acc_{s.name}", f"val_{s.name}", f"idx_{s.name}", s.name
        cmp = ">" if s.reduction_type == "argmax" else "<"
        lines = [f"{v} = {val}"]
        if s.value.dtype.is_floating_point:
            lines += [f"vnan_{n} = {v} != {v}", f"anan_{n} = {acc} != {acc}",
                      f"take_{n} = ({v} {cmp} {acc}) | (vnan_{n} & ~anan_{n}) | "
                      f"((({v} == {acc}) | (vnan_{n} & anan_{n})) & (rindex < {idx}))"]
        else:
            lines.append(f"take_{n} = ({v} {cmp} {acc}) | (({v} == {acc}) & (rindex < {idx}))")
        return lines + [f"{acc} = tl.where(take_{n}, {v}, {acc})", f"{idx} = tl.where(take_{n}, rindex, {idx})"]

    def finish(self, s: kir.Reduce) -> list[str]:
        acc, rt, name = f"acc_{s.name}", s.reduction_type, s.name
        if rt in ("argmax", "argmin"):
            floating = s.value.dtype.is_floating_point
            best = ("_tc_" if floating else "tl.") + rt[3:]
            # the lanes holding the row's best (NaN if any lane holds one): the earliest index
            is_best = f"({acc} == best_{name})"
            if floating:
                is_best = f"({is_best} | (({acc} != {acc}) & (best_{name} != best_{name})))"
            return [f"best_{name} = {best}({acc}, 1)[:, None]",
                    f"{name} = tl.min(tl.where({is_best}, idx_{name}, {2**62}), 1)[:, None]"]
        if s.dtype == torch.bool or rt in ("any", "all"):
            red = "tl.max" if rt in ("sum", "max", "any") else "tl.min"
            return [f"{name} = {red}({acc}.to(tl.int32), 1)[:, None] != 0"]
        red = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min", "prod": "_tc_prod"}[rt]
        if rt in ("max", "min") and s.dtype.is_floating_point:
            red = f"_tc_{rt}"  # tl.max/tl.min ignore NaN; see NAN_GPU
        if rt == "prod":
            return [f"{name} = tl.reduce({acc}, 1, _tc_mul)[:, None]"]
        return [f"{name} = {red}({acc}, 1)[:, None]"]


HEADER = '''import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def _tc_mul(a, b):
    return a * b


'''
# Row max/min that propagate NaN as eager's (tl.max/tl.min ignore it): on the GPU a reduction
# whose combine is the NaN-propagating max/min (one max.NaN instruction a step on sm_80+).
NAN_GPU = '''@triton.jit
def _tc_maximum(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _tc_minimum(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _tc_max(a, axis: tl.constexpr):
    return tl.reduce(a, axis, _tc_maximum)


@triton.jit
def _tc_min(a, axis: tl.constexpr):
    return tl.reduce(a, axis, _tc_minimum)


'''
# The interpreter runs a custom combine element by element in Python (seconds a tile): there the
# NaN-ignoring reduction (numpy's nanmax) and whether the row holds a NaN, both vectorised.
NAN_INTERPRETED = '''def _tc_max(a, axis):
    return _tc_nan_reduce(a, axis, tl.max)


def _tc_min(a, axis):
    return _tc_nan_reduce(a, axis, tl.min)


def _tc_nan_reduce(a, axis, reduce):
    import warnings
    with warnings.catch_warnings():  # numpy's nanmax of an all-NaN row warns
        warnings.simplefilter("ignore", RuntimeWarning)
        return tl.where(tl.max((a != a).to(tl.int8), axis) != 0, float("nan"), reduce(a, axis))


'''
# Triton 3.6's interpreter truncates float32 to bfloat16 (its cast ignores the rounding mode); the
# GPU, like torch, rounds to the nearest even: done here on the bits, NaN kept quiet.
BF16_INTERPRETED = '''def _tc_bf16(x):
    x = x.to(tl.float32)
    bits = x.to(tl.uint32, bitcast=True)
    bits = tl.where(x != x, bits | 0x400000, bits + 0x7FFF + ((bits >> 16) & 1))
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


'''


def bf16_helper(text: str, interpret: bool) -> str:
    """The source of ``_tc_bf16`` where a kernel text under the interpreter calls it."""
    return BF16_INTERPRETED if interpret and "_tc_bf16(" in text else ""


# A data-dependent index checked against its dim's size, negative ones wrapped first when the op
# wraps them. On the GPU a device-side assert (as eager's CUDA kernels and torch.compile): the
# CUDA context reports it at the next synchronisation.
CHECK_GPU = '''@triton.jit
def _tc_check_index(i, n, wraps: tl.constexpr, mask):
    if wraps:
        i = tl.where(i < 0, i + n, i)
    tl.device_assert((i >= 0) & (i < n), "index out of bounds", mask)
    return i


'''
# The interpreter ignores device_assert: a plain function over its numpy-backed blocks raises
# eager's IndexError instead (``TritonLauncher`` unwraps it from Triton's InterpreterError).
CHECK_INTERPRETED = '''def _tc_check_index(i, n, wraps, mask):
    j = tl.where(i < 0, i + n, i) if wraps else i
    bad = (j < 0) | (j >= n)
    if mask is not None:
        bad = bad & mask
    if bad.handle.data.any():
        import numpy
        where = bad.handle.data
        raw = numpy.broadcast_to(i.handle.data, where.shape)[where].flat[0]
        size = n.handle.data.item() if hasattr(n, "handle") else n
        raise IndexError(f"index {raw} is out of bounds for dimension with size {size}")
    return j


'''


def _static_numel(sizes: tuple) -> int | None:
    return math.prod(sizes) if all(isinstance(s, int) for s in sizes) else None


def _and(*masks: str | None) -> str | None:
    kept = [m for m in masks if m]
    return " & ".join(kept) if kept else None


def _divides(sizes: tuple, config: dict | None, block: str) -> bool:
    """Whether every block of this config is full (so its mask is all true and can go)."""
    numel = _static_numel(sizes)
    if config is None or numel is None or block not in config:
        return False
    return numel > 0 and numel % config[block] == 0  # no element: the one block is all masked


def is_persistent(kernel: kir.Kernel, interpret: bool) -> bool:
    rnumel = _static_numel(kernel.rranges)
    limit = PERSISTENT_MAX if interpret else PERSISTENT_MAX_GPU
    if is_columnar(kernel):
        limit = COLUMN_RBLOCK
    return kernel.is_reduction and rnumel is not None and rnumel <= limit


@functools.lru_cache(maxsize=4096)  # asked several times per kernel (config, writer, metadata, launch)
def is_columnar(kernel: kir.Kernel) -> bool:
    """A reduction over rows whose data is contiguous along the kept dimension: the bias gradient
    ``grad.sum(0)`` of a [tokens, features] matrix. A program must then read a run of columns
    across a few rows at a time, not one column down all the rows: a column of bf16 values 6 KB
    apart costs one memory transaction per element."""
    if isinstance(kernel, _BucketShape):
        return kernel.columnar
    if not kernel.is_reduction or not kernel.xranges:
        return False
    inner = kir.xvars(len(kernel.xranges))[-1]
    rs = kir.rvars(len(kernel.rranges))
    votes = 0
    for stage in kernel.stages:
        for s in stage.inner + stage.outer:
            for u in s.value.toposort():
                if u.op is not Ops.LOAD:
                    continue
                index = sympy.expand(sympy.sympify(u.arg[1]))
                r_strides = [index.coeff(r) for r in rs if index.has(r)]
                if not r_strides:
                    continue
                if any(st == 1 for st in r_strides):
                    votes -= 1
                elif index.coeff(inner) == 1:
                    votes += 1
    return votes > 0


def fits_int32(kernel: kir.Kernel) -> bool:
    """Whether every index and offset of ``kernel`` stays well inside int32 (cheaper math)."""
    xnumel, rnumel = _static_numel(kernel.xranges), _static_numel(kernel.rranges)
    if xnumel is None or rnumel is None or (xnumel + 65536) * max(rnumel, 1) >= INT32_LIMIT:
        return False
    ranges = {f"x{i}": n for i, n in enumerate(kernel.xranges)} | {f"r{i}": n for i, n in enumerate(kernel.rranges)}
    for expr in _indices(kernel):
        bound = index_bound(expr, ranges | _checked_index_ranges(expr))
        if bound is None or bound >= INT32_LIMIT:
            return False
    return True


def _checked_index_ranges(expr: sympy.Expr) -> dict[str, int]:
    """A bounds-checked data-dependent index lies in [0, size) (out of it the launch fails), so
    it bounds an address as a loop variable of that range does: an embedding's row gather keeps
    int32 loop math (int64 division and modulo cost a gather ~15% of its bandwidth)."""
    found = {}
    for name, value in zip(kir.indirect_names(expr), kir.indirect_sources(expr)):
        size = value.arg[0] if value.op is Ops.CHECK_INDEX else None
        if isinstance(size, sympy.Integer):
            found[name] = int(size)
    return found


def _indices(kernel: kir.Kernel):
    for stage in kernel.stages:
        for s in stage.inner + stage.outer:
            if isinstance(s, kir.Store):
                yield s.index
            for u in s.value.toposort():
                if u.op is Ops.LOAD:
                    yield u.arg[1]
                elif u.op is Ops.INDEX:  # computed in the index dtype before widening to int64
                    yield u.arg


@functools.lru_cache(maxsize=8192)  # each layer of a model asks again for the same ones
def _flat_offset(expr: sympy.Expr, xranges: tuple) -> str | None:
    xs = kir.xvars(len(xranges))
    expr = sympy.sympify(expr).subs({x: 0 for x, n in zip(xs, xranges) if n == 1})
    flat = sum((x * math.prod(xranges[i + 1:]) for i, x in enumerate(xs)), sympy.Integer(0))
    rest = sympy.expand(expr - flat)
    if rest.free_symbols or not rest.is_Integer:
        return None
    return "xindex" if rest == 0 else f"xindex + {int(rest)}"


def index_bound(expr: sympy.Expr, ranges: dict) -> int | None:
    """An upper bound of ``|expr|`` over the loop ranges; None when unknown (sizes, loaded indices)."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return abs(int(expr))
    if expr.is_Symbol:
        n = ranges.get(expr.name)
        return max(int(n) - 1, 0) if isinstance(n, int) else None
    if isinstance(expr, kir.FloorDiv):
        return index_bound(expr.args[0], ranges)
    if isinstance(expr, kir.ModIndex):
        b = index_bound(expr.args[1], ranges)
        return b if b is not None else index_bound(expr.args[0], ranges)
    if expr.is_Add or expr.is_Mul:
        bounds = [index_bound(a, ranges) for a in expr.args]
        if any(b is None for b in bounds):
            return None
        return sum(bounds) if expr.is_Add else math.prod(bounds)
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
        b = index_bound(expr.base, ranges)
        return None if b is None else b ** int(expr.exp)
    return None


def heuristic_config(kernel: kir.Kernel, interpret: bool, xnumel: int | None = None,
                     rnumel: int | None = None) -> dict:
    """One block-size config per kernel (max_autotune tries several instead).

    Pointwise: 32 bytes of the narrowest buffer per thread at 4 warps, but never more than 8
    elements a thread: Triton 3.6 compiled a gather wrong at 16 elements a thread and right at 8
    and 32 (benchmarks/NOTES.md §28), and 16 bf16 a thread ran slower than 8 (§8). Persistent
    reductions: tiles of up to 4096 elements (a whole row of up to 4096), a warp per 256, so that
    they too run at most 8 elements a thread (§29).
    ``xnumel`` / ``rnumel``: a size bucket's sizes, for kernels over symbolic sizes
    (:class:`BucketedLauncher`); looped reductions then size their tile by the row's bucket.
    """
    xnumel = _known(_static_numel(kernel.xranges), xnumel)
    if not kernel.is_reduction:
        width = min((dt.itemsize for _, dt in kernel.inputs + kernel.outputs), default=4)
        block = min(next_pow2(xnumel), 4096 if interpret else 128 * min(MAX_ELEMENTS_A_THREAD, 32 // width))
        return {"XBLOCK": max(block, 16), "num_warps": 4 if block >= 512 else 2}
    bucketed = _static_numel(kernel.rranges) is None and rnumel is not None
    rnumel = _known(_static_numel(kernel.rranges), rnumel)
    if is_columnar(kernel) and not is_persistent(kernel, interpret):
        # 32 or 64 adjacent columns a program (64-128 bytes of bf16 a row), 64 rows a step
        xblock = min(next_pow2(xnumel), 64 if xnumel >= 64 * 128 else 32)
        return {"XBLOCK": xblock, "RBLOCK": COLUMN_RBLOCK, "num_warps": 4}
    if is_persistent(kernel, interpret) or bucketed:
        # a looped reduction over a row of symbolic length tiles like a persistent one of its bucket
        rblock = max(next_pow2(min(rnumel, 2048) if bucketed else rnumel), 2)  # persistent: the whole row
        budget = (1 << 15) if interpret else 4096
        xblock = max(1, min(next_pow2(xnumel), budget // rblock, 64 if not interpret else 1 << 12))
        warps = min(16, max(2, xblock * rblock // (32 * MAX_ELEMENTS_A_THREAD)))
        return {"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": warps}
    return {"XBLOCK": 1, "RBLOCK": 2048, "num_warps": 8}


def _known(static: int | None, bucket: int | None) -> int:
    """A kernel's static element count (0 included: a reduction over no element), else its size
    bucket's, else a large one."""
    if static is not None:
        return static
    return bucket or (1 << 20)


def size_bucket(n: int) -> int:
    """The bucket of a run-time size: the next power of two (a config is chosen per bucket)."""
    return next_pow2(max(int(n), 1))


class BucketedLauncher:
    """Launches a kernel over symbolic sizes: ``launcher(xnumel, rnumel, *args)`` picks the
    config of the sizes' bucket and computes the grid from ``xnumel``. Buckets of one config
    share one :class:`TritonLauncher` (``make(config)``, on first use): the kernel does not
    specialise on sizes, so on a GPU that is one compile per config, for every size."""

    def __init__(self, make: Any, reduction: bool, configs: Any):
        self.make, self.reduction, self.configs = make, reduction, configs
        self._launchers: dict[tuple, tuple] = {}  # by bucket
        self._by_config: dict[tuple, tuple] = {}

    def __call__(self, xnumel: int, rnumel: int, *args: Any) -> None:
        key = (size_bucket(xnumel), size_bucket(rnumel) if self.reduction else 1)
        entry = self._launchers.get(key)
        if entry is None:
            entry = self._launchers[key] = self._entry(self.configs(*key))
        launcher, xblock = entry
        if xnumel:
            launcher(-(-xnumel // xblock), *args)

    def _entry(self, config: dict) -> tuple:
        key = tuple(sorted(config.items()))
        if key not in self._by_config:
            self._by_config[key] = (self.make(config), config["XBLOCK"])
            build.COUNTERS["triton_configs"] += 1
        return self._by_config[key]


# element-count buckets compiled ahead: 2**6 .. 2**31 (past int32, run compiles its own variant);
# smaller ones (a few configs more each: softmax rows of symbolic length 62 against 12) compile
# at their first launch
BUCKETS_X = range(6, 32)
BUCKETS_R = 13  # row-length buckets 2**0 .. 2**12 (the tile stops growing at 2048)


def bucket_configs(meta: dict) -> list[dict]:
    """Every config the size buckets of a kernel over symbolic sizes can choose (a few: block
    sizes stop growing past small buckets), those of the most buckets first."""
    shape = _BucketShape(meta["bucketed"])
    counts: dict[tuple, int] = {}
    for x in BUCKETS_X:
        for r in range(BUCKETS_R if shape.reduction else 1):
            key = tuple(heuristic_config(shape, meta["interpret"], 1 << x, 1 << r).items())
            counts[key] = counts.get(key, 0) + 1
    return [dict(k) for k in sorted(counts, key=counts.get, reverse=True)]


def _with_config(record: dict, config: dict) -> dict:
    return {**record, "meta": {**record["meta"], "config": config}}


def _elements_a_thread(config: dict) -> int:
    return config["XBLOCK"] * config.get("RBLOCK", 1) // (32 * config["num_warps"])


def autotune_configs(kernel: kir.Kernel) -> list[dict]:
    """The configs max-autotune times, none of more than 8 elements a thread but a reduction's
    own (``heuristic_config``'s, timed first; a column reduction's runs 32)."""
    if not kernel.is_reduction:
        candidates = [{"XBLOCK": b, "num_warps": w} for b in (256, 512, 1024, 2048) for w in (4, 8)]
        return [c for c in candidates if _elements_a_thread(c) <= MAX_ELEMENTS_A_THREAD]
    base = heuristic_config(kernel, False)
    rblock = base["RBLOCK"]
    others = [{"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": warps}
              for xblock in (1, 2, 4, 8, 16, 32) for warps in (2, 4, 8, 16)
              if xblock * rblock <= 16384 and (xblock, warps) != (base["XBLOCK"], base["num_warps"])]
    return [base] + [c for c in others if _elements_a_thread(c) <= MAX_ELEMENTS_A_THREAD]


class TritonBackend:
    name = "triton"

    def generate(self, kernel: kir.Kernel, name: str, options: Any, device: Any) -> str:
        interpret = _interpreting(device)
        autotune = bool(options.get("max_autotune")) and not interpret
        fixed = not autotune and not _bucket_shape(kernel)  # else masks stay: blocks vary per launch
        writer = TritonKernelWriter(kernel, "kernel", interpret, heuristic_config(kernel, interpret) if fixed else None)
        writer.bucket_args = autotune and bool(_bucket_shape(kernel))
        text = writer.generate()
        # Named by what it computes plus a hash of its text: readable in profiles, unique per
        # distinct kernel, and still the same for identical kernels (which then share one build).
        digest = hashlib.sha256(text.encode()).hexdigest()[:6]
        text = text.replace("def kernel(", f"def {descriptive_name(kernel)}_{digest}(", 1)
        if autotune:
            configs = ", ".join(
                f"triton.Config({ {k: v for k, v in c.items() if k != 'num_warps'} }, num_warps={c['num_warps']})"
                for c in autotune_configs(kernel))
            # over symbolic sizes tuned once per size bucket, not once per size
            key = "['xbucket', 'rbucket']" if writer.bucket_args else "['xnumel']"
            deco = f"@triton.autotune(configs=[{configs}], key={key})\n" + writer.decorator()
        else:
            deco = writer.decorator()
        checks = "" if not kir.has_index_checks(kernel) else CHECK_INTERPRETED if interpret else CHECK_GPU
        nan = "" if not _float_compare_reductions(kernel) else NAN_INTERPRETED if interpret else NAN_GPU
        return HEADER + checks + nan + bf16_helper(text, interpret) + deco + text

    def metadata(self, kernel: kir.Kernel, options: Any, device: Any) -> dict:
        interpret = _interpreting(device)
        return {"config": heuristic_config(kernel, interpret), "bucketed": _bucket_shape(kernel),
                "autotune": bool(options.get("max_autotune")) and not interpret, "interpret": interpret,
                "warmup": None if interpret else warmup_signature(kernel, device),
                "pointers": len(kernel.inputs) + len(kernel.outputs), "first_output": len(kernel.inputs),
                "device": torch.device(device).index or 0, "options": launch_options(kernel),
                "varying_ints": symbolic_sizes(kernel)}

    def start(self, record: dict, options: Any) -> None:
        """Compile for the GPU now, in the pool, instead of at the first launch: a kernel over
        symbolic sizes in each config its size buckets can choose (``bucket_configs``)."""
        meta = record["meta"]
        if meta.get("warmup") is None:
            return
        store = options.get("artifact_store")
        if not _start_verified(record, store):
            self._start_compile(record, store)

    def _start_compile(self, record: dict, store: Any) -> None:
        meta = record["meta"]
        records = [record] if not meta.get("bucketed") or meta["autotune"] else \
            [_with_config(record, c) for c in bucket_configs(meta)]
        if not meta["autotune"] and not all(_in_store(store, r) for r in records):
            # a kernel restored from the store never reaches the pool: starting up to 16
            # processes for it only slows a warm start (precompile starts them when needed)
            _start_compile_workers(meta["warmup"]["device"])
        kernel = self._kernel(record)
        for r in records:
            _start_warmup(kernel, r, store)

    def load(self, record: dict, options: Any):
        meta, store = record["meta"], options.get("artifact_store")
        verified = _verified.get(_warmup_key(record))
        if verified is not None:
            launcher = verified.result()
            if launcher is not None:
                return launcher
            self._start_compile(record, store)  # not loadable as recorded: as a kernel without the record
        kernel = self._kernel(record)
        if meta["autotune"]:
            # Triton's Autotuner keeps the arguments of a warmup or run on itself (``nargs``) and
            # clears them when done: a launch while the pool's ahead-of-time warmup of it ran
            # found them cleared (TypeError in its benchmark). Its warmup finishes first.
            future = _warmups.get(_warmup_key(record))
            if future is not None:
                concurrent.futures.wait([future])
            return kernel
        if meta.get("bucketed"):  # each config's compile is waited for at its first launch
            shape = _BucketShape(meta["bucketed"])
            return BucketedLauncher(lambda config: self._launcher(kernel, _with_config(record, config), store),
                                    shape.reduction, lambda x, r: heuristic_config(shape, meta["interpret"], x, r))
        future = _warmups.get(_warmup_key(record))
        # the compiled kernel, or None (failed, logged: the first launch then says why)
        return self._launcher(kernel, record, store, future.result() if future is not None else None, verify=True)

    @staticmethod
    def _launcher(kernel: Any, record: dict, store: Any, compiled: Any = None, verify: bool = False) -> TritonLauncher:
        """The launcher of ``record``'s config; a kernel over symbolic sizes is compiled for that
        config (in the pool, unless ``start`` has already) and launched directly at every size."""
        meta = record["meta"]
        if compiled is None and meta.get("bucketed") and meta.get("warmup") is not None:
            _start_warmup(kernel, record, store)
            try:
                compiled = _warmups[_warmup_key(record)].result()
            except Exception as e:  # Triton rejected the source (``_warmup``): as a failed launch, nothing written
                e.tc_kernel_failed = True
                raise
        on_verified = functools.partial(_save_verified, store, record) if verify and store is not None else None
        return TritonLauncher(kernel, meta["config"], meta["pointers"], range(meta["first_output"], meta["pointers"]),
                              compiled, meta["device"], meta.get("options", {}), meta.get("varying_ints", False),
                              on_verified)

    def _kernel(self, record: dict):
        """The kernel's function, its source written (checked) and imported once per process:
        ``start`` and ``load`` both ask for it."""
        source, interpret = record["source"], record["meta"]["interpret"]
        found = _functions.get((source, interpret))
        if found is not None:
            return found
        key = hashlib.sha256(source.encode()).hexdigest()[:24]
        path = cache_dir() / "triton" / f"tc_{key}.py"
        ensure_file(path, source.encode())  # what is imported is the record's source, nothing planted
        fn = _import_kernel(path, interpret, kernel_function_name(source))
        return _functions.setdefault((source, interpret), fn)

    def launch(self, name: str, kernel: kir.Kernel, args: list[str], options: Any, device: Any) -> str:
        xnumel = print_index(sympy.sympify(sympy.Mul(*kernel.xranges)), {}, "//") if kernel.xranges else "1"
        rnumel = print_index(sympy.sympify(sympy.Mul(*kernel.rranges)), {}, "//") if kernel.rranges else None
        if _static_numel(kernel.xranges) == 0:
            return "pass  # empty kernel"
        interpret = _interpreting(device)
        sixteens = _sixteens(kernel, interpret and not is_persistent(kernel, interpret))  # as the writer's
        counts = [f"({xnumel}) // 16" if "xnumel" in sixteens else xnumel]
        counts += [f"({rnumel}) // 16" if "rnumel" in sixteens else rnumel] if rnumel else []
        call_args = args + list(kernel.sizes) + counts
        call_args += [str(slot) for _, slot in kernel.seeds]  # the seed slots: see TritonKernelWriter.decorator
        meta = self.metadata(kernel, options, device)
        if meta["autotune"]:
            grid = f"lambda meta: (triton.cdiv({xnumel}, meta['XBLOCK']),)"
            options = [f"{k}={v!r}" for k, v in meta["options"].items()]
            if meta.get("bucketed"):
                options = [f"xbucket=size_bucket({xnumel})", f"rbucket=size_bucket({rnumel or 1})"] + options
            return f"{name}[{grid}]({', '.join(call_args + options)})"
        if meta.get("bucketed"):  # config and grid chosen per size bucket at run time
            return f"{name}({xnumel}, {rnumel or 1}, {', '.join(call_args)})  # BucketedLauncher: xnumel, rnumel, args"
        config = meta["config"]
        static = _static_numel(kernel.xranges)
        grid = f"{-(-static // config['XBLOCK'])}" if static is not None else \
            f"triton.cdiv({xnumel}, {config['XBLOCK']})"  # computed here when sizes are known
        consts = ", ".join(f"{k}={v}" for k, v in config.items())
        return f"{name}.launch({grid}, {', '.join(call_args)})  # TritonLauncher: grid, args; {consts},"


def symbolic_sizes(kernel: kir.Kernel) -> bool:
    """Whether a size of ``kernel`` is only known at run time (passed as an int argument)."""
    return bool(kernel.sizes) or _static_numel(kernel.xranges) is None or _static_numel(kernel.rranges) is None


def _sixteens(kernel: kir.Kernel, rconst: bool) -> tuple[str, ...]:
    """The symbolic element counts of ``kernel`` known to be multiples of 16 whatever the sizes
    (``768*s0``): passed as ``<name>_16`` = count // 16. ``rconst``: rnumel is a constexpr."""
    names = []
    if _static_numel(kernel.xranges) is None and _multiple_of_16(kernel.xranges):
        names.append("xnumel")
    if kernel.is_reduction and not rconst and _static_numel(kernel.rranges) is None and _multiple_of_16(kernel.rranges):
        names.append("rnumel")
    return tuple(names)


def _multiple_of_16(ranges: tuple) -> bool:
    """Whether the product of ``ranges`` (integer-valued sizes) is a multiple of 16 for every value
    of its symbols: the product of each factor's known integer content."""
    content = 1
    for r in ranges:
        r = sympy.sympify(r)
        terms = [t.as_coeff_Mul()[0] for t in sympy.Add.make_args(r)]
        if all(t.is_Integer for t in terms):
            content *= math.gcd(*(int(t) for t in terms))
    return content % 16 == 0


def _bucket_shape(kernel: kir.Kernel) -> dict | None:
    """What choosing a config per size bucket needs to know of a kernel over symbolic sizes
    (kept in the record's metadata, so a cached graph chooses without the kernel IR); None for
    a kernel whose sizes are all static."""
    if _static_numel(kernel.xranges) is not None and _static_numel(kernel.rranges) is not None:
        return None
    width = min((dt.itemsize for _, dt in kernel.inputs + kernel.outputs), default=4)
    return {"reduction": kernel.is_reduction, "columnar": is_columnar(kernel), "width": width,
            "xranges": [str(x) for x in kernel.xranges], "rranges": [str(r) for r in kernel.rranges]}


class _BucketShape:
    """Stands in for a kernel in :func:`heuristic_config`: its sizes are symbolic, so only the
    kind of kernel, its narrowest dtype and whether it is columnar matter there."""

    def __init__(self, shape: dict):
        self.reduction, self.columnar = shape["reduction"], shape["columnar"]
        dtype = {1: torch.uint8, 2: torch.float16, 4: torch.float32, 8: torch.float64}[shape["width"]]
        self.inputs, self.outputs = (("", dtype),), ()
        self.xranges = tuple(sympy.Symbol(x) if not x.isdigit() else int(x) for x in shape["xranges"])
        self.rranges = tuple(sympy.Symbol(r) if not r.isdigit() else int(r) for r in shape["rranges"])

    @property
    def is_reduction(self) -> bool:
        return self.reduction


def _broadcast(v: str, value: UOp, dtype: torch.dtype, shape: str) -> str:
    """``v`` as a block of ``shape``. ``tl.broadcast_to`` cannot add dimensions, and a value made of
    constants alone is a one-element block of rank 1, so that one is combined with a full block."""
    if any(u.op in (Ops.LOAD, Ops.INDEX, Ops.REDUCED) for u in value.toposort()):
        return f"tl.broadcast_to({v}, {shape})"
    if dtype == torch.bool:
        return f"(tl.full({shape}, 0, tl.int1) | {v})"
    return f"(tl.zeros({shape}, {TL[dtype]}) + {v})"


def _float_compare_reductions(kernel: kir.Kernel) -> bool:
    """Whether a reduction of the kernel is a max/min/argmax/argmin of floats (see NAN_GPU)."""
    return any(isinstance(s, kir.Reduce) and s.reduction_type in ("max", "min", "argmax", "argmin")
               and (s.value.dtype if s.reduction_type.startswith("arg") else s.dtype).is_floating_point
               for stage in kernel.stages for s in stage.inner)


def descriptive_name(kernel: kir.Kernel) -> str:
    """``tc_poi_add_tanh``, ``tc_red_sum_rsqrt``: the kind and the first few distinct math ops."""
    kind = "red" if kernel.is_reduction else "poi"
    seen: dict[str, None] = {}
    for stage in kernel.stages:
        for s in stage.inner + stage.outer:
            if isinstance(s, kir.Reduce):
                seen.setdefault(s.reduction_type.lower(), None)
            for u in s.value.toposort():
                if u.op not in _PLUMBING:
                    seen.setdefault(u.op.name.lower(), None)
    return "_".join(["tc", kind, *list(seen)[:4]])


_PLUMBING = {Ops.LOAD, Ops.CONST, Ops.INDEX, Ops.SIZE, Ops.REDUCED, Ops.SEED, Ops.CAST, Ops.WHERE, Ops.MASKED,
             Ops.CHECK_INDEX}
_modules: dict[str, Any] = {}
_functions: dict[tuple, Any] = {}  # by (source, interpreted): TritonBackend._kernel's memo
_modules_lock = threading.Lock()
_warmups: dict[str, concurrent.futures.Future] = {}  # by source, signature, config and device
_verified: dict[str, concurrent.futures.Future] = {}  # ``_load_verified``'s, by the same key


def launch_options(kernel: kir.Kernel) -> dict:
    """Triton compile options every launch (and ahead-of-time compile) of ``kernel`` passes.
    Kernels with checked indices are debug kernels (``decorator``), and in debug mode Triton
    would also check every int32 add and multiply for overflow: only the index checks are
    wanted (as torch.compile does)."""
    return {"sanitize_overflow": False} if kir.has_index_checks(kernel) else {}


def warmup_signature(kernel: kir.Kernel, device: Any) -> dict | None:
    """What ``JITFunction.warmup`` needs to compile ``kernel`` as the wrapper will launch it:
    pointer dtypes (names) and the int arguments: the static sizes, and for a size only known
    at run time any int32 value (the kernel does not specialise on it: ``unspecialised``; a
    size past int32 is launched through ``JITFunction.run``, which compiles an int64 variant).
    None for a kernel with no element (never launched)."""
    xnumel, rnumel = _static_numel(kernel.xranges), _static_numel(kernel.rranges)
    if xnumel == 0:
        return None
    any_int32 = (1 << 16) + 1
    ints = [any_int32] * len(kernel.sizes) + [any_int32 if xnumel is None else xnumel]
    ints += [any_int32 if rnumel is None else rnumel] if kernel.is_reduction else []
    pointers = [str(dt).removeprefix("torch.") for _, dt in kernel.inputs + kernel.outputs]
    ints += [0] * len(kernel.seeds)  # any slot: unspecialised
    return {"pointers": pointers, "ints": ints, "device": torch.device(device).index or 0}


def _warmup_key(record: dict) -> str:
    meta = record["meta"]
    return hashlib.sha256(repr((record["source"], meta.get("warmup"), meta["config"])).encode()).hexdigest()


def _start_warmup(kernel: Any, record: dict, store: Any = None) -> None:
    key = _warmup_key(record)
    with _modules_lock:
        if key not in _warmups:
            _warmups[key] = build.workers().submit(_warmup, kernel, record["meta"], store, key)


def _warmup(kernel: Any, meta: dict, store: Any = None, key: str = "") -> Any:
    """The compiled kernel of ``meta``'s signature and config, loaded with its C launcher: from
    the artifact store, else compiled in a worker, and read from Triton's cache without
    Triton's cache key (``triton_load.py``); through ``JITFunction.warmup`` where that fails
    (autotuned kernels, no worker, an entry or reply that does not describe the kernel)."""
    sig = meta["warmup"]
    args = [getattr(torch, name) for name in sig["pointers"]] + list(sig["ints"])
    consts = ({} if meta["autotune"] else dict(meta["config"])) | meta.get("options", {})
    try:
        # Triton compiles for the calling thread's current device
        with torch.cuda.device(sig["device"]) if torch.cuda.is_available() else contextlib.nullcontext():
            store_key = _store_key(key, sig["device"])
            known = _load_known(kernel, args, consts, store, store_key) if not meta["autotune"] else None
            if known is not None:  # in Triton's cache already: the store's entry is not read
                _load_ahead(known)
                return known
            restored = _restore_compiled(store, store_key, triton_load.cache_root()) if store is not None else []
            described = _stored_description(triton_load.cache_root(), restored)
            if not meta["autotune"] and not restored:
                described = _compile_in_worker(kernel, sig, consts)
            compiled = _load_compiled(kernel, args, consts, described)
            if compiled is None:
                compiled = kernel.warmup(*args, grid=(1,), **consts)  # a cache hit after the worker's compile
                compiled = compiled.result() if hasattr(compiled, "result") else compiled
                triton_compile.check_hash(kernel, (described or {}).get("hash"), compiled)
            _load_ahead(compiled)
        if store is not None:  # an entry without the description (older tc) is stored again, with it
            _save_compiled(store, store_key, compiled, triton_load.cache_root(), restored, stale=described is None)
            _save_description(store, store_key, compiled)
        return compiled
    except Exception as e:  # the first launch compiles it again and raises what is wrong
        if _is_compile_error(e):  # ... unless the source itself is: then the compile fails now, not at launch
            raise
        _log.debug("ahead-of-time compile of a Triton kernel failed (%s: %s); it compiles at launch",
                   type(e).__name__, e)
        return None


# ---- kernels launched as verified in an earlier process ----------------------------------------
#
# A kernel whose first launch through tc's C launcher matched Triton's own (``TritonLauncher._first``)
# gets a ``"triton_verified"`` store entry (``TritonLauncher.verified``: hash, name, argument kinds,
# compile keyword arguments). A later process loads such a kernel's binary straight from Triton's
# cache (``triton_load.load_verified``) and launches it with tc's C launcher from its first launch:
# it neither imports the kernel's source (``@triton.jit`` tokenizes it: 3-25 ms a kernel, 5.6 s of
# MobileNetV3 training's warm start on the H100) nor binds, builds Triton's launcher or compares
# the first launch again. The entry's key covers what the comparison depended on: the kernel's
# source, signature and config, Triton's version, the device's capability and tc's launch code
# (``_launch_code``); what the process itself can change is checked at the load.

def _verified_key(record: dict) -> str:
    return _store_key(_warmup_key(record) + _launch_code(), record["meta"]["warmup"]["device"])


@functools.cache
def _launch_code() -> str:
    """A digest of the code a recorded comparison vouches for: tc's C launcher and its Python
    side, the launch and load paths."""
    here = Path(__file__).parent
    files = [cuda_launch.SOURCE, here / "cuda_launch.py", here / "triton_launch.py", here / "triton_load.py"]
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()


def _start_verified(record: dict, store: Any) -> bool:
    """Start loading ``record``'s kernel as recorded (``_load_verified``), where it can be: a fixed
    config, and a ``"triton_verified"`` entry in the store."""
    meta = record["meta"]
    if store is None or meta["autotune"] or meta.get("bucketed") or not torch.cuda.is_available():
        return False
    key = _verified_key(record)
    if not _contains(store, "triton_verified", key):
        return False
    with _modules_lock:
        warmup_key = _warmup_key(record)
        if warmup_key not in _verified:
            _verified[warmup_key] = build.workers().submit(_load_verified, record, store, key)
    return True


def _load_verified(record: dict, store: Any, key: str) -> VerifiedLauncher | None:
    """``record``'s kernel loaded and its C launcher made as the store's entry records; None
    where it cannot be (logged under ``TC_LOGS=perf_hints``): it is then loaded as usual."""
    from triton import knobs
    from triton.runtime import driver

    meta = record["meta"]
    device = meta["warmup"]["device"]
    try:
        entry = json.loads(artifacts.store_get(store, "triton_verified", key) or b"null")
        with torch.cuda.device(device):
            loaded = triton_load.load_verified(entry["hash"], entry["name"], entry["kwargs"], entry["debug"], device)
            fallback = _RunLater(record)
            launch = cuda_launch.make_for(loaded.function, loaded.metadata, entry["kinds"].encode(), fallback,
                                          driver.active.get_current_stream, device, knobs.runtime)
        if launch is None:
            raise triton_load.LoadError("tc's C launcher cannot launch it")
        return VerifiedLauncher(launch)
    except Exception as e:  # loaded as usual: import, load, compare at the first launch
        _log.info("Triton kernel %s not loaded as recorded (%s: %s)", key, type(e).__name__, e)
        return None


class _RunLater:
    """A ``VerifiedLauncher``'s fallback: ``JITFunction.run`` of the kernel, its module imported
    at the first launch that needs it."""

    def __init__(self, record: dict):
        self.record, self.launcher = record, None

    def __call__(self, grid0: int, *args: Any) -> None:
        if self.launcher is None:
            self.launcher = TritonBackend._launcher(TritonBackend()._kernel(self.record), self.record, None)
        self.launcher(grid0, *args)


def _save_verified(store: Any, record: dict, entry: dict) -> None:
    """The ``"triton_verified"`` entry of ``record``'s kernel (``TritonLauncher.on_verified``)."""
    key = _verified_key(record)
    if not _contains(store, "triton_verified", key):
        artifacts.store_put(store, "triton_verified", key, json.dumps(entry).encode())


def _load_compiled(kernel: Any, args: list, consts: dict, described: dict | None) -> Any:
    """The kernel ``described`` (a worker's reply or a store entry) loaded from Triton's cache
    without Triton's cache key; None where it cannot be (``warmup`` then loads or compiles it)."""
    from triton.runtime.jit import JITFunction

    if not described or not isinstance(kernel, JITFunction):
        return None
    try:
        return triton_load.load(kernel, args, consts, described.get("hash"), described.get("src"))
    except Exception as e:  # never a wrong kernel: warmup's own lookup (or compile) is always right
        _log.info("loading Triton kernel %s without Triton's cache key failed (%s: %s); using warmup",
                  kernel, type(e).__name__, e)
        return None


def _is_compile_error(e: BaseException) -> bool:
    """Triton rejected the kernel's source (not a missing driver or a dead worker): every launch
    would raise it too."""
    from triton.compiler.errors import CompilationError

    return isinstance(e, CompilationError)


def _load_ahead(compiled: Any) -> None:
    """Load a compiled kernel and build Triton's C launcher for it (a gcc run per signature) now,
    in the compile pool beside the other kernels, not one after another at the first launch
    (BERT-base's first call spent 19 s there on the H200). A failure here is not an error: the
    first launch loads it again and says what is wrong."""
    try:
        if hasattr(compiled, "_init_handles"):
            compiled._init_handles()
    except Exception as e:
        _log.debug("loading a Triton kernel ahead of its first launch failed (%s: %s)", type(e).__name__, e)


def _start_compile_workers(device: int) -> None:
    """The compile pool's workers start, and warm up for this GPU, while the graph is generated."""
    try:
        with torch.cuda.device(device) if torch.cuda.is_available() else contextlib.nullcontext():
            target = triton_compile.current_target(device)
    except Exception:  # no driver: _compile_in_worker says so
        target = None
    triton_compile.pool(target)
    if target is not None:  # tc's C launcher, built once per machine (cuda_launch.py), meanwhile
        build.workers().submit(cuda_launch.module)


def _compile_in_worker(kernel: Any, sig: dict, consts: dict) -> dict | None:
    """Compile ``kernel`` into Triton's cache in a worker process (``triton_compile.py``), so
    that this process only loads it; the worker's description of the compiled kernel
    (``{"hash", "src", "launcher"}``), or None where it did not."""
    from triton.runtime.jit import JITFunction, MockTensor, mangle_type

    if not isinstance(kernel, JITFunction):  # autotuned, interpreted, or a test's stand-in
        return None
    try:
        target = triton_compile.current_target(sig["device"])
        pointers = [mangle_type(MockTensor(getattr(torch, name))) for name in sig["pointers"]]
    except Exception as e:  # no driver: nothing to compile for
        _log.debug("no Triton target for a compile worker (%s: %s)", type(e).__name__, e)
        return None
    return triton_compile.precompile(kernel, pointers, sig["ints"], consts, target)


# ---- compiled kernels in the artifact store (CUDA only: the interpreter compiles nothing) ---------
#
# Triton keeps a compiled kernel in ``<TRITON_CACHE_DIR>/<hash>/`` (cubin, ptx, IR, metadata json
# and a ``__grp__`` file listing them), where ``hash`` is ``CompiledKernel.hash``: a digest of the
# source, options, target and Triton's version. We cannot compute that hash before Triton does,
# so the store entry is keyed by what we launch (source, signature, config) plus the Triton version
# and the device's capability, and holds the directory plus ``tc_load.json`` (``DESCRIPTION``): the
# hash and ``triton_load.describe`` of the kernel's ``src``. Restored, the kernel is loaded from it
# without Triton's cache key (``triton_load.load``); an entry without it (older tc) or one that
# does not load goes through ``warmup``, whose own lookup finds the directory, and is stored again.
# Triton's C launcher (built once per argument signature) is not carried.

def _store_key(key: str, device: int) -> str:
    import triton

    capability = torch.cuda.get_device_capability(device) if torch.cuda.is_available() else None
    return hashlib.sha256(repr((key, triton.__version__, capability)).encode()).hexdigest()[:32]


def _in_store(store: Any, record: dict) -> bool:
    """Whether ``record``'s compiled kernel is in the artifact store (a stat; its digest is still
    checked when it is restored)."""
    if store is None or not hasattr(store, "contains"):
        return False
    return store.contains("triton_kernel", _store_key(_warmup_key(record), record["meta"]["warmup"]["device"]))


def _restore_compiled(store: Any, key: str, root: Path) -> list[str]:
    """Triton cache directories restored from the store (none when absent or unreadable)."""
    data = artifacts.store_get(store, "triton_kernel", key)
    if data is None:
        return []
    try:
        return artifacts.restore_dirs(data, root)
    except (ValueError, OSError) as e:  # Triton then compiles it, and we store it again
        _log.debug("stored Triton kernel %s is unusable (%s); compiling it", key, e)
        return []


DESCRIPTION = "tc_load.json"


def _stored_description(root: Path, restored: list[str]) -> dict | None:
    """The ``DESCRIPTION`` of a restored entry: ``{"hash", "src"}``; None if absent or unreadable."""
    if len(restored) != 1:
        return None
    try:
        described = json.loads((root / restored[0] / DESCRIPTION).read_text())
    except (OSError, ValueError):
        return None
    return described if isinstance(described, dict) else None


def _load_known(kernel: Any, args: list, consts: dict, store: Any, key: str) -> Any:
    """The kernel loaded straight from Triton's cache, where the store's small ``"triton_desc"``
    entry (``DESCRIPTION``'s content) names a kernel that Triton's cache still holds: a warm start
    then reads neither the store's archive (every IR text of the kernel) nor writes anything.
    None otherwise (absent, another machine's Triton cache, not loadable): the archive is restored."""
    from triton.runtime.jit import JITFunction

    if store is None or not isinstance(kernel, JITFunction) or not _contains(store, "triton_desc", key) \
            or not _contains(store, "triton_kernel", key):  # (a bundle made now must carry the archive)
        return None
    try:
        described = json.loads(artifacts.store_get(store, "triton_desc", key) or b"null")
        return triton_load.load(kernel, args, consts, described.get("hash"), described.get("src"))
    except Exception as e:  # the archive's path (or warmup) loads it
        _log.debug("Triton kernel %s is not in Triton's cache as described (%s: %s)", key, type(e).__name__, e)
        return None


def _contains(store: Any, kind: str, key: str) -> bool:
    return hasattr(store, "contains") and store.contains(kind, key)


def _description(compiled: Any) -> bytes | None:
    """``DESCRIPTION``'s content for ``compiled``: its hash and ``triton_load.describe`` of its
    ``src``; None where there is none (autotuned: several configs; a test's stand-in)."""
    digest = getattr(compiled, "hash", None)
    if not isinstance(digest, str):
        return None
    try:
        return json.dumps({"hash": digest, "src": triton_load.describe(compiled.src)}).encode()
    except Exception:  # no src to describe: loaded through warmup
        return None


def _save_description(store: Any, key: str, compiled: Any) -> None:
    """The ``"triton_desc"`` entry of ``compiled`` (for ``_load_known``), where the store lacks it."""
    if not hasattr(store, "contains") or _contains(store, "triton_desc", key):
        return
    data = _description(compiled)
    if data is not None:
        artifacts.store_put(store, "triton_desc", key, data)


def _save_compiled(store: Any, key: str, compiled: Any, root: Path, restored: list[str], stale: bool = False) -> None:
    """Store ``compiled``'s cache directory, with its ``DESCRIPTION``; not if it was restored from
    the store (unless the entry was ``stale``: without a description)."""
    digest = getattr(compiled, "hash", None)  # None for autotuned kernels (several configs)
    name = triton_load.triton_cache_entry(root, digest) if isinstance(digest, str) else None
    if name is None or (name in restored and not stale):
        return
    data = _description(compiled)
    extra = {f"{name}/{DESCRIPTION}": data} if data is not None else {}
    artifacts.store_put(store, "triton_kernel", key, artifacts.pack_dirs(root, [name], extra))


def _check_interpreter() -> None:
    import triton.language.standard as standard
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(standard.max, InterpretedFunction):
        raise RuntimeError(
            "tc_inductor: Triton kernels on CPU tensors need the Triton interpreter; set TRITON_INTERPRET=1 "
            "in the environment before triton is imported (or use the C++ backend on CPU tensors)")


def _import_kernel(path, interpret: bool, name: str):
    if interpret:
        _check_interpreter()
    with _modules_lock:
        return _import_locked(path, interpret, name)


def _import_locked(path, interpret: bool, name: str):
    key = str(path)
    if key not in _modules:
        saved = os.environ.get("TRITON_INTERPRET")
        if interpret:
            os.environ["TRITON_INTERPRET"] = "1"  # read when @triton.jit decorates the kernel
        try:
            spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        finally:
            if saved is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = saved
        _modules[key] = module
        build.COUNTERS["triton_kernels"] += 1
    return _modules[key].__dict__[name]


def kernel_function(module: Any, source: str) -> Any:
    """The jitted function ``source`` defines, in its imported ``module``."""
    return module.__dict__[kernel_function_name(source)]


def kernel_function_name(source: str) -> str:
    return re.findall(r"^@triton\.jit(?:\(.*\))?\ndef (\w+)\(", source, re.M)[-1]  # the header defines helpers first


def _interpreting(device: Any) -> bool:
    """CPU tensors can only run Triton kernels under the interpreter."""
    return torch.device(device).type != "cuda"


def _applies(device: Any, options: Any) -> bool:
    device = torch.device(device)
    return device.type == "cuda" or (device.type == "cpu" and options.get("backend") == "triton")


register_backend("triton", _applies, TritonBackend())
