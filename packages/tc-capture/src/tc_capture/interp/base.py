"""The bottom of the symbolic interpreter: what every other module of ``interp`` may import.

* :class:`Unsupported`, the one exception of the interpreter (a graph break with a reason);
* the sentinels ``NULL`` (CPython's NULL stack slot) and ``UNBOUND`` (an unassigned local), shared
  with the resume code and the real-value executor;
* the opcode table :data:`HANDLERS` and its :func:`handler` decorator (``opcodes.py`` fills it)
  and :class:`StackFrame`, what both executors of that table share;
* the interpreter's mutually recursive entry points. Calling a function iterates, iterating calls
  ``__iter__``, reading an attribute calls a property... so ``calls``, ``iteration`` and the
  modules below them need each other. Each entry point is *defined once*, in the module that owns
  it, which registers it here with :func:`defines`; lower modules call it through the forwarder
  of the same name below. There are no imports inside function bodies and no import cycle: a module
  imports only modules below it (``tests/test_import_graph.py`` checks it).
"""

from __future__ import annotations

import functools
import os
import sysconfig
from collections.abc import Callable
from typing import Any

import torch

from ..bytecode import decode as _decode

NULL = type("NULL", (), {"__repr__": lambda self: "NULL", "__slots__": ()})()
UNBOUND = type("UNBOUND", (), {"__repr__": lambda self: "UNBOUND", "__slots__": ()})()
DONE = object()  # returned by a handler whose frame has returned
EXHAUSTED = object()  # what a frame's ``next_item`` returns at the end of an iterator

HANDLERS: dict[str, Callable[[Any, Any], Any]] = {}


@functools.cache
def real_path(filename: str) -> str:
    """``os.path.realpath`` of a source file, computed once per file. Whose code a called function
    is (the user's, the standard library's, torch's) is asked at every call the interpreter
    inlines, and ``realpath`` makes a system call per component of the path: uncached it was a
    tenth of GPT-2's warm first call on the H100 host (43 of 404 samples of the main thread)."""
    return os.path.realpath(filename)


# Folder prefixes end with a separator: ".../site-packages/torch" must not match torchvision.
STDLIB_DIR = os.path.join(real_path(sysconfig.get_paths()["stdlib"]), "")
TORCH_DIR = os.path.join(os.path.dirname(real_path(torch.__file__)), "")
OPTIM_DIR = os.path.join(TORCH_DIR, "optim", "")


class Unsupported(Exception):
    """Something the interpreter will not capture: becomes a graph break with this reason."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
        self.filename: str | None = None
        self.lineno: int | None = None
        self.nested = False  # raised inside an inlined call (the call then runs as a frame of its own)


def handler(*names: str):
    """Register the decorated function as the handler of opcodes ``names``."""
    def register(fn):
        for name in names:
            HANDLERS[name] = fn
        return fn

    return register


# ---- late-bound entry points ------------------------------------------------------------------
_ENTRY_POINTS: dict[str, Callable] = {}


def defines(fn: Callable) -> Callable:
    """Register ``fn`` as the implementation of the entry point of the same name."""
    _ENTRY_POINTS[fn.__name__] = fn
    return fn


def call_function(f, fn, args: list, kwargs: dict):
    """What calling ``fn`` does while capturing (``calls.call_function``: the call rules)."""
    return _ENTRY_POINTS["call_function"](f, fn, args, kwargs)


def iterate(f, v):
    """``iter(v)`` while capturing (``iteration.iterate``)."""
    return _ENTRY_POINTS["iterate"](f, v)


def pull(f, it):
    """``next(it)`` while capturing, None when exhausted (``iteration.pull``)."""
    return _ENTRY_POINTS["pull"](f, it)


# ---- what both executors of the opcode table share ----------------------------------------------
class StackFrame:
    """The value stack, locals (a dict by name; a missing name is unbound), cells (by name) and
    instruction pointer of a frame run by the opcode table (``opcodes.py``).

    A subclass is an executor, and supplies the *value operations* the handlers ask for, all with
    the same names and arguments: ``const``, ``null``/``is_null``/``is_none``, ``truth``,
    ``unbound_local``, ``load_global``/``store_global``, ``load_deref``/``store_deref``/
    ``make_cell``, ``import_name``/``import_from``, ``call``/``call_ex``, ``make_function``,
    ``get_attr``/``super_attr``/``set_attr``/``del_attr``, ``build_tuple``/``build_list``/
    ``build_set``/``build_map``/``build_const_key_map``/``build_slice``/``build_string``,
    ``list_append``/``set_add``/``map_add``/``list_extend``/``set_update``/``dict_update``,
    ``list_to_tuple``, ``unpack``/``unpack_ex``, ``length``, ``getitem``/``setitem``/``delitem``/
    ``slice_of``, ``binary``/``compare``/``is_same``/``contains``/``unary``, ``format_value``,
    ``get_iter``/``next_item``, ``start_generator``/``yield_value``/``yield_from``,
    ``before_with``, ``raise_``/``exception_matches``/``reraise``. The symbolic ``interp.frame.Frame``
    tracks values; ``resume.real_frame.RealFrame`` computes them.
    """

    def __init__(self, code, globals_: dict, ip: int = 0, stack: list | None = None):
        self.code, self.globals = code, globals_
        self.insts, self.index_of = _decode(code)
        self.stack: list = list(stack or [])
        self.ip = ip
        self.kw_names: tuple = ()
        self.result = None

    def push(self, v) -> None:
        self.stack.append(v)

    def pop(self):
        return self.stack.pop()

    def popn(self, n: int) -> list:
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    def jump(self, offset: int) -> None:
        self.ip = self.index_of[offset]


def hashable(x) -> bool:
    """Can ``x`` be looked up in a table (a dict or set of rules keyed by the called object)?"""
    try:
        hash(x)
        return True
    except TypeError:
        return False
