"""A process-wide epoch that changes whenever any ``nn.Module``'s state may have changed.

Guards on module state (parameters, buffers, submodules, flags) are checked only when the
epoch moved since an entry last checked a root module. The epoch moves on
``__setattr__``/``__delattr__`` (this covers ``self.training = ...``, parameter and submodule
replacement), ``_apply`` (``.to()``, ``.half()``, ``.cuda()`` rewrite ``param.data`` and keep
the object, so identity alone would miss them), ``train``/``eval``, ``load_state_dict``,
``requires_grad_``, the ``register_*`` methods and hook registration/removal.

Not seen: ``param.requires_grad_(...)`` called on one tensor, ``param.data = t`` by hand, and
``object.__setattr__`` on a module; after those, call :func:`bump` (``tc_capture.reset()`` also
works).
"""

from __future__ import annotations

import functools
import threading

import torch

EPOCH = [0]
_lock = threading.Lock()
_installed = False

_MODULE_METHODS = ("__setattr__", "__delattr__", "_apply", "train", "load_state_dict", "requires_grad_",
                   "register_buffer", "register_parameter", "add_module", "register_module",
                   "register_forward_hook", "register_forward_pre_hook")


def bump() -> None:
    EPOCH[0] += 1


def _bumping(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        EPOCH[0] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            EPOCH[0] += 1

    wrapper._tc_bumps = True
    return wrapper


def install() -> None:
    """Patch ``nn.Module`` once so that its state changes move the epoch."""
    global _installed
    with _lock:
        if _installed:
            return
        for name in _MODULE_METHODS:
            fn = getattr(torch.nn.Module, name)
            if not getattr(fn, "_tc_bumps", False):
                setattr(torch.nn.Module, name, _bumping(fn))
        handle = torch.utils.hooks.RemovableHandle
        handle.remove = _bumping(handle.remove)
        _installed = True
