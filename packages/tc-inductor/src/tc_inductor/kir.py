"""The kernel IR: one immutable, structurally hashed node class over a closed op vocabulary.

A ``UOp`` is the value of one element of a kernel's iteration space: loads at sympy index
expressions, constants, arithmetic, casts, masked sub-computations and the results of in-kernel
reductions. Equal trees are equal objects (hash and ``==`` are structural), so common
sub-expressions merge for free when a backend prints a kernel.
"""

from __future__ import annotations

import enum
import functools
import hashlib
from typing import Any

import attrs
import sympy
import torch


class Ops(enum.Enum):
    # leaves
    LOAD = enum.auto()       # arg=(buffer, index expr); src=values of indirect index symbols
    CONST = enum.auto()      # arg=python number
    INDEX = enum.auto()      # arg=sympy expr over loop variables, as an int64 value
    SIZE = enum.auto()       # arg=scalar argument name (a runtime Python number)
    # src=(index,), arg=(size, wraps): a data-dependent index into a dim of ``size`` (an int or a
    # sympy size), negative ones wrapped first when ``wraps``; out of [0, size) the launch fails
    # with an IndexError (C++) or a device-side assert (Triton), as eager raises
    CHECK_INDEX = enum.auto()
    REDUCED = enum.auto()    # arg=name of an in-kernel reduction: its per-row result
    SEED = enum.auto()       # arg=(buffer, slot): one random op's int64 seed, the same for every element
    #                          (kernels take the slot as an argument: Kernel.seeds)
    # structure
    CAST = enum.auto()       # to self.dtype
    WHERE = enum.auto()      # src=(cond, a, b)
    MASKED = enum.auto()     # src=(mask, body, other): body is only evaluated where mask holds
    # unary
    NEG = enum.auto(); ABS = enum.auto(); EXP = enum.auto(); EXP2 = enum.auto(); EXPM1 = enum.auto()  # noqa: E702
    LOG = enum.auto(); LOG2 = enum.auto(); LOG10 = enum.auto(); LOG1P = enum.auto()  # noqa: E702
    SQRT = enum.auto(); RSQRT = enum.auto(); RECIPROCAL = enum.auto()  # noqa: E702
    SIN = enum.auto(); COS = enum.auto(); TAN = enum.auto(); ASIN = enum.auto(); ACOS = enum.auto()  # noqa: E702
    ATAN = enum.auto(); SINH = enum.auto(); COSH = enum.auto(); TANH = enum.auto()  # noqa: E702
    ASINH = enum.auto(); ACOSH = enum.auto(); ATANH = enum.auto()  # noqa: E702
    ERF = enum.auto(); ERFC = enum.auto(); ERFINV = enum.auto(); LGAMMA = enum.auto()  # noqa: E702
    SIGMOID = enum.auto()
    FLOOR = enum.auto(); CEIL = enum.auto(); ROUND = enum.auto(); TRUNC = enum.auto()  # noqa: E702
    SIGN = enum.auto(); SIGNBIT = enum.auto()  # noqa: E702
    ISNAN = enum.auto(); ISINF = enum.auto()  # noqa: E702
    NOT = enum.auto(); BITNOT = enum.auto()  # noqa: E702
    # binary
    ADD = enum.auto(); SUB = enum.auto(); MUL = enum.auto(); TRUEDIV = enum.auto()  # noqa: E702
    FLOORDIV = enum.auto(); TRUNCDIV = enum.auto(); MOD = enum.auto(); FMOD = enum.auto()  # noqa: E702
    POW = enum.auto(); MAX = enum.auto(); MIN = enum.auto(); ATAN2 = enum.auto()  # noqa: E702
    HYPOT = enum.auto(); COPYSIGN = enum.auto(); NEXTAFTER = enum.auto()  # noqa: E702
    AND = enum.auto(); OR = enum.auto(); XOR = enum.auto()  # noqa: E702
    BITAND = enum.auto(); BITOR = enum.auto(); BITXOR = enum.auto()  # noqa: E702
    LSHIFT = enum.auto(); RSHIFT = enum.auto()  # noqa: E702
    LT = enum.auto(); LE = enum.auto(); GT = enum.auto(); GE = enum.auto()  # noqa: E702
    EQ = enum.auto(); NE = enum.auto()  # noqa: E702
    # random: src=(seed, offset) -> uniform float32 in [0, 1) / standard normal, from Philox4x32-10
    # keyed by the seed and counting from the int64 offset (the element's flat index in the random
    # op's result), so a value never depends on block sizes, fusion or which kernel computes it
    RAND = enum.auto(); RANDN = enum.auto()  # noqa: E702


