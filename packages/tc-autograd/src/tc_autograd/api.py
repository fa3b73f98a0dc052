"""``aot``: a torch-level graph in, a callable that behaves like eager under autograd out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch

import tc_ir

from . import cache as trace_cache
from . import passes
from . import symbolic as sym_sizes
from .joint import Traced, trace
from .partition import Partition
from .partition import partition as split
from .runtime import InferenceRunner, TrainingRunner, WrongVariant, repeated_outputs, storage_groups

INFERENCE = "inference"  # the variant key when nothing is differentiated
MAX_SIZE_TRACES = 8      # traces of one variant for sizes earlier traces' guards refused
Compiler = Callable[[tc_ir.Graph, Sequence[Any]], Callable]
log = tc_ir.logs.get_logger("aot")


def _any_requires_grad_slow(*values: Any) -> bool:
    return any(isinstance(v, torch.Tensor) and v.requires_grad for v in values)


_any_requires_grad = getattr(torch._C, "_any_requires_grad", _any_requires_grad_slow)


def any_requires_grad(inputs: Sequence[Any]) -> bool:
    """One C-level pass (stops at the first tensor requiring grad)."""
    return _any_requires_grad(*inputs)


def interpret_compiler(graph: tc_ir.Graph, example_inputs: Sequence[Any]) -> Callable:
    """The default compiler: run the graph with the reference interpreter."""
    return lambda *args: tc_ir.interpret(graph, args)


def example_of(spec: Any, hints: dict | None = None) -> Any:
    """A tensor fitting ``spec`` (what a backward compiler gets as example inputs); symbolic
    sizes take their ``hints`` (the sizes traced), an int input binding a symbol its hint."""
    if hints and isinstance(spec, tc_ir.ScalarSpec) and spec.expr is not None:
        return int(sympy.sympify(spec.expr).xreplace(hints))
    if hints and isinstance(spec, tc_ir.TensorSpec) and not spec.is_static:
        at = lambda d: int(sympy.sympify(d).xreplace(hints))  # noqa: E731
        spec = spec.with_(shape=tuple(map(at, spec.shape)), stride=tuple(map(at, spec.stride)))
    if isinstance(spec, tc_ir.TensorSpec):
        # in the forward's layout: a backward compiled for another one copies each saved input per call
        if spec.is_static and all(spec.shape):
            span = 1 + sum((n - 1) * st for n, st in zip(spec.shape, spec.stride))
            return torch.zeros(span, dtype=spec.dtype, device=spec.device).as_strided(spec.shape, spec.stride)
        return torch.zeros(spec.shape, dtype=spec.dtype, device=spec.device)
    return None


def _as_laid_out(examples: list, fw: Any, start: int) -> list:
    """Saved-tensor examples in the strides the compiled forward returns them in (its
    ``output_strides``, when it has them), so the backward is compiled for that layout."""
    strides = getattr(fw, "output_strides", None) or []
    out = []
    for i, example in enumerate(examples):
        stride = strides[start + i] if start + i < len(strides) else None
        if isinstance(example, torch.Tensor) and stride is not None and tuple(stride) != example.stride():
            example = torch.empty_strided(example.shape, stride, dtype=example.dtype, device=example.device).zero_()
        out.append(example)
    return out


def _show(stage: str, graph: tc_ir.Graph) -> None:
    tc_ir.logs.dump(f"aot_{stage}", graph.name, lambda: graph.format(data=False, header=f"made by: tc_autograd {stage}"))
    if tc_ir.logs.enabled("aot"):
        log.debug("%s", graph.format(data=False, header=f"made by: tc_autograd {stage}"))


class Compiled:
    """One traced variant: the graphs made for one pattern of (grad mode, requires_grad).

    With a store in ``options["cache"]``, the graphs come from the trace cache when an entry
    fits (see :mod:`tc_autograd.cache`), and a fresh trace is stored there.

    A graph with size symbols is traced symbolically: ``guards`` are the size relations the
    trace relied on (sympy, over the graph's symbols) and ``guard(inputs)`` checks them; ``guard``
    is None for a static graph. ``other`` is the next trace of the same variant, made for sizes
    this one's guards refused. A symbolic trace is cached with its guards, and read back only
    for inputs they admit.
    """

    def __init__(self, graph: tc_ir.Graph, inputs: Sequence[Any], key: Any, options: dict):
        self.key = key
        self.other: Compiled | None = None
        symbolic = bool(sym_sizes.graph_symbols(graph))
        places = sym_sizes.binding_places(graph) if symbolic else {}
        admits = (lambda guards: sym_sizes.guard_function(guards, places)(inputs)) if symbolic else None
        hit, slot = _cache_find(options.get("cache"), graph, inputs, key, options, admits)
        if hit is None:
            traced, graphs, num_saved = _trace(graph, inputs, key, options)
            if slot:
                _cache_put(options["cache"], slot, traced, graphs, num_saved, symbolic)
        else:
            traced, graphs, num_saved = hit
        self.traced, self._joint = traced, graphs.get("joint")
        self.guards: list = list(traced.guards)
        self.guard = sym_sizes.guard_function(self.guards, places) if symbolic else None
        # the sizes of this call (a trace's hints, or a cached trace's new sizes): backward examples
        hints = tc_ir.bind_sizes(graph, inputs) if symbolic else None
        self.partition: Partition | None = None
        if traced.is_joint:
            forward, backward = graphs["forward"], graphs["backward"]
            saved = list(tc_ir.leaves(forward.outputs))[len(traced.differentiable):]
            self.partition = Partition(forward, backward, saved)
            _show("forward", forward)
            _show("backward", backward)
            log.debug("%s", self.partition.saved_summary())
            # Saved activations are no output the user sees: the forward's compiler may lay them
            # out as it likes (channels-last around convolutions) and says how in output_strides.
            forward.meta["free_outputs"] = tuple(range(len(traced.differentiable), len(traced.differentiable) + len(saved)))
            forward.meta["inplace_outputs"] = inplace_outputs(traced, key)
            # A compiler may return before the forward's kernels are built (tc_inductor: they
            # build in its pool meanwhile) and finish loading them once the backward is compiled:
            # the two graphs' kernels then build together. Both are loaded before this returns,
            # so that a kernel that fails to build fails the compile, not a later call.
            forward.meta["defer_load"] = True
            fw = options["fw_compiler"](forward, list(inputs))
            bw_examples = [example_of(n.spec, hints) for n in backward.inputs]
            bw_examples[:len(saved)] = _as_laid_out(bw_examples[:len(saved)], fw, len(traced.differentiable))
            bw = options["bw_compiler"](backward, bw_examples)
            if callable(getattr(fw, "finish_loading", None)):
                fw.finish_loading()
            sizes = graphs.get("backward_sizes")
            reader = sym_sizes.size_reader(sizes, sym_sizes.binding_places(forward)) if sizes else None
            self.runner: Any = TrainingRunner(traced, fw, bw, num_saved, key, reader, repeated_outputs(backward))
        else:
            _show("inference", traced.graph)
            traced.graph.meta["inplace_outputs"] = inplace_outputs(traced, key)
            self.runner = InferenceRunner(traced, options["fw_compiler"](traced.graph, list(inputs)))

    def joint_graph(self) -> tc_ir.Graph | None:
        """The joint graph (parsed on first read when the variant came from the trace cache)."""
        if isinstance(self._joint, str):
            self._joint = tc_ir.parse(self._joint)
        return self._joint


def inplace_outputs(traced: Traced, key: Any) -> dict[int, int]:
    """{output position: input position} for the outputs that are new values of mutated inputs:
    the compiler may write them into the input's memory (the runtime then skips their copy-back).
    Inputs that require grad in this variant are left out: their copy-back records autograd history."""
    grads = key if isinstance(key, tuple) else ()
    return {traced.num_user_outputs + k: i for k, i in enumerate(traced.mutated_inputs)
            if not (i < len(grads) and grads[i])}


def _trace(graph: tc_ir.Graph, inputs: Sequence[Any], key: Any, options: dict) -> tuple[Traced, dict, int]:
    """Trace to ATen and, when training, partition: ``(traced, graphs by name, saved count)``."""
    traced = trace(graph, inputs, options["decompositions"], key is not INFERENCE)
    traced.graph = passes.clean(traced.graph)
    if not traced.is_joint:
        return traced, {"inference": traced.graph}, 0
    _show("joint", traced.graph)
    part = split(traced.graph, options["partition"])
    graphs = {"joint": traced.graph, "forward": part.forward, "backward": part.backward}
    if traced.graph.meta.get("size_hints"):
        part.forward.meta["size_hints"] = part.backward.meta["size_hints"] = traced.graph.meta["size_hints"]
        # Sizes the backward needs that no saved tensor carries come from the forward's inputs.
        graphs["backward_sizes"] = sym_sizes.add_size_inputs(part.backward)
    return traced, graphs, len(part.saved)


def _cache_find(store: Any, graph: tc_ir.Graph, inputs: Sequence[Any], key: Any, options: dict,
                admits: Callable | None) -> tuple[tuple[Traced, dict, int] | None, str | None]:
    """``(hit, None)``, or ``(None, slot)``: no entry fits, trace and store under ``slot`` (None:
    not cacheable, or every slot holds a trace for other sizes). A symbolic graph's slots are
    read in order; one whose guards refuse the inputs' sizes is skipped, as in-process traces are."""
    cache_key = trace_cache.trace_key(graph, inputs, key, options) if store is not None else None
    if cache_key is None:
        return None, None
    for slot in trace_cache.slots(cache_key, admits is not None, MAX_SIZE_TRACES):
        data = store.get(trace_cache.KIND, slot)
        hit = trace_cache.load(data, len(inputs), admits) if data is not None else None
        if hit is None:
            log.debug("trace cache %s for %s", "miss" if data is None else "damaged entry", slot)
            return None, slot
        if hit is not False:
            log.debug("trace cache hit for %s", slot)
            return hit, None
    return None, None


def _cache_put(store: Any, key: str, traced: Traced, graphs: dict, num_saved: int, symbolic: bool) -> None:
    data = trace_cache.dump(traced, graphs, num_saved, symbolic)
    if data is not None:
        store.put(trace_cache.KIND, key, data)


class AOTFunction:
    """What :func:`aot` returns: call it like the graph; read its graphs to see what it runs.

    Attributes of the most recently used variant: ``joint_graph``, ``forward_graph``,
    ``backward_graph`` (training), ``inference_graph`` (no grad needed), ``saved_summary()``.
    """

    def __init__(self, graph: tc_ir.Graph, options: dict):
        self.graph, self.options = graph, options
        self.num_inputs = len(graph.inputs)
        self.variants: dict[Any, Compiled] = {}
        self.last: Compiled | None = None
        self.writes_inputs = False  # a variant writes to inputs: sharing memory matters

    def key(self, inputs: Sequence[Any]) -> Any:
        """The variant key: ``INFERENCE``, or which inputs require grad (a tuple of bools); once
        a variant writes to inputs, also which inputs share memory (see ``check_unshared``)."""
        if not torch.is_grad_enabled() or not any_requires_grad(inputs):
            key: Any = INFERENCE
        else:
            key = tuple(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)
        groups = storage_groups(inputs) if self.writes_inputs else ()
        return ("shared", key, groups) if groups else key

    def variant(self, inputs: Sequence[Any]) -> Compiled:
        key = self.key(inputs)
        compiled, tried = self.variants.get(key), 0
        while compiled is not None and compiled.guard is not None and not compiled.guard(inputs):
            compiled, tried = compiled.other, tried + 1  # sizes its trace did not admit: the next one
        if compiled is None:
            try:
                if tried >= MAX_SIZE_TRACES:
                    raise NotImplementedError(
                        f"tc_autograd: graph {self.graph.name} was traced {tried} times for sizes the earlier "
                        f"traces' guards refused (last guards: {self._last_guards(key)}); not tracing again")
                with tc_ir.deferred_full_gc():  # a compile's heap only grows: no full GC rescans of it
                    compiled = Compiled(self.graph, inputs, _grad_key(key), self.options)
                self.writes_inputs |= bool(compiled.traced.mutated_inputs)
            except Exception as e:
                # Callers (the umbrella's eager fallback) may retry the call another way: tell
                # them that nothing of the graph ran.
                e.tc_while_compiling = True
                raise
            self._append(key, compiled)
        self.last = compiled
        return compiled

    def _append(self, key: Any, compiled: Compiled) -> None:
        head = self.variants.get(key)
        if head is None:
            self.variants[key] = compiled
            return
        while head.other is not None:
            head = head.other
        head.other = compiled
        log.debug("graph %s traced again for sizes outside the guards %s", self.graph.name, head.guards)

    def _last_guards(self, key: Any) -> list:
        head = self.variants.get(key)
        while head is not None and head.other is not None:
            head = head.other
        return head.guards if head is not None else []

    def __call__(self, *inputs: Any) -> Any:
        """Run the variant of the last call when it still fits, without building a key.

        A training variant checks its fit for free: inside ``autograd.Function.forward``,
        ``ctx.needs_input_grad`` (computed by autograd anyway) must equal its requires-grad
        pattern, or it raises :class:`WrongVariant` before running anything.
        """
        if len(inputs) != self.num_inputs:
            raise TypeError(f"tc_autograd: graph {self.graph.name} takes {self.num_inputs} inputs, got {len(inputs)}")
        last = self.last
        if last is not None and (last.guard is None or last.guard(inputs)):
            try:
                if last.key is not INFERENCE:
                    if torch.is_grad_enabled():
                        return last.runner(inputs)
                elif not torch.is_grad_enabled() or not any_requires_grad(inputs):
                    return last.runner(inputs)
            except WrongVariant:
                pass
        return self.variant(inputs).runner(inputs)

    # ---- reading --------------------------------------------------------------------------
    @property
    def joint_graph(self) -> tc_ir.Graph | None:
        return self.last.joint_graph() if self.last and self.last.partition else None

    @property
    def forward_graph(self) -> tc_ir.Graph | None:
        return self.last.partition.forward if self.last and self.last.partition else None

    @property
    def backward_graph(self) -> tc_ir.Graph | None:
        return self.last.partition.backward if self.last and self.last.partition else None

    @property
    def guards(self) -> list:
        """The size relations (sympy, over the graph's size symbols) the last variant's trace
        relied on; empty for a static graph. Calls whose sizes break one are traced again."""
        return list(self.last.guards) if self.last else []

    @property
    def inference_graph(self) -> tc_ir.Graph | None:
        return self.last.traced.graph if self.last and not self.last.partition else None

    def saved_summary(self) -> str:
        """The tensors the forward saves for the backward, with their sizes in bytes."""
        if not self.last or not self.last.partition:
            return "saved for backward: nothing (inference graph)"
        return self.last.partition.saved_summary()

    def saved_bytes(self) -> int:
        return self.last.partition.saved_bytes() if self.last and self.last.partition else 0


def _grad_key(key: Any) -> Any:
    """The part of a variant key that decides the graphs (memory sharing only decides whether
    they can be traced at all)."""
    return key[1] if isinstance(key, tuple) and key and key[0] == "shared" else key


def aot(graph: tc_ir.Graph, example_inputs: Sequence[Any], *, fw_compiler: Compiler | None = None,
        bw_compiler: Compiler | None = None, decompositions: dict | None = None,
        partition: str = "min_cut", cache: Any = None) -> AOTFunction:
    """Trace ``graph`` (torch level) to functional ATen graphs and compile them.

    >>> f = aot(graph, [x, w])                   # doctest: +SKIP
    >>> out = f(x, w); out.sum().backward()      # grads reach x and w as in eager

    ``fw_compiler``/``bw_compiler`` take ``(tc_ir.Graph, example_inputs)`` and return a callable
    (default: the tc_ir interpreter). ``decompositions`` maps ATen overloads to Python functions.
    ``partition`` is ``"min_cut"`` (recompute cheap ops) or ``"save_all"``. ``cache`` is an
    artifact store (``get(kind, key)``/``put(kind, key, data)``, e.g. ``tc_runtime.ArtifactCache()``)
    for the trace cache: a variant traced in an earlier process is read back instead of traced
    (see :mod:`tc_autograd.cache`). The graphs for the example inputs' grad pattern are made
    now; other patterns are traced on first use.
    """
    if partition not in ("min_cut", "save_all"):
        raise ValueError(f"tc_autograd: partition must be 'min_cut' or 'save_all', got {partition!r}")
    options = {"fw_compiler": fw_compiler or interpret_compiler, "bw_compiler": bw_compiler or interpret_compiler,
               "decompositions": decompositions, "partition": partition, "cache": cache}
    fn = AOTFunction(graph, options)
    fn.variant(list(example_inputs))
    return fn
