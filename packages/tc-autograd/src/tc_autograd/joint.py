"""Tracing a torch-level graph to ATen: the forward alone (inference) or forward+backward (joint).

The joint trace runs the torch-level graph on fake tensors under the :class:`Recorder`, then
calls ``torch.autograd.grad`` on the outputs that need a gradient, with fresh *tangent* inputs as
their cotangents; the backward ops the autograd engine dispatches are recorded into the same
graph. The joint graph returns ``(forward_values, grads)``: forward values are the user's tensor
outputs followed by the new values of mutated inputs; grads line up with the inputs that require
grad (``None`` where an input gets no gradient).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import attrs
import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensorMode

import tc_ir

from .attention import bind_attention
from .checkpoint import bind_recompute
from .cond import bind_higher_order
from .functionalize import storage_groups
from .rnn import bind_rnn
from .symbolic import Symbols, graph_symbols
from .trace import Recorder, clean_spec, has_tensor, interpret_unwrapped, refusing_data_dependence


@attrs.frozen
class OutputLeaf:
    """How the runtime produces one output: ``graph`` (k-th graph value), ``input`` (the input
    itself), ``input_view`` (a view of an input: the trace's view ops replayed on the real input,
    as ``(index, steps, requires_grad)``), ``output_view`` (a view of the k-th graph value, its
    view ops replayed likewise, as ``(k, steps, requires_grad)``), ``output_strided`` (the same
    where the ops cannot be replayed, as size/stride/offset, for outputs aliasing each other) or
    ``value`` (a constant)."""

    kind: str
    args: tuple


@attrs.define
class Traced:
    """An ATen graph plus what the runtime needs to rebuild eager's results from its outputs."""

    graph: tc_ir.Graph
    plan: Any                      # output structure with OutputLeaf leaves
    num_user_outputs: int          # forward values before the mutated inputs' new values
    mutated_inputs: list[int]      # input positions copied back, in this order
    differentiable: list[bool]     # per forward value: does it carry a gradient
    grad_inputs: list[int]         # input positions that receive gradients (joint only)
    is_joint: bool
    guards: list = attrs.field(factory=list)   # size relations the trace relied on (symbolic traces)


def _fake_inputs(mode: FakeTensorMode, graph: tc_ir.Graph, rec: Recorder, inputs: Sequence[Any],
                 training: bool, symbols: Symbols | None = None) -> tuple[list[Any], list[Any]]:
    """Fake twins of the inputs, each bound to a new graph input; also the autograd leaves.

    With ``symbols``, an input whose spec holds size symbols gets a fake with SymInt sizes (an
    int input binding a symbol, that symbol's SymInt); the others are fakes of the real input."""
    fakes, leaves = [], []
    for i, (node, value) in enumerate(zip(graph.inputs, inputs)):
        if not isinstance(value, torch.Tensor):
            fake_value = symbols.fake_value(node.spec, value) if symbols else value
            spec = tc_ir.ScalarSpec(int, fake_value) if fake_value is not value else tc_ir.spec_of(value)
            placeholder = rec.graph.input(node.name, spec)
            placeholder.meta["role"] = "primal"
            fakes.append(fake_value)
            leaves.append(None)
            continue
        symbolic = symbols is not None and isinstance(node.spec, tc_ir.TensorSpec) and not node.spec.is_static
        leaf = symbols.fake_input(mode, node.spec) if symbolic else mode.from_tensor(value.detach(), static_shapes=True)
        placeholder = rec.graph.input(node.name, clean_spec(leaf if symbolic else value))
        placeholder.meta["role"] = "primal"
        if training and value.requires_grad:
            leaf.requires_grad_(True)
        with mode:
            fake = _writable_twin(leaf) if leaf.requires_grad else leaf
        rec.table.fresh(fake, placeholder, input_index=i, leaf=value.is_leaf and value.requires_grad)
        fakes.append(fake)
        leaves.append(leaf)
    return fakes, leaves


