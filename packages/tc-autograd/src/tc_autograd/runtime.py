"""Runtime glue: run compiled graphs so the results behave like eager under autograd.

The wrapper (1) calls the compiled forward (inside a ``torch.autograd.Function`` when training),
(2) copies the new values of mutated inputs back into them, in input order, and (3) rebuilds the
user's output structure, regenerating outputs that alias an input as views of that input.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.autograd.graph import increment_version

import tc_ir

from .functionalize import storage_groups, storage_pointers
from .joint import OutputLeaf, Traced

DOUBLE_BACKWARD = ("tc_autograd: double backward (or create_graph=True) through a compiled region "
                   "is not supported; run this region eagerly to differentiate twice")


def no_ambient_autocast() -> contextlib.AbstractContextManager:
    """Compiled graphs already hold their casts; an autocast around the call must not add more."""
    on = [d for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)]
    if not on:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    for device in on:
        stack.enter_context(torch.autocast(device, enabled=False))
    return stack


def copy_back(inputs: Sequence[Any], positions: list[int], values: Sequence[torch.Tensor]) -> None:
    """Copy each new value into its mutated input; a value the compiled graph already wrote into
    the input's memory (same storage and layout) is not copied, only the input's version counter
    is bumped, as ``copy_`` would have (autograd then refuses a stale saved tensor as in eager)."""
    written = []
    enabled = torch.is_grad_enabled()  # read once: the loop restores it after each copy
    for i, value in zip(positions, values):
        target = inputs[i]
        # A leaf that requires grad was written under no_grad (eager refuses an in-place write to
        # it otherwise, and so does the trace: ``Storage.leaf``): its new value is copied in
        # without recording history (a parameter clamped or averaged under no_grad in forward)
        grad = enabled and (value.requires_grad or target.requires_grad) and not (target.is_leaf and target.requires_grad)
        if not grad and (value is target or same_memory(value, target)):
            written.append(target)
            continue
        if 0 in target.stride():
            target, value = distinct_memory(target, value)
        elif grad and same_memory(value, target):
            value = value.clone()  # the history must come from the value, not from the target itself
        with torch.set_grad_enabled(grad):
            target.copy_(value)
    if written:
        increment_version(written)
    COUNTERS["skipped_copies"] += len(written)


COUNTERS = {"skipped_copies": 0}  # copy-backs skipped because the graph wrote in place (tests read it)


def same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` are the same elements of the same memory (a zero-size tensor never is)."""
    try:
        # One C++ call for the usual case, a graph value written into its input (the same
        # storage, offset, sizes and strides): copy-back asks this for every mutated input.
        if a.is_set_to(b):
            return a.dtype is b.dtype and a.numel() > 0
    except NotImplementedError:  # a backend without is_set_to
        pass
    # Also two storages over one memory (``from_numpy`` twice, DLPack): compare addresses. The
    # stride of a size-1 dim moves to no other element: a graph that wrote in place into a
    # [1, 4, 4] input of strides (16, 1, 4) returns it as (4, 1, 4), the layout it compiled for
    # (its layout checks skip such strides), and ``copy_`` between the two raised
    # "some elements ... refer to a single memory location" where eager ran.
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.dtype == b.dtype
            and a.device == b.device and a.numel() > 0
            and all(n == 1 or x == y for n, x, y in zip(a.shape, a.stride(), b.stride())))


