"""What a call at a nested graph break runs: the callee as a compiled frame of its own.

When capture breaks *inside* a call it inlined (a user function, a module's ``forward``, a
decorator's ``wrapper``), the caller's region ends just before that call, and the call is the
instruction the driver runs in Python (``runtime.FrameCache._continue``). Running it natively
would run the whole callee eagerly; instead it is called through the callee's own frame cache
(``FrameCache.call_callee``), so its graphs before and after its break are captured, cached and
guarded like a top-level compiled function's — what torch.compile gets from compiling every
frame. It is recursive: a break nested deeper breaks again at the callee's own call site.

This module says which callable runs which Python function (``python_target``), runs a module
call with its hooks around a compiled ``forward`` (``call_module``), and lays out call
arguments in a function's parameter slots (``binder``).
"""

from __future__ import annotations

import inspect
import types
import weakref
from collections.abc import Callable

import torch

_NOT_FRAMES = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def python_target(fn) -> tuple[types.FunctionType, tuple] | None:
    """(function, leading arguments) that calling ``fn`` runs, or None where the call is not one
    Python frame we can compile (a builtin, a class, a generator function, a C ``__call__``)."""
    if isinstance(fn, types.FunctionType):
        func, lead = fn, ()
    elif isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        func, lead = fn.__func__, (fn.__self__,)
    elif isinstance(fn, type) or isinstance(fn, types.BuiltinFunctionType):
        return None
    else:
        owner = next((c for c in type(fn).__mro__ if "__call__" in c.__dict__), None)
        call = None if owner is None else owner.__dict__["__call__"]
        if not isinstance(call, types.FunctionType):
            return None
        func, lead = call, (fn,)
    if func.__code__.co_flags & _NOT_FRAMES:
        return None  # a generator is consumed by its caller: it runs natively (a clean break)
    return func, lead


def module_forward(mod: torch.nn.Module) -> tuple[Callable, tuple]:
    """The forward a module call runs, and its leading arguments (``self`` when bound)."""
    fn = mod.__dict__.get("forward")
    if fn is None:
        return type(mod).forward, (mod,)
    if isinstance(fn, types.MethodType) and fn.__self__ is mod:
        return fn.__func__, (mod,)
    return fn, ()


def plain_module_call(mod) -> bool:
    """A module whose ``__call__`` is ``nn.Module``'s (hooks, then ``forward``)."""
    return isinstance(mod, torch.nn.Module) and type(mod).__call__ is torch.nn.Module.__call__


def call_module(mod: torch.nn.Module, args: tuple, kwargs: dict, forward: Callable):
    """``mod(*args, **kwargs)`` with ``forward(args, kwargs)`` in place of its ``forward``:
    forward pre-hooks and hooks run in Python around it, as ``nn.Module._call_impl`` runs them.
    Modules with backward hooks (they wrap tensors in Python) and global hooks run natively."""
    if mod._backward_hooks or mod._backward_pre_hooks or global_hooks():
        return mod(*args, **kwargs)
    if not (mod._forward_hooks or mod._forward_pre_hooks):
        return forward(args, kwargs)
    for hook_id, hook in list(mod._forward_pre_hooks.items()):
        if hook_id in mod._forward_pre_hooks_with_kwargs:
            r = hook(mod, args, kwargs)
            if r is not None:
                args, kwargs = r
        else:
            r = hook(mod, args)
            if r is not None:
                args = r if isinstance(r, tuple) else (r,)
    out = forward(args, kwargs)
    for hook_id, hook in list(mod._forward_hooks.items()):
        r = hook(mod, args, kwargs, out) if hook_id in mod._forward_hooks_with_kwargs else hook(mod, args, out)
        if r is not None:
            out = r
    return out


def global_hooks() -> bool:
    g = torch.nn.modules.module
    return bool(g._global_forward_hooks or g._global_forward_pre_hooks or g._global_backward_hooks
                or g._global_backward_pre_hooks)


_BINDERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def binder(fn) -> Callable:
    """A fast way to lay out call arguments in the order of ``fn``'s code's parameter slots;
    the binder returns None for a call eager rejects (the caller runs it for eager's error)."""
    found = _BINDERS.get(fn)
    if found is None:
        found = _BINDERS[fn] = _make_binder(fn)
    return found


def _make_binder(fn) -> Callable:
    code = fn.__code__
    simple = not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS) and not code.co_kwonlyargcount
    n = code.co_argcount
    sig = inspect.signature(fn, follow_wrapped=False)
    names = code.co_varnames[:n + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS)
                             + bool(code.co_flags & inspect.CO_VARKEYWORDS)]

    def bind(args, kwargs):
        if simple and not kwargs and len(args) == n:
            return args
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        return tuple(bound.arguments[name] for name in names)

    return bind
