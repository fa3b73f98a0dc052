"""Our ATen tracer: run a torch-level graph on fake tensors and record every ATen op it dispatches.

:class:`Recorder` is a ``TorchDispatchMode`` sitting above ``FakeTensorMode``. Each op first runs
for real on fake tensors (so autograd, autocast and grad mode behave as in eager); the recorder
then writes a functional node for it (see :mod:`tc_autograd.functionalize`). The caller's
decomposition table is applied here: a decomposed op is not recorded, the ops its decomposition
dispatches are.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

import tc_ir

from .functionalize import AliasTable, View, functional_variant, functional_with_writes, is_view_op, metadata_view, mutated_args

aten = torch.ops.aten


def clean_spec(value: Any) -> Any:
    """The spec of a traced value; ``requires_grad`` means nothing in a functional ATen graph."""
    if isinstance(value, torch.Tensor):
        return tc_ir.TensorSpec.from_tensor(value).with_(requires_grad=False)
    if isinstance(value, (tuple, list)):
        return tuple(clean_spec(v) for v in value)
    return tc_ir.spec_of(value)


class DataDependentError(NotImplementedError):
    """An op's result (or output shape) depends on tensor values, which fake tensors do not
    have: ``nonzero``, ``.item()``, ``tensor_split(x, tensor_of_indices)``. A clean refusal
    (a ``NotImplementedError``, so callers fall back to eager), the fake-tensor error its cause."""


# Fake-tensor errors meaning "this needs the tensor's values"; the last is what a C++ kernel
# (a CompositeImplicit op like ``tensor_split.tensor_indices_or_sections``) raises reading them.
_DATA_DEPENDENT = ("DynamicOutputShapeException", "DataDependentOutputException")
_DATA_READ = "data is not allocated yet"


def data_dependent(e: BaseException) -> BaseException | None:
    """The fake-tensor error in ``e``'s cause chain saying an op needed tensor values, if any."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if type(e).__name__ in _DATA_DEPENDENT or (isinstance(e, RuntimeError) and _DATA_READ in str(e)):
            return e
        e = e.__cause__ or e.__context__
    return None


@contextlib.contextmanager
def refusing_data_dependence(where: str) -> Iterator[None]:
    """Turn a data-dependent failure while tracing into :class:`DataDependentError`."""
    try:
        yield
    except NotImplementedError:
        raise
    except Exception as e:
        found = data_dependent(e)
        if found is None:
            raise
        raise _refusal(found, where) from e


def _refusal(found: BaseException, where: str) -> DataDependentError:
    what = getattr(found, "func", None) or "an op read a tensor's values"
    return DataDependentError(f"tc_autograd: data-dependent operation in {where}: {what} "
                              "(its result depends on tensor values)")


def retarget_calls(graph: tc_ir.Graph, targets: Any, make: Callable[[Any], Any]) -> tc_ir.Graph:
    """``graph``, or a copy whose calls of any of ``targets`` call ``make(target)`` instead."""
    if not any(n.target in targets for n in graph.calls):
        return graph
    graph = graph.copy()
    for node in graph.calls:
        if node.target in targets:
            node.target = make(node.target)
    return graph


def interpret_unwrapped(graph: tc_ir.Graph, inputs: Sequence[Any]) -> Any:
    """``tc_ir.interpret``, but a ``NotImplementedError`` (something tc_autograd cannot do yet)
    surfaces as itself, with the failing node in a note, so callers can fall back to eager; a
    data-dependent op surfaces as :class:`DataDependentError` naming the node."""
    try:
        return tc_ir.interpret(graph, inputs)
    except tc_ir.InterpretError as e:
        cause = e
        while isinstance(cause, tc_ir.InterpretError) and cause.__cause__ is not None:
            cause = cause.__cause__
        found = data_dependent(cause)
        if found is not None and not isinstance(cause, NotImplementedError):
            raise _refusal(found, str(e).split(" failed: ")[0]) from e
        if _reads_memory(cause):
            raise NotImplementedError(
                f"tc_autograd: {str(e).split(' failed: ')[0]} reads tensor memory without dispatching (a kernel "
                "launcher such as torch.cuda.jiterator's): it cannot run on fake tensors") from e
        if not isinstance(cause, NotImplementedError):
            raise
        cause.add_note(str(e).split(" failed: ")[0])
        raise cause from e


