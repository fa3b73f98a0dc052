"""What a call does while capturing: record, inline, fold, or break.

The rules, in order: bound values unwrap; tensor methods and torch functions become graph
nodes (shape-propagated on fake tensors); ``nn.Module`` calls run their hooks and inline
``forward``; user Python functions are inlined; a closed table of builtins is interpreted;
pure functions of constants are folded; anything else is a graph break.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import inspect
import operator
import os
import types
import weakref

import torch

import tc_ir

from ..cache import default_device
from ..cache import sources as S
from . import numpy_funcs, numpy_ops, queries, stdlib_collections, stdlib_iter, torch_features  # noqa: F401  (they register BUILTINS)
from .base import OPTIM_DIR, STDLIB_DIR, TORCH_DIR, Unsupported, defines, hashable, real_path
from .builtins_ import BUILTINS, CALLABLE_TYPES, bind_namedtuple
from .cond import capture_cond
from .contexts import CONTEXT_CLASSES, make_context, restore
from .pyops import binary, items_of, realize_const
from .record import DATA_METHODS, record, to_fake
from .stdlib_classes import call_stdlib_const, construct_special
from .variables import (
    BoundV,
    CellV,
    Const,
    DataDictV,
    DictV,
    ExitV,
    FuncV,
    IterV,
    ListV,
    MethodV,
    ObjV,
    SetV,
    TensorV,
    TupleV,
    V,
)

_INLINE_TORCH = (os.path.join(TORCH_DIR, "nn", "modules", ""),  # torch's modules' forwards
                 # DDP's forward: Python around `self.module(...)` (its reducer calls break)
                 os.path.join(TORCH_DIR, "nn", "parallel", ""),
                 os.path.join(TORCH_DIR, "utils", "_contextlib.py"),  # @torch.no_grad() as a decorator
                 OPTIM_DIR,
                 # optimizers' step() (see README: optimizers) asks which devices have foreach kernels
                 os.path.join(TORCH_DIR, "utils", "_foreach_utils.py"))
# Standard-library code that library models run and that is plain Python with no hidden state:
# ``nullcontext`` (transformers' ``maybe_autocast``) and the default ``__enter__`` of
# ``AbstractContextManager`` subclasses.
_INLINE_STDLIB = {contextlib.nullcontext.__init__.__code__, contextlib.nullcontext.__enter__.__code__,
                  contextlib.nullcontext.__exit__.__code__, contextlib.AbstractContextManager.__enter__.__code__}
# Standard-library files whose Python code is inlined like the user's: ``Counter``'s methods and
# the methods of namedtuple classes (``_replace``, ``_make``, ``_asdict``) are plain Python over
# dicts and tuples (their one C helper, ``_count_elements``, is modelled in stdlib_collections).
_INLINE_STDLIB_FILES = {real_path(collections.__file__)}
_CO_ASYNC = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
_UNSAFE_TORCH = {"manual_seed", "seed", "save", "load", "set_default_dtype", "set_default_device",
                 "set_grad_enabled", "use_deterministic_algorithms", "set_printoptions", "compile",
                 "set_num_threads"}
# Mode queries that model code branches on, answered as constants while capturing. Inside a
# captured region we *are* compiling (library code then takes its compiler-friendly paths), but
# not Dynamo and not exporting or scripting.
_TORCH_CONSTANTS = {torch.jit.is_scripting: False, torch.jit.is_tracing: False, torch._C._get_tracing_state: None,
                    torch.compiler.is_compiling: True, torch.compiler.is_dynamo_compiling: False,
                    torch.compiler.is_exporting: False, torch._C._is_torch_function_mode_enabled: False}
_TORCH_COND = getattr(torch, "cond", None)  # the same semantics as tc_ir.ops.cond, one node
_PURE_MODULES = {"math", "operator", "_operator", "builtins", "itertools", "functools", "string", "inspect"}


@defines
def call_function(f, fn: V, args: list[V], kwargs: dict[str, V]) -> V:
    if isinstance(fn, BoundV):
        if isinstance(fn.self_v, Const) and fn.self_v.value is os.environ:
            return _environ_read(f, fn, args, kwargs)
        return call_function(f, fn.func, [fn.self_v, *args], kwargs)
    if isinstance(fn, MethodV):
        return tensor_method(f, fn.name, fn.self_v, args, kwargs)
    if isinstance(fn, FuncV):
        return inline(f, fn, args, kwargs)
    if isinstance(fn, ExitV):
        return exit_mode(f, fn)
    if isinstance(fn, Const):
        return _call_const(f, fn, args, kwargs)
    if hasattr(fn, "call"):  # functools.partial made while capturing (stdlib_values.PartialV)
        return fn.call(f, args, kwargs)
    raise Unsupported(f"calling a {type(fn).__name__}")


def _call_const(f, fn: Const, args, kwargs) -> V:
    for rule in CONST_CALL_RULES:
        out = rule(f, fn, args, kwargs)
        if out is not PASS:
            return out
    raise Unsupported(f"call to {_name(fn.value)} is not supported")


# ---- the call rules for a callee known at capture time, tried in order (CONST_CALL_RULES) --------
# Each rule returns what the call gives, or PASS when the callee is not its kind.
PASS = object()


def _builtin(f, fn, args, kwargs):
    handler = BUILTINS.get(fn.value) if hashable(fn.value) else None
    return PASS if handler is None else handler(f, args, kwargs)


def _numpy(f, fn, args, kwargs):
    out = numpy_ops.call(f, fn.value, args, kwargs)  # NumPy functions on arrays as torch ops
    return PASS if out is None else out


def _by_type(f, fn, args, kwargs):
    rule = CALLABLE_TYPES.get(type(fn.value))
    return PASS if rule is None else rule(f, fn, args, kwargs)


def _context_manager(f, fn, args, kwargs):
    value = fn.value
    return make_context(f, value, args, kwargs) if hashable(value) and value in CONTEXT_CLASSES else PASS


def _cond(f, fn, args, kwargs):
    return capture_cond(f, args, kwargs) if fn.value is tc_ir.ops.cond or fn.value is _TORCH_COND else PASS


def _module(f, fn, args, kwargs):
    return call_module(f, fn, args, kwargs) if isinstance(fn.value, torch.nn.Module) else PASS


def _dynamo_marker(f, fn, args, kwargs):
    return Const(None) if _is_dynamo_marker(fn.value) else PASS


def _weak_reference(f, fn, args, kwargs):
    if isinstance(fn.value, weakref.ReferenceType) and fn.source is not None and not args and not kwargs:
        return _deref(f, fn)
    return PASS


def _function_get(f, fn, args, kwargs):
    value = fn.value
    if isinstance(value, types.MethodWrapperType) and value.__name__ == "__get__" \
            and isinstance(value.__self__, types.FunctionType) and args:
        return BoundV(Const(value.__self__), args[0])  # func.__get__(obj, cls): a bound method
    return PASS


def _torch_constant(f, fn, args, kwargs):
    return Const(_TORCH_CONSTANTS[fn.value]) if hashable(fn.value) and fn.value in _TORCH_CONSTANTS else PASS


def _state_query(f, fn, args, kwargs):
    value = fn.value
    if queries.is_query(value):
        answered = queries.answer(f, value, args, kwargs)
        if answered is not None:
            return answered
    if queries.dispatch_stack_query(value) and not args and not kwargs:
        return queries.empty_dispatch_stack(f)
    return PASS


def _usage_log(f, fn, args, kwargs):
    if fn.value is torch._C._log_api_usage_once and all(isinstance(a, Const) for a in args):
        fn.value(*[a.value for a in args])  # usage logging, no effect on values: done at capture, not in graphs
        return Const(None)
    return PASS


def _op_packet(f, fn, args, kwargs):
    if isinstance(fn.value, (torch._ops.OpOverloadPacket, torch._library.custom_ops.CustomOpDef)):
        return torch_call(f, _overload(fn.value, args, kwargs), args, kwargs)
    return PASS


def _torch_feature(f, fn, args, kwargs):
    feature = torch_features.rule(fn.value)  # autograd.Function, checkpoint, disable, allow_in_graph, torch.func
    return PASS if feature is None else feature(f, fn, args, kwargs)


def _torch_function(f, fn, args, kwargs):
    return torch_call(f, fn.value, args, kwargs) if is_torch_callable(fn.value) else PASS


def _python_function(f, fn, args, kwargs):
    value = fn.value
    if not isinstance(value, types.FunctionType):
        return PASS
    folded = call_stdlib_const(f, fn, args, kwargs)
    if folded is not None:
        return folded
    inner = _dynamo_disabled_optim(value)
    if inner is not None:
        return inline(f, inner, args, kwargs)
    return inline(f, value, args, kwargs, fn.source)


def _bound_method(f, fn, args, kwargs):
    value = fn.value
    if isinstance(value, types.MethodType):
        return call_function(f, BoundV(Const(value.__func__), Const(value.__self__)), args, kwargs)
    return PASS


def _partial(f, fn, args, kwargs):
    return _call_partial(f, fn, args, kwargs) if type(fn.value) is functools.partial else PASS


def _class(f, fn, args, kwargs):
    return construct(f, fn.value, args, kwargs) if isinstance(fn.value, type) else PASS


def _fold(f, fn, args, kwargs):
    value = fn.value
    if not _foldable(value, args, kwargs):
        return PASS
    real_args = [realize_const(a) for a in args]
    try:
        out = value(*real_args, **{k: realize_const(v) for k, v in kwargs.items()})
    except Exception as e:
        raise Unsupported(f"{_name(value)} raised {type(e).__name__}: {e}") from e
    if _container_read(value):
        _guard_read(f, fn, real_args, kwargs, out)
        if getattr(value, "__name__", None) in ("get", "__getitem__"):
            return Const(out)  # an element held by the container: its identity matters
    return _fresh(out)


def _callable_object(f, fn, args, kwargs):
    call = type(fn.value).__dict__.get("__call__") if callable(fn.value) else None
    if isinstance(call, types.FunctionType) and type(fn.value).__call__ is not None:
        return call_function(f, BoundV(Const(type(fn.value).__call__), fn), args, kwargs)
    return PASS


CONST_CALL_RULES = (_builtin, _numpy, _by_type, _context_manager, _cond, _module, _dynamo_marker, _weak_reference,
                    _function_get, _torch_constant, _state_query, _usage_log, _op_packet, _torch_feature,
                    _torch_function, _python_function, _bound_method, _partial, _class, _fold, _callable_object)


_ENVIRON_READS = {"get", "__getitem__", "__contains__"}


def _environ_read(f, fn: BoundV, args, kwargs) -> V:
    """``os.environ.get(name, default)`` / ``os.environ[name]`` / ``name in os.environ``: read now
    and guarded on the variable's value (inlining ``Mapping.get`` raised and caught a KeyError)."""
    name = getattr(realize_const(fn.func), "__name__", None)
    if name not in _ENVIRON_READS or kwargs or not all(isinstance(a, Const) for a in args):
        raise Unsupported(f"os.environ.{name} is not a read this interpreter answers")
    key = args[0].value
    present = key in os.environ
    g = f.session.guards
    env = g.ref(os.environ)
    g.add(None, f"({g.ref(key)} in {env}) is {present}", f"os.environ has {key!r}: {present}")
    if present:
        g.add(None, f"{env}[{g.ref(key)}] == {os.environ[key]!r}", f"os.environ[{key!r}] == {os.environ[key]!r}")
    if name == "__contains__":
        return Const(present)
    if not present:
        if name == "__getitem__":
            raise Unsupported(f"os.environ[{key!r}] raises KeyError")
        return args[1] if len(args) > 1 else Const(None)
    return Const(os.environ[key])