class GroupOp:
    """Op properties as named sets (what backends and rewrites dispatch on)."""

    Leaf = {Ops.LOAD, Ops.CONST, Ops.INDEX, Ops.SIZE, Ops.REDUCED, Ops.SEED}
    Unary = {
        Ops.NEG, Ops.ABS, Ops.EXP, Ops.EXP2, Ops.EXPM1, Ops.LOG, Ops.LOG2, Ops.LOG10, Ops.LOG1P,
        Ops.SQRT, Ops.RSQRT, Ops.RECIPROCAL, Ops.SIN, Ops.COS, Ops.TAN, Ops.ASIN, Ops.ACOS,
        Ops.ATAN, Ops.SINH, Ops.COSH, Ops.TANH, Ops.ASINH, Ops.ACOSH, Ops.ATANH, Ops.ERF,
        Ops.ERFC, Ops.ERFINV, Ops.LGAMMA, Ops.SIGMOID, Ops.FLOOR, Ops.CEIL, Ops.ROUND, Ops.TRUNC,
        Ops.SIGN, Ops.SIGNBIT, Ops.ISNAN, Ops.ISINF, Ops.NOT, Ops.BITNOT,
    }
    Binary = {
        Ops.ADD, Ops.SUB, Ops.MUL, Ops.TRUEDIV, Ops.FLOORDIV, Ops.TRUNCDIV, Ops.MOD, Ops.FMOD,
        Ops.POW, Ops.MAX, Ops.MIN, Ops.ATAN2, Ops.HYPOT, Ops.COPYSIGN, Ops.NEXTAFTER, Ops.AND,
        Ops.OR, Ops.XOR, Ops.BITAND, Ops.BITOR, Ops.BITXOR, Ops.LSHIFT, Ops.RSHIFT,
        Ops.LT, Ops.LE, Ops.GT, Ops.GE, Ops.EQ, Ops.NE,
    }
    Compare = {Ops.LT, Ops.LE, Ops.GT, Ops.GE, Ops.EQ, Ops.NE}
    BoolResult = Compare | {Ops.ISNAN, Ops.ISINF, Ops.SIGNBIT, Ops.NOT, Ops.AND, Ops.OR, Ops.XOR}
    # Math that must run in floating point (integer inputs are promoted before these).
    FloatOnly = {
        Ops.EXP, Ops.EXP2, Ops.EXPM1, Ops.LOG, Ops.LOG2, Ops.LOG10, Ops.LOG1P, Ops.SQRT, Ops.RSQRT,
        Ops.SIN, Ops.COS, Ops.TAN, Ops.ASIN, Ops.ACOS, Ops.ATAN, Ops.SINH, Ops.COSH, Ops.TANH,
        Ops.ASINH, Ops.ACOSH, Ops.ATANH, Ops.ERF, Ops.ERFC, Ops.ERFINV, Ops.LGAMMA, Ops.SIGMOID,
        Ops.TRUEDIV, Ops.ATAN2, Ops.HYPOT, Ops.COPYSIGN, Ops.NEXTAFTER,
    }
    Random = {Ops.RAND, Ops.RANDN}


REDUCTION_TYPES = ("sum", "prod", "max", "min", "argmax", "argmin", "any", "all")

# dtypes generated kernels handle; anything else runs as an extern call through torch.
KERNEL_DTYPES = {
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool,
}
LOW_PRECISION = {torch.float16, torch.bfloat16}


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a kernel computes in for values stored as ``dtype`` (half types widen)."""
    return torch.float32 if dtype in LOW_PRECISION else dtype


def arg_key(arg: Any) -> Any:
    """What ``UOp.arg`` is compared and hashed by. Python numbers compare by value, so ``0.0 ==
    -0.0``, ``1 == 1.0 == True`` and ``nan != nan``; as a key that would merge ``x / 0.0`` and
    ``x / -0.0`` into one printed constant. The key is the number's type and exact text instead."""
    if isinstance(arg, (bool, int, float)):
        return (type(arg).__name__, repr(arg))
    if isinstance(arg, tuple):
        return tuple(arg_key(a) for a in arg)
    return arg