def distinct_memory(target: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``target`` narrowed so each memory location appears once (``value`` alike).

    Eager lets some ops write to memory that overlaps itself (``fill_``/``zero_`` on an expanded
    tensor); every element sharing a location then holds the same value, which the first element
    along each broadcast (stride-0) dim carries. ``copy_`` refuses such a destination.
    """
    for dim, (size, stride) in enumerate(zip(target.shape, target.stride())):
        if stride == 0 and size > 1:
            target, value = target.narrow(dim, 0, 1), value.narrow(dim, 0, 1)
    return target, value


def output_strided(base: torch.Tensor, size: tuple, stride: tuple, offset: int, requires_grad: bool) -> torch.Tensor:
    """An output that aliases another output, rebuilt as a strided view of the graph value they share."""
    view = base.as_strided(size, stride, base.storage_offset() + offset)
    return keep_grad(view, requires_grad)


def keep_grad(view: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    """``view``, detached when eager's result did not require grad (a view made under ``no_grad``)."""
    return view if requires_grad or not view.requires_grad else view.detach()


def make_rebuild(plan: Any) -> tuple[Callable[[Sequence[Any], Sequence[Any]], Any], str]:
    """A generated function ``rebuild(inputs, values)`` giving the user's output structure.

    The plan is fixed per variant, so walking it on every call (closures, isinstance checks)
    is replaced by one straight-line expression; returns the function and its source.
    """
    names: dict[str, Any] = {"output_strided": output_strided, "keep_grad": keep_grad}

    def constant(value: Any) -> str:
        if isinstance(value, (int, bool)) or value is None:
            return repr(value)
        name = f"c{len(names)}"
        names[name] = value
        return name

    def replay(base: str, steps: tuple) -> str:
        # The trace's view ops, called on the real input: eager makes the view (layout, offset,
        # autograd history) exactly as the user's code would have.
        for op, args, kwargs, index in steps:
            items = [base, *map(constant, args), *(f"{k}={constant(x)}" for k, x in kwargs.items())]
            name = f"aten_{op.overloadpacket.__name__}_{op._overloadname}"  # readable source
            names[name] = op
            base = f"{name}({', '.join(items)})" + ("" if index is None else f"[{index}]")
        return base

    def expr(v: Any) -> str:
        if isinstance(v, OutputLeaf):
            if v.kind == "graph":
                return f"values[{v.args[0]}]"
            if v.kind == "input":
                return f"inputs[{v.args[0]}]"
            if v.kind == "input_view":
                i, steps, requires_grad = v.args
                return f"keep_grad({replay(f'inputs[{i}]', steps)}, {requires_grad!r})"
            if v.kind == "output_view":
                k, steps, requires_grad = v.args
                return f"keep_grad({replay(f'values[{k}]', steps)}, {requires_grad!r})"
            if v.kind == "output_strided":
                k, *rest = v.args
                return f"output_strided(values[{k}], {', '.join(map(repr, rest))})"
            return constant(v.args[0])
        if isinstance(v, tuple) and hasattr(v, "_fields"):
            return f"{constant(type(v))}({', '.join(map(expr, v))})"
        if isinstance(v, tuple):
            return f"({''.join(expr(x) + ', ' for x in v)})"
        if isinstance(v, list):
            return f"[{', '.join(map(expr, v))}]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{constant(k)}: {expr(x)}" for k, x in v.items()) + "}"
        return constant(v)

    source = f"def rebuild(inputs, values):\n    return {expr(plan)}\n"
    exec(compile(source, "<tc_autograd rebuild>", "exec"), names)
    return names["rebuild"], source


class WrongVariant(Exception):
    """A variant was called with inputs it was not made for: another requires-grad pattern, or
    inputs sharing memory with an input the graph writes."""


def check_unshared(inputs: Sequence[Any], mutated: list[int], pointers: list[int] | None = None) -> None:
    """Written inputs must not share memory with other inputs (the graph treats each input as
    its own value, so a write to one would not show in the other): such a call needs another
    variant (which refuses to trace, so the caller runs the graph eagerly). ``pointers``: the
    inputs' ``storage_pointers``, when the caller has them."""
    groups = storage_groups(inputs, pointers)
    if groups and any(i in g for g in groups for i in mutated):
        raise WrongVariant


class InferenceRunner:
    """One forward graph; nothing is differentiated."""

    def __init__(self, traced: Traced, forward: Callable):
        self.traced, self.forward = traced, forward
        self.rebuild, self.rebuild_source = make_rebuild(traced.plan)
        self.mutated, self.num_user = traced.mutated_inputs, traced.num_user_outputs

    def __call__(self, inputs: Sequence[Any]) -> Any:
        if self.mutated:
            check_unshared(inputs, self.mutated)
        grad = torch.is_grad_enabled()
        if grad:
            torch._C._set_grad_enabled(False)
        try:
            with no_ambient_autocast():
                values = self.forward(*inputs)
        finally:
            if grad:
                torch._C._set_grad_enabled(True)
        if self.mutated:
            copy_back(inputs, self.mutated, values[self.num_user:])
        return self.rebuild(inputs, values)


class TrainingRunner:
    """Forward and backward graphs joined by a ``torch.autograd.Function``."""

    def __init__(self, traced: Traced, forward: Callable, backward: Callable, num_saved: int, pattern: tuple,
                 sizes: Callable | None = None, repeats: dict[int, int] | None = None):
        self.traced, self.num_saved = traced, num_saved
        self.function = _make_function(traced, forward, backward, pattern, sizes, repeats or {})
        self.apply = _direct_apply(self.function)
        self.rebuild, self.rebuild_source = make_rebuild(traced.plan)
        self.mutated, self.num_user = traced.mutated_inputs, traced.num_user_outputs

    def __call__(self, inputs: Sequence[Any]) -> Any:
        # check_unshared runs inside the function's forward, sharing its storage addresses with
        # _protect_from_copy_back
        if torch._C._are_functorch_transforms_active():
            values = self.function.apply(*inputs)
        else:
            values = self.apply(*inputs)
        if self.mutated:
            copy_back(inputs, self.mutated, values[self.num_user:])
        return self.rebuild(inputs, values)


def _direct_apply(function: type) -> Callable:
    """``function.apply`` without the Python wrapper's per-call work (``inspect`` checks and a
    walk over every argument for dead functorch wrappers, which costs ~0.2 µs per input); used
    only while no functorch transform is active, as that wrapper itself does."""
    base = getattr(torch._C._FunctionBase, "__dict__", {}).get("apply")
    return base.__get__(None, function) if base is not None else function.apply


