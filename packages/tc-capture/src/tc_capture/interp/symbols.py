"""Symbolic sizes in capture: which input dims are symbols, the ShapeEnv behind them, the guards.

A dim is *dynamic* when the frame's policy says so (``dynamic=True``, ``mark_dynamic``, or a size
that changed between captures of one frame: automatic dynamic) and its size is at least 2 (sizes
0 and 1 are always static: every symbol is an integer >= 2, tc_autograd's and tc_inductor's
contract). A dynamic dim's fake tensor size is a ``SymInt`` of the capture's ``ShapeEnv``, with
the real size as its hint, so everything the program computes from sizes (``B, T, C = x.size()``,
``T // 2``, ``torch.arange(T)``) is a ``SymInt`` carrying a sympy expression, and everything it
*decides* from them (``if T > 64``, ``range(T)``, a broadcast of two symbols, a view's
divisibility) goes through the ShapeEnv, which records the relation as a guard (or replaces a
symbol by its value: specialised). At the end of a capture (``finish``) the graph's specs and
arguments are rewritten over tc_ir symbols, and the ShapeEnv's guards and replacements become
cache guards reading the sizes of the frame's tensors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import sympy
import torch
from torch._guards import GuardSource, Source
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

import tc_ir

from ..cache.guards import _Text
from .base import Unsupported

SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


@dataclasses.dataclass(frozen=True)
class _DimSource(Source):
    """Names a ShapeEnv symbol after the input dim it stands for (messages only: tc never asks the
    ShapeEnv for guard code)."""

    where: str

    @property
    def name(self) -> str:
        return self.where

    def guard_source(self) -> GuardSource:
        return GuardSource.LOCAL

    def reconstruct(self, codegen: Any) -> None:
        raise NotImplementedError


# ---- the policy: which dims of which inputs are symbols --------------------------------------------
class DynamicPolicy:
    """Per frame cache and resume offset: ``dynamic`` is ``None`` (static first, automatic
    dynamic on a size change), ``True`` (every dim of a frame input) or ``False`` (never)."""

    def __init__(self, dynamic: bool | None):
        self.dynamic = dynamic
        self.seen: dict[str, tuple] = {}  # source expression -> sizes at its first capture
        self.auto: dict[str, set[int]] = {}  # dims that changed between captures

    def dims(self, expr: str, t: torch.Tensor, gated: bool) -> dict[int, tuple[int | None, int | None]]:
        """The dims of ``t`` (read from ``expr``) to make symbols, each with its (min, max)."""
        if self.dynamic is False:
            return {}
        shape = tuple(t.shape)
        marked = dict(getattr(t, "_tc_dynamic_dims", None) or {})
        dims = {d: marked.get(d, (None, None)) for d in marked if d < len(shape)}
        old = self.seen.get(expr)
        if old is not None and len(old) == len(shape):
            self.auto.setdefault(expr, set()).update(d for d, (a, b) in enumerate(zip(old, shape)) if a != b)
        for d in self.auto.get(expr, ()):
            dims.setdefault(d, (None, None))
        if self.dynamic is True and not gated:  # parameters and buffers stay static, as in Dynamo
            dims.update({d: (None, None) for d in range(len(shape)) if d not in dims})
        return {d: r for d, r in dims.items() if shape[d] >= 2 and _in_range(shape[d], r)}

    def saw(self, inputs: list) -> None:
        """Record the sizes of a capture's tensor inputs (the first capture's stay)."""
        for _, source, value in inputs:
            if isinstance(value, torch.Tensor):
                self.seen.setdefault(source.expr, tuple(value.shape))


def _in_range(size: int, r: tuple) -> bool:
    lo, hi = r
    return (lo is None or size >= lo) and (hi is None or size <= hi)


def symbolic_layout(t: torch.Tensor, dims: set[int] | dict) -> list[tuple[int, int | None]] | None:
    """How ``t``'s strides read when ``dims`` are size symbols: its dims from innermost to
    outermost, each with ``None`` (its stride is the product of the sizes inside it) or a
    constant stride, larger than that product, which only a dim outside every dim in ``dims``
    may have (a row slice ``x[:, :6]`` of an ``[n, 12]`` tensor: ``[s0, 6]`` at stride ``(12, 1)``
    for every ``s0``, where a constant stride inside a symbol would hold for one size only).
    ``None`` when no such reading exists (overlapping memory, a gap inside a symbolic dim, or no
    elements: a zero-size tensor's strides are arbitrary, and it stays static as a whole)."""
    if t.numel() == 0:
        return None
    order = sorted(range(t.dim()), key=lambda d: (t.stride(d), t.shape[d]))
    layout, running, symbolic = [], 1, False
    for d in order:
        if t.stride(d) == running:
            layout.append((d, None))
        elif t.stride(d) > running and not symbolic:
            layout.append((d, t.stride(d)))
            running = t.stride(d)
        else:
            return None
        running *= t.shape[d]
        symbolic = symbolic or d in dims
    return layout


# ---- one capture's sizes -------------------------------------------------------------------------------
@dataclasses.dataclass
class _Sym:
    env: sympy.Symbol  # the ShapeEnv's symbol
    ours: sympy.Symbol  # tc_ir.sym("sN")
    read: str  # guard code reading the size (``_t0.shape[1]``, ``_t0`` bound by the tensor's guard)
    runtime: str  # runner code reading it (``F[0].shape[1]``)
    where: str  # for people (``x.shape[1]``)
    hint: int
    source: Any  # the tensor's source


class Sizes:
    """The ShapeEnv of one capture and the symbols it made for input dims."""

    def __init__(self):
        self.env = ShapeEnv(allow_scalar_outputs=False, allow_dynamic_output_shape_ops=False)
        self.env._tc_sizes = self  # codegen finds the sizes of a SymInt through its ShapeEnv
        self.syms: dict[sympy.Symbol, _Sym] = {}
        self.ranges: list[tuple[_Sym, int | None, int | None]] = []

    def fake_input(self, fake_mode, t: torch.Tensor, dims: dict, source, read: str, where: str) -> tuple:
        """A fake of ``t`` whose ``dims`` are symbols, laid out as ``t`` is (``symbolic_layout``:
        a permutation of contiguous, or with constant strides outside the symbols); returns (fake,
        the guard code of its strides)."""
        sizes: list = list(t.shape)
        for d, (lo, hi) in sorted(dims.items()):
            hint = int(t.shape[d])
            made = self.env.create_symbol(hint, _DimSource(f"{where}.shape[{d}]"), dynamic_dim=DimDynamic.DYNAMIC)
            sym = _Sym(made, tc_ir.sym(f"s{len(self.syms)}"), f"{read}.shape[{d}]", f"{source.expr}.shape[{d}]",
                       f"{where}.shape[{d}]", hint, source)
            self.syms[made] = sym
            if lo is not None or hi is not None:
                self.env.constrain_symbol_range(made, compiler_min=2 if lo is None else lo,
                                                compiler_max=2**62 if hi is None else hi)
                self.ranges.append((sym, lo, hi))
            sizes[d] = self.env.create_symintnode(made, hint=hint)
        strides, stride_read = [0] * t.dim(), [""] * t.dim()
        running, running_read = 1, []
        for d, constant in symbolic_layout(t, dims):
            if constant is not None:  # outside every symbol (symbolic_layout): a number
                running, running_read = constant, [str(constant)]
            strides[d], stride_read[d] = running, " * ".join(running_read) or "1"
            running = running * sizes[d]
            running_read = running_read + [f"{read}.shape[{d}]" if d in dims else str(t.shape[d])]
        with fake_mode:
            fake = torch.empty_strided(sizes, strides, dtype=t.dtype, device=t.device)
        if t.requires_grad:
            fake.requires_grad_(True)
        return fake, "(" + "".join(f"{s}, " for s in stride_read) + ")"

    def readable(self, spec: tc_ir.TensorSpec) -> str:
        """``spec`` (over the ShapeEnv's symbols) written with tc_ir's symbol names."""
        names = {k: v.ours for k, v in self.syms.items()}
        shape = [d.xreplace(names) if isinstance(d, sympy.Expr) else d for d in spec.shape]
        stride = [d.xreplace(names) if isinstance(d, sympy.Expr) else d for d in spec.stride]
        return f"{str(spec.dtype).removeprefix('torch.')}{shape} stride={tuple(stride)} {spec.device}"

    # ---- out of the capture --------------------------------------------------------------------
    def ours(self, expr: Any) -> Any:
        """An expression over the ShapeEnv's symbols (or a SymInt) as one over tc_ir's symbols,
        with the ShapeEnv's replacements applied."""
        if isinstance(expr, torch.SymInt):
            expr = expr.node.expr
        if not isinstance(expr, sympy.Basic):
            return expr
        expr = plain_sympy(self.env.replace(expr))
        unknown = expr.free_symbols - set(self.syms)
        if unknown:
            raise Unsupported(f"a size of no input dim ({expr}): data-dependent sizes are not captured")
        return tc_ir.spec.normalize_dim(expr.xreplace({k: v.ours for k, v in self.syms.items()}))

    def value(self, v: Any) -> Any:
        """A node argument as tc_ir holds it: SymInts as expressions over tc_ir's symbols."""
        if isinstance(v, torch.SymInt):
            return self.ours(v)
        if isinstance(v, torch.Size) and any(isinstance(d, torch.SymInt) for d in v):
            return tuple(self.ours(d) for d in v)
        if isinstance(v, sympy.Expr):
            return self.ours(v)
        return v

    def spec(self, spec: Any) -> Any:
        if isinstance(spec, tc_ir.TensorSpec) and not spec.is_static:
            return spec.with_(shape=tuple(map(self.ours, spec.shape)), stride=tuple(map(self.ours, spec.stride)))
        if isinstance(spec, tuple):
            return tuple(self.spec(s) for s in spec)
        return spec

    def relations(self) -> list[sympy.Basic]:
        """Every relation between sizes the capture relied on, over the ShapeEnv's symbols."""
        found = [g.expr for g in self.env.guards]
        found += [sympy.Eq(k, v) for k, v in self.env.replacements.items() if k in self.syms]
        out: list = []
        for r in found:
            if r is not sympy.true and r not in out:
                out.append(r)
        return out


def concrete(value: Any) -> Any:
    """``value`` with its symbolic numbers made plain (each specialised: guarded equal to its
    value), for Python operations that would read a ``SymInt`` wrongly (``str``, ``hash``...)."""
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    if isinstance(value, torch.SymBool):
        return bool(value)
    if isinstance(value, torch.Size):
        return torch.Size(concrete(d) for d in value) if any(isinstance(d, SYM_TYPES) for d in value) else value
    if type(value) in (tuple, list) and is_symbolic(value):
        return type(value)(concrete(d) for d in value)
    if type(value) is slice:
        return slice(concrete(value.start), concrete(value.stop), concrete(value.step))
    return value


def is_symbolic(value: Any) -> bool:
    if isinstance(value, SYM_TYPES):
        return True
    if isinstance(value, (tuple, list)):
        return any(is_symbolic(v) for v in value)
    if type(value) is slice:
        return any(is_symbolic(v) for v in (value.start, value.stop, value.step))
    return False


SYM_PYTHON_TYPES = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}


