"""Symbolic sizes through the trace: our size symbols <-> a ``ShapeEnv``'s, and the guards.

A torch-level graph whose input specs hold ``tc_ir.sym`` symbols is traced on fake tensors whose
sizes are ``SymInt``s: one ShapeEnv symbol per graph symbol, with the example inputs' sizes as
hints. Every spec and argument the recorder writes is then an expression over the ShapeEnv's
symbols; :meth:`Symbols.finish` rewrites the whole ATen graph over ours (torch's ``FloorDiv`` /
``Mod`` / ``ModularIndexing`` become plain sympy ``floor`` / ``Mod``, which tc_ir's text reads).

Whatever the trace assumed about sizes (a branch on ``s0 > 64``, ``s0 == s1`` when two
tensors were added, ``s0 % 8 == 0`` for a view) the ShapeEnv records as a guard. Those come back
as sympy relations over our symbols, and :func:`guard_function` compiles them into one
straight-line Python check run before every call: a call they do not admit is traced again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

import tc_ir
from tc_ir.interpret import size_places
from tc_ir.spec import SizeSource


def graph_symbols(graph: tc_ir.Graph) -> set[sympy.Symbol]:
    """The size symbols of ``graph``'s input specs (empty for a static graph)."""
    found: set[sympy.Symbol] = set()
    for node in graph.inputs:
        found |= _spec_symbols(node.spec)
    return found


def _spec_symbols(spec: Any) -> set[sympy.Symbol]:
    if isinstance(spec, tc_ir.TensorSpec):
        return spec.free_symbols
    if isinstance(spec, tc_ir.ScalarSpec) and isinstance(spec.expr, sympy.Expr):
        return set(spec.expr.free_symbols)
    if isinstance(spec, tuple):
        return set().union(*map(_spec_symbols, spec)) if spec else set()
    return set()


def binding_places(graph: tc_ir.Graph) -> dict[sympy.Symbol, tuple[int, int]]:
    """Where each symbol's value is read from the inputs: ``(input, dim)``, dim -1 for an int."""
    return size_places(graph)


