"""Call rules for torch features that are neither plain ops nor plain Python.

* ``torch.autograd.Function`` subclasses (``MyFn.apply(x)``): the forward and the user's backward
  are each traced into a sub-graph of one ``tc_ir.ops.autograd_function`` node (see there for its
  operands); ``ctx`` is a plain object of :class:`FunctionCtx` while capturing, so what the
  forward stores on it (``save_for_backward``, attributes, ``mark_non_differentiable``) is what
  the backward reads. Tensors the backward reads are carried as saved outputs of the forward.
* ``torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)``: ``fn`` is inlined and
  every call node it adds carries ``meta["recompute"] = <region id>`` (ids count per graph; a
  nested call's nodes take the outermost region's id). tc_autograd carries the tag onto the ATen
  nodes those ops trace to, and its partitioner saves the region's inputs, not its activations:
  the backward graph recomputes the region. Random ops in a region keep the forward's draw (the
  dropout mask is saved and the recompute reads it, where eager replays the RNG state), so values
  and gradients are eager's. ``use_reentrant=True`` (or unset) and ``context_fn=`` (selective
  checkpointing) are graph breaks: they run in Python.
* ``torch.compiler.disable`` / ``torch._dynamo.disable``: a break around the call, which runs
  in Python (read from the markers they leave on the wrapper: tc never imports Dynamo).
* ``torch.compiler.allow_in_graph``: the function becomes one graph node (read from Dynamo's
  registry when Dynamo is loaded; the registry exists only after a call of it).
* ``torch.func``/``torch.vmap`` transforms: a break with a reason.
* ``torch._higher_order_ops.associative_scan`` in ``"pointwise"`` mode: captured as ops, its
  ``combine_fn`` inlined (scans.py says why: torch's eager run of it is wrong on the GPU).
"""

from __future__ import annotations

import sys
import types

import torch
import torch.utils.checkpoint

import tc_ir

from . import scans
from .base import OPTIM_DIR, Unsupported, call_function, real_path
from .record import _spec, record, wrap_result
from .subgraphs import trace_sub
from .variables import Const, DictV, ListV, ObjV, TensorV, TupleV, V

_APPLY = torch.autograd.Function.apply.__func__
_CHECKPOINT = torch.utils.checkpoint.checkpoint


def rule(value):
    """The handler ``(f, fn, args, kwargs) -> V`` for a torch feature, or None."""
    if value is _APPLY or isinstance(value, types.MethodType) and value.__func__ is _APPLY:
        return _function_apply
    if value is _CHECKPOINT:
        return _checkpoint
    if getattr(value, "_torchdynamo_disable", False) is True and not _optim_internal(value):
        return _disabled
    module = getattr(value, "__module__", None)
    # ``torch.functional`` (einsum, split, norm, meshgrid, ...) is no transform: only the
    # ``torch.func`` package and functorch's are
    if isinstance(module, str) and (module == "torch.func" or module.startswith(("torch.func.", "torch._functorch"))):
        return _func_transform
    if _allowed_in_graph(value):
        return _in_graph
    scan_module = sys.modules.get("torch._higher_order_ops.associative_scan")  # no user has it unimported
    if scan_module is not None and value is getattr(scan_module, "associative_scan", None):
        return _associative_scan
    return None