def _deref(f, ref: Const) -> V:
    """``ref()`` of a weak reference held by the frame (the LR scheduler's step wrapper): the
    referent, read again at call time through the same call and guarded like any value."""
    target = ref.value()
    source = S.Source(f"{ref.source.expr}()", f"{ref.source.name}_ref")
    return f.session.wrap(target, source)



def _dynamo_disabled_optim(fn) -> types.FunctionType | None:
    """An optimizer method wrapped by ``torch._dynamo.disable`` (importing Dynamo wraps
    ``Optimizer._init_group`` and friends, which Dynamo handles its own way): the function it
    wraps, which tc inlines like the rest of ``torch.optim``."""
    inner = getattr(fn, "__wrapped__", None)
    if not isinstance(inner, types.FunctionType) or not fn.__code__.co_filename.endswith("eval_frame.py"):
        return None
    return inner if real_path(inner.__code__.co_filename).startswith(OPTIM_DIR) else None


def _is_dynamo_marker(fn) -> bool:
    """``torch._dynamo.graph_break()``: a hint to Dynamo (the optimizer's ``_use_grad`` puts one
    around the grad-mode switch). tc records grad-mode changes as graph nodes, so the marker has
    nothing to do; matched by name so that tc never imports Dynamo."""
    return getattr(fn, "__module__", None) == "torch._dynamo.decorators" and getattr(fn, "__name__", None) == "graph_break"


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _foldable(fn, args, kwargs) -> bool:
    module = getattr(fn, "__module__", None)
    receiver = getattr(fn, "__self__", None)
    all_const = all(isinstance(a, Const) or _plain_container(a) for a in [*args, *kwargs.values()])
    if not all_const or _runs_python(fn) or any(_runs_python(a.value) for a in [*args, *kwargs.values()]
                                                if isinstance(a, Const)):
        return False  # folding would run the user's code once, at capture, not on every call
    if isinstance(fn, (types.BuiltinFunctionType, types.MethodWrapperType)) \
            and isinstance(receiver, (str, bytes, tuple, int, float, frozenset, range,
                                                                             torch.Size, torch.dtype, torch.device)):
        return True
    if isinstance(fn, types.BuiltinMethodType) and isinstance(receiver, (dict, list, set, tuple, str)) \
            and fn.__name__ in _READ_METHODS and not isinstance(receiver, torch.nn.Module):
        return True  # a read of a registry-like container held by a global or an object
    return module in _PURE_MODULES and not any(isinstance(getattr(a, "value", None), torch.Tensor) for a in args)


