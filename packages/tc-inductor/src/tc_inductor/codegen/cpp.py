"""The C++/OpenMP backend for CPU tensors.

One ``extern "C"`` function per kernel: OpenMP across the outer (x) loops, reduction loops
inside that gcc vectorises (``-O3 -march=native``, ``__restrict__`` pointers), half types
stored as 16-bit and computed in float. Compiled once per source hash by the machine's g++.
"""

from __future__ import annotations

import math
from typing import Any

import sympy
import torch

from .. import kir
from ..kir import Ops, UOp
from . import build, cpp_rows, cpp_vecmath
from .common import Emitter, Scope, pointer_name, print_index
from .registry import register_backend

CTYPES = {
    torch.float32: "float", torch.float64: "double", torch.float16: "_Float16", torch.bfloat16: "uint16_t",
    torch.int64: "int64_t", torch.int32: "int32_t", torch.int16: "int16_t", torch.int8: "int8_t",
    torch.uint8: "uint8_t", torch.bool: "bool",
}
# The C++ type a value of each compute dtype is held in (half types are held in float).
VTYPES = {**CTYPES, torch.float16: "float", torch.bfloat16: "float"}

PRELUDE = r"""
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
static inline float tc_bf16_to_f32(uint16_t v) { uint32_t u = (uint32_t)v << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t tc_f32_to_bf16(float f) {
  if (f != f) return 0x7fc0;
  uint32_t u; std::memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return (uint16_t)(u >> 16);
}
static inline float tc_round_bf16(float f) { return tc_bf16_to_f32(tc_f32_to_bf16(f)); }
static inline float tc_round_f16(float f) { return (float)(_Float16)f; }
template <typename T> static inline T tc_max(T a, T b) { if (a != a) return a; if (b != b) return b; return a > b ? a : b; }
template <typename T> static inline T tc_min(T a, T b) { if (a != a) return a; if (b != b) return b; return a < b ? a : b; }
template <typename T> static inline T tc_floordiv(T a, T b) { T q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1; return q; }
template <typename T> static inline T tc_mod(T a, T b) { T r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
template <typename T> static inline T tc_fmod_py(T a, T b) { T r = std::fmod(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
template <typename T> static inline T tc_ipow(T a, T b) {
  if (b < 0) return (a == 1) ? 1 : (a == -1 ? ((b % 2) ? -1 : 1) : 0);
  T r = 1; while (b) { if (b & 1) r *= a; a *= a; b >>= 1; } return r;
}
static inline double tc_erfinv(double y) {
  if (y <= -1) return -INFINITY; if (y >= 1) return INFINITY;
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  if (w < 5.0) { w -= 2.5; x = 2.81022636e-08; x = 3.43273939e-07 + x * w; x = -3.5233877e-06 + x * w;
    x = -4.39150654e-06 + x * w; x = 0.00021858087 + x * w; x = -0.00125372503 + x * w; x = -0.00417768164 + x * w;
    x = 0.246640727 + x * w; x = 1.50140941 + x * w; }
  else { w = std::sqrt(w) - 3.0; x = -0.000200214257; x = 0.000100950558 + x * w; x = 0.00134934322 + x * w;
    x = -0.00367342844 + x * w; x = 0.00573950773 + x * w; x = -0.0076224613 + x * w; x = 0.00943887047 + x * w;
    x = 1.00167406 + x * w; x = 2.83297682 + x * w; }
  x *= y;
  for (int i = 0; i < 2; i++) { double err = std::erf(x) - y; x -= err / (1.1283791670955126 * std::exp(-x * x)); }
  return x;
}
// A data-dependent index checked against its dim's size (negative ones wrapped first when the
// op wraps them): one unsigned compare. Out of range, the first failure's index and size go to
// err (read by the launcher, which raises) and 0 is used instead, so no load leaves the tensor.
static inline int64_t tc_index(int64_t i, int64_t n, bool wraps, int64_t* err) {
  int64_t j = (wraps && i < 0) ? i + n : i;
  if (__builtin_expect((uint64_t)j >= (uint64_t)n, 0)) {
    int64_t expected = 0;
    if (__atomic_compare_exchange_n(&err[0], &expected, 1, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      err[1] = i; err[2] = n;
    }
    return 0;
  }
  return j;
}
""" + r"""
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): counter
// (offset lo, offset hi, 0, 0), key (seed lo, seed hi); ten rounds of two 32x32->64 products,
// the key raised by the Weyl constants after each. Same words and float mapping as Triton's
// tl.rand / tl.randn, so C++ and Triton kernels give the same numbers for the same seed.
struct tc_philox_out { uint32_t c0, c1; };
static inline tc_philox_out tc_philox(int64_t seed, int64_t offset) {
  uint32_t c0 = (uint32_t)(uint64_t)offset, c1 = (uint32_t)((uint64_t)offset >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)(uint64_t)seed, k1 = (uint32_t)((uint64_t)seed >> 32);
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p2 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p2 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p2; c3 = (uint32_t)p0; c0 = n0; c2 = n2;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  return {c0, c1};
}
// A 32-bit word as a float in [0, 1): the word as int32 folded onto [0, 2^31), times the largest
// scale that keeps (2^31 - 1) * scale below 1 in float (triton.language.random's mapping).
static inline float tc_uniform(uint32_t word) {
  int32_t i = (int32_t)word; if (i < 0) i = ~i;
  return (float)i * 4.6566127342e-10f;
}
static inline float tc_rand(int64_t seed, int64_t offset) { return tc_uniform(tc_philox(seed, offset).c0); }
static inline float tc_randn(int64_t seed, int64_t offset) {  // Box-Muller on the first two words
  tc_philox_out w = tc_philox(seed, offset);
  float u1 = std::fmax(1.0e-7f, tc_uniform(w.c0)), theta = 6.283185307179586f * tc_uniform(w.c1);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(theta);
}
"""