# ---- associative_scan -------------------------------------------------------------------------
def _associative_scan(f, fn: Const, args, kwargs) -> V:
    """A ``"pointwise"`` scan of tensors as :func:`scans.inclusive_scan`; anything torch would
    refuse or that is not of that mode is a break, so that torch's own call decides (and errs)."""
    try:
        bound = scans.scan_arguments(fn.value, args, kwargs).arguments
    except TypeError as e:
        raise Unsupported(f"associative_scan{e}") from e
    dim, reverse, mode = (_constant(bound[k]) for k in ("dim", "reverse", "combine_mode"))
    if mode != "pointwise":
        raise Unsupported(f"associative_scan(combine_mode={mode!r}) runs in Python (its combine_fn is vmapped)")
    leaves = _tensor_leaves(bound["xs"])
    if not leaves or not isinstance(dim, int) or isinstance(dim, bool) or not isinstance(reverse, bool):
        raise Unsupported("associative_scan needs tensors in tuples, lists or dicts, an int dim and a bool reverse")
    ndim = leaves[0].fake.dim()
    if any(t.fake.dim() != ndim or t.fake.device.type not in scans.POINTWISE_DEVICES for t in leaves) \
            or not -ndim <= dim < ndim or any(t.fake.shape[dim] == 0 for t in leaves) \
            or any(t.fake.shape[dim] != leaves[0].fake.shape[dim] for t in leaves):
        raise Unsupported("associative_scan of these tensors runs in Python (torch checks them)")
    return call_function(f, Const(scans.inclusive_scan), [bound["combine_fn"], bound["xs"], Const(dim % ndim),
                                                         Const(reverse)], {})


def _constant(v):
    if isinstance(v, V) and not isinstance(v, Const):
        raise Unsupported("associative_scan's dim, reverse and combine_mode must be constants")
    return v.value if isinstance(v, Const) else v


def _tensor_leaves(v: V) -> list[TensorV] | None:
    """The tensors of a tuple/list/dict tree, or None where it holds anything else."""
    if isinstance(v, TensorV):
        return [v]
    if isinstance(v, (TupleV, ListV, DictV)) and getattr(v, "cls", tuple) in (tuple, list, dict):
        items = v.items.values() if isinstance(v, DictV) else v.items
        found = []
        for item in items:
            leaves = _tensor_leaves(item)
            if leaves is None:
                return None
            found += leaves
        return found
    return None


# ---- disable / allow_in_graph / torch.func ----------------------------------------------------
def _optim_internal(fn) -> bool:
    """``Optimizer`` methods that importing Dynamo wraps with ``disable``: tc inlines those."""
    inner = getattr(fn, "__wrapped__", None)
    return isinstance(inner, types.FunctionType) and real_path(inner.__code__.co_filename).startswith(OPTIM_DIR)


def _disabled(f, fn: Const, args, kwargs) -> V:
    inner = getattr(fn.value, "_torchdynamo_orig_callable", fn.value)
    msg = getattr(fn.value, "_torchdynamo_disable_msg", None)
    name = getattr(inner, "__qualname__", None) or type(inner).__name__
    raise Unsupported(f"{name} is marked torch.compiler.disable: it runs in Python" + (f" ({msg})" if msg else ""))


def _allowed_in_graph(fn) -> bool:
    rules = sys.modules.get("torch._dynamo.trace_rules")
    ids = getattr(getattr(rules, "_allowed_callable_ids", None), "function_ids", None)
    if not ids or id(fn) not in ids:
        return False
    module = getattr(fn, "__module__", None) or ""
    return module != "torch" and not module.startswith("torch.")  # torch's own: the usual rules


def _in_graph(f, fn: Const, args, kwargs) -> V:
    """An ``allow_in_graph`` function: one node, called as is when the graph runs (its Python is
    not inspected, as with Dynamo: side effects in it happen when the back end runs it)."""
    return record(f.session, fn.value, tuple(args), kwargs)


def _func_transform(f, fn: Const, args, kwargs) -> V:
    name = getattr(fn.value, "__name__", type(fn.value).__name__)
    raise Unsupported(f"torch.func transform {name} is not captured: it runs in Python")


# ---- checkpoint -------------------------------------------------------------------------------
_CHECKPOINT_OPTIONS = {"use_reentrant", "context_fn", "determinism_check", "debug", "early_stop",
                       "preserve_rng_state"}


