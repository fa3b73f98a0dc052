"""Helpers for the dynamic-shape tests: hand-built ATen graphs whose sizes are size symbols.

:class:`SymGraph` builds a ``tc_ir.Graph`` as the tests elsewhere do, but infers each call's
spec on fake tensors with symbolic sizes (torch's ``ShapeEnv``), then writes the sizes back as
expressions over ``tc_ir.sym`` symbols: the graphs the capture and autograd layers hand over.
:func:`run_sizes` compiles once and compares with eager and ``tc_ir.interpret`` at many sizes.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import sympy
import torch
from inductor_helpers import assert_same
from torch._guards import GuardSource, Source
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv
from torch.utils import _sympy as torch_sympy
from torch.utils._pytree import tree_map

import tc_inductor
import tc_ir

aten = torch.ops.aten
# sizes each family runs at: 2, 3, odd, prime, a multiple of 16 plus one, large
SIZES = (2, 3, 5, 7, 17, 31, 64, 97)


@dataclasses.dataclass(frozen=True)
class _Src(Source):
    label: str

    @property
    def name(self) -> str:
        return self.label

    def guard_source(self) -> GuardSource:
        return GuardSource.LOCAL


def _to_tc(expr: Any, names: dict) -> Any:
    """A ShapeEnv size (SymInt or int) as an int or a sympy expression over tc_ir symbols."""
    if isinstance(expr, torch.SymInt):
        expr = expr.node.expr
    if isinstance(expr, int):
        return expr
    funcs = torch_sympy.functions
    expr = expr.replace(lambda e: isinstance(e, funcs.FloorDiv), lambda e: sympy.floor(e.args[0] / e.args[1]))
    expr = expr.replace(lambda e: isinstance(e, funcs.CeilDiv), lambda e: sympy.ceiling(e.args[0] / e.args[1]))
    expr = expr.replace(lambda e: isinstance(e, funcs.ModularIndexing),
                        lambda e: sympy.Mod(sympy.floor(e.args[0] / e.args[1]), e.args[2]))
    expr = expr.replace(lambda e: isinstance(e, (funcs.PythonMod, funcs.Mod)), lambda e: sympy.Mod(*e.args))
    out = expr.xreplace(names)
    return int(out) if out.is_Integer else out


class SymGraph:
    """A graph builder whose ``call`` infers symbolic specs (sizes as ``tc_ir.sym`` expressions)."""

    def __init__(self):
        self.graph = tc_ir.Graph()
        self.env = ShapeEnv()
        self.mode = FakeTensorMode(shape_env=self.env, allow_non_fake_inputs=True)
        self.fakes: dict[tc_ir.Node, Any] = {}
        self.to_env: dict[sympy.Symbol, sympy.Symbol] = {}  # tc_ir symbol -> ShapeEnv symbol
        self.to_tc: dict[sympy.Symbol, sympy.Symbol] = {}

    def sym(self, name: str, hint: int = 5) -> sympy.Symbol:
        mine = tc_ir.sym(name)
        if mine not in self.to_env:
            theirs = self.env.create_symbol(hint, _Src(name), dynamic_dim=DimDynamic.DYNAMIC)
            self.to_env[mine], self.to_tc[theirs] = theirs, mine
        return mine

    def symint(self, value: Any) -> Any:
        if not isinstance(value, sympy.Expr):
            return value
        expr = sympy.sympify(value).xreplace(self.to_env)
        if expr.is_Integer:
            return int(expr)
        return self.env.create_symintnode(expr, hint=int(expr.xreplace(self.env.backed_var_to_val)))

    def input(self, name: str, shape: tuple, dtype: torch.dtype = torch.float32, device: str = "cpu") -> tc_ir.Node:
        spec = tc_ir.TensorSpec(shape, dtype, device)
        node = self.graph.input(name, spec)
        with self.mode:
            self.fakes[node] = torch.empty_strided([self.symint(d) for d in spec.shape],
                                                   [self.symint(d) for d in spec.stride], dtype=dtype, device=device)
        return node

    def int_input(self, name: str, symbol: sympy.Symbol) -> tc_ir.Node:
        node = self.graph.input(name, tc_ir.ScalarSpec(int, symbol))
        self.fakes[node] = self.symint(symbol)
        return node

    def call(self, target: Any, *args: Any, **kwargs: Any) -> Any:
        fake_args, fake_kwargs = tree_map(self._fake, (args, kwargs))
        with self.mode:
            result = target(*fake_args, **fake_kwargs)
        node = self.graph.call(target, *args, kwargs=kwargs or None, spec=self._spec(result))
        self.fakes[node] = result
        if isinstance(result, (tuple, list)):
            items = tuple(self.graph.call(operator.getitem, node, i, spec=self._spec(r)) for i, r in enumerate(result))
            self.fakes.update(zip(items, result))
            return items
        return node

    def output(self, value: Any) -> tc_ir.Graph:
        self.graph.output(value)
        return self.graph

    def _fake(self, value: Any) -> Any:
        if isinstance(value, tc_ir.Node):
            return self.fakes[value]
        return self.symint(value)

    def _spec(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return tc_ir.TensorSpec(tuple(_to_tc(d, self.to_tc) for d in value.shape), value.dtype, value.device,
                                    tuple(_to_tc(d, self.to_tc) for d in value.stride()))
        if isinstance(value, (tuple, list)):
            return tuple(self._spec(v) for v in value)
        return tc_ir.spec_of(value)


def kernel_builds() -> int:
    """Kernels built (C++ .so loads and Triton launch configs) so far in this process."""
    return tc_inductor.compile_counters()["kernel_builds"]


def run_sizes(graph: tc_ir.Graph, make_inputs, sizes=SIZES, backend: str = "cpp", options: dict | None = None,
              eager=None, externs: int | None = 0):
    """Compile ``graph`` once, run it at every size in ``sizes`` (``make_inputs(n)`` gives fresh
    inputs), compare with ``tc_ir.interpret`` (and ``eager(*inputs)`` when given); assert no
    kernel is built after the first size, and that ``externs`` ops run through torch (None: any).
    Returns the compiled graph."""
    compiled = tc_inductor.compile(graph, make_inputs(sizes[0]), {"backend": backend, "cache": False,
                                                                  **(options or {})})
    if externs is not None:
        assert compiled.stats["extern_calls"] == externs, compiled.source
    builds = None
    for n in sizes:
        inputs = make_inputs(n)
        expected = tc_ir.interpret(graph, inputs)
        assert_same(compiled(*inputs), expected)
        if eager is not None:
            assert_same(compiled(*inputs), eager(*inputs))
        if builds is None:
            builds = kernel_builds()
        elif backend == "cpp":
            assert kernel_builds() == builds, f"size {n} built new kernels"
    return compiled