def runtime_expr(value: Any, ref: Callable[[object], str]) -> str | None:
    """Python code computing ``value`` (a SymInt, or a tuple/list/``torch.Size`` holding some) at
    run time from the frame's tensors' sizes, for generated runner code; ``None`` when ``value``
    is not symbolic. A SymFloat or SymBool is specialised (guarded equal to its value)."""
    if not is_symbolic(value):
        return None
    if isinstance(value, (torch.SymFloat, torch.SymBool)):
        return repr(concrete(value))
    if isinstance(value, torch.SymInt):
        sizes = value.node.shape_env._tc_sizes
        expr = sizes.env.replace(value.node.expr)
        try:
            return python(plain_sympy(expr), {k: v.runtime for k, v in sizes.syms.items()})
        except (ValueError, AttributeError):
            return repr(int(value))
    items = [runtime_expr(v, ref) or _literal(v, ref) for v in value]
    if isinstance(value, torch.Size):
        return f"{ref(torch.Size)}([{', '.join(items)}])"
    if type(value) is slice:
        return f"slice({', '.join(items)})"
    return f"[{', '.join(items)}]" if type(value) is list else "(" + "".join(f"{i}, " for i in items) + ")"


def _literal(v: Any, ref: Callable[[object], str]) -> str:
    return repr(v) if type(v) in (int, float, bool, type(None)) else ref(v)