def _checkpoint(f, fn: Const, args, kwargs) -> V:
    if not args:
        raise Unsupported("checkpoint() without a function")
    options = {k: v for k, v in kwargs.items() if k in _CHECKPOINT_OPTIONS}
    rest = {k: v for k, v in kwargs.items() if k not in _CHECKPOINT_OPTIONS}
    if not all(isinstance(v, Const) for v in options.values()):
        raise Unsupported("checkpoint() options must be constants")
    reentrant = options.get("use_reentrant", Const(None)).value
    if reentrant is not False:
        # The reentrant variant (the default, with a warning) gives no gradients to parameters when
        # no input requires grad, and refuses torch.autograd.grad: its own semantics, run natively.
        raise Unsupported("checkpoint(use_reentrant=True or unset) runs in Python; pass use_reentrant=False")
    context = options.get("context_fn")
    if context is not None and context.value is not torch.utils.checkpoint.noop_context_fn:
        raise Unsupported("checkpoint(context_fn=...) (selective checkpointing) runs in Python")
    graph = f.session.graph
    before = set(graph.nodes)
    result = call_function(f, args[0], list(args[1:]), rest)
    # Every op traced inside the region (nested regions included: the outer call tags last, so
    # the whole outer region is one) is recomputed in the backward rather than saved.
    # Ids count per graph, so the same program always gets the same tags (the trace cache's key).
    region = 1 + max((n.meta.get("recompute", 0) for n in graph.nodes), default=0)
    for node in graph.nodes:
        if node.op == "call" and node not in before:
            node.meta["recompute"] = region
    return result


# ---- autograd.Function ------------------------------------------------------------------------
class FunctionCtx:
    """What ``ctx`` is while an ``autograd.Function`` is captured (interpreted like user code)."""

    saved_tensors = ()
    non_differentiable = ()
    materialize_grads = True

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def mark_non_differentiable(self, *outputs):
        self.non_differentiable = self.non_differentiable + outputs

    def set_materialize_grads(self, value):
        self.materialize_grads = value

    def mark_dirty(self, *tensors):
        raise NotImplementedError("an autograd.Function that writes its inputs in place (mark_dirty)")

    def save_for_forward(self, *tensors):
        raise NotImplementedError("forward-mode AD in an autograd.Function (save_for_forward)")


def _function_apply(f, fn: Const, args, kwargs) -> V:
    if isinstance(fn.value, types.MethodType):
        cls = fn.value.__self__
    else:
        cls, args = args[0].value, list(args[1:])
    if kwargs:
        raise Unsupported(f"{cls.__name__}.apply with keyword arguments")
    try:
        return _capture_function(f, cls, list(args))
    except Unsupported as e:  # the whole apply runs in Python, not compiled as a frame of its own
        raise Unsupported(f"autograd.Function {cls.__qualname__}: {e.reason}") from e


def _capture_function(f, cls, args: list[V]) -> V:
    _guard_methods(f, cls)
    if _own(cls, "backward") is None and _own(cls, "vjp") is None:
        raise Unsupported("it defines no backward")
    backward = _own(cls, "backward") or _own(cls, "vjp")
    backward = getattr(backward, "__wrapped__", backward)  # @once_differentiable
    declared = [a for a in args if isinstance(a, TensorV)]
    grad_on = f.session.grad_enabled
    ctx = ObjV(FunctionCtx, {"needs_input_grad": Const(tuple(
        grad_on and isinstance(a, TensorV) and a.fake.requires_grad for a in args))})
    fwd = _trace_forward(f, cls, args, declared, ctx)
    outs = _outputs(fwd, declared)
    if not (isinstance(ctx.attrs.get("materialize_grads", Const(True)), Const)
            and ctx.attrs.get("materialize_grads", Const(True)).value is True):
        raise Unsupported("ctx.set_materialize_grads(False)")
    saved_vs, bwd_ctx = _ctx_tensors(ctx)
    bwd = _trace_backward(f, f"{cls.__name__}_backward", backward, bwd_ctx, saved_vs, outs, args)
    fwd_saved = [_in_forward(fwd, v) for v in saved_vs]
    single = not isinstance(fwd.result, (TupleV, ListV))
    fwd.graph.output(((outs[0].node if single else tuple(o.node for o in outs)), tuple(fwd_saved)))
    non_diff = _non_differentiable(ctx, outs)
    operands = [a.node for a in declared] + fwd.free + bwd.free
    fakes = _result_fakes(outs, non_diff, grad_on and any(a.fake.requires_grad for a in declared))
    node = f.session.graph.call(tc_ir.ops.autograd_function, fwd.graph, bwd.graph, operands, len(declared),
                                len(fwd.free), tuple(non_diff), cls.__qualname__,
                                spec=_spec(fakes[0] if single else tuple(fakes)))
    return wrap_result(f.session, node, fakes[0] if single else tuple(fakes))