@attrs.frozen(cache_hash=True)
class UOp:
    """One kernel-IR value. ``dtype`` is the dtype it is computed in."""

    op: Ops
    dtype: torch.dtype
    src: tuple[UOp, ...] = ()
    arg: Any = attrs.field(default=None, eq=arg_key)

    def __repr__(self) -> str:
        inner = ", ".join([repr(s) for s in self.src] + ([str(self.arg)] if self.arg is not None else []))
        return f"{self.op.name.lower()}<{_short(self.dtype)}>({inner})"

    def toposort(self) -> list[UOp]:
        """Every distinct node of this tree, operands before users."""
        seen: dict[UOp, None] = {}

        def visit(u: UOp) -> None:
            if u in seen:
                return
            for s in u.src:
                visit(s)
            seen[u] = None

        visit(self)
        return list(seen)


def _structurally_equal(a: UOp, b: object) -> bool:
    """``UOp`` equality, in time linear in the distinct node pairs of both trees. attrs' own
    comparison recursed into every use of a shared operand: a chain in which each value reads
    the last one twice (a max over a window: ``where(best > v, best, v)``) compared in 2**length
    steps when built twice (20 steps: 2 s)."""
    if a is b:
        return True
    if b.__class__ is not UOp:
        return NotImplemented
    proven: set[tuple[int, int]] = set()  # ids stay valid: a and b hold every node alive
    pending = [(a, b)]
    while pending:
        x, y = pending.pop()
        if x is y or (id(x), id(y)) in proven:
            continue
        if (hash(x) != hash(y) or x.op is not y.op or x.dtype != y.dtype or len(x.src) != len(y.src)
                or arg_key(x.arg) != arg_key(y.arg)):
            return False
        proven.add((id(x), id(y)))
        pending.extend(zip(x.src, y.src))
    return True


UOp.__eq__ = _structurally_equal  # attrs' hash (cached) stays; it agrees: equal nodes hash alike


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ---- constructors -------------------------------------------------------------------------

def const(value: Any, dtype: torch.dtype) -> UOp:
    if dtype == torch.bool:
        value = bool(value)
    elif dtype.is_floating_point:
        value = float(value)
    else:
        value = int(value)
    return UOp(Ops.CONST, compute_dtype(dtype), (), value)


def size_value(n: Any, dtype: torch.dtype) -> UOp:
    """A size (an element count, a dim) as a value of ``dtype``: a constant, or for a symbolic
    size the int64 value of its expression over the kernel's size arguments, cast."""
    if isinstance(n, (int, float)) or (isinstance(n, sympy.Expr) and n.is_Number):
        return const(n, dtype)
    n = sympy.sympify(n)
    if not integer_valued(n):
        raise ValueError(f"size {n} is not an integer expression")
    return cast(index_value(n), dtype)


def integer_valued(expr: sympy.Expr) -> bool:
    """Whether ``expr`` is an integer for every integer value of its symbols, by its form: built
    from integers, symbols, +, *, powers and floor/ceiling/FloorDiv/Mod/Max/Min (a rational
    inside ``floor(s/2 - 1/2)`` is fine, a ``s/2`` outside one is not)."""
    if expr.is_Integer or expr.is_Symbol or isinstance(expr, (sympy.floor, sympy.ceiling, FloorDiv, ModIndex)):
        return True
    if isinstance(expr, (sympy.Add, sympy.Mul, sympy.Max, sympy.Min, sympy.Mod)):
        return all(integer_valued(a) for a in expr.args)
    if isinstance(expr, sympy.Pow):
        return expr.exp.is_Integer and int(expr.exp) >= 0 and integer_valued(expr.base)
    return False


def load(buffer: str, index: sympy.Expr, dtype: torch.dtype) -> UOp:
    index = sympy.sympify(index)
    return UOp(Ops.LOAD, compute_dtype(dtype), indirect_sources(index), (buffer, index))


def index_value(expr: Any) -> UOp:
    expr = sympy.sympify(expr)
    return UOp(Ops.INDEX, torch.int64, indirect_sources(expr), expr)


def checked_index(value: UOp, size: Any, wraps: bool) -> UOp:
    """``value`` (int64) as an index into a dim of ``size``: see ``Ops.CHECK_INDEX``."""
    return UOp(Ops.CHECK_INDEX, torch.int64, (cast(value, torch.int64),), (sympy.sympify(size), bool(wraps)))