def _reads_memory(e: BaseException) -> bool:
    """A fake tensor's data pointer was asked for (FakeTensorMode with unsafe access off)."""
    return isinstance(e, RuntimeError) and str(e).startswith("Cannot access data pointer of Tensor")


def has_tensor(value: Any) -> bool:
    return any(isinstance(v, torch.Tensor) for v in tc_ir.leaves(value))


class Recorder(TorchDispatchMode):
    """Records the functional form of every ATen op dispatched while it is active."""

    def __init__(self, graph: tc_ir.Graph, decompositions: dict | None = None):
        super().__init__()
        self.graph = graph
        self.decompositions = decompositions or {}
        self.table = AliasTable(self.emit)
        self.constants = 0
        self.subgraphs = 0      # sub-graphs made so far (their names must be unique)
        self.paused = False

    @contextlib.contextmanager
    def pausing(self) -> Iterator[None]:
        """Ops run (on fakes) without being recorded: making the fake results of a recorded node."""
        saved, self.paused = self.paused, True
        try:
            yield
        finally:
            self.paused = saved

    @contextlib.contextmanager
    def tracing_into(self, graph: tc_ir.Graph) -> Iterator[None]:
        """Record into ``graph`` (a sub-graph) with its own alias table, then go back."""
        saved = self.graph, self.table
        self.graph, self.table = graph, AliasTable(self.emit)
        try:
            yield
        finally:
            self.graph, self.table = saved

    def subgraph_name(self, stem: str) -> str:
        self.subgraphs += 1
        return f"{stem}{self.subgraphs}"

    # ---- writing nodes ------------------------------------------------------------------
    def emit(self, target: Any, *args: Any, spec: Any = None, **kwargs: Any) -> tc_ir.Node:
        """A call node over already-recorded nodes (used by functionalization's rewrites)."""
        return self.graph.call(target, *args, kwargs=kwargs, spec=spec)

    def node_of(self, value: Any) -> Any:
        """The node standing for a tensor argument; real tensors become held constants."""
        if not isinstance(value, torch.Tensor):
            return value
        if value not in self.table:
            self._lift_constant(value)
        return self.table.read(value)

    def _lift_constant(self, t: torch.Tensor) -> None:
        if isinstance(t, FakeTensor):
            raise RuntimeError("tc_autograd: an op read a fake tensor the trace never produced")
        self.constants += 1
        with _disable_current_modes():  # under the fake mode, detach() would give a fake tensor
            value = t.detach()
        node = self.graph.constant(f"_tensor_constant{self.constants}", value)
        self.table.fresh(t, node)

    def record(self, target: Any, args: tuple, kwargs: dict, out: Any) -> tc_ir.Node:
        node_args, node_kwargs = tc_ir.map_structure((args, kwargs), self.node_of)
        return self.graph.call(target, *node_args, kwargs=node_kwargs, spec=clean_spec(out))

    def outputs_of(self, node: tc_ir.Node, out: Any) -> list[tuple[torch.Tensor, tc_ir.Node]]:
        """(tensor, node) pairs of an op's results: getitem nodes for ops with several."""
        if isinstance(out, torch.Tensor):
            return [(out, node)]
        pairs = []
        for i, value in enumerate(out):
            if isinstance(value, torch.Tensor):
                pairs.append((value, self.emit(operator.getitem, node, i, spec=clean_spec(value))))
        return pairs

    # ---- the dispatch hook --------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        if func in self.decompositions:
            with self:
                out = self.decompositions[func](*args, **kwargs)
            if out is not NotImplemented:
                return out
        written = _written_tensors(func, args, kwargs)
        versions = [t._version for t in written]
        out = func(*args, **kwargs)
        _bump_versions_eager_would(func, written, versions)
        # ``_foreach_add_`` and friends return nothing: their writes alone must be recorded.
        if has_tensor(out) or written:
            rule = MUTATION_RULES.get(func)
            (rule or record_op)(self, func, args, kwargs, out)
        return out