def _writable_twin(leaf: torch.Tensor) -> torch.Tensor:
    """A non-leaf copy of ``leaf`` with its strides, standing for an input that requires grad.

    Being a non-leaf lets the graph write to it, as eager allows for non-leaf inputs; gradients
    are taken with respect to ``leaf`` (the input's old value). The strides are the input's (a
    step slice keeps its gaps), so ops whose results depend on the layout (``view``, ``contiguous``,
    strides of ``empty_like``) trace as they run in eager. Memory that overlaps itself (an expanded
    input with elements; an empty one has nothing to overlap) cannot be copied into: the leaf
    itself stands for it, and a write to it fails the trace (the umbrella then runs the graph
    eagerly, where such writes mostly fail too).
    """
    shape, stride = tuple(leaf.shape), leaf.stride()
    broadcast = any(s == 0 and n > 1 for n, s in zip(shape, stride))
    if 0 not in shape and (broadcast or overlaps_beyond_broadcast(shape, stride)):  # empty: nothing shared
        return leaf
    twin = torch.empty_strided(leaf.shape, leaf.stride(), dtype=leaf.dtype, device=leaf.device)
    return twin.copy_(leaf)


def _view_steps(alias: Any) -> tuple:
    """The view ops carving an output out of an input, to replay on the real input at run time.

    Replaying them (rather than ``as_strided`` with the fake's strides) gives the real input's
    layout, storage offset and autograd view history, whatever the input's strides.
    """
    steps = []
    for step in alias.chain:
        if has_tensor((step.args[1:], step.kwargs)):
            raise NotImplementedError(f"tc_autograd: an output is a view of an input made by {step.op}, "
                                      "which takes a tensor argument")
        steps.append((step.op, tuple(step.args[1:]), dict(step.kwargs), step.index))
    return tuple(steps)


def _plan_leaf(value: Any, rec: Recorder, fakes: list[Any], nodes: list[tc_ir.Node],
               tensors: list[torch.Tensor], shared: dict[int, bool]) -> OutputLeaf:
    """How the runtime produces one output: from the graph, as a view of an input or of another
    output, or a constant."""
    if not isinstance(value, torch.Tensor):
        return OutputLeaf("value", (value,))
    alias = rec.table.alias(value) if value in rec.table else None
    if alias is not None and alias.storage.input_index is not None:
        i = alias.storage.input_index
        if value is fakes[i]:
            return OutputLeaf("input", (i,))
        return OutputLeaf("input_view", (i, _view_steps(alias), value.requires_grad))
    root = alias.storage.root if alias is not None else None
    if alias is not None and id(alias.storage) in shared and value is not root \
            and (root.requires_grad or not value.requires_grad):
        # A view of a value the graph makes: made outside the autograd Function, from the whole
        # value, as eager's view of it is (in-place writes to it are then allowed, as in eager).
        # Not where the value has no gradient but the view has: its gradient comes from an op's
        # own formula (``var_mean`` decomposed below autograd), not through the view.
        steps = _replayable_steps(alias)
        if steps is not None:
            return OutputLeaf("output_view", (_graph_value(root, rec, nodes, tensors), steps, value.requires_grad))
        if shared[id(alias.storage)] and value.dtype == root.dtype:  # outputs viewing each other
            offset = value.storage_offset() - root.storage_offset()
            k = _graph_value(root, rec, nodes, tensors)
            return OutputLeaf("output_strided", (k, tuple(value.shape), tuple(value.stride()), offset,
                                                 value.requires_grad))
    return OutputLeaf("graph", (_graph_value(value, rec, nodes, tensors),))


def _replayable_steps(alias: Any) -> tuple | None:
    """The view ops from the storage's root to the output (:func:`_view_steps`), or None where
    they cannot be replayed at run time: a tensor argument, or a symbolic size (stale next call)."""
    try:
        steps = _view_steps(alias)
    except NotImplementedError:
        return None
    sym = (torch.SymInt, torch.SymFloat, torch.SymBool)
    return None if any(isinstance(v, sym) for v in tc_ir.leaves(steps)) else steps