class Symbols:
    """One symbolic trace's ShapeEnv, with our symbols mapped 1:1 onto its symbols."""

    def __init__(self, graph: tc_ir.Graph, inputs: Sequence[Any]):
        self.env = ShapeEnv()
        hints = tc_ir.bind_sizes(graph, inputs)
        ours = sorted(graph_symbols(graph), key=lambda s: s.name)
        missing = [s for s in ours if s not in hints]
        if missing:
            raise NotImplementedError(f"tc_autograd: size symbols {missing} appear in no input dim by themselves")
        self.hints: dict[sympy.Symbol, int] = {s: hints[s] for s in ours}
        self.to_env: dict[sympy.Symbol, sympy.Expr] = {}
        self.pinned: list[sympy.Expr] = []  # symbols the ShapeEnv specialised at creation (0/1)
        self.assumed: list[sympy.Basic] = []  # relations :meth:`settled` relied on (``e >= 1``)
        for s in ours:
            made = self.env.create_symbol(self.hints[s], source=SizeSource(s.name), dynamic_dim=DimDynamic.DYNAMIC)
            self.to_env[s] = made
            if not isinstance(made, sympy.Symbol):
                self.pinned.append(sympy.Eq(s, int(made)))
        self.from_env = {v: k for k, v in self.to_env.items() if isinstance(v, sympy.Symbol)}

    # ---- into the trace ---------------------------------------------------------------------
    def symint(self, expr: Any) -> Any:
        """The SymInt (or int) standing for ``expr`` over our symbols."""
        if not isinstance(expr, sympy.Expr):
            return expr
        env_expr = expr.xreplace(self.to_env)
        if env_expr.is_Integer:
            return int(env_expr)
        return self.env.create_symintnode(env_expr, hint=int(expr.xreplace(self.hints)))

    def fake_input(self, mode: Any, spec: tc_ir.TensorSpec) -> torch.Tensor:
        """A fake tensor with ``spec``'s sizes and strides as SymInts."""
        with mode:
            return torch.empty_strided([self.symint(d) for d in spec.shape], [self.symint(d) for d in spec.stride],
                                       dtype=spec.dtype, device=spec.device)

    def runnable(self, graph: tc_ir.Graph) -> tc_ir.Graph:
        """A copy of ``graph`` the interpreter can run on symbolic fakes: sizes in node arguments
        become SymInts, and input specs are dropped (binding them would read each SymInt as an
        int, which specialises it)."""
        graph = graph.copy()
        for g in [graph, *graph.subgraphs()]:
            for node in g.nodes:
                if node.op == "input":
                    node.spec = None
                elif node.op == "call":
                    node.args, node.kwargs = tc_ir.map_structure((node.args, node.kwargs), self.symint)
            g.output(tc_ir.map_structure(g.outputs, self.symint))
        return graph

    def fake_value(self, spec: Any, value: Any) -> Any:
        """A non-tensor input: an int input binding a symbol becomes that symbol's SymInt."""
        if isinstance(spec, tc_ir.ScalarSpec) and isinstance(spec.expr, sympy.Expr):
            return self.symint(spec.expr)
        return value

    # ---- out of the trace -------------------------------------------------------------------
    def ours(self, expr: Any, replace: bool = True) -> Any:
        """An expression over the ShapeEnv's symbols (or a SymInt) as one over ours; ``replace``
        applies the ShapeEnv's replacements first (``s1 -> s0`` once ``s0 == s1`` was guarded)."""
        if isinstance(expr, torch.SymInt):
            expr = expr.node.expr
        if not isinstance(expr, sympy.Basic):
            return expr
        if replace:
            expr = self.env.replace(expr)
        unknown = expr.free_symbols - set(self.from_env)
        if unknown:
            raise NotImplementedError(f"tc_autograd: a size the trace made ({expr}) uses symbols of no input "
                                      f"({sorted(map(str, unknown))}): data-dependent sizes are not supported")
        return tc_ir.spec.normalize_dim(plain_sympy(expr).xreplace(self.from_env)) if isinstance(expr, sympy.Expr) \
            else plain_sympy(expr).xreplace(self.from_env)

    def value(self, v: Any) -> Any:
        """A node argument as tc_ir holds it: SymInts as expressions over our symbols, SymFloats
        as ``tc_ir.spec.SizeFloat`` of an exact rational expression over them."""
        if isinstance(v, torch.SymInt):
            return self.settled(self.ours(v))
        if isinstance(v, torch.SymFloat):
            return self.size_float(v)
        if isinstance(v, torch.SymBool):
            raise NotImplementedError(f"tc_autograd: a symbolic SymBool ({v}) as an op argument")
        if isinstance(v, sympy.Expr):
            return self.settled(self.ours(v))
        return v

    def size_float(self, v: torch.SymFloat) -> sympy.Expr:
        """A SymFloat (batch norm's ``n / (n - 1)``, ``1 / n``) as ``SizeFloat(e)``: ``e`` rational
        over our symbols, so one correctly rounded division at run time gives what eager's double
        arithmetic gives (exactly, where that was one rounding)."""
        expr = self.env.replace(v.node.expr)
        unknown = expr.free_symbols - set(self.from_env)
        if unknown:
            raise NotImplementedError(f"tc_autograd: a float the trace made ({expr}) uses symbols of no input")
        return tc_ir.spec.SizeFloat(_exact_rational(expr).xreplace(self.from_env))

    def settled(self, expr: Any) -> Any:
        """``expr`` with each ``Max(1, e)`` (torch's contiguous stride over a size only known
        ``>= 0``: ``s - 2`` after a valid conv, ``floor(s/2) - 1`` after a pool) written ``e``
        where ``e >= 1`` at the traced sizes; the guard ``e >= 1`` is recorded (a size 0 traces
        again and keeps the ``Max``). Index math then simplifies as over a static contiguous tensor."""
        if not isinstance(expr, sympy.Expr) or not expr.has(sympy.Max):
            return expr
        return expr.replace(lambda e: isinstance(e, sympy.Max) and len(e.args) == 2 and sympy.S.One in e.args,
                            self._max_one)

    def _max_one(self, e: sympy.Max) -> sympy.Expr:
        other = e.args[1] if e.args[0] == 1 else e.args[0]
        if int(other.xreplace(self.hints)) < 1:
            return e
        relation = sympy.Ge(other, 1)
        if relation is not sympy.true and relation not in self.assumed:
            self.assumed.append(relation)
        return other

    def spec(self, spec: Any) -> Any:
        if isinstance(spec, tc_ir.TensorSpec) and not spec.is_static:
            return spec.with_(shape=tuple(self.settled(self.ours(d)) for d in spec.shape),
                              stride=tuple(self.settled(self.ours(d)) for d in spec.stride))
        if isinstance(spec, tc_ir.ScalarSpec) and isinstance(spec.expr, sympy.Expr):
            return tc_ir.ScalarSpec(spec.type, self.ours(spec.expr))
        if isinstance(spec, tuple):
            return tuple(self.spec(s) for s in spec)
        return spec

    def finish(self, graph: tc_ir.Graph) -> None:
        """Rewrite ``graph`` (and its sub-graphs) over our symbols, in place."""
        for g in [graph, *graph.subgraphs()]:
            for node in g.nodes:
                node.spec = self.spec(node.spec)
                if node.op == "call":
                    node.args, node.kwargs = tc_ir.map_structure((node.args, node.kwargs), self.value)
            g.output(tc_ir.map_structure(g.outputs, self.value))
        graph.meta["size_hints"] = dict(self.hints)

    def guards(self) -> list[sympy.Basic]:
        """Every relation between sizes the trace relied on, over our symbols (``s >= 2`` left out:
        that holds for every symbol by the contract)."""
        found: list[sympy.Basic] = list(self.pinned) + list(self.assumed)
        relations = [g.expr for g in self.env.guards]
        relations += [sympy.Eq(k, v) for k, v in self.env.replacements.items() if k in self.from_env]
        for relation in relations:
            ours = self.ours(relation, replace=False)
            if ours is sympy.true or ours in found:
                continue
            if ours is sympy.false:
                raise AssertionError(f"tc_autograd: a guard is false at the sizes traced: {relation}")
            found.append(ours)
        return found


