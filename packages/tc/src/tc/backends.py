"""Back ends: what compiles each graph that capture hands over.

A back end is a callable ``backend(gm, example_inputs) -> callable`` receiving a
``torch.fx.GraphModule`` and the example inputs: exactly ``torch.compile``'s contract, so a back
end written for ``torch.compile`` works unchanged (tc_ir's FX adapter, :func:`tc_ir.to_fx`,
makes the GraphModule). A back end that wants tc_ir graphs asks for them: decorate it with
:func:`tc_ir_backend`, or register it with ``register_backend(name, fn, graph="tc_ir")``.

The built-in ones take tc_ir graphs: ``eager`` runs captured graphs as they are, ``aot_eager``
runs tc_autograd's ATen graphs on the reference interpreter, and ``inductor`` compiles them to
kernels (with CUDA graphs when the options say so).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch

import tc_autograd
import tc_capture
import tc_inductor
import tc_ir
import tc_runtime
from tc_ir.logs import get_logger

from .options import Options

log = get_logger("perf_hints")

# The form every back end is called in here: (tc_ir graph, example inputs, options) -> callable.
Backend = Callable[[tc_ir.Graph, Sequence[Any], Options], Callable]
_REGISTRY: dict[str, Backend] = {}
_GRAPH_KINDS = ("fx", "tc_ir")


class BackendCompilerFailed(tc_capture.CompileError):
    """A back end raised while compiling a graph and ``options={"fallback": False}`` was set
    (a ``CompileError``: capture lets it through instead of running the region eagerly)."""


def tc_ir_backend(fn: Callable) -> Callable:
    """Mark ``fn(graph, example_inputs)`` as a back end that receives ``tc_ir.Graph`` objects.

    >>> @tc_ir_backend
    ... def count_ops(graph, example_inputs):
    ...     print(len(graph.calls), "ops")
    ...     return lambda *inputs: tc_ir.interpret(graph, inputs)
    """
    fn.tc_graph = "tc_ir"
    return fn


def register_backend(name: str, backend: Callable | None = None, *, graph: str | None = None):
    """Register ``backend`` under ``name`` (``tc.compile(backend=name)``); usable as a decorator.

    ``graph="fx"`` (the default): ``backend(gm, example_inputs)`` gets a ``torch.fx.GraphModule``,
    as ``torch.compile`` back ends do. ``graph="tc_ir"`` (or a function marked with
    :func:`tc_ir_backend`): ``backend(graph, example_inputs)`` gets the ``tc_ir.Graph``.
    """
    if graph not in (None, *_GRAPH_KINDS):
        raise ValueError(f"tc.register_backend: graph={graph!r}; choose one of {_GRAPH_KINDS}")

    def add(fn: Callable) -> Callable:
        _REGISTRY[name] = _as_backend(tc_ir_backend(fn) if graph == "tc_ir" else fn, graph or "fx")
        return fn

    return add(backend) if backend is not None else add


def _builtin(name: str) -> Callable:
    """Register one of tc's own back ends: tc_ir graphs, and the options of ``tc.compile``."""

    def add(fn: Backend) -> Backend:
        _REGISTRY[name] = fn
        return fn

    return add


def list_backends() -> list[str]:
    """The names ``tc.compile(backend=...)`` accepts."""
    return sorted(_REGISTRY)


def lookup(backend: str | Callable) -> Backend:
    if callable(backend):
        return _as_backend(backend, "fx")
    if backend not in _REGISTRY:
        raise ValueError(f"tc.compile: unknown backend {backend!r}; registered: {list_backends()}")
    return _REGISTRY[backend]


def _as_backend(fn: Callable, default: str) -> Backend:
    if getattr(fn, "tc_graph", default) == "tc_ir":
        return lambda graph, example_inputs, options: fn(graph, example_inputs)
    return lambda graph, example_inputs, options: fn(tc_ir.to_fx(graph), list(example_inputs))


def interpreter(graph: tc_ir.Graph, example_inputs: Sequence[Any] = ()) -> Callable:
    """Run ``graph`` on tc_ir's reference interpreter."""
    return lambda *inputs: tc_ir.interpret(graph, inputs)


@_builtin("eager")
def eager(graph: tc_ir.Graph, example_inputs: Sequence[Any], options: Options | None = None) -> Callable:
    return interpreter(graph)


@_builtin("aot_eager")
def aot_eager(graph: tc_ir.Graph, example_inputs: Sequence[Any], options: Options | None = None) -> Callable:
    return _aot(graph, example_inputs, lambda lifted: interpreter, decompositions=None)