def _graph_value(value: torch.Tensor, rec: Recorder, nodes: list[tc_ir.Node], tensors: list[torch.Tensor]) -> int:
    for k, seen in enumerate(tensors):
        if seen is value:
            return k
    tensors.append(value)
    nodes.append(rec.node_of(value))
    return len(nodes) - 1


def _shared_storages(outs: Any, rec: Recorder) -> dict[int, bool]:
    """Storages (by id) that an output views without being the storage's root, or that two or
    more distinct outputs view, each with whether several outputs view it. Those outputs come
    back as views of one graph output, the storage's whole value: they alias each other as in
    eager, and a view made outside the autograd Function may be written in place (one made
    inside may not: autograd forbids it). A block whose current value is laid out differently
    from its owner is left alone (it cannot be)."""
    seen: dict[int, set[int]] = {}
    viewed: set[int] = set()
    for value in tc_ir.leaves(outs):
        if isinstance(value, torch.Tensor) and value in rec.table:
            storage = rec.table.alias(value).storage
            if storage.input_index is None and storage.root is not None:
                seen.setdefault(id(storage), set()).add(id(value))
                if value is not storage.root:
                    viewed.add(id(storage))
    storages = {id(a.storage): a.storage for a in rec.table.aliases.values()}
    return {sid: len(members) > 1 for sid, members in seen.items()
            if (len(members) > 1 or sid in viewed) and _same_layout(storages[sid])}


def _same_layout(storage: Any) -> bool:
    spec = storage.value.spec
    root = storage.root
    return (isinstance(spec, tc_ir.TensorSpec) and storage.root_unchanged()
            and spec.stride == tuple(root.stride()) and spec.shape == tuple(root.shape))


def trace(graph: tc_ir.Graph, inputs: Sequence[Any], decompositions: dict | None, training: bool) -> Traced:
    """Trace ``graph`` on fake twins of ``inputs``; ``training`` adds the backward (joint graph)."""
    symbols = Symbols(graph, inputs) if graph_symbols(graph) else None
    mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=symbols.env if symbols else None)
    # A function that reads a tensor's memory without dispatching (a kernel launcher such as
    # torch.cuda.jiterator's, dlpack) gets an error from a fake, not its null pointer: launched
    # on it, a CUDA kernel faults and poisons the process (interpret_unwrapped: a refusal)
    mode._allow_unsafe_data_ptr_access = False
    rec = Recorder(tc_ir.Graph(f"{graph.name}_{'joint' if training else 'forward'}"), decompositions)
    fakes, leaves = _fake_inputs(mode, graph, rec, inputs, training, symbols)
    # cuDNN batch norm writes running stats behind its schema's back and needs its reserve
    # buffer in the backward; with cuDNN off, CUDA batch norm traces as native_batch_norm.
    with mode, rec, torch.set_grad_enabled(training), _no_autocast_leak(), torch.backends.cudnn.flags(enabled=False), \
            symbolic_dispatch(symbols):
        runnable = symbols.runnable(graph) if symbols else graph
        outs = interpret_unwrapped(bind_recompute(bind_rnn(bind_attention(bind_higher_order(runnable, rec))), rec), fakes)
    nodes: list[tc_ir.Node] = []
    tensors: list[torch.Tensor] = []
    shared = _shared_storages(outs, rec)
    plan = tc_ir.map_structure(outs, lambda v: _plan_leaf(v, rec, fakes, nodes, tensors, shared))
    mutated = [s.input_index for s in rec.table.mutated_inputs()]
    _check_writable(inputs, mutated)
    values = nodes + [rec.table.read(fakes[i]) for i in mutated]
    fw_fakes = tensors + [fakes[i] for i in mutated]
    differentiable = [training and f.requires_grad for f in fw_fakes]
    grad_inputs = [i for i, leaf in enumerate(leaves) if leaf is not None and leaf.requires_grad]
    is_joint = any(differentiable) and bool(grad_inputs)
    grads: list[Any] = []
    if is_joint:
        with symbolic_dispatch(symbols):
            grads = _trace_backward(mode, rec, fw_fakes, differentiable, [leaves[i] for i in grad_inputs])
    rec.graph.output((tuple(values), tuple(grads)) if is_joint else tuple(values))
    guards = []
    if symbols is not None:
        _check_static_plan(plan)
        symbols.finish(rec.graph)
        guards = symbols.guards()
    return Traced(rec.graph, plan, len(nodes), mutated, differentiable, grad_inputs if is_joint else [], is_joint,
                  guards)