def _plain_container(v: V) -> bool:
    """A list/tuple/set built while capturing, holding only plain constants: passed to a folded
    call as the real container (``frozenset.union([9])``)."""
    if not isinstance(v, (ListV, TupleV, SetV)) or isinstance(v, TupleV) and v.cls is not tuple:
        return False
    return all(isinstance(x, Const) and type(x.value) in (int, float, str, bool, bytes, type(None)) or _plain_container(x)
               for x in v.items)


def _call_partial(f, fn: Const, args, kwargs) -> V:
    """``partial(func, *a, **k)(*args, **kw)`` is ``func(*a, *args, **k, **kw)``; the partial's
    parts are read through its source (guarded like any value), never run at capture."""
    p, src, wrap = fn.value, fn.source, f.session.wrap
    if src is None:
        func, pargs, pkw = Const(p.func), [Const(a) for a in p.args], {k: Const(v) for k, v in p.keywords.items()}
    else:
        func = wrap(p.func, src.attr("func", p))
        pargs = list(wrap(p.args, src.attr("args", p)).items)
        pkw = dict(wrap(p.keywords, src.attr("keywords", p)).items)
    return call_function(f, func, [*pargs, *args], {**pkw, **kwargs})


def _runs_python(value) -> bool:
    """A Python function, bound method or object with a Python ``__call__``: calling it runs code."""
    if isinstance(value, (types.FunctionType, types.MethodType, functools.partial)):
        return True
    return any(isinstance(vars(k).get("__call__"), types.FunctionType) for k in type(value).__mro__)