_METHODS = ("forward", "setup_context", "backward", "vjp")


def _guard_methods(f, cls) -> None:
    """The graph holds what the class's methods did: a method replaced on the class recompiles."""
    g = f.session.guards
    found = tuple(_own(cls, name) for name in _METHODS)
    g.add(None, f"{g.ref(_methods_of)}({g.ref(cls)}) == {g.ref(found)}", f"{cls.__qualname__}'s methods unchanged")


def _methods_of(cls) -> tuple:
    return tuple(_own(cls, name) for name in _METHODS)


def _own(cls, name: str):
    """``cls``'s own ``name`` (a staticmethod's function), not ``autograd.Function``'s default."""
    for klass in cls.__mro__:
        if klass in (torch.autograd.Function, torch.autograd.function._SingleLevelFunction):
            return None
        if name in klass.__dict__:
            value = klass.__dict__[name]
            return value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
    return None


def _trace_forward(f, cls, args: list[V], declared: list[TensorV], ctx: ObjV):
    setup = _own(cls, "setup_context")
    forward = _own(cls, "forward")
    if forward is None:
        raise Unsupported("it defines no forward")

    def body(inner: list[TensorV]) -> V:
        it = iter(inner)
        call_args = [next(it) if isinstance(a, TensorV) else a for a in args]
        if setup is None:
            return call_function(f, Const(forward), [ctx, *call_args], {})
        out = call_function(f, Const(forward), call_args, {})
        call_function(f, Const(setup), [ctx, TupleV(call_args), out], {})
        return out

    with _grad_mode(f, False):  # eager runs forward (and backward) with grad mode off
        return trace_sub(f, f"{cls.__name__}_forward", declared, body)


class _grad_mode:
    def __init__(self, f, enabled: bool):
        self.f, self.enabled, self.saved = f, enabled, None

    def __enter__(self):
        self.saved = (self.f.session.grad_enabled, torch.is_grad_enabled())
        self.f.session.grad_enabled = self.enabled
        torch._C._set_grad_enabled(self.enabled)

    def __exit__(self, *exc):
        self.f.session.grad_enabled = self.saved[0]
        torch._C._set_grad_enabled(self.saved[1])


def _outputs(fwd, declared: list[TensorV]) -> list[TensorV]:
    result = fwd.result
    outs = list(result.items) if isinstance(result, (TupleV, ListV)) else [result]
    inputs = {id(t.fake) for t in declared}
    for o in outs:
        if not isinstance(o, TensorV) or o.node.graph is not fwd.graph or o.node.op == "input":
            raise Unsupported("forward must return tensors it computes (not an input as is, nor other values)")
        if o.fake._base is not None and id(o.fake._base) in inputs:
            raise Unsupported("forward returns a view of an input")
    if isinstance(result, ListV) or len({id(o.node) for o in outs}) != len(outs):
        raise Unsupported("forward returns a list, or one tensor twice")
    return outs


def _ctx_tensors(ctx: ObjV) -> tuple[list[TensorV], ObjV]:
    """The tensors held by ``ctx`` (each once) and a ``ctx`` for the backward where each is an
    input of the backward sub-graph (filled in by ``_trace_backward``)."""
    saved: dict[int, TensorV] = {}

    def visit(v: V) -> V:
        if isinstance(v, TensorV):
            saved.setdefault(id(v.node), v)
            return v
        if isinstance(v, (TupleV, ListV)):
            for x in v.items:
                visit(x)
            return v
        if isinstance(v, DictV):
            for x in v.items.values():
                visit(x)
            return v
        if isinstance(v, Const):
            return v
        raise Unsupported(f"ctx holds a {type(v).__name__}")

    for name, v in ctx.attrs.items():
        if name != "non_differentiable":  # outputs named by mark_non_differentiable: not for the backward
            visit(v)
    return list(saved.values()), ctx