# ---- sympy to Python ---------------------------------------------------------------------------------
def plain_sympy(expr: sympy.Basic) -> sympy.Basic:
    """``expr`` in plain sympy (``tc_ir.spec.plain_size_expr``); no tc_ir form: a graph break."""
    try:
        return tc_ir.spec.plain_size_expr(expr)
    except tc_ir.spec.SizeExprError as e:
        raise Unsupported(str(e)) from None
python = tc_ir.spec.size_python  # exact integer Python; ``names`` maps each symbol to its reader


def sizes_text(*pairs: Any) -> _Text:
    """The sizes a failed relation read, for the recompile log (``x.shape[1]=70``)."""
    return _Text(", ".join(f"{pairs[i]}={pairs[i + 1]}" for i in range(0, len(pairs), 2)))


# ---- the end of a capture ------------------------------------------------------------------------
def finish(sizes: Sizes, graph: tc_ir.Graph, guards) -> None:
    """Rewrite ``graph`` over tc_ir's symbols and add the size guards the capture relied on."""
    if not sizes.syms:
        return
    graphs = [graph, *graph.subgraphs()]
    for g in graphs:  # symbolic floats and bools in arguments are specialised (first: it may replace)
        for node in g.nodes:
            if node.op == "call":
                node.args, node.kwargs = tc_ir.map_structure((node.args, node.kwargs), _concrete_non_int)
    for g in graphs:
        for node in g.nodes:
            node.spec = sizes.spec(node.spec)
            if node.op == "call":
                node.args, node.kwargs = tc_ir.map_structure((node.args, node.kwargs), sizes.value)
        g.output(tc_ir.map_structure(g.outputs, sizes.value))
    _add_guards(sizes, guards)
    graph.meta["size_symbols"] = {str(s.ours): s.where for s in sizes.syms.values()
                                  if isinstance(sizes.ours(s.env), sympy.Symbol) and sizes.ours(s.env) == s.ours}


