"""What every backend shares: index printing and a scoped common-subexpression emitter."""

from __future__ import annotations

from collections.abc import Callable

import sympy

from ..kir import FloorDiv, ModIndex, Ops, UOp


def pointer_name(buffer: str) -> str:
    """The wrapper local holding ``buffer``'s data pointer, for backends whose launch lines take
    pointers (the wrapper binds it once a call: ``KernelCall.pointers``)."""
    return f"ptr_{buffer}"


def print_index(expr: sympy.Expr, names: dict[str, str], dialect: str = "/") -> str:
    """Print an index expression; ``names`` renames symbols (indirect indices, sizes).

    ``dialect``: ``"/"`` C++, ``"//"`` Python (the wrapper), ``"tl"`` a Triton
    kernel. C++ and Triton divide integers toward zero, Python toward minus infinity: the same text
    ``(-s3 // 2)`` is -1 in a kernel and -2 in the wrapper that sized its buffers, for a kernel
    height s3 = 3 (a convolution's output size over a symbolic kernel: writes past the buffer).
    So a floor whose numerator is not known non-negative is printed as an exact floor division."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        value = int(expr)
        return f"{value}" if abs(value) < 2**31 else f"{value}LL" if dialect == "/" else f"{value}"
    if expr.is_Symbol:
        return names.get(expr.name, expr.name)
    if isinstance(expr, FloorDiv):  # of a non-negative index (its contract): every dialect agrees
        a, b = (print_index(x, names, dialect) for x in expr.args)
        return f"({a} {_DIVIDE[dialect]} {b})"
    if isinstance(expr, (ModIndex, sympy.Mod)):  # sizes and indices are non-negative: C's % is Python's
        a, b = (print_index(x, names, dialect) for x in expr.args)
        return f"({a} % {b})"
    if isinstance(expr, (sympy.floor, sympy.ceiling)):  # of a size expression: floor(s0/2)
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        if isinstance(expr, sympy.ceiling):
            num = num + den - 1
        a, b = print_index(num, names, dialect), print_index(den, names, dialect)
        if (num.is_nonnegative and den.is_positive) or dialect == "//":
            return f"({a} {_DIVIDE[dialect]} {b})"
        return _EXACT_FLOOR[dialect].format(a=a, b=b)
    if isinstance(expr, (sympy.Max, sympy.Min)):  # contiguous strides of a size only known >= 0: Max(1, s - 2)
        return _print_minmax(expr, [print_index(a, names, dialect) for a in expr.args], dialect)
    if expr.is_Add:
        return "(" + " + ".join(print_index(a, names, dialect) for a in expr.args) + ")"
    if expr.is_Mul:
        return "(" + " * ".join(print_index(a, names, dialect) for a in expr.args) + ")"
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
        base = print_index(expr.base, names, dialect)
        return "(" + " * ".join([base] * int(expr.exp)) + ")"
    raise NotImplementedError(f"cannot print index {expr}")


_DIVIDE = {"/": "/", "//": "//", "tl": "//"}
# floor(a / b) for any sign of a: C++'s helper (cpp.py's header); in Triton, for a < 0,
# -ceil(-a / b) computed on non-negative values (b > 0 here: a fraction's denominator)
_EXACT_FLOOR = {"/": "tc_floordiv<int64_t>({a}, {b})",
                "tl": "tl.where({a} >= 0, {a} // {b}, -((-({a}) + {b} - 1) // {b}))"}


def _print_minmax(expr: sympy.Expr, args: list[str], dialect: str) -> str:
    """``Max``/``Min`` of index terms, folded pairwise: C++ ``std::max<int64_t>`` (one type for
    a literal and an int64 size), Triton ``tl.maximum`` (scalars and blocks alike), Python's."""
    is_max = isinstance(expr, sympy.Max)
    if dialect == "/":
        fn = "std::max<int64_t>" if is_max else "std::min<int64_t>"
    elif dialect == "tl":
        fn = "tl.maximum" if is_max else "tl.minimum"
    else:
        fn = "max" if is_max else "min"
    text = args[0]
    for arg in args[1:]:
        text = f"{fn}({text}, {arg})"
    return text


class Scope:
    """Values already computed where code is being emitted; children see their parents'."""

    def __init__(self, parent: Scope | None = None, mask: str | None = None):
        self.parent, self.mask, self.cache = parent, mask, {}

    def lookup(self, u: UOp) -> str | None:
        scope = self
        while scope is not None:
            if u in scope.cache:
                return scope.cache[u]
            scope = scope.parent
        return None


class Emitter:
    """Turns UOp trees into one assignment per distinct value. Backends supply the printing."""

    def __init__(self, render: Callable[[UOp, list, Scope], str], declare: Callable[[UOp, str, str], str],
                 masked: Callable[..., str]):
        self.render, self.declare, self.masked = render, declare, masked
        self.counter = 0

    def new_var(self) -> str:
        self.counter += 1
        return f"tmp{self.counter}"

    def value(self, u: UOp, scope: Scope, lines: list[str]) -> str:
        found = scope.lookup(u)
        if found is not None:
            return found
        if u.op is Ops.MASKED:
            var = self.masked(self, u, scope, lines)
        else:
            args = [self.value(s, scope, lines) for s in u.src]
            var = self.new_var()
            lines.append(self.declare(u, var, self.render(u, args, scope)))
        scope.cache[u] = var
        return var