def _fresh(value) -> V:
    """A value a folded call made: its mutable containers are tracked like ones built by the
    user's code (a `Const` list would be one object shared, and mutated, across calls)."""
    t = type(value)
    if t is list:
        return ListV([_fresh(x) for x in value])
    if t is dict:
        return DictV({k: _fresh(x) for k, x in value.items()})
    if t is set:
        return SetV([Const(x) for x in value])
    if t is tuple and any(type(x) in (list, dict, set, tuple) for x in value):
        return TupleV([_fresh(x) for x in value])
    return Const(value)


def _container_read(fn) -> bool:
    return isinstance(getattr(fn, "__self__", None), (dict, list, set)) and not isinstance(fn.__self__, torch.nn.Module)


def _guard_read(f, fn: Const, args: list, kwargs: dict, out) -> None:
    """A read of a mutable container held by a global or an object (``registry.get(key)``): the
    answer is guarded, so a registry changed between calls recompiles instead of answering stale."""
    g = f.session.guards
    if kwargs or type(out).__name__.startswith(("dict_", "odict_")):
        raise Unsupported(f"{_name(fn.value)} with keywords, or returning a live view")
    # Without a source (``super().get(k)`` in a dict subclass) the bound method itself is kept:
    # it holds the container, which the function reached through guarded reads.
    method = fn.source.expr if fn.source is not None else g.ref(fn.value)
    call = f"{method}({', '.join(g.ref(a) for a in args)})"
    text = f"{_name(fn.value)}(...) == {out!r:.40}"
    if type(out) in (int, float, bool, str, bytes, type(None)):
        g.add(fn.source, f"type({call}) is {g.ref(type(out))} and {call} == {g.ref(out)}", text)
    else:
        g.add(fn.source, f"{call} is {g.ref(out)}", text)


_READ_METHODS = {"get", "keys", "values", "items", "__contains__", "__getitem__", "index", "count", "copy",
                 "startswith", "endswith", "split", "join", "lower", "upper", "format", "replace", "strip"}