PARALLEL_THRESHOLD = 32768  # elements below which a kernel runs on one thread


def _lit(value: Any, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        if math.isnan(value):
            return "std::numeric_limits<float>::quiet_NaN()" if dtype != torch.float64 else "NAN"
        if math.isinf(value):
            return ("" if value > 0 else "-") + "INFINITY"
        text = repr(float(value))
        return text + ("f" if VTYPES[dtype] == "float" else "")
    value = int(value)
    return f"{value}LL" if VTYPES[dtype] == "int64_t" else str(value)


_UNARY = {
    Ops.EXP: "std::exp({0})", Ops.EXP2: "std::exp2({0})", Ops.EXPM1: "std::expm1({0})", Ops.LOG: "std::log({0})",
    Ops.LOG2: "std::log2({0})", Ops.LOG10: "std::log10({0})", Ops.LOG1P: "std::log1p({0})",
    Ops.SQRT: "std::sqrt({0})", Ops.SIN: "std::sin({0})", Ops.COS: "std::cos({0})", Ops.TAN: "std::tan({0})",
    Ops.ASIN: "std::asin({0})", Ops.ACOS: "std::acos({0})", Ops.ATAN: "std::atan({0})", Ops.SINH: "std::sinh({0})",
    Ops.COSH: "std::cosh({0})", Ops.TANH: "std::tanh({0})", Ops.ASINH: "std::asinh({0})",
    Ops.ACOSH: "std::acosh({0})", Ops.ATANH: "std::atanh({0})", Ops.ERF: "std::erf({0})",
    Ops.ERFC: "std::erfc({0})", Ops.LGAMMA: "std::lgamma({0})", Ops.FLOOR: "std::floor({0})",
    Ops.CEIL: "std::ceil({0})", Ops.ROUND: "std::nearbyint({0})", Ops.TRUNC: "std::trunc({0})",
    Ops.NOT: "!{0}", Ops.BITNOT: "~{0}", Ops.ISNAN: "({0} != {0})",
}
_BINARY = {
    Ops.ADD: "{0} + {1}", Ops.SUB: "{0} - {1}", Ops.MUL: "{0} * {1}", Ops.TRUEDIV: "{0} / {1}",
    Ops.MAX: "tc_max({0}, {1})", Ops.MIN: "tc_min({0}, {1})", Ops.ATAN2: "std::atan2({0}, {1})",
    Ops.HYPOT: "std::hypot({0}, {1})", Ops.COPYSIGN: "std::copysign({0}, {1})",
    Ops.NEXTAFTER: "std::nextafter({0}, {1})", Ops.AND: "{0} && {1}", Ops.OR: "{0} || {1}", Ops.XOR: "{0} != {1}",
    Ops.BITAND: "{0} & {1}", Ops.BITOR: "{0} | {1}", Ops.BITXOR: "{0} ^ {1}", Ops.LSHIFT: "{0} << {1}",
    Ops.RSHIFT: "{0} >> {1}", Ops.LT: "{0} < {1}", Ops.LE: "{0} <= {1}", Ops.GT: "{0} > {1}",
    Ops.GE: "{0} >= {1}", Ops.EQ: "{0} == {1}", Ops.NE: "{0} != {1}",
}


class CppKernelWriter:
    """Prints one kir.Kernel as a C++ function."""

    def __init__(self, kernel: kir.Kernel, name: str):
        self.kernel, self.name = kernel, name
        self.params = {n: f"in_ptr{i}" for i, (n, _) in enumerate(kernel.inputs)}
        self.params.update({n: f"out_ptr{i}" for i, (n, _) in enumerate(kernel.outputs)})
        self.seed_args = {seed: f"seed{i}" for i, seed in enumerate(kernel.seeds)}  # slots are arguments
        self.dtypes = dict(kernel.inputs) | dict(kernel.outputs)
        self.emitter = Emitter(self.render, self.declare, self.masked)

    # ---- values -------------------------------------------------------------------------------
    def declare(self, u: UOp, var: str, text: str) -> str:
        return f"{VTYPES[u.dtype]} {var} = {text};"

    def index(self, expr: sympy.Expr, args: list) -> str:
        names = dict(zip(kir.indirect_names(expr), args))
        return print_index(expr, names, "/")

    def render(self, u: UOp, args: list, scope: Scope) -> str:
        op, t = u.op, VTYPES[u.dtype]
        if op is Ops.LOAD:
            buf, expr = u.arg
            raw = f"{self.params[buf]}[{self.index(expr, args)}]"
            stored = self.dtypes[buf]
            return f"tc_bf16_to_f32({raw})" if stored == torch.bfloat16 else (
                f"static_cast<float>({raw})" if stored == torch.float16 else raw)
        if op is Ops.CONST:
            return _lit(u.arg, u.dtype)
        if op is Ops.INDEX:
            return f"static_cast<int64_t>({self.index(u.arg, args)})"
        if op is Ops.REDUCED:
            return u.arg
        if op is Ops.CHECK_INDEX:
            size, wraps = u.arg
            return f"tc_index({args[0]}, {self._size(size)}, {'true' if wraps else 'false'}, tc_err)"
        if op is Ops.SEED:
            return f"{self.params[u.arg[0]]}[{self.seed_args[u.arg]}]"
        if op is Ops.CAST:
            return self.cast(u, u.src[0].dtype, args[0])
        if op is Ops.WHERE:
            return f"{args[0]} ? {args[1]} : {args[2]}"
        return self.math(u, args, t)

    def cast(self, u: UOp, src: torch.dtype, a: str) -> str:
        if u.dtype == torch.bfloat16:
            return f"tc_round_bf16({a})"
        if u.dtype == torch.float16:
            return f"tc_round_f16({a})"
        if u.dtype == torch.bool:
            return f"({a} != 0)"
        return f"static_cast<{VTYPES[u.dtype]}>({a})"

    def math(self, u: UOp, args: list, t: str) -> str:
        op, is_float = u.op, u.src[0].dtype.is_floating_point
        a = args[0]
        if op is Ops.NEG:
            return f"-{a}"
        if op is Ops.ABS:
            return f"std::abs({a})" if is_float else f"({a} < 0 ? -{a} : {a})"
        if op is Ops.EXP and t == "float":
            return f"tc_expf({a})"
        if op is Ops.RSQRT:
            return f"{t}(1) / std::sqrt({a})"
        if op is Ops.RECIPROCAL:
            return f"{t}(1) / {a}"
        if op is Ops.SIGMOID:
            return f"{t}(1) / ({t}(1) + {'tc_expf' if t == 'float' else 'std::exp'}(-{a}))"
        if op is Ops.ERFINV:
            return f"static_cast<{t}>(tc_erfinv({a}))"
        if op in (Ops.RAND, Ops.RANDN):
            return f"tc_{op.name.lower()}({a}, {args[1]})"
        if op is Ops.SIGN:
            return f"static_cast<{t}>(({a} > 0) - ({a} < 0))" if u.dtype != torch.bool else a
        if op is Ops.SIGNBIT:
            return f"std::signbit({a})" if is_float else f"({a} < 0)"
        if op is Ops.ISINF:
            return f"std::isinf({a})" if is_float else "false"
        if op in _UNARY:
            return _UNARY[op].format(a)
        b = args[1]
        if op is Ops.FLOORDIV:
            return f"std::floor({a} / {b})" if is_float else f"tc_floordiv({a}, {b})"
        if op is Ops.TRUNCDIV:
            return f"std::trunc({a} / {b})" if is_float else f"{a} / {b}"
        if op is Ops.MOD:
            return f"tc_fmod_py({a}, {b})" if is_float else f"tc_mod({a}, {b})"
        if op is Ops.FMOD:
            return f"std::fmod({a}, {b})" if is_float else f"{a} % {b}"
        if op is Ops.POW:
            return f"std::pow({a}, {b})" if is_float else f"tc_ipow({a}, {b})"
        if u.src[0].dtype == torch.bool and op in (Ops.ADD, Ops.MUL, Ops.MAX, Ops.MIN):
            return f"{a} || {b}" if op in (Ops.ADD, Ops.MAX) else f"{a} && {b}"
        if op in _BINARY:
            return _BINARY[op].format(a, b)
        raise NotImplementedError(f"C++ backend cannot print {op}")

    def masked(self, emitter: Emitter, u: UOp, scope: Scope, lines: list) -> str:
        mask = emitter.value(u.src[0], scope, lines)
        other = emitter.value(u.src[2], scope, lines)
        var = emitter.new_var()
        lines.append(f"{VTYPES[u.dtype]} {var} = {other};")
        inner: list[str] = []
        body = emitter.value(u.src[1], Scope(scope), inner)
        lines.append(f"if ({mask}) {{")
        lines.extend("    " + line for line in inner)
        lines.append(f"    {var} = {body};")
        lines.append("}")
        return var

    # ---- statements -----------------------------------------------------------------------------
    def store(self, s: kir.Store, scope: Scope, lines: list) -> None:
        v = self.emitter.value(s.value, scope, lines)
        target = f"{self.params[s.buffer]}[{self.index(s.index, [])}]"
        if s.dtype == torch.bfloat16:
            v = f"tc_f32_to_bf16({v})"
        elif s.dtype == torch.float16:
            v = f"static_cast<_Float16>({v})"
        elif VTYPES[s.dtype] != VTYPES[s.value.dtype]:
            v = f"static_cast<{CTYPES[s.dtype]}>({v})"
        lines.append(f"{target} = {v};")

    def generate(self) -> str:
        k = self.kernel
        params = [f"const {CTYPES[d]}* __restrict__ {self.params[n]}" for n, d in k.inputs]
        params += [f"{CTYPES[d]}* __restrict__ {self.params[n]}" for n, d in k.outputs]
        params += [f"int64_t {s}" for s in k.sizes]
        params += [f"int64_t {s}" for s in self.seed_args.values()]
        body = self.reduction_body() if k.is_reduction else self.pointwise_body()
        if not kir.has_index_checks(k):
            head = f'extern "C" void {self.name}({", ".join(params)})'
            return head + " {\n" + "\n".join("    " + line for line in body) + "\n}\n"
        # checked indices: a three-word error record (failed, index, size); nonzero return = failed
        head = f'extern "C" int {self.name}({", ".join(params + ["int64_t* tc_err"])})'
        body = ["tc_err[0] = 0;", *body, "return tc_err[0] != 0;"]
        return head + " {\n" + "\n".join("    " + line for line in body) + "\n}\n"

    def _size(self, s: Any) -> str:
        return print_index(sympy.sympify(s), {}, "/")

    def _numel(self, sizes: tuple) -> str:
        return " * ".join(self._size(s) for s in sizes) or "1"

    def _loops(self, var: str, sizes: tuple) -> list[str]:
        return [f"for (int64_t {var}{i} = 0; {var}{i} < {self._size(s)}; {var}{i}++)" for i, s in enumerate(sizes)]

    def pointwise_body(self) -> list[str]:
        k = self.kernel
        inner: list[str] = []
        scope = Scope()
        for stage in k.stages:
            for s in stage.inner + stage.outer:
                self.store(s, scope, inner)
        loops = self._loops("x", k.xranges)
        if not loops:
            return ["{"] + ["    " + line for line in inner] + ["}"]
        cond = f"if({self._numel(k.xranges)} >= {PARALLEL_THRESHOLD})"
        if len(loops) == 1:
            return [f"#pragma omp parallel for simd {cond}"] + _nest(loops, inner)
        # Iterations of the innermost loop are independent (distinct elements of restrict buffers);
        # saying so spares gcc the aliasing checks it cannot prove through OpenMP's outlining.
        innermost = ["#pragma omp simd"] + _nest(loops[-1:], inner)
        return [f"#pragma omp parallel for collapse({len(loops) - 1}) {cond}"] + _nest(loops[:-1], innermost)

    def reduction_body(self) -> list[str]:
        k = self.kernel
        self.row_n = cpp_rows.row_size(k.rranges)
        self.row_arrays: list[str] = []
        self.cached: dict[UOp, str] = {}
        body: list[str] = []
        for i, stage in enumerate(k.stages):
            body += self.stage(stage, k.stages[i + 1:])
        body = self.row_arrays + body
        loops = self._loops("x", k.xranges)
        if not loops:
            return ["{"] + ["    " + line for line in body] + ["}"]
        numel = f"{self._numel(k.xranges)} * {self._numel(k.rranges)}"
        pragma = f"#pragma omp parallel for collapse({len(loops)}) if({numel} >= {PARALLEL_THRESHOLD})"
        return [pragma] + _nest(loops, body)

    def stage(self, stage: kir.Stage, later: tuple) -> list[str]:
        k = self.kernel
        out: list[str] = []
        inner: list[str] = []
        scope = Scope()
        scope.cache.update(self.cached)
        reductions = [s for s in stage.inner if isinstance(s, kir.Reduce)]
        for s in stage.inner:
            if isinstance(s, kir.Store):
                self.store(s, scope, inner)
            else:
                out += self.accumulator(s)
                inner += self.accumulate(s, self.emitter.value(s.value, scope, inner))
        if stage.inner:
            self.save_rows(scope, later, inner)
            loops = self._loops("r", k.rranges)
            clauses = _simd_clauses(reductions)
            if clauses is None:
                out += _nest(loops, inner)
            else:
                out += _nest(loops[:-1], [f"#pragma omp simd{clauses}"] + _nest(loops[-1:], inner))
        for s in reductions:
            out.append(self.finish(s))
        scope = Scope()
        for s in stage.outer:
            self.store(s, scope, out)
        return out

    def save_rows(self, scope: Scope, later: tuple, inner: list[str]) -> None:
        """Keep values later stages recompute in per-thread row arrays (``cpp_rows``)."""
        if not later or self.row_n is None:
            return
        fresh = {u: v for u, v in scope.cache.items() if u not in self.cached and cpp_rows.worth_caching(u)}
        rlin = print_index(_linear(self.kernel.rranges), {}, "/")
        for stage in later:
            for u in cpp_rows.wanted(stage, {**fresh, **self.cached}):
                if u in self.cached or u not in fresh:
                    continue
                if (len(self.row_arrays) + 1) * self.row_n * 8 > cpp_rows.TOTAL_BYTES:
                    return
                name = f"row{len(self.row_arrays)}"
                self.row_arrays.append(f"alignas(64) {VTYPES[u.dtype]} {name}[{self.row_n}];")
                inner.append(f"{name}[{rlin}] = {fresh[u]};")
                self.cached[u] = f"{name}[{rlin}]"

    def finish(self, s: kir.Reduce) -> str:
        t = VTYPES[s.dtype]
        if s.reduction_type.startswith("arg"):
            return f"int64_t {s.name} = idx_{s.name};"
        if _nan_flagged(s):
            return f"{t} {s.name} = nan_{s.name} ? std::numeric_limits<{t}>::quiet_NaN() : acc_{s.name};"
        return f"{t} {s.name} = acc_{s.name};"

    def accumulator(self, s: kir.Reduce) -> list[str]:
        t = VTYPES[s.value.dtype] if s.reduction_type.startswith("arg") else VTYPES[s.dtype]
        if s.reduction_type == "sum" and s.dtype == torch.float32:
            # A float sum over a long row, added in order, loses digits that eager's cascade
            # sum keeps (a batch norm's mean over 4096 values near 100 was off by 1.7e-4, its
            # output by 2%): accumulate in double, rounded once by finish().
            t = "double"
        dt = s.value.dtype if s.reduction_type.startswith("arg") else s.dtype
        lowest = "-INFINITY" if dt.is_floating_point else ("false" if dt == torch.bool else f"std::numeric_limits<{t}>::lowest()")
        highest = "INFINITY" if dt.is_floating_point else ("true" if dt == torch.bool else f"std::numeric_limits<{t}>::max()")
        init = {"sum": f"{t}(0)", "prod": f"{t}(1)", "max": lowest, "min": highest, "any": "false", "all": "true",
                "argmax": lowest, "argmin": highest}[s.reduction_type]
        lines = [f"{t} acc_{s.name} = {init};"]
        if _nan_flagged(s):
            lines.append(f"int nan_{s.name} = 0;")
        if s.reduction_type.startswith("arg"):
            lines.append(f"int64_t idx_{s.name} = 0;")
        return lines

    def accumulate(self, s: kir.Reduce, v: str) -> list[str]:
        acc = f"acc_{s.name}"
        rt = s.reduction_type
        if rt in ("argmax", "argmin"):
            cmp = ">" if rt == "argmax" else "<"
            rlin = print_index(_linear(self.kernel.rranges), {}, "/")
            return [f"if (!({acc} != {acc}) && (({v} != {v}) || {v} {cmp} {acc})) {{ {acc} = {v}; idx_{s.name} = {rlin}; }}"]
        if rt in ("max", "min") and s.dtype != torch.bool:
            # Branch-free, so the loop vectorises; NaN is tracked apart (tc_max's propagation).
            cmp = ">" if rt == "max" else "<"
            nan = [f"nan_{s.name} |= ({v} != {v});"] if _nan_flagged(s) else []
            return [f"{acc} = {acc} {cmp} {v} ? {acc} : {v};"] + nan
        if s.dtype == torch.bool:
            op = {"sum": "||", "max": "||", "any": "||", "prod": "&&", "min": "&&", "all": "&&"}[rt]
            return [f"{acc} = {acc} {op} {v};"]
        return [{
            "sum": f"{acc} = {acc} + {v};", "prod": f"{acc} = {acc} * {v};", "max": f"{acc} = tc_max({acc}, {v});",
            "min": f"{acc} = tc_min({acc}, {v});", "any": f"{acc} = {acc} || ({v} != 0);",
            "all": f"{acc} = {acc} && ({v} != 0);",
        }[rt]]


def _nan_flagged(s: kir.Reduce) -> bool:
    return s.reduction_type in ("max", "min") and s.dtype.is_floating_point


def _simd_clauses(reductions: list) -> str | None:
    """``omp simd`` reduction clauses for a row loop, or None when an accumulator is not one
    OpenMP can split across lanes (arg-reductions, bool, products)."""
    clauses = []
    for s in reductions:
        op = {"sum": "+", "max": "max", "min": "min"}.get(s.reduction_type)
        if op is None or s.dtype == torch.bool:
            return None
        clauses.append(f" reduction({op}:acc_{s.name})")
        if _nan_flagged(s):
            clauses.append(f" reduction(|:nan_{s.name})")
    return "".join(clauses)


def _linear(rranges: tuple) -> sympy.Expr:
    rv = kir.rvars(len(rranges))
    expr, stride = sympy.Integer(0), sympy.Integer(1)
    for var, size in reversed(list(zip(rv, rranges))):
        expr += var * stride
        stride *= size
    return expr


def _nest(loops: list[str], body: list[str]) -> list[str]:
    lines, indent = [], ""
    for loop in loops:
        lines.append(indent + loop + " {")
        indent += "    "
    lines += [indent + line for line in body]
    for i in range(len(loops)):
        indent = indent[:-4]
        lines.append(indent + "}")
    return lines


class CppBackend:
    name = "cpp"
    reads_pointers = True  # launch lines take ``ptr_<buffer>`` ints the wrapper binds once a call

    def generate(self, kernel: kir.Kernel, name: str, options: Any, device: Any) -> str:
        return PRELUDE + cpp_vecmath.declarations() + cpp_vecmath.EXPF + CppKernelWriter(kernel, name).generate()

    def metadata(self, kernel: kir.Kernel, options: Any, device: Any) -> dict:
        return {"pointers": len(kernel.inputs) + len(kernel.outputs), "sizes": len(kernel.sizes),
                "seeds": len(kernel.seeds), "checks": kir.has_index_checks(kernel)}

    def start(self, record: dict, options: Any) -> None:
        build.compile_cpp_async(record["source"], options.get("artifact_store"))

    def load(self, record: dict, options: Any):
        import ctypes

        lib = build.compile_cpp_async(record["source"], options.get("artifact_store")).result()
        fn = lib.kernel
        meta = record["meta"]
        fn.argtypes = [ctypes.c_void_p] * meta["pointers"] + [ctypes.c_int64] * (meta["sizes"] + meta.get("seeds", 0))
        if not meta.get("checks"):
            fn.restype = None
            return fn
        fn.restype = ctypes.c_int
        fn.argtypes = fn.argtypes + [ctypes.c_void_p]
        return _checked_launch(fn)

    def launch(self, name: str, kernel: kir.Kernel, args: list[str], options: Any, device: Any) -> str:
        ptrs = [pointer_name(a) for a in args]  # bound by the wrapper (KernelCall.pointers)
        slots = [str(slot) for _, slot in kernel.seeds]
        return f"{name}({', '.join(ptrs + list(kernel.sizes) + slots)})"


def _checked_launch(fn: Any):
    """A launcher for a kernel with bounds-checked indices: raises eager's IndexError after a
    launch that read out of range (the kernel read element 0 there instead)."""
    import ctypes

    def launch(*args: Any) -> None:
        err = (ctypes.c_int64 * 3)()  # per launch: concurrent calls never share the record
        if fn(*args, err):
            raise IndexError(f"index {err[1]} is out of bounds for dimension with size {err[2]}")

    return launch


def _is_cpu(device: Any, options: dict) -> bool:
    return torch.device(device).type == "cpu" and options.get("backend", "cpp") in ("cpp", "auto", None)


register_backend("cpp", _is_cpu, CppBackend())