def _substitute(v: V, mapping: dict) -> V:
    if isinstance(v, TensorV):
        return mapping[id(v.node)]
    if isinstance(v, TupleV):
        return TupleV([_substitute(x, mapping) for x in v.items], cls=v.cls)
    if isinstance(v, ListV):
        return ListV([_substitute(x, mapping) for x in v.items])
    if isinstance(v, DictV):
        return DictV({k: _substitute(x, mapping) for k, x in v.items.items()})
    return v


def _trace_backward(f, name: str, backward, ctx: ObjV, saved: list[TensorV], outs: list[TensorV], args: list[V]):
    n_saved = len(saved)

    def body(inner: list[TensorV]) -> V:
        mapping = {id(v.node): t for v, t in zip(saved, inner)}
        bwd_ctx = ObjV(FunctionCtx, {k: _substitute(v, mapping) for k, v in ctx.attrs.items()
                                     if k != "non_differentiable"})
        return call_function(f, Const(backward), [bwd_ctx, *inner[n_saved:]], {})

    with _grad_mode(f, False):
        bwd = trace_sub(f, name, [*saved, *outs], body)
    grads = list(bwd.result.items) if isinstance(bwd.result, (TupleV, ListV)) else [bwd.result]
    if len(grads) < len(args) or any(not _is_none(g) for g in grads[len(args):]):
        raise Unsupported(f"backward returns {len(grads)} gradients for {len(args)} arguments")
    out = []
    for a, g in zip(args, grads):
        if _is_none(g):
            out.append(None)
        elif not isinstance(a, TensorV) or not isinstance(g, TensorV) or g.node.graph is not bwd.graph:
            raise Unsupported("backward returns a gradient that is not a tensor it computes, or for a non-tensor")
        else:
            out.append(g.node)
    bwd.graph.output(tuple(o for a, o in zip(args, out) if isinstance(a, TensorV)))
    _order_backward_inputs(bwd, n_saved)
    return bwd


def _order_backward_inputs(bwd, n_saved: int) -> None:
    """Inputs (saved, grads, lifted) become (saved, lifted, grads): at run time the lifted ones are
    saved with the forward's (``tc_ir.ops.autograd_function``)."""
    inputs = bwd.graph.inputs
    n_free = len(bwd.free)
    saved, grads, free = inputs[:n_saved], inputs[n_saved:len(inputs) - n_free], inputs[len(inputs) - n_free:]
    bwd.graph.nodes[:] = saved + free + grads + [n for n in bwd.graph.nodes if n.op != "input"]


def _is_none(v: V) -> bool:
    return isinstance(v, Const) and v.value is None


def _in_forward(fwd, v: TensorV):
    """The forward sub-graph's node for a tensor ``ctx`` holds (lifted ones are its inputs)."""
    if v.node.graph is fwd.graph:
        return v.node
    if v.node in fwd.free:
        n_declared = len(fwd.graph.inputs) - len(fwd.free)
        return fwd.graph.inputs[n_declared + fwd.free.index(v.node)]
    raise Unsupported("ctx holds a tensor the forward did not read")


def _non_differentiable(ctx: ObjV, outs: list[TensorV]) -> list[int]:
    marked = ctx.attrs.get("non_differentiable", TupleV([]))
    ids = {id(v.node) for v in getattr(marked, "items", ()) if isinstance(v, TensorV)}
    return [i for i, o in enumerate(outs) if id(o.node) in ids]


def _result_fakes(outs: list[TensorV], non_diff: list[int], requires_grad: bool) -> list:
    fakes = []
    for i, o in enumerate(outs):
        fake = o.fake.detach()
        if requires_grad and i not in non_diff and (fake.dtype.is_floating_point or fake.dtype.is_complex):
            fake.requires_grad_(True)
        fakes.append(fake)
    return fakes