@_builtin("inductor")
def inductor(graph: tc_ir.Graph, example_inputs: Sequence[Any], options: Options | None = None) -> Callable:
    def compiler_for(lifted: tc_ir.Graph) -> Callable:
        return _kernel_compiler(options or Options(), static_input_names(lifted))

    return _aot(graph, example_inputs, compiler_for, decompositions=tc_inductor.decompositions())


def _aot(graph: tc_ir.Graph, example_inputs: Sequence[Any], compiler_for: Callable[[tc_ir.Graph], Callable],
         decompositions: Any) -> Callable:
    # Tensors the graph holds (export, FX get_attr) become inputs, so autograd treats them like
    # any parameter: traced symbolically, and differentiated when they require grad.
    lifted, held = tc_ir.lift_held(graph)
    compiler = compiler_for(lifted)
    # The trace cache shares the artifact store: a warm process reads its ATen graphs back.
    compiled = tc_autograd.aot(lifted, [*example_inputs, *held], fw_compiler=compiler, bw_compiler=compiler,
                               decompositions=decompositions, cache=artifact_cache())
    return (lambda *inputs: compiled(*inputs, *held)) if held else compiled


@functools.cache
def artifact_cache() -> tc_runtime.ArtifactCache:
    """The process's artifact cache (``TC_CACHE_DIR``): graph-level results of the inductor live
    here, so ``tc.save_cache_artifacts()`` carries them to another machine."""
    return tc_runtime.ArtifactCache()


# Symbolic ATen graphs (traced once by tc_autograd) compile once into kernels that take sizes as
# arguments; a graph tc_inductor cannot compile symbolically (a size no input carries as a plain
# dim) gets static copies per concrete shape. options={"symbolic_kernels": False} forces the latter.
SYMBOLIC_KERNELS = True


def static_input_names(graph: tc_ir.Graph) -> frozenset[str]:
    """Names of ``graph``'s inputs that keep their memory between calls (``meta["static"]``: tensors
    lifted from the graph, an optimizer's parameters and state marked by capture). tc_autograd's
    ATen graphs name their primal inputs after the captured graph's, which is how the mark reaches
    the graphs the kernel compiler sees (their nodes do not carry capture's meta)."""
    return frozenset(n.name for n in graph.inputs if n.meta.get("static"))


def runs_on_cuda(example_inputs: Sequence[Any]) -> bool:
    """Whether a compiled graph with these inputs is replayed as CUDA graphs (under
    ``options.cudagraphs``); CPU tests of the CUDA-graph path replace it."""
    return any(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs)


def _kernel_compiler(options: Options, static_names: frozenset[str] = frozenset()) -> Callable:
    def compile_kernels(graph: tc_ir.Graph, example_inputs: Sequence[Any]) -> Callable:
        inductor_options = {"artifact_store": artifact_cache(), **options.inductor}
        symbolic_kernels = bool(inductor_options.pop("symbolic_kernels", SYMBOLIC_KERNELS))
        per_shape = lambda: KernelsPerShape(  # noqa: E731
            graph, lambda g, ex: tc_inductor.compile(g, ex, options=inductor_options))
        if is_symbolic(graph) and not symbolic_kernels:
            return per_shape()
        try:
            compiled = tc_inductor.compile(graph, example_inputs, options=inductor_options)
        except tc_inductor.SymbolicUnsupported as e:
            log.debug("symbolic kernels declined (%s): one static compile per shape", e)
            compiled = per_shape()
        if not (options.cudagraphs and runs_on_cuda(example_inputs)):
            return compiled
        # Parameters, the tensors lifted from the graph and an optimizer's parameters and state
        # keep their storage between calls: read and written in place, never copied. Gradients are
        # not static: the runtime reads them in place when a graph of its pool (the backward) made
        # them. A symbolic graph gets one CUDA graph per concrete shape, all in one pool (tc_runtime).
        # Inputs the kernels write in place (a batch norm's running statistics: the graph's
        # ``inplace_outputs``) are static too: a graph writing into copies of them would lose the write.
        written = set(dict(graph.meta.get("inplace_outputs") or {}).values())
        static = [i for i, (t, node) in enumerate(zip(example_inputs, graph.inputs))
                  if isinstance(t, torch.nn.Parameter) or node.meta.get("static") or node.name in static_names
                  or i in written]
        graphed = tc_runtime.cudagraphify(compiled, example_inputs, static_input_indices=static)
        # tc_autograd compiles the backward for the layouts the forward returns (channels-last
        # saved activations): without this, each would be copied into the backward's layout per call
        graphed.output_strides = getattr(compiled, "output_strides", None)
        graphed.finish_loading = getattr(compiled, "finish_loading", lambda: None)  # see tc_autograd's Compiled
        return graphed

    return compile_kernels


def is_symbolic(graph: tc_ir.Graph) -> bool:
    """Do ``graph``'s input specs hold size symbols?"""
    return any(_spec_symbols(n.spec) for n in graph.inputs)