def has_index_checks(kernel: Kernel) -> bool:
    """Whether ``kernel`` reads through data-dependent indices it must bounds-check."""
    return any(u.op is Ops.CHECK_INDEX for stage in kernel.stages for s in stage.inner + stage.outer
               for u in s.value.toposort())


def cast(x: UOp, dtype: torch.dtype) -> UOp:
    dtype = compute_dtype(dtype)
    return x if x.dtype == dtype else UOp(Ops.CAST, dtype, (x,))


def round_to(x: UOp, dtype: torch.dtype) -> UOp:
    """Round to a storage dtype and widen again: how eager rounds a half-precision result."""
    return UOp(Ops.CAST, x.dtype, (UOp(Ops.CAST, dtype, (x,)),)) if dtype in LOW_PRECISION else x


def unary(op: Ops, x: UOp) -> UOp:
    return UOp(op, torch.bool if op in GroupOp.BoolResult else x.dtype, (x,))


def binary(op: Ops, a: UOp, b: UOp) -> UOp:
    assert a.dtype == b.dtype or op in (Ops.LSHIFT, Ops.RSHIFT), (op, a.dtype, b.dtype)
    return UOp(op, torch.bool if op in GroupOp.BoolResult else a.dtype, (a, b))


def where(cond: UOp, a: UOp, b: UOp) -> UOp:
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    return UOp(Ops.WHERE, a.dtype, (cast(cond, torch.bool), a, b))


def seed(buffer: str, slot: int) -> UOp:
    return UOp(Ops.SEED, torch.int64, (), (buffer, slot))


def random(op: Ops, seed_value: UOp, offset: Any) -> UOp:
    """``Ops.RAND`` / ``Ops.RANDN`` (float32) of the element at flat ``offset`` (an index expr)."""
    assert op in GroupOp.Random and seed_value.op is Ops.SEED, (op, seed_value)
    return UOp(op, torch.float32, (seed_value, index_value(offset)))


def buffer_reads(value: UOp) -> list[str]:
    """Names of the buffers ``value`` reads (loads and seeds), in first-read order."""
    names = {u.arg[0]: None for u in value.toposort() if u.op in (Ops.LOAD, Ops.SEED)}
    return list(names)


def masked(mask: UOp, body: UOp, other: Any) -> UOp:
    other_uop = other if isinstance(other, UOp) else const(other, body.dtype)
    return UOp(Ops.MASKED, body.dtype, (cast(mask, torch.bool), body, cast(other_uop, body.dtype)))


# ---- kernel-level records ------------------------------------------------------------------

@attrs.frozen(cache_hash=True)
class Store:
    """Write ``value`` to ``buffer[index]`` (index over the kernel's loop variables)."""

    buffer: str
    index: sympy.Expr
    value: UOp
    dtype: torch.dtype  # storage dtype


@attrs.frozen(cache_hash=True)
class Reduce:
    """Reduce ``value`` over the kernel's reduction variables into the per-row value ``name``."""

    name: str
    reduction_type: str
    value: UOp
    dtype: torch.dtype  # compute dtype of the result


@attrs.frozen(cache_hash=True)
class Stage:
    """Statements of one pass over a row: reductions and stores inside the reduction loop
    (``inner``), then stores that only depend on the row (``outer``)."""

    inner: tuple  # of Reduce | Store
    outer: tuple  # of Store


@attrs.frozen(cache_hash=True)
class Kernel:
    """A fused loop nest: ``xranges`` (parallel) by ``rranges`` (reduced), run as ``stages``.

    Loop variables are the sympy symbols ``x0..`` and ``r0..``; buffers are named in
    ``inputs``/``outputs`` with their storage dtypes; ``sizes`` are scalar arguments.
    """

    xranges: tuple
    rranges: tuple
    stages: tuple  # of Stage
    inputs: tuple  # of (name, dtype)
    outputs: tuple  # of (name, dtype)
    sizes: tuple = ()  # names of symbolic sizes passed as arguments

    @property
    def is_reduction(self) -> bool:
        return bool(self.rranges)

    @property
    def seeds(self) -> tuple:
        """The ``(buffer, slot)`` of every seed the kernel reads, in first-read order. Backends
        pass the slots as integer arguments (``seed0, seed1, ...`` by this position), never in
        the source: the same dropout in every layer of a model is then one kernel."""
        found: dict[tuple, None] = {}
        for stage in self.stages:
            for s in stage.inner + stage.outer:
                found.update((u.arg, None) for u in s.value.toposort() if u.op is Ops.SEED)
        return tuple(found)


