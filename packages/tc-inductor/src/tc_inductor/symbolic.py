"""Symbolic sizes: how a graph's size symbols reach kernels, grids and allocations.

A graph whose input specs hold ``tc_ir.sym`` symbols compiles once for every size the symbols
can take (each a positive integer >= 2: capture specialises 0 and 1). The wrapper binds each
symbol to a Python int at the top of every call, from the first input dim (or int input) that
*is* that symbol (:func:`binding_plan`), and checks every other input size against its
expression. From there sizes are ordinary wrapper locals named like the symbols: allocation
shapes, extern arguments and launch grids are Python expressions over them (:func:`py_expr`),
and kernels take them as int64 arguments (``Kernel.sizes``), so one kernel serves every size.
"""

from __future__ import annotations

import keyword
import re
from typing import Any

import sympy
import torch

import tc_ir
from tc_ir.interpret import size_places

from . import kir
from .kir import FloorDiv, ModIndex, Ops, UOp

# Names the kernels and the wrapper use for their own variables: a size symbol must not be one.
_RESERVED = re.compile(r"^(x\d+|r\d+|ind_.*|buf\d+|extern\d+.*|ptr_.*|const_.*|seeds_.*|tmp\d+|in_ptr\d+|"
                       r"out_ptr\d+|seed\d+|acc_.*|idx_.*|row\d+|red\d+|xnumel|rnumel|xindex|rindex|xmask|rmask|"
                       r"xoffset|roffset|rbase|args|tc_err|device_.*|ext_.*|k\d+|triton|tl|torch|empty_strided|"
                       r"randint)$")


class SymbolicUnsupported(ValueError):
    """A symbolic graph tc_inductor cannot compile for every size (the caller specialises)."""


def is_symbolic(value: Any) -> bool:
    return isinstance(value, sympy.Expr) and not value.is_Integer


def size_symbols(expr: Any) -> set[sympy.Symbol]:
    """The size symbols in ``expr``: free symbols other than loop variables and indirect indices."""
    if not isinstance(expr, sympy.Basic):
        return set()
    return {s for s in expr.free_symbols if not re.match(r"^(x\d+|r\d+|ind_.*)$", s.name)}


def graph_symbols(graph: tc_ir.Graph) -> set[sympy.Symbol]:
    """Every size symbol the graph's inputs carry."""
    found: set[sympy.Symbol] = set()
    for node in graph.inputs:
        spec = node.spec
        if isinstance(spec, tc_ir.TensorSpec):
            found |= spec.free_symbols
        elif isinstance(spec, tc_ir.ScalarSpec) and spec.expr is not None:
            found |= size_symbols(sympy.sympify(spec.expr))
    return found


def binding_plan(graph: tc_ir.Graph) -> dict[sympy.Symbol, tuple[int, int]]:
    """symbol -> (input position, dim) it is read from; dim -1: the int input itself.

    Raises :class:`SymbolicUnsupported` when a symbol is not a plain size of any input, or has
    a name the generated code uses for something else."""
    plan = size_places(graph)
    for symbol in graph_symbols(graph):
        if symbol not in plan:
            raise SymbolicUnsupported(f"tc_inductor: size symbol {symbol} is not a plain size of any input "
                                      "(only expressions of it are): it cannot be bound at run time")
        if _RESERVED.match(symbol.name) or keyword.iskeyword(symbol.name) or not symbol.name.isidentifier():
            raise SymbolicUnsupported(f"tc_inductor: size symbol name {symbol.name!r} clashes with generated code")
    return dict(sorted(plan.items(), key=lambda item: item[1]))


def py_expr(expr: Any) -> str:
    """``expr`` (an int or a sympy size expression) as Python over the wrapper's size locals."""
    if isinstance(expr, int):
        return str(expr)
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return str(int(expr))
    if expr.is_Symbol:
        return expr.name
    if isinstance(expr, tc_ir.spec.SizeFloat):  # numerator / denominator: one rounding, as eager's double
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        return f"({py_expr(num)} / {py_expr(den)})"
    if isinstance(expr, (FloorDiv, ModIndex, sympy.Mod)):
        a, b = (py_expr(x) for x in expr.args)
        return f"({a} // {b})" if isinstance(expr, FloorDiv) else f"({a} % {b})"
    if isinstance(expr, (sympy.floor, sympy.ceiling)):
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        if isinstance(expr, sympy.floor):
            return f"(({py_expr(num)}) // ({py_expr(den)}))"
        return f"(-((-({py_expr(num)})) // ({py_expr(den)})))"
    if isinstance(expr, (sympy.Max, sympy.Min)):
        return f"{'max' if isinstance(expr, sympy.Max) else 'min'}({', '.join(py_expr(a) for a in expr.args)})"
    if expr.is_Add:
        return "(" + " + ".join(py_expr(a) for a in expr.args) + ")"
    if expr.is_Mul and all(a.is_Integer or not a.is_Rational for a in expr.args):
        return "(" + " * ".join(py_expr(a) for a in expr.args) + ")"
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
        return "(" + " * ".join([py_expr(expr.base)] * int(expr.exp)) + ")"
    raise SymbolicUnsupported(f"tc_inductor: cannot evaluate size expression {expr} at run time")


def scalar_value(expr: sympy.Expr) -> UOp:
    """A scalar argument computed from sizes, as a kernel value: an int64 size expression over
    the kernel's size arguments, or for ``SizeFloat(e)`` its numerator over its denominator in
    float64 (one correctly rounded division, what the wrapper's Python computes too)."""
    if isinstance(expr, tc_ir.spec.SizeFloat):
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        return kir.binary(Ops.TRUEDIV, kir.cast(kir.index_value(num), torch.float64),
                          kir.cast(kir.index_value(den), torch.float64))
    if not kir.integer_valued(expr):
        raise ValueError(f"size {expr} is not an integer expression")
    return kir.index_value(expr)


def scalar_example(value: Any) -> Any:
    """What a scalar argument is for type promotion: a float for ``SizeFloat``, an int for a
    size expression, else itself."""
    if isinstance(value, tc_ir.spec.SizeFloat):
        return 1.0
    return 1 if isinstance(value, sympy.Expr) else value


def py_tuple(values: Any) -> str:
    """A tuple of sizes as Python source (``(s0, 8)``)."""
    items = [py_expr(v) for v in values]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def provably_le(a: Any, b: Any) -> bool:
    """Whether ``a <= b`` for every value the size symbols can take (each >= 2); False when
    unknown. Each symbol ``s`` is written ``t + 2`` with ``t >= 0`` and sympy asked whether
    the difference is non-negative."""
    diff = sympy.expand(sympy.sympify(b) - sympy.sympify(a))
    if diff.is_Integer:
        return int(diff) >= 0
    shifted = {s: sympy.Symbol(f"_t_{s.name}", integer=True, nonnegative=True) + 2 for s in diff.free_symbols}
    return bool(sympy.expand(diff.xreplace(shifted)).is_nonnegative)