# ---- torch's sympy functions as plain sympy (what tc_ir's text and interpreter read) -----------
def plain_sympy(expr: sympy.Basic) -> sympy.Basic:
    """``expr`` in plain sympy (``tc_ir.spec.plain_size_expr``); no tc_ir form: NotImplementedError."""
    try:
        return tc_ir.spec.plain_size_expr(expr)
    except tc_ir.spec.SizeExprError as e:
        raise NotImplementedError(f"tc_autograd: {e}") from None


# SymFloat expressions: torch's float functions over sizes, as exact rationals.
_FLOAT_FUNCS: dict[str, Any] = {
    "ToFloat": lambda a: a,
    "FloatTrueDiv": lambda a, b: a / b,
    "IntTrueDiv": lambda a, b: a / b,
}


def _exact_rational(expr: sympy.Basic) -> sympy.Expr:
    """A SymFloat's expression as an exact rational one (float constants as their exact binary
    value); integer sub-expressions through :func:`plain_sympy`. Anything else (powers, roots of
    sizes) has no exact form: NotImplementedError, and the caller runs the graph eagerly."""
    if isinstance(expr, sympy.Float):
        return sympy.Rational(float(expr))
    if isinstance(expr, (sympy.Integer, sympy.Rational, sympy.Symbol)):
        return expr
    rule = _FLOAT_FUNCS.get(type(expr).__name__)
    if rule is not None:
        return rule(*map(_exact_rational, expr.args))
    if isinstance(expr, (sympy.Add, sympy.Mul)) or (isinstance(expr, sympy.Pow) and expr.exp.is_Integer):
        return expr.func(*map(_exact_rational, expr.args))
    if type(expr).__module__.startswith("torch") and type(expr).__name__.startswith(("Float", "Opaque", "Trunc")):
        raise NotImplementedError(f"tc_autograd: a symbolic float {expr} has no exact form")
    return plain_sympy(expr)


# ---- the run-time check -----------------------------------------------------------------------
python = tc_ir.spec.size_python  # exact integer Python for a size expression or relation


