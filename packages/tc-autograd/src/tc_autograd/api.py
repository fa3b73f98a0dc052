"""``aot``: a torch-level graph in, a callable that behaves like eager under autograd out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

import tc_ir

from . import passes
from .joint import trace
from .partition import Partition
from .partition import partition as split
from .runtime import InferenceRunner, TrainingRunner, WrongVariant

INFERENCE = "inference"  # the variant key when nothing is differentiated
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


def example_of(spec: Any) -> Any:
    """A tensor fitting ``spec`` (what a backward compiler gets as example inputs)."""
    if isinstance(spec, tc_ir.TensorSpec):
        return torch.zeros(spec.shape, dtype=spec.dtype, device=spec.device)
    return None


def _show(stage: str, graph: tc_ir.Graph) -> None:
    tc_ir.logs.dump(f"aot_{stage}", graph.name, graph.format(data=False, header=f"made by: tc_autograd {stage}"))
    if tc_ir.logs.enabled("aot"):
        log.debug("%s", graph.format(data=False, header=f"made by: tc_autograd {stage}"))


class Compiled:
    """One traced variant: the graphs made for one pattern of (grad mode, requires_grad)."""

    def __init__(self, graph: tc_ir.Graph, inputs: Sequence[Any], key: Any, options: dict):
        self.key = key
        traced = trace(graph, inputs, options["decompositions"], key is not INFERENCE)
        traced.graph = passes.clean(traced.graph)
        self.traced = traced
        self.partition: Partition | None = None
        if traced.is_joint:
            _show("joint", traced.graph)
            self.partition = split(traced.graph, options["partition"])
            _show("forward", self.partition.forward)
            _show("backward", self.partition.backward)
            log.debug("%s", self.partition.saved_summary())
            forward = options["fw_compiler"](self.partition.forward, list(inputs))
            bw_examples = [example_of(n.spec) for n in self.partition.backward.inputs]
            backward = options["bw_compiler"](self.partition.backward, bw_examples)
            self.runner: Any = TrainingRunner(traced, forward, backward, len(self.partition.saved), key)
        else:
            _show("inference", traced.graph)
            self.runner = InferenceRunner(traced, options["fw_compiler"](traced.graph, list(inputs)))


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

    def key(self, inputs: Sequence[Any]) -> Any:
        """The variant key: ``INFERENCE``, or which inputs require grad (a tuple of bools)."""
        if not torch.is_grad_enabled() or not any_requires_grad(inputs):
            return INFERENCE
        return tuple(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)

    def variant(self, inputs: Sequence[Any]) -> Compiled:
        key = self.key(inputs)
        compiled = self.variants.get(key)
        if compiled is None:
            try:
                compiled = self.variants[key] = Compiled(self.graph, inputs, key, self.options)
            except Exception as e:
                # Callers (the umbrella's eager fallback) may retry the call another way: tell
                # them that nothing of the graph ran.
                e.tc_while_compiling = True
                raise
        self.last = compiled
        return compiled

    def __call__(self, *inputs: Any) -> Any:
        """Run the variant of the last call when it still fits, without building a key.

        A training variant checks its fit for free: inside ``autograd.Function.forward``,
        ``ctx.needs_input_grad`` (computed by autograd anyway) must equal its requires-grad
        pattern, or it raises :class:`WrongVariant` before running anything.
        """
        if len(inputs) != self.num_inputs:
            raise TypeError(f"tc_autograd: graph {self.graph.name} takes {self.num_inputs} inputs, got {len(inputs)}")
        last = self.last
        if last is not None:
            if last.key is not INFERENCE:
                if torch.is_grad_enabled():
                    try:
                        return last.runner(inputs)
                    except WrongVariant:
                        pass
            elif not torch.is_grad_enabled() or not any_requires_grad(inputs):
                return last.runner(inputs)
        return self.variant(inputs).runner(inputs)

    # ---- reading --------------------------------------------------------------------------
    @property
    def joint_graph(self) -> tc_ir.Graph | None:
        return self.last.traced.graph if self.last and self.last.partition else None

    @property
    def forward_graph(self) -> tc_ir.Graph | None:
        return self.last.partition.forward if self.last and self.last.partition else None

    @property
    def backward_graph(self) -> tc_ir.Graph | None:
        return self.last.partition.backward if self.last and self.last.partition else None

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


def aot(graph: tc_ir.Graph, example_inputs: Sequence[Any], *, fw_compiler: Compiler | None = None,
        bw_compiler: Compiler | None = None, decompositions: dict | None = None,
        partition: str = "min_cut") -> AOTFunction:
    """Trace ``graph`` (torch level) to functional ATen graphs and compile them.

    >>> f = aot(graph, [x, w])                   # doctest: +SKIP
    >>> out = f(x, w); out.sum().backward()      # grads reach x and w as in eager

    ``fw_compiler``/``bw_compiler`` take ``(tc_ir.Graph, example_inputs)`` and return a callable
    (default: the tc_ir interpreter). ``decompositions`` maps ATen overloads to Python functions.
    ``partition`` is ``"min_cut"`` (recompute cheap ops) or ``"save_all"``. The graphs for the
    example inputs' grad pattern are made now; other patterns are traced on first use.
    """
    if partition not in ("min_cut", "save_all"):
        raise ValueError(f"tc_autograd: partition must be 'min_cut' or 'save_all', got {partition!r}")
    options = {"fw_compiler": fw_compiler or interpret_compiler, "bw_compiler": bw_compiler or interpret_compiler,
               "decompositions": decompositions, "partition": partition}
    fn = AOTFunction(graph, options)
    fn.variant(list(example_inputs))
    return fn
