"""Value specs: what a graph value is (shape, dtype, device, strides) without holding data."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import attrs
import sympy
import torch
from torch._guards import GuardSource, Source

_SHORT_DTYPES = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "b8",
    torch.complex64: "c64",
    torch.complex128: "c128",
}


def _all_dtypes() -> dict[str, torch.dtype]:
    found = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    found.update({short: dtype for dtype, short in _SHORT_DTYPES.items()})
    return found


DTYPES_BY_NAME: dict[str, torch.dtype] = _all_dtypes()


def dtype_name(dtype: torch.dtype) -> str:
    """Short, stable text name of a dtype: ``f32``, ``bf16``, ``i64`` or torch's own name."""
    return _SHORT_DTYPES.get(dtype) or str(dtype).removeprefix("torch.")


def sym(name: str) -> sympy.Symbol:
    """The symbol tc uses for a dynamic size: a positive integer named ``name`` (``s0``, ``s1``...)."""
    return sympy.Symbol(name, integer=True, positive=True)


def parse_dim(text: str) -> int | sympy.Expr:
    """Parse a size written by :func:`format_dim` (an int or a sympy expression over size symbols)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    expr = sympy.sympify(text)
    return expr.subs({s: sym(s.name) for s in expr.free_symbols})


def format_dim(dim: int | sympy.Expr) -> str:
    return str(dim)


def normalize_dim(dim: Any) -> int | sympy.Expr:
    if dim.__class__ is int:  # the common case, ahead of the isinstance tests
        return dim
    if isinstance(dim, sympy.Expr):
        return int(dim) if dim.is_Integer else dim
    if isinstance(dim, torch.SymInt):
        return normalize_dim(dim.node.expr)
    return int(dim)


class SizeExprError(ValueError):
    """A size expression with a torch-only function that has no plain sympy form."""


def plain_size_expr(expr: sympy.Basic) -> sympy.Basic:
    """``expr`` with torch's integer functions (``FloorDiv``, ``ModularIndexing``, ``CleanDiv``,
    ``PythonMod``...; what a ``ShapeEnv`` writes) in the plain sympy tc_ir's text form, interpreter
    and code generators read (``floor``, ``ceiling``, ``Mod``, ``Max``, ``Min``). The one copy of
    this translation: capture and tc_autograd both hand tc_ir graphs traced on torch's fakes."""
    if not expr.args or isinstance(expr, (sympy.Symbol, sympy.Number)):
        return expr
    args = [plain_size_expr(a) for a in expr.args]
    rule = _PLAIN_SIZE_FUNCS.get(type(expr).__name__)
    if rule is not None:
        return rule(*args)
    if type(expr).__module__.startswith("torch"):
        raise SizeExprError(f"size expression {expr} ({type(expr).__name__}) has no tc_ir form")
    return expr.func(*args)


_PLAIN_SIZE_FUNCS: dict[str, Any] = {
    "FloorDiv": lambda a, b: sympy.floor(a / b),
    "CleanDiv": lambda a, b: sympy.floor(a / b),
    "IntTrueDiv": lambda a, b: a / b,
    "CeilDiv": lambda a, b: sympy.ceiling(a / b),
    "ModularIndexing": lambda x, d, m: sympy.Mod(sympy.floor(x / d), m),
    "Mod": sympy.Mod,
    "PythonMod": sympy.Mod,
    "Max": sympy.Max,
    "Min": sympy.Min,
    "Identity": lambda a: a,
}


_RELATIONS = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">="}


def size_python(expr: sympy.Basic, names: dict | None = None) -> str:
    """Exact integer Python for a plain size expression or relation (``//`` for floor division),
    as generated guards and size checks evaluate it; ``names`` maps a symbol to the code reading
    it (default: its name). Raises ``ValueError`` where there is no exact integer form."""
    def p(e: sympy.Basic) -> str:
        if isinstance(e, sympy.Integer):
            return str(int(e))
        if isinstance(e, sympy.Symbol):
            return e.name if names is None else names[e]
        if e is sympy.true or e is sympy.false:
            return str(bool(e))
        if type(e) in _RELATIONS:
            return f"({p(e.lhs)} {_RELATIONS[type(e)]} {p(e.rhs)})"
        if isinstance(e, (sympy.And, sympy.Or)):
            return "(" + (" and " if isinstance(e, sympy.And) else " or ").join(map(p, e.args)) + ")"
        if isinstance(e, sympy.Not):
            return f"(not {p(e.args[0])})"
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            n, d = sympy.fraction(sympy.together(e.args[0]))
            return f"({p(n)} // {p(d)})" if isinstance(e, sympy.floor) else f"(-((-{p(n)}) // {p(d)}))"
        if isinstance(e, sympy.Mod):
            return f"({p(e.args[0])} % {p(e.args[1])})"
        if isinstance(e, (sympy.Max, sympy.Min)):
            return f"{'max' if isinstance(e, sympy.Max) else 'min'}({', '.join(map(p, e.args))})"
        if sympy.fraction(sympy.together(e))[1] != 1:
            raise ValueError(f"not an integer expression: {e}")
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(map(p, e.args)) + ")"
        if isinstance(e, sympy.Mul):
            return "(" + " * ".join(map(p, e.args)) + ")"
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp >= 0:
            return f"({p(e.base)} ** {int(e.exp)})"
        raise ValueError(f"no Python form for {e}")

    return p(expr)


SizeFloat = sympy.Function("SizeFloat")
SizeFloat.__doc__ = """``SizeFloat(e)``: a float argument computed from sizes (a ``SymFloat``, such as batch
norm's ``n / (n - 1)``), ``e`` an exact rational expression of them. Evaluated by
:func:`size_value`, rounded once to a double; an ``int()`` of it raises rather than truncates."""