def _python_or_none(expr: sympy.Basic) -> str | None:
    try:
        return python(expr)
    except ValueError:
        return None


def guard_function(guards: Sequence[sympy.Basic], places: dict[sympy.Symbol, tuple[int, int]]) -> Callable:
    """``check(inputs) -> bool``: do the inputs' sizes satisfy every guard, and is every size
    symbol at least 2 (what the trace assumed of each; one pinned to 0 or 1 has its own guard)?
    One generated straight-line function (sizes read once, integer arithmetic); a relation with
    no exact Python form is evaluated with sympy (slow, exact)."""
    needed = set().union(*(g.free_symbols for g in guards)) if guards else set()
    if needed - set(places):
        raise NotImplementedError(f"tc_autograd: guards on sizes no input carries: {needed - set(places)}")
    pinned = {g.lhs for g in guards if isinstance(g, sympy.Eq) and g.lhs.is_Symbol and g.rhs.is_Integer}
    at_least_two = [sympy.Ge(s, 2) for s in sorted(set(places) - pinned, key=lambda s: s.name)]
    guards = [*at_least_two, *guards]
    needed |= set(places) - pinned
    names: dict[str, Any] = {"sympy": sympy}
    lines = ["def check(inputs):"]
    for s in sorted(needed, key=lambda s: s.name):
        i, d = places[s]
        lines.append(f"    {s.name} = int(inputs[{i}])" if d < 0 else f"    {s.name} = inputs[{i}].shape[{d}]")
    for k, g in enumerate(guards):
        code = _python_or_none(g)
        if code is None:
            names[f"g{k}"] = g
            syms = ", ".join(f"sympy.Symbol({s.name!r}, integer=True, positive=True): {s.name}"
                             for s in sorted(g.free_symbols, key=lambda s: s.name))
            code = f"bool(g{k}.subs({{{syms}}}))"
        lines.append(f"    if not {code}:\n        return False")
    lines.append("    return True")
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<tc_autograd size guards>", "exec"), names)
    check = names["check"]
    check.source = source
    return check


def size_reader(symbols: Sequence[sympy.Symbol], places: dict[sympy.Symbol, tuple[int, int]]) -> Callable:
    """``read(inputs) -> tuple of ints``: the values of ``symbols`` in the forward's inputs
    (what a backward needing sizes no saved tensor carries gets as its last inputs)."""
    items = []
    for s in symbols:
        i, d = places[s]
        items.append(f"int(inputs[{i}])" if d < 0 else f"inputs[{i}].shape[{d}]")
    names: dict[str, Any] = {}
    exec(compile(f"def read(inputs):\n    return ({''.join(x + ', ' for x in items)})\n",
                 "<tc_autograd size reader>", "exec"), names)
    return names["read"]




def used_symbols(graph: tc_ir.Graph) -> set[sympy.Symbol]:
    """Every size symbol ``graph`` (or a sub-graph) reads: in specs, arguments and outputs."""
    found: set[sympy.Symbol] = set()
    for g in [graph, *graph.subgraphs()]:
        for node in g.nodes:
            found |= _spec_symbols(node.spec)
            for v in tc_ir.leaves((node.args, node.kwargs)):
                if isinstance(v, sympy.Basic):
                    found |= v.free_symbols
        for v in tc_ir.leaves(g.outputs):
            if isinstance(v, sympy.Basic):
                found |= v.free_symbols
    return found


def add_size_inputs(graph: tc_ir.Graph) -> list[sympy.Symbol]:
    """Give ``graph`` (a backward) an int input ``ScalarSpec(int, s)`` for each symbol it uses
    that no tensor input's dim carries by itself; returns those symbols, in input order."""
    extra = sorted(used_symbols(graph) - set(binding_places(graph)), key=lambda s: s.name)
    if not extra:
        return []
    first_call = next((n for n in graph.nodes if n.op != "input"), None)
    for s in extra:
        if first_call is None:
            graph.input(f"size_{s.name}", tc_ir.ScalarSpec(int, s))
        else:
            with graph.inserting_before(first_call):
                graph.input(f"size_{s.name}", tc_ir.ScalarSpec(int, s))
    return extra