def symbolic_dispatch(symbols: Symbols | None) -> Any:
    """Torch's Python dispatcher over size symbols, as Dynamo traces. Some C++ composite kernels
    read a concrete size (torch 2.11's ``matmul`` behind ``linear`` calls ``numel()``) and fail
    on SymInt sizes; the Python dispatcher runs torch's symbolic-aware Python versions of them."""
    return enable_python_dispatcher() if symbols is not None else contextlib.nullcontext()


def _check_static_plan(plan: Any) -> None:
    """The runtime rebuilds outputs from the plan with the values it holds: a symbolic size in it
    (an output that is a size, a view of an input sliced at a symbolic bound) would be stale."""
    for leaf in tc_ir.leaves(plan):
        if any(isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) for v in tc_ir.leaves(leaf.args)):
            raise NotImplementedError(f"tc_autograd: an output rebuilt from a symbolic size ({leaf.kind} {leaf.args})")


def _check_writable(inputs: Sequence[Any], mutated: list[int]) -> None:
    """Inputs written by the graph must take a copy-back: memory overlapping itself only along
    broadcast (stride-0) dims (see ``runtime.distinct_memory``); other overlaps are refused here,
    before anything runs, so the caller can run the graph eagerly instead."""
    shared = [i for g in storage_groups(inputs) for i in g]
    for i in mutated:
        t = inputs[i]
        if i in shared:
            raise NotImplementedError(f"tc_autograd: input {i} is written in place and shares memory with "
                                      "another input (each input is traced as its own value)")
        if overlaps_beyond_broadcast(tuple(t.shape), t.stride()):
            raise NotImplementedError(f"tc_autograd: input {i} is written in place but its memory overlaps itself "
                                      f"(size {tuple(t.shape)}, stride {t.stride()})")


def overlaps_beyond_broadcast(shape: tuple, stride: tuple) -> bool:
    """Do two elements share memory other than through a stride-0 (broadcast) dim?

    Dims sorted by stride must each step past everything the smaller ones span."""
    if 0 in shape:
        return False
    dims = sorted((s, n) for n, s in zip(shape, stride) if n > 1 and s != 0)
    span = 0
    for s, n in dims:
        if s <= span:
            return True
        span += (n - 1) * s
    return False


def _trace_backward(mode: FakeTensorMode, rec: Recorder, fw_fakes: list[torch.Tensor],
                    differentiable: list[bool], wrt: list[torch.Tensor]) -> list[Any]:
    outs = [f for f, d in zip(fw_fakes, differentiable) if d]
    tangents = []
    for k, out in enumerate(outs):
        with mode:
            tangent = torch.empty(out.shape, dtype=out.dtype, device=out.device)
        node = rec.graph.input(f"tangent_{k}", clean_spec(tangent))
        node.meta["role"] = "tangent"
        rec.table.fresh(tangent, node)
        tangents.append(tangent)
    with mode, rec, torch.enable_grad(), refusing_data_dependence("the backward"):
        grads = torch.autograd.grad(outs, wrt, tangents, allow_unused=True)
    return [None if g is None else rec.node_of(g) for g in grads]


class _no_autocast_leak:
    """Restore grad mode and autocast state after a graph that toggles them without restoring."""

    def __enter__(self) -> None:
        self.grad = torch.is_grad_enabled()
        self.autocast = {d: (torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")}

    def __exit__(self, *exc: Any) -> None:
        torch._C._set_grad_enabled(self.grad)
        for device, (enabled, dtype) in self.autocast.items():
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, dtype)