def _spec_symbols(spec: Any) -> set:
    if isinstance(spec, tc_ir.TensorSpec):
        return spec.free_symbols
    if isinstance(spec, tc_ir.ScalarSpec) and isinstance(spec.expr, sympy.Expr):
        return spec.expr.free_symbols
    return set()


class KernelsPerShape:
    """A symbolic graph run as static copies, one compiled per distinct set of input sizes (and
    int input values) on first use: correct at every size, one kernel compile per shape."""

    MAX_SHAPES = 64  # specialisations kept (oldest dropped first)

    def __init__(self, graph: tc_ir.Graph, compile_static: Callable[[tc_ir.Graph, list], Callable]):
        self.graph, self.compile_static = graph, compile_static
        self.compiled: dict[tuple, Callable] = {}

    def __call__(self, *inputs: Any) -> Any:
        key = tuple(tuple(x.shape) if isinstance(x, torch.Tensor) else x if isinstance(x, int) else None
                    for x in inputs)
        fn = self.compiled.get(key)
        if fn is None:
            if len(self.compiled) >= self.MAX_SHAPES:
                self.compiled.pop(next(iter(self.compiled)))
            static = specialise(self.graph, tc_ir.bind_sizes(self.graph, inputs))
            fn = self.compiled[key] = self.compile_static(static, list(inputs))
        return fn(*inputs)


def specialise(graph: tc_ir.Graph, sizes: dict) -> tc_ir.Graph:
    """A static copy of ``graph`` with every size symbol replaced by its value in ``sizes``."""
    static = graph.copy()

    def at(value: Any) -> Any:
        return tc_ir.spec.size_value(value, sizes)  # an int, or a float for SizeFloat(e)

    for g in [static, *static.subgraphs()]:
        for node in g.nodes:
            node.spec = _static_spec(node.spec, at)
            if node.op == "call":
                node.args, node.kwargs = tc_ir.map_structure((node.args, node.kwargs), at)
        g.output(tc_ir.map_structure(g.outputs, at))
    return static


def _static_spec(spec: Any, at: Callable) -> Any:
    if isinstance(spec, tc_ir.TensorSpec) and not spec.is_static:
        return spec.with_(shape=tuple(map(at, spec.shape)), stride=tuple(map(at, spec.stride)))
    if isinstance(spec, tc_ir.ScalarSpec) and spec.expr is not None:
        return tc_ir.ScalarSpec(spec.type)  # the value comes with each call; the shape key holds it
    if isinstance(spec, tuple):
        return tuple(_static_spec(s, at) for s in spec)
    return spec


def with_fallback(backend: Backend, name: str, options: Options) -> Callable:
    """The back end as capture calls it: a failure runs the graph eagerly, with one warning.

    Failures can also come later: tc_autograd compiles a new variant when a call brings a new
    pattern of grad mode and ``requires_grad``. Those fall back the same way, for this graph
    from then on; nothing of the graph has run when they happen, so running it eagerly is safe.
    """

    def eager_instead(graph: tc_ir.Graph, e: Exception) -> Callable:
        if not options.fallback:
            raise BackendCompilerFailed(f"back end {name!r} failed on graph {graph.name}: {e}") from e
        message = (f"back end {name!r} failed on graph {graph.name} ({type(e).__name__}: {e}); "
                   "running this graph eagerly. Pass options={'fallback': False} to raise instead.")
        if "location" in graph.meta:  # set by capture: the warning names the user's file:line
            tc_capture.warn_fallback(*graph.meta["location"], message)
        else:
            warnings.warn(f"tc: {message}", stacklevel=3)
        return interpreter(graph)

    def compile_graph(graph: tc_ir.Graph, example_inputs: Sequence[Any]) -> Callable:
        try:
            compiled = backend(graph, example_inputs, options)
        except Exception as e:
            return eager_instead(graph, e)
        return _LateFallback(compiled, lambda e: eager_instead(graph, e))

    return compile_graph


class _LateFallback:
    """Calls the compiled graph; if a call fails while tc_autograd compiles a new variant, the
    graph runs eagerly from then on. A try block costs nothing on the hit path."""

    __slots__ = ("fn", "fallback")

    def __init__(self, fn: Callable, fallback: Callable[[Exception], Callable]):
        self.fn, self.fallback = fn, fallback

    def __call__(self, *inputs: Any) -> Any:
        try:
            return self.fn(*inputs)
        except Exception as e:
            if not _while_compiling(e):
                raise
            self.fn = self.fallback(e)
            return self.fn(*inputs)


def _while_compiling(e: BaseException) -> bool:
    return getattr(e, "tc_while_compiling", False)  # set by tc_autograd when a variant fails to compile
