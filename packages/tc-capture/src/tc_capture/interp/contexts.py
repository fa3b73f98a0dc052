"""``with torch.no_grad()`` / ``enable_grad()`` / ``set_grad_enabled(b)`` / ``autocast(...)``.

Mode changes are recorded as nodes (``torch._C._set_grad_enabled``, autocast enter/exit) so the
graph runs each region under the right mode, and are applied for real while capturing so fake
tensors propagate ``requires_grad`` and autocast dtypes correctly. The driver restores the modes
when capture ends.
"""

from __future__ import annotations

import inspect
import types

import torch

from .attrs import get_attr
from .base import Unsupported, call_function
from .pyops import realize_const
from .variables import AutocastV, Const, ExitV, GradModeV, ObjV, V

_enter_autocast = torch.amp.autocast_mode._enter_autocast
_exit_autocast = torch.amp.autocast_mode._exit_autocast

CONTEXT_CLASSES = {torch.no_grad, torch.enable_grad, torch.set_grad_enabled, torch.autocast,
                   torch.amp.autocast}


def set_grad(f, enabled: bool) -> None:
    s = f.session
    s.graph.call(torch._C._set_grad_enabled, enabled, spec=None)
    torch._C._set_grad_enabled(enabled)
    s.grad_enabled = enabled


def make_context(f, cls, args, kwargs) -> V:
    if cls is torch.no_grad:
        return GradModeV(False)
    if cls is torch.enable_grad:
        return GradModeV(True)
    if cls is torch.set_grad_enabled:
        enabled = bool(realize_const(args[0] if args else kwargs["mode"]))
        prev = f.session.grad_enabled
        set_grad(f, enabled)
        return GradModeV(enabled, applied=prev)
    return AutocastV(tuple(realize_const(a) for a in args), {k: realize_const(v) for k, v in kwargs.items()})


def enter(f, ctx: V) -> tuple[V, V]:
    """Enter ``ctx``: the ``__exit__`` to leave on the stack and what ``as`` binds."""
    if isinstance(ctx, GradModeV):
        if ctx.applied is None:
            prev = f.session.grad_enabled
            set_grad(f, ctx.enabled)
        else:
            prev = ctx.applied
        return ExitV("grad", prev), Const(None)
    if isinstance(ctx, AutocastV):
        args = _autocast_args(ctx)
        node = f.session.graph.call(_enter_autocast, *args, spec=None)
        real = _enter_autocast(*args)
        f.session.autocast_stack.append(real)
        return ExitV("autocast", node), Const(None)
    return _enter_python(f, ctx)


def _enter_python(f, ctx: V) -> tuple[V, V]:
    """A context manager written in Python (``nullcontext()``, a user class): its ``__enter__``
    is inlined and its bound ``__exit__`` left on the stack, called like any method later."""
    if not isinstance(ctx, (ObjV, Const)) or isinstance(ctx, Const) and not _python_dunders(type(ctx.value)):
        raise Unsupported(f"`with` on {_type_name(ctx)}")
    exit_fn = get_attr(f, ctx, "__exit__")
    return exit_fn, call_function(f, get_attr(f, ctx, "__enter__"), [], {})


def _python_dunders(cls: type) -> bool:
    return all(isinstance(getattr(cls, name, None), types.FunctionType) for name in ("__enter__", "__exit__"))


def _type_name(ctx: V) -> str:
    return type(ctx.value).__name__ if isinstance(ctx, Const) else type(ctx).__name__


def _autocast_args(ctx: AutocastV) -> tuple:
    sig = inspect.signature(torch.amp.autocast.__init__)
    bound = sig.bind(None, *ctx.args, **ctx.kwargs)
    bound.apply_defaults()
    a = bound.arguments
    return (a["device_type"], a["dtype"], a["enabled"], a["cache_enabled"])


def restore(f, ex: ExitV) -> None:
    if ex.kind == "grad":
        set_grad(f, ex.state)
        return
    f.session.graph.call(_exit_autocast, ex.state, spec=None)
    _exit_autocast(f.session.autocast_stack.pop())