def _concrete_non_int(v: Any) -> Any:
    return concrete(v) if isinstance(v, (torch.SymFloat, torch.SymBool)) else v


def _add_guards(sizes: Sizes, guards) -> None:
    reads = {k: s.read for k, s in sizes.syms.items()}
    wheres = {k: s.where for k, s in sizes.syms.items()}
    for sym in sizes.syms.values():  # the contract of every symbol; failing it names the dim
        guards.add(sym.source, f"{sym.read} >= 2", f"{sym.where} >= 2 ({sym.ours}: sizes 0 and 1 are specialised)",
                   sym.read)
    for sym, lo, hi in sizes.ranges:
        cond = " and ".join(([f"{sym.read} >= {lo}"] if lo is not None else []) +
                            ([f"{sym.read} <= {hi}"] if hi is not None else []))
        text = " and ".join(([f"{sym.where} >= {lo}"] if lo is not None else []) +
                            ([f"{sym.where} <= {hi}"] if hi is not None else []))
        guards.add(sym.source, cond, f"{text} ({sym.ours}: mark_dynamic bounds)", sym.read)
    for relation in sizes.relations():
        involved = [sizes.syms[s] for s in sorted(relation.free_symbols, key=str) if s in sizes.syms]
        try:
            cond, text = python(plain_sympy(relation), reads), python(plain_sympy(relation), wheres)
        except (ValueError, Unsupported):  # no exact integer form: specialise what it reads
            for s in involved:
                guards.add(s.source, f"{s.read} == {s.hint}", f"{s.where} == {s.hint} ({s.ours}, specialised)", s.read)
            continue
        source = next((s.source for s in involved if s.source.gated), involved[0].source if involved else None)
        actual = f"{guards.ref(sizes_text)}(" + ", ".join(f"{s.where!r}, {s.read}" for s in involved) + ")"
        ours = relation.xreplace({k: v.ours for k, v in sizes.syms.items()})
        guards.add(source, cond, f"{_bare(text)} ({_bare(python(plain_sympy(ours), {s.ours: str(s.ours) for s in involved}))})",
                   actual)


def _bare(text: str) -> str:
    return text[1:-1] if text.startswith("(") and text.endswith(")") else text