def size_value(expr: Any, sizes: dict) -> Any:
    """A node argument at ``sizes`` (symbol -> int): an int for a size expression, a float for
    ``SizeFloat(e)`` (``e``'s numerator over its denominator, one correctly rounded division)."""
    if not isinstance(expr, sympy.Expr):
        return expr
    if isinstance(expr, SizeFloat):
        value = sympy.Rational(expr.args[0].xreplace(sizes))
        return int(value.p) / int(value.q)
    return int(expr.xreplace(sizes))


def contiguous_strides(shape: Sequence[int | sympy.Expr]) -> tuple[int | sympy.Expr, ...]:
    """Row-major strides of ``shape`` as ``torch.empty(shape).stride()`` gives them: a size-0 or
    size-1 dim counts as 1 in the running product (``(3, 0)`` → ``(1, 1)``). The one copy of
    this rule: tc_inductor allocates with it too."""
    if all(size.__class__ is int for size in shape):  # static: plain ints, no normalize_dim per dim
        strides, running = [], 1
        for size in reversed(shape):
            strides.append(running)
            running *= size if size > 1 else 1
        return tuple(reversed(strides))
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running = normalize_dim(running * (max(size, 1) if isinstance(size, int) else size))
    return tuple(reversed(strides))


@attrs.frozen
class TensorSpec:
    """The static facts about a tensor value.

    >>> TensorSpec((4, 8), torch.float32)
    TensorSpec(f32[4, 8] cpu)

    ``shape`` entries are ints or sympy expressions over symbols made by :func:`sym`.
    ``stride`` defaults to the contiguous strides of ``shape``.
    """

    shape: tuple = attrs.field(converter=lambda s: tuple(normalize_dim(d) for d in s))
    dtype: torch.dtype = torch.float32
    device: torch.device = attrs.field(default=torch.device("cpu"), converter=torch.device)
    stride: tuple = attrs.field(default=None)
    requires_grad: bool = False

    def __attrs_post_init__(self) -> None:
        if self.stride is None:
            object.__setattr__(self, "stride", contiguous_strides(self.shape))
        else:
            object.__setattr__(self, "stride", tuple(normalize_dim(d) for d in self.stride))
        if len(self.stride) != len(self.shape):
            raise ValueError(f"stride {self.stride} does not match shape {self.shape}")

    @classmethod
    def from_tensor(cls, t: torch.Tensor) -> TensorSpec:
        return cls(tuple(t.shape), t.dtype, t.device, tuple(t.stride()), t.requires_grad)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape + self.stride)

    @property
    def numel(self) -> int | sympy.Expr:
        return normalize_dim(sympy.Mul(*self.shape)) if not self.is_static else math.prod(self.shape)

    @property
    def is_contiguous(self) -> bool:
        return all(
            size == 1 or stride == want
            for size, stride, want in zip(self.shape, self.stride, contiguous_strides(self.shape))
        )

    @property
    def free_symbols(self) -> set[sympy.Symbol]:
        return {s for d in self.shape + self.stride if isinstance(d, sympy.Expr) for s in d.free_symbols}

    def with_(self, **changes: Any) -> TensorSpec:
        return attrs.evolve(self, **changes)

    def meta_tensor(self) -> torch.Tensor:
        """An empty tensor on the meta device with this spec (static sizes only)."""
        return torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device="meta")

    def __str__(self) -> str:
        text = f"{dtype_name(self.dtype)}[{', '.join(map(format_dim, self.shape))}] {self.device}"
        if not self.is_contiguous:
            text += f" stride=[{', '.join(map(format_dim, self.stride))}]"
        if self.requires_grad:
            text += " grad"
        return text

    def __repr__(self) -> str:
        return f"TensorSpec({self})"


@attrs.frozen
class ScalarSpec:
    """A Python number or bool flowing through a graph (a size, ``.item()``, a flag).

    ``expr`` is set on an ``int`` that is a size: the symbol (or expression over symbols) it equals.
    A graph input ``ScalarSpec(int, sym("s0"))`` binds ``s0`` from the int passed at run time, for
    graphs (such as a backward) that need a size no tensor input carries.
    """

    type: type
    expr: Any = attrs.field(default=None, converter=lambda e: None if e is None else normalize_dim(e))

    def __str__(self) -> str:
        return self.type.__name__ if self.expr is None else f"{self.type.__name__}={format_dim(self.expr)}"


SCALAR_TYPES = {t.__name__: t for t in (int, float, bool, complex)}


def spec_of(value: Any) -> Any:
    """The spec of a runtime value: TensorSpec, ScalarSpec, a tuple of specs, or None."""
    if isinstance(value, torch.Tensor):
        return TensorSpec.from_tensor(value)
    if isinstance(value, torch.SymInt):
        return ScalarSpec(int)
    if isinstance(value, (bool, int, float, complex)):
        return ScalarSpec(type(value))
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(spec_of(v) for v in value)
    return None


@dataclasses.dataclass(frozen=True)
class SizeSource(Source):
    """Where a torch ``ShapeEnv`` symbol comes from when a tc tracer makes one for a graph's size
    symbol: it names the symbol in the ShapeEnv's messages (tc never asks the ShapeEnv to produce
    guard code from sources)."""

    symbol: str

    @property
    def name(self) -> str:
        return f"tc_size_{self.symbol}"

    def guard_source(self) -> GuardSource:
        return GuardSource.LOCAL

    def reconstruct(self, codegen: Any) -> None:
        raise NotImplementedError
