"""The public entry points: ``optimize``, ``capture``, ``explain``, ``reset`` and friends."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

import tc_ir

from .cache.frame_cache import ALL_CACHES, FrameCache, compiling_depth, frame_cache, warn_fallback
from .interp.builtins_ import BUILTINS
from .interp.variables import Const
from .resume.callees import binder, call_module, global_hooks
from .resume.compile_region import Break, Entry, distinct_breaks


def is_compiling() -> bool:
    """True while tc_capture captures or runs a compiled region (in this thread)."""
    return compiling_depth() > 0


def _register_is_compiling() -> None:
    BUILTINS[is_compiling] = lambda f, args, kwargs: Const(True)  # inside a captured region it is


_register_is_compiling()


def mark_dynamic(t: torch.Tensor, dim: int | list[int] | tuple[int, ...], *, min: int | None = None,
                 max: int | None = None) -> None:
    """Make ``t``'s size ``dim`` a symbol from the first capture (``dynamic=None`` or ``True``).

    ``min``/``max`` bound the sizes a compiled graph accepts (guarded; a size outside recompiles).
    A size 0 or 1, or one outside ``[min, max]`` at capture, stays static (specialised).
    """
    dims = getattr(t, "_tc_dynamic_dims", None) or {}
    for d in ([dim] if isinstance(dim, int) else dim):
        dims[d % t.dim() if t.dim() else d] = (min, max)
    t._tc_dynamic_dims = dims


def reset() -> None:
    """Forget every compiled entry of every optimized function."""
    for cache in list(ALL_CACHES):
        cache.clear()


class OptimizedModule:
    """A compiled ``nn.Module``: calling it runs the guarded cache; attributes are the module's.

    The module's ``forward`` (with ``self`` bound as its first argument) is the root frame that
    is captured, so a graph break in ``forward`` resumes capture right after it, as in a plain
    function. Forward pre-hooks and hooks run in Python around the compiled forward.
    """

    def __init__(self, module: torch.nn.Module, make_cache: Callable):
        object.__setattr__(self, "_orig_mod", module)
        object.__setattr__(self, "_make_cache", make_cache)
        object.__setattr__(self, "_forwards", {})  # forward function -> (cache, binder)

    @property
    def _cache(self) -> FrameCache:
        return self._compiled_forward()[0]

    def _compiled_forward(self):
        mod = self._orig_mod
        fn = mod.__dict__.get("forward")
        bound_self = fn is None or isinstance(fn, types.MethodType) and fn.__self__ is mod
        fn = type(mod).forward if fn is None else getattr(fn, "__func__", fn)
        found = self._forwards.get(fn)
        if found is None:
            if not isinstance(fn, types.FunctionType):
                found = self._forwards[fn] = (_EagerForward(mod, bound_self), _unbound, bound_self)
            else:
                found = self._forwards[fn] = (self._make_cache(fn), binder(fn), bound_self)
        return found

    def _forward(self, args, kwargs):
        cache, bind, bound_self = self._compiled_forward()
        if bound_self:
            args = (self._orig_mod, *args)
        return cache.call(bind(args, kwargs), args, kwargs)

    def __call__(self, *args, **kwargs):
        mod = self._orig_mod
        if not (mod._forward_hooks or mod._forward_pre_hooks or mod._backward_hooks or mod._backward_pre_hooks
                or global_hooks()):
            return self._forward(args, kwargs)
        return call_module(mod, args, kwargs, self._forward)  # hooks in Python around forward

    def forward(self, *args, **kwargs):
        return self._forward(args, kwargs)

    def __getattr__(self, name):
        return getattr(self._orig_mod, name)

    def __setattr__(self, name, value):
        setattr(self._orig_mod, name, value)


class _EagerForward:
    """Stands in for the cache of a ``forward`` that is not a Python function (a C function, a
    ``functools.partial``): the module runs eagerly, warned once."""

    def __init__(self, mod: torch.nn.Module, bound_self: bool):
        self.mod, self.bound_self = mod, bound_self
        self.listeners: list = []
        self.warned = False

    def call(self, F, args, kwargs):
        if not self.warned:
            self.warned = True
            name = type(self.mod).__name__
            warn_fallback(*_where(type(self.mod)), f"{name}.forward is not a Python function; running it eagerly")
        return self.mod.forward(*(args[1:] if self.bound_self else args), **kwargs)


def _unbound(args, kwargs):
    return None


def _where(obj) -> tuple[str, int]:
    try:
        return inspect.getsourcefile(obj) or "<unknown>", inspect.getsourcelines(obj)[1]
    except (OSError, TypeError):
        return "<unknown>", 0


def optimize(backend: Callable, *, fullgraph: bool = False, dynamic: bool | None = None,
             recompile_limit: int = 8) -> Callable:
    """A decorator compiling a function, bound method or ``nn.Module`` with ``backend``.

    ``backend(graph, example_inputs)`` returns a callable that takes the graph's inputs
    positionally and returns what ``tc_ir.interpret(graph, inputs)`` would.

    ``dynamic``: ``None`` (static first; a dim whose size changes becomes a symbol at the
    recompile), ``True`` (every dim of frame inputs symbolic where the program allows), ``False``
    (never); see the README's *Dynamic shapes*.

    >>> import torch, tc_ir, tc_capture
    >>> be = lambda g, ex: (lambda *xs: tc_ir.interpret(g, xs))
    >>> f = tc_capture.optimize(be)(lambda x: torch.relu(x) + 1)
    >>> bool((f(torch.ones(2)) == 2).all())
    True
    """
    def wrap(fn):
        if isinstance(fn, torch.nn.Module):
            return OptimizedModule(fn, lambda forward: frame_cache(forward, backend, fullgraph, recompile_limit, dynamic))
        if isinstance(fn, types.MethodType):
            inner = wrap(fn.__func__)
            return types.MethodType(inner, fn.__self__)
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"tc_capture.optimize needs a function, method or nn.Module, got {type(fn).__name__}")
        cache = frame_cache(fn, backend, fullgraph, recompile_limit, dynamic)
        bind = binder(fn)

        @functools.wraps(fn)
        def compiled(*args, **kwargs):
            return cache.call(bind(args, kwargs), args, kwargs)

        compiled._tc_cache = cache
        return compiled

    return wrap


def interpret_backend(graph: tc_ir.Graph, example_inputs: list) -> Callable:
    """The reference back end: run the graph on ``tc_ir.interpret``."""
    return lambda *inputs: tc_ir.interpret(graph, inputs)


# ---- analysis --------------------------------------------------------------------------------------
@dataclass
class CaptureResult:
    """What capturing one call found: graphs, guards, graph breaks, and the call's result."""

    graphs: list = field(default_factory=list)
    guards: list = field(default_factory=list)
    breaks: list = field(default_factory=list)
    result: Any = None
    symbols: dict = field(default_factory=dict)  # size symbol -> the input dim it stands for

    @property
    def ops_per_graph(self) -> list[int]:
        return [len(g.calls) for g in self.graphs]

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def graph_break_count(self) -> int:
        return len(self.breaks)

    @property
    def break_reasons(self) -> list[str]:
        return [str(b) for b in self.breaks]

    def __str__(self) -> str:
        lines = [f"graphs: {self.graph_count}, graph breaks: {self.graph_break_count}",
                 f"ops per graph: {self.ops_per_graph}"]
        lines += [f"  break: {b}" for b in self.breaks]
        if self.symbols:
            lines.append("symbolic sizes: " + ", ".join(f"{s} = {where}" for s, where in self.symbols.items()))
        lines += ["guards:"] + [f"  {g}" for g in self.guards]
        return "\n".join(lines)


def capture(fn, *args, **kwargs) -> CaptureResult:
    """Run ``fn(*args, **kwargs)`` once through the capture layer and report what it captured.

    Each region between graph breaks gives one graph (run by the reference interpreter), the
    guards that make it valid, and the break reasons with the user's file:line.
    """
    report = CaptureResult()

    def listen(entry: Entry) -> None:
        if entry.graph is not None:
            report.graphs.append(entry.graph)
            report.symbols.update(entry.graph.meta.get("size_symbols", {}))
        report.guards.extend(g for g in entry.guard_texts if g not in report.guards)
        report.breaks.extend(entry.breaks)

    private_backend = functools.partial(interpret_backend)  # a new object: caches of its own
    compiled = optimize(private_backend)(fn)
    cache = compiled._cache if isinstance(compiled, OptimizedModule) else (
        compiled.__func__ if isinstance(compiled, types.MethodType) else compiled)._tc_cache
    cache.listeners.append(listen)
    report.result = compiled(*args, **kwargs)
    report.breaks = distinct_breaks(report.breaks)
    return report  # the private caches go with ``compiled`` (weakly registered)


explain = capture
__all__ = ["Break"]
