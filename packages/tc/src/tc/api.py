"""``tc.compile``: capture composed with a back end, for functions, methods and modules."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch

import tc_capture

from .options import Options


def compile(
    model: Callable | None = None,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: str | Callable = "inductor",
    mode: str | None = None,
    options: dict[str, Any] | None = None,
    disable: bool = False,
) -> Any:
    """Compile a function, method or ``nn.Module``; also a decorator, with or without arguments.

    >>> import torch, tc
    >>> @tc.compile
    ... def f(x):
    ...     return torch.relu(x) * 2
    >>> f(torch.ones(3))
    tensor([2., 2., 2.])

    ``backend``: ``"inductor"`` (default), ``"aot_eager"``, ``"eager"``, a registered name, or a
    callable ``(gm, example_inputs) -> callable`` that gets a ``torch.fx.GraphModule``, as
    ``torch.compile``'s back ends do (``tc.tc_ir_backend`` marks one that wants ``tc_ir`` graphs).
    ``mode``: ``None``/``"default"``,
    ``"reduce-overhead"`` (CUDA graphs), ``"max-autotune"``. ``options``: ``fallback`` (default
    True: a back-end failure runs that graph eagerly with one warning), ``cudagraphs``,
    ``max_autotune``, and options of ``tc_inductor.compile``. A compiled module is the same
    module to its user: attributes, ``parameters()``, ``train()``/``eval()``, ``to()``, and
    ``state_dict()`` keys are the original's.
    """
    if model is None:
        return functools.partial(compile, fullgraph=fullgraph, dynamic=dynamic, backend=backend,
                                 mode=mode, options=options, disable=disable)
    if disable:
        return model
    capture_backend = _capture_backend(backend, mode, options)
    compiled = tc_capture.optimize(capture_backend, fullgraph=fullgraph, dynamic=dynamic)(model)
    if isinstance(model, torch.nn.Module):
        settings = {"fullgraph": fullgraph, "dynamic": dynamic, "backend": backend, "mode": mode, "options": options}
        return _same_module(model, compiled, settings)
    return compiled


# Weak values: a configuration's back-end object lives while a compiled frame's cache uses it, so a
# user's back end (and what it holds) goes with the last compiled function or module using it.
_BACKENDS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _capture_backend(backend: str | Callable, mode: str | None, options: dict[str, Any] | None) -> Callable:
    """One back-end object per configuration, so capture shares compiled frames between every
    ``tc.compile`` of the same code with the same settings (regional compilation)."""
    key = (backend, mode, repr(sorted((options or {}).items())))
    found = _BACKENDS.get(key)
    if found is None:
        # the back ends (tc_autograd, tc_inductor, tc_runtime) load here, not at ``import tc``
        from .backends import lookup, with_fallback

        name = backend if isinstance(backend, str) else getattr(backend, "__name__", "custom")
        found = _BACKENDS[key] = with_fallback(lookup(backend), name, Options.from_user(mode, options))
    return found


def _recompiled(module: torch.nn.Module, settings: dict[str, Any]) -> torch.nn.Module:
    """What a pickled compiled module loads as: the original module, compiled again (on its first
    call, as any new ``tc.compile``); nothing compiled is pickled."""
    return compile(module, **settings)


def _same_module(module: torch.nn.Module, compiled: Callable, settings: dict[str, Any]) -> torch.nn.Module:
    """A module that shares ``module``'s state (its ``__dict__``) but calls the compiled forward.

    Sharing the state, rather than wrapping, is what keeps ``state_dict()`` keys, attribute
    writes, ``train()``/``to()`` and optimizers pointing at the very same parameters.
    """
    cls = type(module)
    namespace = {
        "__call__": lambda self, *args, **kwargs: compiled(*args, **kwargs),
        "_orig_mod": property(lambda self: module),
        # pickle / torch.save / deepcopy: the original module and the settings, recompiled on load
        "__reduce_ex__": lambda self, protocol: (_recompiled, (module, settings)),
        "__module__": cls.__module__,
        "__doc__": cls.__doc__,
        "__qualname__": cls.__qualname__,
    }
    # the original's name: libraries read it (HF save_pretrained writes it as the architecture)
    compiled_cls = type(cls.__name__, (cls,), namespace)
    wrapper = object.__new__(compiled_cls)
    object.__setattr__(wrapper, "__dict__", module.__dict__)
    return wrapper