@functools.cache  # asked for ~10,000 times in a GPT-2 training compile
def xvars(n: int) -> tuple[sympy.Symbol, ...]:
    return tuple(sympy.Symbol(f"x{i}", integer=True, nonnegative=True) for i in range(n))


@functools.cache
def rvars(n: int) -> tuple[sympy.Symbol, ...]:
    return tuple(sympy.Symbol(f"r{i}", integer=True, nonnegative=True) for i in range(n))


def format_kernel(kernel: Kernel, name: str = "kernel") -> str:
    """A readable text form of a kernel (for logs and the debug directory): each distinct value
    once, as ``%i = op<dtype>(%j, ..., arg)``, then the statements naming them. Printing the
    values as nested trees repeats every shared operand at each use, which grows exponentially
    with the fusion's depth (a GPT-2 training graph spent seconds formatting its kernels)."""
    lines = [f"kernel {name} x={list(kernel.xranges)} r={list(kernel.rranges)}"]
    names: dict[UOp, str] = {}

    def value(u: UOp) -> str:
        for v in u.toposort():
            if v not in names:
                inner = [names[s] for s in v.src] + ([str(v.arg)] if v.arg is not None else [])
                names[v] = f"%{len(names)}"
                lines.append(f"    {names[v]} = {v.op.name.lower()}<{_short(v.dtype)}>({', '.join(inner)})")
        return names[u]

    def statement(s: Store | Reduce) -> str:
        if isinstance(s, Reduce):
            return f"{s.name} = {s.reduction_type}<{_short(s.dtype)}>({value(s.value)})"
        return f"{s.buffer}[{s.index}] = {value(s.value)} as {_short(s.dtype)}"

    for i, stage in enumerate(kernel.stages):
        lines.append(f"  stage {i}:")
        for where, statements in (("inner", stage.inner), ("outer", stage.outer)):
            for s in statements:
                text = statement(s)  # appends the values it names first
                lines.append(f"    {where} {text}")
    return "\n".join(lines)


# ---- index vocabulary ------------------------------------------------------------------------

class FloorDiv(sympy.Function):
    """``a // b`` for a non-negative index ``a`` and positive size ``b``."""

    is_integer = True

    @classmethod
    def eval(cls, a, b):
        if b == 1:
            return a
        if a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) // int(b))
        return None


class ModIndex(sympy.Function):
    """``a % b`` for a non-negative index ``a`` and positive size ``b``."""

    is_integer = True

    @classmethod
    def eval(cls, a, b):
        if b == 1 or a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) % int(b))
        return None


# Indirect indices (gather, embedding, index): a symbol stands for the int64 value of a UOp.
_INDIRECT: dict[str, UOp] = {}


def indirect_symbol(value: UOp) -> sympy.Symbol:
    """A symbol for a data-dependent index ``value``; loads through it list ``value`` in src.
    Named by a digest of ``value``'s structure, the same in every process: the names order a
    kernel's indirect loads, so a name from Python's ``hash`` (randomised for strings, by id for
    dtypes) changed kernel sources from run to run, and a warm process missed their cache."""
    name = f"ind_{structural_digest(value)}"
    _INDIRECT[name] = value
    return sympy.Symbol(name, integer=True)


def structural_digest(value: UOp) -> str:
    """A digest of ``value``'s DAG (ops, dtypes, args as ``UOp`` equality compares them):
    equal values have equal digests, in any process."""
    ids: dict[UOp, int] = {}
    text = []
    for u in value.toposort():
        ids[u] = len(ids)
        text.append(f"{u.op.name} {_short(u.dtype)} {[ids[s] for s in u.src]} {arg_key(u.arg)!r}")
    return hashlib.sha256("\n".join(text).encode()).hexdigest()[:16]


def indirect_sources(expr: sympy.Expr) -> tuple[UOp, ...]:
    names = sorted(s.name for s in expr.free_symbols if s.name.startswith("ind_"))
    return tuple(_INDIRECT[n] for n in names)


def indirect_names(expr: sympy.Expr) -> list[str]:
    return sorted(s.name for s in expr.free_symbols if s.name.startswith("ind_"))