# ---- torch ---------------------------------------------------------------------------------------
def _overload(op, args, kwargs) -> torch._ops.OpOverload:
    """The overload a call of ``torch.ops.ns.op`` (a packet) or a ``custom_op`` object runs: graphs
    hold ``OpOverload``s, which every stage after capture understands. A packet is resolved
    against its schemas with the arguments' fake values, as calling it resolves them."""
    if isinstance(op, torch._library.custom_ops.CustomOpDef):
        return op._opoverload
    fake_args, fake_kwargs = [to_fake(a) for a in args], {k: to_fake(v) for k, v in kwargs.items()}
    try:
        name = torch._C._jit_resolve_packet(op._qualified_op_name, *fake_args, **fake_kwargs)
    except RuntimeError as e:
        raise Unsupported(f"no overload of {op._qualified_op_name} takes these arguments: {e}") from e
    return getattr(op, name)


def is_torch_callable(fn) -> bool:
    if isinstance(fn, type) or not callable(fn):
        return False
    module = getattr(fn, "__module__", None) or ""
    if isinstance(fn, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return getattr(fn, "__objclass__", None) is torch._C.TensorBase
    if module != "torch" and not module.startswith("torch."):  # torchvision, torchaudio: user code
        return fn in (torch.Tensor.__getitem__,) or module == "torch._C._nn"
    # torch._C._distributed*: the pybind methods of DDP's Reducer/Logger are effects, not ops (recorded,
    # their unused results would be dropped and gradients never all-reduced)
    return not module.startswith(("torch.nn.modules", "torch.utils", "torch._dynamo", "torch.autograd.grad_mode", "torch.optim",
                                  "torch.distributed", "torch.testing", "torch.serialization", "torch.jit",
                                  "torch.nn.parallel", "torch._C._distributed"))


def torch_call(f, fn, args, kwargs) -> V:
    name = getattr(fn, "__name__", "")
    if name in _UNSAFE_TORCH:
        raise Unsupported(f"torch.{name} changes global state")
    if isinstance(fn, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return tensor_method(f, fn.__name__, args[0], args[1:], kwargs)
    if fn is torch.is_grad_enabled:
        return Const(f.session.grad_enabled)
    if fn is torch.get_default_device:  # the mode it reads is set aside while capturing
        return Const(default_device.queried(f.session.default_device))
    kwargs = _on_default_device(f.session.default_device, fn, kwargs)
    if fn in _FOREACH_POINTWISE and _tensor_scalars(args, kwargs) is not None:
        return _foreach_with_tensor_scalars(f, fn, args, kwargs)
    from_numpy = numpy_ops.from_numpy_call(f, fn, args, kwargs)  # torch.from_numpy(a) of a tracked ndarray
    if from_numpy is not None:
        return from_numpy
    return record(f.session, fn, tuple(args), kwargs)


def _on_default_device(device: torch.device | None, fn, kwargs: dict[str, V]) -> dict[str, V]:
    """A factory called without a ``device=`` (or with ``device=None``) under a default device
    gets it written in, as the ``DeviceContext`` mode gives it in eager (``cache/default_device``)."""
    if device is None or not default_device.redirected(fn):
        return kwargs
    given = kwargs.get("device")
    if given is not None and not (isinstance(given, Const) and given.value is None):
        return kwargs
    return {**kwargs, "device": Const(device)}


# Compiling optimizers take paths where a step count is a tensor (``_get_value`` returns it
# when ``is_compiling()``), so the step size handed to these ops is a tensor. Eager's kernels
# read such a value with ``.item()`` (a data-dependent read); written as the arithmetic it
# stands for, it stays in the graph, as Dynamo rewrites it too.
_POINTWISE = {"addcdiv_": operator.truediv, "addcmul_": operator.mul}
_FOREACH_POINTWISE = {torch._foreach_addcdiv_: "addcdiv_", torch._foreach_addcmul_: "addcmul_"}


def _tensor_value(name: str, args, kwargs) -> V | None:
    value = kwargs.get("value", args[2] if len(args) > 2 else None)
    return value if name in _POINTWISE and isinstance(value, TensorV) else None


def _pointwise_with_tensor_value(f, name: str, self_v: V, args, kwargs) -> V:
    """``p.addcdiv_(t1, t2, value=v)`` with a tensor ``v``: ``p.add_(t1 / t2 * v)``."""
    t1, t2, value = args[0], args[1], _tensor_value(name, args, kwargs)
    update = binary(f, operator.mul, binary(f, _POINTWISE[name], t1, t2), value)
    return record(f.session, "add_", (self_v, update), {})


def _tensor_scalars(args, kwargs) -> V | None:
    scalars = kwargs.get("scalars", args[3] if len(args) > 3 else None)
    return scalars if isinstance(scalars, TensorV) else None


def _foreach_with_tensor_scalars(f, fn, args, kwargs) -> V:
    """``torch._foreach_addcdiv_(xs, t1s, t2s, scalars)`` with a tensor of scalars (Adam's
    foreach path when compiling): one in-place update per list element, ``scalars[i]`` read in
    the graph."""
    name = _FOREACH_POINTWISE[fn]
    selves, t1s, t2s = (items_of(f, a) for a in args[:3])
    scalars = _tensor_scalars(args, kwargs)
    for i, (x, t1, t2) in enumerate(zip(selves, t1s, t2s)):
        s_i = record(f.session, operator.getitem, (scalars, Const(i)), {})
        _pointwise_with_tensor_value(f, name, x, [t1, t2, s_i], {})
    return Const(None)


def tensor_method(f, name: str, self_v: V, args, kwargs) -> V:
    if name == "is_inference" and isinstance(self_v, TensorV) and not args and not kwargs:
        return _is_inference(f, self_v)
    if name == "numpy":  # a tracked ndarray over the tensor (numpy_ops)
        return numpy_ops.tensor_numpy(f, self_v, args, kwargs)
    if name in DATA_METHODS:
        raise Unsupported(f"Tensor.{name}() hands tensor data to Python")
    if not isinstance(self_v, TensorV):
        raise Unsupported(f"Tensor.{name} on {type(self_v).__name__}")
    if _tensor_value(name, args, kwargs) is not None:
        return _pointwise_with_tensor_value(f, name, self_v, args, kwargs)
    return record(f.session, name, (self_v, *args), kwargs)


def _is_inference(f, t: TensorV) -> V:
    """Fake tensors are never inference tensors: an input's answer is read and guarded; a computed
    tensor's depends on views of inference inputs and the ambient mode, so it is a break."""
    real = f.session.real_input(t)
    if real is None:
        raise Unsupported("Tensor.is_inference() of a computed tensor")
    value, g = real.is_inference(), f.session.guards
    g.add(t.source, f"{t.source.expr}.is_inference() is {value}", f"{g.readable(t.source)}.is_inference() is {value}")
    return Const(value)


# ---- modules -------------------------------------------------------------------------------------
def call_module(f, mod_v: Const, args, kwargs) -> V:
    mod = mod_v.value
    g = torch.nn.modules.module
    if g._global_forward_hooks or g._global_forward_pre_hooks or g._global_backward_hooks \
            or g._global_backward_pre_hooks:
        raise Unsupported("global module hooks are registered")
    if mod._backward_hooks or mod._backward_pre_hooks:  # they wrap the call's tensors in eager
        raise Unsupported(f"{type(mod).__name__} has backward hooks")
    if mod_v.source is not None:
        f.session.guards.module_hooks(mod_v.source, mod)
    try:
        args, kwargs = _pre_hooks(f, mod_v, args, kwargs)
    except Unsupported as e:
        e.nested = True  # only the hook breaks: the call runs as frames of its own (forward compiled)
        raise
    # The forward an instance holds (accelerate and PEFT replace ``module.forward``) hides its
    # class's: which one ran is guarded, or a forward replaced after the capture was never called
    forward = mod.__dict__.get("forward")
    source = mod_v.source
    if forward is None:
        if source is not None:
            f.session.guards.not_own(source, "forward")
            f.session.guards.class_member(type(mod), "forward", type(mod).forward)
        fn = BoundV(Const(type(mod).forward), mod_v)
    else:
        fn = f.session.wrap(forward, source.attr("forward", mod)) if source is not None else Const(forward)
    out = call_function(f, fn, args, kwargs)
    try:
        return _post_hooks(f, mod_v, args, kwargs, out)
    except Unsupported as e:
        e.nested = True
        raise


def _pre_hooks(f, mod_v: Const, args, kwargs):
    mod = mod_v.value
    for hook_id, hook in list(mod._forward_pre_hooks.items()):
        if hook_id in mod._forward_pre_hooks_with_kwargs:
            r = call_function(f, Const(hook), [mod_v, TupleV(args), DictV(kwargs)], {})
            if not (isinstance(r, Const) and r.value is None):
                args, kwargs = list(r.items[0].items), dict(r.items[1].items)
        else:
            r = call_function(f, Const(hook), [mod_v, TupleV(args)], {})
            if not (isinstance(r, Const) and r.value is None):
                args = list(r.items) if isinstance(r, TupleV) else [r]
    return args, kwargs


def _post_hooks(f, mod_v: Const, args, kwargs, out):
    mod = mod_v.value
    for hook_id, hook in list(mod._forward_hooks.items()):
        if hook_id in mod._forward_hooks_with_kwargs:
            r = call_function(f, Const(hook), [mod_v, TupleV(args), DictV(kwargs), out], {})
        else:
            r = call_function(f, Const(hook), [mod_v, TupleV(args), out], {})
        if not (isinstance(r, Const) and r.value is None):
            out = r
    return out


# ---- classes --------------------------------------------------------------------------------------
def construct(f, cls: type, args, kwargs) -> V:
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return bind_namedtuple(cls, args, kwargs)
    if issubclass(cls, dict) and dataclasses.is_dataclass(cls) and hasattr(cls, "to_tuple"):
        return _model_output(cls, args, kwargs)
    special = construct_special(f, cls, args, kwargs)
    if special is not None:
        return special
    if cls.__module__ in ("builtins", "torch") or cls.__module__.startswith("torch."):
        if all(isinstance(a, Const) for a in [*args, *kwargs.values()]) and cls in (
                torch.Size, torch.device, slice, complex, frozenset, torch.finfo, torch.iinfo):
            return Const(cls(*[a.value for a in args], **{k: v.value for k, v in kwargs.items()}))
        raise Unsupported(f"creating a {cls.__qualname__} inside a captured function")
    if cls.__new__ is not object.__new__ or type(cls).__call__ is not type.__call__:
        raise Unsupported(f"class {cls.__qualname__} has a custom __new__ or metaclass")
    if getattr(cls, "__abstractmethods__", None):  # ABCMeta classes: object.__new__ would raise
        raise Unsupported(f"class {cls.__qualname__} has abstract methods")
    obj = ObjV(cls)
    init = cls.__init__
    if init is not object.__init__:
        call_function(f, BoundV(Const(init), obj), args, kwargs)
    return obj


def _model_output(cls: type, args, kwargs) -> V:
    """A Hugging Face ``ModelOutput``-style dataclass dict, built field by field.

    Its ``__post_init__`` puts every field that is not ``None`` into the dict, in field order;
    the odd case of one non-tensor first field (a dict or an iterable of pairs) is not modelled.
    """
    fields = [fd for fd in dataclasses.fields(cls) if fd.init]
    values: dict[str, V] = dict(zip((fd.name for fd in fields), args))
    values.update(kwargs)
    for fd in fields:
        if fd.name not in values:
            if fd.default is not dataclasses.MISSING:
                values[fd.name] = Const(fd.default)
            elif fd.default_factory is not dataclasses.MISSING:
                values[fd.name] = _const_v(fd.default_factory())
            else:
                raise Unsupported(f"{cls.__name__}() missing field {fd.name}")
    first, rest = values[fields[0].name], [values[fd.name] for fd in fields[1:]]
    if all(type(v) is Const and v.value is None for v in rest) and not isinstance(first, TensorV) \
            and not (type(first) is Const and first.value is None):
        raise Unsupported(f"{cls.__name__} built from one non-tensor value")
    return DataDictV({fd.name: values[fd.name] for fd in fields}, cls)


# ---- inlining ------------------------------------------------------------------------------------
def _skip_reason(fn) -> str | None:
    code = fn.__code__ if not isinstance(fn, FuncV) else fn.code
    if code.co_flags & _CO_ASYNC:
        return f"{code.co_name} is a coroutine"
    path = real_path(code.co_filename)
    if code in _INLINE_STDLIB or path in _INLINE_STDLIB_FILES:
        return None
    if path.startswith(STDLIB_DIR) and "site-packages" not in path and "dist-packages" not in path:
        return f"{_name(fn)} lives in the standard library ({os.path.basename(path)})"
    if path.startswith(TORCH_DIR) and not path.startswith(_INLINE_TORCH):
        return f"{_name(fn)} is torch internals ({os.path.relpath(path, TORCH_DIR)})"
    return None


def inline(f, fn, args: list[V], kwargs: dict[str, V], source: S.Source | None = None) -> V:
    reason = _skip_reason(fn)
    if reason is not None:
        raise Unsupported(f"call to {reason}")
    if isinstance(fn, FuncV):
        code, globals_, defaults, kwdefaults, closure = fn.code, fn.globals, fn.defaults, fn.kwdefaults, fn.closure
    else:
        code, globals_ = fn.__code__, fn.__globals__
        defaults = [_default_v(f, d, source, f"__defaults__[{i}]", f"default{i}")
                    for i, d in enumerate(fn.__defaults__ or ())]
        kwdefaults = {k: _default_v(f, d, source, f"__kwdefaults__[{k!r}]", f"kwdefault_{k}")
                      for k, d in (fn.__kwdefaults__ or {}).items()}
        closure = [_closure_cell(f, c, i, source) for i, c in enumerate(fn.__closure__ or ())]
    locals_ = bind_args(code, defaults, kwdefaults, args, kwargs)
    cells = dict(zip(code.co_freevars, closure))
    child = f.child(code, globals_, locals_, cells)
    if code.co_flags & inspect.CO_GENERATOR:
        return _run_generator(child)
    return child.run()


def _run_generator(child) -> IterV:
    """A generator consumed where it is made: run its body to the end, collecting what it yields.

    Generator expressions and generator functions in model code are consumed at once (unpacked,
    summed, joined, looped over), so running the body eagerly gives the same values; the body's
    own side effects happen before the consumer's, which is only visible if the two interleave
    effects on the same object.
    """
    child.yields = []
    child.run()
    return IterV(child.yields, cls=types.GeneratorType)


_IMMUTABLE = (int, float, bool, str, bytes, complex, type(None), type, types.FunctionType, types.ModuleType,
              types.BuiltinFunctionType, torch.dtype, torch.device)


def _immutable(value) -> bool:
    if isinstance(value, (tuple, frozenset)):
        return all(_immutable(v) for v in value)
    return isinstance(value, _IMMUTABLE)


def _default_v(f, value, source: S.Source | None, where: str, label: str) -> V:
    """A default argument of an inlined function. A mutable one (a list appended to across calls,
    an ndarray or a tensor written in place) is the function's own object, read through its
    source and tracked like any other, so its mutations are seen and replayed as eager's are;
    an immutable one is a constant."""
    if _immutable(value):
        return Const(value)
    if source is None:
        if isinstance(value, torch.Tensor) or type(value).__module__ == "numpy":
            raise Unsupported(f"a {type(value).__name__} default argument of a function reached without a source")
        return _const_v(value)
    return f.session.wrap(value, S.Source(f"{source.expr}.{where}", f"{source.name}_{label}"))


def _const_v(value) -> V:
    if isinstance(value, torch.Tensor):
        raise Unsupported("a tensor default argument")
    if isinstance(value, list):
        return ListV([_const_v(v) for v in value])
    if isinstance(value, dict):
        return DictV({k: _const_v(v) for k, v in value.items()})
    return Const(value)


def _closure_cell(f, cell, index: int, source) -> CellV:
    try:
        contents = cell.cell_contents
    except ValueError:
        return CellV(None)
    if source is not None:
        return CellV(f.session.wrap(contents, S.Source(f"{source.expr}.__closure__[{index}].cell_contents",
                                                       f"{source.name}_cell{index}")))
    if isinstance(contents, (types.FunctionType, type, types.ModuleType, int, float, str, bool, type(None))):
        return CellV(Const(contents))
    ref = f.session.guards.ref(cell)
    return CellV(f.session.wrap(contents, S.Source(f"{ref}.cell_contents", f"cell{index}")))


def bind_args(code, defaults, kwdefaults, args: list[V], kwargs: dict[str, V]) -> dict[str, V]:
    """Bind call arguments to a code object's parameters (positional, defaults, *args, **kwargs)."""
    nargs, nkw = code.co_argcount, code.co_kwonlyargcount
    names = code.co_varnames
    has_varargs, has_varkw = bool(code.co_flags & inspect.CO_VARARGS), bool(code.co_flags & inspect.CO_VARKEYWORDS)
    out: dict[str, V] = {}
    if len(args) > nargs and not has_varargs:
        raise Unsupported(f"{code.co_name}() takes {nargs} positional arguments but {len(args)} were given")
    for name, v in zip(names[:nargs], args):
        out[name] = v
    kwargs = dict(kwargs)
    for name in names[code.co_posonlyargcount:nargs + nkw]:
        if name in kwargs:
            out[name] = kwargs.pop(name)
    first_default = nargs - len(defaults)
    for i, name in enumerate(names[:nargs]):
        if name not in out and i >= first_default:
            out[name] = defaults[i - first_default]
    for name in names[nargs:nargs + nkw]:
        if name not in out and name in kwdefaults:
            out[name] = kwdefaults[name]
    missing = [n for n in names[:nargs + nkw] if n not in out]
    if missing:
        raise Unsupported(f"{code.co_name}() missing arguments {missing}")
    pos = nargs + nkw
    if has_varargs:
        out[names[pos]] = TupleV(args[nargs:])
        pos += 1
    if has_varkw:
        out[names[pos]] = DictV(kwargs)
    elif kwargs:
        raise Unsupported(f"{code.co_name}() got unexpected keyword arguments {list(kwargs)}")
    return out


def exit_mode(f, ex: ExitV) -> V:
    restore(f, ex)
    return Const(None)


