"""The default device as ambient state, the way capture reads it.

``torch.set_default_device(d)`` and ``with torch.device(d):`` enter a ``DeviceContext``, a torch
function mode that does one thing: a factory called without a ``device=`` (the functions torch
lists in ``torch.utils._device._device_constructors``: ``torch.zeros``, ``torch.arange``,
``torch.tensor``, ...) gets ``d``; every other call passes through unchanged, ``new_*`` methods
and ``*_like`` functions included. So a call made under such modes only is compiled like any
other:

* capture reads the default device once per region and writes it into each such factory call
  of the graph (``default_device``), so the graph means what eager computes whether or not the
  mode is active when it runs, and fake tensors are made on that device;
* the entry's guards check the default device (``GuardSet.ambient``), so a call under another
  one (or none) captures again;
* while tc checks guards, captures, compiles and runs a region the modes are set aside
  (``set_aside``): tc's own tensors are not redirected, and neither the guards nor the compiled
  code pay the mode's Python hook on each torch call they make. The device stays readable
  through ``default_device`` meanwhile (the guard reads it there, and so does a compiled call
  made from inside a region). Python that runs at a graph break runs under the modes, as in
  eager.

Any other mode (a user's ``TorchFunctionMode``, a dispatch mode, a ``DeviceContext`` subclass)
makes the call run eagerly (``frame_cache``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch
from torch.utils._device import DeviceContext, _device_constructors


class _SetAside(threading.local):
    device: torch.device | None = None  # the default device of the modes set aside on this thread


_aside = _SetAside()  # a class default: reading it when unset raises nothing (a guard reads it per call)
_stack_len = torch._C._len_torch_function_stack
_stack_at = torch._C._get_function_stack_at
_dispatch_len = torch._C._len_torch_dispatch_stack
_pop, _push = torch._C._pop_torch_function_stack, torch._C._push_on_torch_function_stack


def only_device_modes() -> bool:
    """Whether every active torch function mode is a ``DeviceContext`` and no dispatch mode is
    active (true when no mode is)."""
    if _dispatch_len():
        return False
    i = _stack_len()
    while i:
        i -= 1
        if type(_stack_at(i)) is not DeviceContext:
            return False
    return True


def default_device() -> torch.device | None:
    """The device a factory called without one gets now: the innermost ``DeviceContext``'s (as
    in eager, where it handles the call first), else the one set aside on this thread, else
    ``None`` (no default device set: torch's own default, the CPU)."""
    i = _stack_len()
    while i:
        i -= 1
        mode = _stack_at(i)
        if type(mode) is DeviceContext:
            return mode.device
    return _aside.device


def redirected(fn: Callable) -> bool:
    """Whether a ``DeviceContext`` gives calls of ``fn`` without a ``device=`` its device."""
    try:
        return fn in _device_constructors()
    except TypeError:  # unhashable: not one of torch's functions
        return False


def queried(device: torch.device | None) -> torch.device:
    """What ``torch.get_default_device()`` answers under ``device``: with the index of the
    current device of its type where it names none (``cuda`` -> ``cuda:0``), as torch finds it."""
    if device is None:
        return torch.device("cpu")
    return device if device.index is not None else torch.empty(0, device=device).device


class set_aside:
    """``with set_aside():`` the ``DeviceContext`` modes off torch's stack while tc works, their
    device kept readable through ``default_device``; put back in their order on the way out. The
    caller has checked that they are the only modes (``only_device_modes``). A class, not a
    generator: a compiled call under the mode enters one per cache lookup and per run."""

    __slots__ = ("modes", "saved")

    def __enter__(self) -> None:
        self.modes = modes = []
        while _stack_len():
            modes.append(_pop())
        if modes:  # the first popped is the innermost
            self.saved, _aside.device = _aside.device, modes[0].device

    def __exit__(self, *exc) -> None:
        modes = self.modes
        if modes:
            while modes:
                _push(modes.pop())
            _aside.device = self.saved