def repeated_outputs(graph: tc_ir.Graph) -> dict[int, int]:
    """{position: first position} of ``graph``'s outputs that repeat an earlier output's node."""
    first: dict[tc_ir.Node, int] = {}
    repeats = {}
    for k, value in enumerate(tc_ir.leaves(graph.outputs)):
        if isinstance(value, tc_ir.Node) and first.setdefault(value, k) != k:
            repeats[k] = first[value]
    return repeats


def _grad_scatter(grad_inputs: list[int], num_inputs: int, repeats: dict[int, int]) -> Callable[[Sequence[Any]], tuple]:
    """A generated ``scatter(grads)``: the backward's grads placed at their inputs' positions.

    A gradient the backward returns for two inputs (``a + b``: one node) is handed to autograd as
    one tensor at both (``repeats``, from :func:`repeated_outputs`), as eager's ``AddBackward``
    does: autograd then copies it rather than let two ``.grad`` share memory. A compiled graph
    may return a repeated output as two views of one buffer (and a CUDA graph's replay as two
    detached aliases), which autograd would keep as two grads over one memory."""
    where = {i: repeats.get(k, k) for k, i in enumerate(grad_inputs)}
    items = "".join((f"grads[{where[i]}], " if i in where else "None, ") for i in range(num_inputs))
    names: dict[str, Any] = {}
    exec(compile(f"def scatter(grads):\n    return ({items})\n", "<tc_autograd scatter>", "exec"), names)
    return names["scatter"]


def _make_function(traced: Traced, forward: Callable, backward: Callable, pattern: tuple,
                   sizes: Callable | None, repeats: dict[int, int]) -> type:
    """``sizes(inputs)``: ints the backward takes last (symbolic sizes no saved tensor carries)."""
    num_values = len(traced.differentiable)
    non_differentiable = [k for k, d in enumerate(traced.differentiable) if not d]
    differentiable = [k for k, d in enumerate(traced.differentiable) if d]
    all_differentiable = not non_differentiable
    mutated = traced.mutated_inputs
    scatter = _grad_scatter(traced.grad_inputs, len(pattern), repeats)
    boxed = getattr(backward, "call_boxed", None)  # takes a list it may empty (tc_inductor's compiled graphs)

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            if ctx.needs_input_grad != pattern:  # which inputs need grad decides the graphs
                raise WrongVariant
            if mutated:  # one pass over the storages serves both checks
                pointers = storage_pointers(inputs)
                check_unshared(inputs, mutated, pointers)
            with no_ambient_autocast():
                results = forward(*inputs)
            values, saved = tuple(results[:num_values]), results[num_values:]
            if mutated:
                saved = _protect_from_copy_back(saved, {pointers[i] for i in mutated})
            ctx.save_for_backward(*saved)
            ctx.sizes = sizes(inputs) if sizes is not None else ()
            if non_differentiable:
                ctx.mark_non_differentiable(*[values[k] for k in non_differentiable])
                # Their cotangents are never read (``tangents`` takes the differentiable ones):
                # autograd passes None instead of allocating and filling zeros for each one
                # (batch norm's running stats: three per layer, every step). A differentiable
                # output without a gradient still gets zeros, as the backward graph needs them.
                ctx._materialize_non_diff_grads = False
            return values

        @staticmethod
        def backward(ctx, *cotangents):
            if torch.is_grad_enabled():
                raise RuntimeError(DOUBLE_BACKWARD)
            if all_differentiable:
                tangents = [c.contiguous() for c in cotangents]
            else:
                tangents = [cotangents[k].contiguous() for k in differentiable]
            if boxed is None:
                with no_ambient_autocast():
                    grads = backward(*ctx.saved_tensors, *tangents, *ctx.sizes)
                return scatter(grads)
            # Hand the saved tensors over (unless retain_graph keeps them): the compiled backward
            # frees each after its last use, as eager's autograd frees them node by node.
            args = [*ctx.saved_tensors, *tangents, *ctx.sizes]
            del tangents
            ctx.maybe_clear_saved_tensors()
            with no_ambient_autocast():
                grads = boxed(args)
            return scatter(grads)

    return CompiledFunction


def _protect_from_copy_back(saved: Sequence[Any], written: set[int]) -> Sequence[Any]:
    """Clone saved tensors sharing memory with inputs the wrapper is about to overwrite
    (``written``: their storage addresses).

    The backward needs their old values, and autograd's version counter would reject them.
    A zero-size written input (address 0) has every memoryless saved tensor cloned: cheap, and
    a saved view of that input would otherwise see its version counter bumped.
    """
    pointers = storage_pointers(saved)
    if written.isdisjoint(pointers):  # the common case, without a Python loop
        return saved
    return [s.clone() if p in written and isinstance(s, torch.Tensor) else s for s, p in zip(saved, pointers)]
