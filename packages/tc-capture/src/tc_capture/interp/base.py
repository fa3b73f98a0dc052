"""The bottom of the symbolic interpreter: what every other module of ``interp`` may import.

* :class:`Unsupported`, the one exception of the interpreter (a graph break with a reason);
* the sentinels ``NULL`` (CPython's NULL stack slot) and ``UNBOUND`` (an unassigned local), shared
  with the resume code and the real-value executor;
* the opcode table :data:`HANDLERS` and its :func:`handler` decorator (each ``ops_*`` module
  registers its opcodes here);
* the interpreter's mutually recursive entry points. Calling a function iterates, iterating calls
  ``__iter__``, reading an attribute calls a property... so ``calls``, ``iteration`` and the
  modules below them need each other. Each entry point is *defined once*, in the module that owns
  it, which registers it here with :func:`defines`; lower modules call it through the forwarder
  of the same name below. There are no imports inside function bodies and no import cycle: a module
  imports only modules below it (``tests/test_import_graph.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NULL = type("NULL", (), {"__repr__": lambda self: "NULL", "__slots__": ()})()
UNBOUND = type("UNBOUND", (), {"__repr__": lambda self: "UNBOUND", "__slots__": ()})()
DONE = object()  # returned by a handler whose frame has returned

HANDLERS: dict[str, Callable[[Any, Any], Any]] = {}


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