def _written_tensors(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors an op writes (every element of a ``_foreach_*_`` op's list)."""
    written = mutated_args(func)
    if not written:
        return []
    argv = _bound_args(func, args, kwargs)
    return [t for k in written for t in tc_ir.leaves(argv[k]) if isinstance(t, torch.Tensor)]


def _bump_versions_eager_would(func: Any, written: list[torch.Tensor], versions: list[int]) -> None:
    """Ops with no ADInplaceOrView kernel (``_foreach_mul_``, ``_fused_adam_``) bump their
    tensors' versions only inside eager's CPU kernels, which re-dispatch per tensor; on fake
    tensors nothing bumps them, and autograd then never regenerates the history of a view taken
    before the write, so the view's gradient would skip the write (it reached the base's old
    value). Bump once, where the kernel did not, on tensors that carry autograd history: stats
    such as ``_batch_norm_with_update``'s running mean are written without a bump in eager too,
    and the op's own backward saved them."""
    if not written or torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "ADInplaceOrView"):
        return
    for t, before in zip(written, versions):
        if t.requires_grad and t._version == before:
            torch.autograd.graph.increment_version(t)


def record_op(rec: Recorder, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
    written = mutated_args(func)
    if metadata_view(func) is not None:
        _record_metadata_inplace(rec, func, args, kwargs)
    elif written:
        _record_inplace(rec, func, args, kwargs, out, written)
    elif is_view_op(func) and _really_aliases(out, args[0]):
        if out is not args[0]:  # ``x.to(x.dtype)`` returns x itself: nothing new to record
            _record_view(rec, func, args, kwargs, out)
    else:
        node = rec.record(func, args, kwargs, out)
        for tensor, value in rec.outputs_of(node, out):
            rec.table.fresh(tensor, value)


def _really_aliases(out: Any, base: Any) -> bool:
    """Ops whose schema *may* return an alias (``to``, ``reshape``...) but copied this time are
    ordinary ops: ``x.to(dtype, copy=True)`` is a new tensor, not a view of ``x``."""
    if not isinstance(base, torch.Tensor):
        return False
    outs = out if isinstance(out, (tuple, list)) else [out]
    return all(isinstance(o, torch.Tensor) and torch._C._is_alias_of(o, base) for o in outs)


def _record_inplace(rec: Recorder, func: Any, args: tuple, kwargs: dict, out: Any, written: list[int]) -> None:
    if written != [0]:
        _record_writes(rec, func, args, kwargs, out)
        return
    functional = functional_variant(func)
    target = args[0]
    args, kwargs = _defaults_it_lacks(func, functional, args, kwargs)
    if isinstance(target, (list, tuple)):
        for args_k in _one_at_a_time(rec, args):
            _write_each(rec, rec.record(functional, args_k, kwargs, args_k[0]), args_k[0])
        return
    node = rec.record(functional, args, kwargs, target)
    node.spec = tc_ir.infer_spec(functional, node.args, node.kwargs) or node.spec
    if node.spec.dtype != target.dtype:  # in-place ops keep self's dtype; out-of-place ones promote
        node = rec.emit(aten._to_copy.default, node, dtype=target.dtype, spec=clean_spec(target))
    rec.table.write(target, node)
    if out is not target and isinstance(out, torch.Tensor) and out not in rec.table:
        rec.table.fresh(out, node)


def _record_writes(rec: Recorder, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
    """An op writing several arguments (``_batch_norm_with_update``'s running stats,
    ``rrelu_with_noise``'s noise): record its ``_functional`` twin, give the op's own results
    their items, and write each written argument's new value back through its view chain."""
    twin, places = functional_with_writes(func)
    argv = _bound_args(func, args, kwargs)
    targets = {k: argv[k] for k, _ in places}
    if not all(isinstance(t, torch.Tensor) for t in targets.values()):
        raise NotImplementedError(f"tc_autograd: {func} writes to an optional argument that is None")
    node = rec.record(twin, args, kwargs, out)
    node.spec = tc_ir.infer_spec(twin, node.args, node.kwargs) or _twin_spec(out, targets, places)
    results = list(out) if isinstance(out, (tuple, list)) else [out]
    written_ids = {id(t) for t in targets.values()}
    for i, t in enumerate(results):
        if isinstance(t, torch.Tensor) and id(t) not in written_ids:
            rec.table.fresh(t, rec.emit(operator.getitem, node, i, spec=node.spec[i]))
    for k, i in places:
        value = rec.emit(operator.getitem, node, i, spec=node.spec[i])
        if node.spec[i].dtype != targets[k].dtype:
            value = rec.emit(aten._to_copy.default, value, dtype=targets[k].dtype, spec=clean_spec(targets[k]))
        rec.table.write(targets[k], value)


def _bound_args(func: Any, args: tuple, kwargs: dict) -> list:
    """Every schema argument's value, by position."""
    schema = func._schema.arguments
    return [args[i] if i < len(args) else kwargs.get(a.name, a.default_value if a.has_default_value() else None)
            for i, a in enumerate(schema)]


def _twin_spec(out: Any, targets: dict, places: list) -> tuple:
    """The twin's result specs when no meta function gives them: the fake results, then the
    written arguments' (their new values have their specs)."""
    results = list(out) if isinstance(out, (tuple, list)) else [out]
    specs = [clean_spec(t) for t in results]
    for k, i in places:
        if i >= len(specs):
            specs.append(clean_spec(targets[k]))
    return tuple(specs)


def _record_metadata_inplace(rec: Recorder, func: Any, args: tuple, kwargs: dict) -> None:
    """``t.t_()``, ``t.squeeze_(0)``, ``t.as_strided_(...)`` change what ``t`` looks at, not any
    value: ``t`` is rebound to the view op applied to its old self (the op already ran on the
    fake, whose metadata is now eager's). An input's own metadata is the caller's tensor's, which
    a compiled graph does not change: refused."""
    t = args[0]
    if t not in rec.table:
        raise NotImplementedError(f"tc_autograd: {func} on a tensor held by the graph")
    alias = rec.table.alias(t)
    if alias.storage.input_index is not None and not alias.chain:
        raise NotImplementedError(f"tc_autograd: {func} changes the metadata of input {alias.storage.input_index} "
                                  "(the caller's tensor)")
    if t.requires_grad and t._is_view() and torch.is_grad_enabled():
        # Autograd regenerates a view written in place by replaying its view ops on fakes
        # (tensor subclasses cannot use as_strided), and that replay misses the metadata change:
        # a later write would give the fake a wrong backward (eager uses as_strided, and is right).
        raise NotImplementedError(f"tc_autograd: {func} on a view that requires grad")
    spec = clean_spec(t)
    if func.overloadpacket is aten.as_strided_:
        rec.table.restride(t, spec)
        return
    view = metadata_view(func)
    node = rec.emit(view, rec.table.read(t), *args[1:], spec=spec, **kwargs)
    rec.table.rebind(t, View(view, (t, *args[1:]), kwargs, None, spec), node)


def _one_at_a_time(rec: Recorder, args: tuple) -> list[tuple]:
    """A ``_foreach_*_`` call as one call, or as one call per list element when its tensors share
    memory (``[x, x]``, or an element that is another's argument): eager applies the op element
    by element, each reading what the earlier ones wrote, which one functional call cannot."""
    n = len(args[0])
    tensors = [t for t in tc_ir.leaves(args) if isinstance(t, torch.Tensor)]
    storages = [id(rec.table.alias(t).storage) if t in rec.table else id(t) for t in tensors]
    if len(set(storages)) == len(storages) or n < 2:
        return [args]
    return [tuple([a[k]] if isinstance(a, (list, tuple)) and len(a) == n else a for a in args) for k in range(n)]


def _write_each(rec: Recorder, node: tc_ir.Node, targets: Sequence[torch.Tensor]) -> None:
    """A ``_foreach_*_`` op wrote every tensor of its list: each gets its item of the functional
    op's list result, cast back to its dtype where the out-of-place op promotes."""
    spec = tc_ir.infer_spec(node.target, node.args, node.kwargs) or node.spec
    node.spec = spec
    for k, target in enumerate(targets):
        item = rec.emit(operator.getitem, node, k, spec=spec[k])
        if spec[k].dtype != target.dtype:
            item = rec.emit(aten._to_copy.default, item, dtype=target.dtype, spec=clean_spec(target))
        rec.table.write(target, item)


def _defaults_it_lacks(inplace: Any, functional: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The in-place call's arguments, plus the in-place schema's defaults that the functional
    overload has no default for: ``bernoulli_(x)`` means p=0.5, but ``bernoulli.p`` needs its p."""
    lacking = {a.name for a in functional._schema.arguments if not a.has_default_value()}
    args, kwargs = list(args), dict(kwargs)
    for i, a in enumerate(inplace._schema.arguments):
        if i < len(args) or a.name in kwargs or not a.has_default_value() or a.name not in lacking:
            continue
        if i == len(args) and not a.kwarg_only:
            args.append(a.default_value)
        else:
            kwargs[a.name] = a.default_value
    return tuple(args), kwargs


def _record_view(rec: Recorder, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
    base = args[0]
    if base not in rec.table:
        rec.node_of(base)
    node = rec.record(func, args, kwargs, out)
    if isinstance(out, torch.Tensor):
        rec.table.view(out, base, View(func, args, kwargs, None, node.spec), node)
        return
    for i, (tensor, item) in enumerate(rec.outputs_of(node, out)):
        rec.table.view(tensor, base, View(func, args, kwargs, i, item.spec), item)


# ---- ops that write to arguments other than ``self`` (their schemas may not even say so) -------
def _batch_norm_args(args: tuple, kwargs: dict) -> list:
    names = ("input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps")
    return [args[i] if i < len(args) else kwargs[n] for i, n in enumerate(names)]


def _record_batch_norm(rec: Recorder, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
    """Training batch norm updates running stats in place: record the functional op, write them back.

    Specs come from the meta kernels, as the verifier checks them: fake batch norm disagrees with
    the real CPU kernels on the dtype and size of the saved statistics.
    """
    x, w, b, mean, var, training, momentum, eps = _batch_norm_args(args, kwargs)
    updates = training and mean is not None
    target = aten._native_batch_norm_legit_functional.default if updates else func
    node = rec.record(target, (x, w, b, mean, var, training, momentum, eps), {}, tuple(out))
    node.spec = tc_ir.infer_spec(node.target, node.args, node.kwargs) or _batch_norm_specs(node.spec, updates, mean, var)
    for i, t in enumerate(out[:3]):
        if t.numel() == 0 and node.spec[i].numel != 0:  # eval: the kernels return empty stats, meta does not
            item = rec.emit(aten.empty.memory_format, [0], dtype=t.dtype, device=t.device, spec=clean_spec(t))
        else:
            item = rec.emit(operator.getitem, node, i, spec=node.spec[i])
        rec.table.fresh(t, item)
    if updates:
        rec.table.write(mean, rec.emit(operator.getitem, node, 3, spec=node.spec[3]))
        rec.table.write(var, rec.emit(operator.getitem, node, 4, spec=node.spec[4]))


def _batch_norm_specs(recorded: tuple, updates: bool, mean: Any, var: Any) -> tuple:
    """Where the meta kernels give no spec (symbolic sizes): the three recorded outputs, and for
    the functional op the new running stats, laid out as the old ones."""
    return (*recorded, clean_spec(mean), clean_spec(var)) if updates else recorded


MUTATION_RULES: dict[Any, Callable] = {
    aten.native_batch_norm.default: _record_batch_norm,
    aten._native_batch_norm_legit.default: _record_batch_norm,
}
