"""Full garbage collections deferred while a compile runs (and restored after it).

A compile makes hundreds of thousands of long-lived objects (nodes, specs, sympy expressions,
fake tensors). CPython runs a full (generation 2) collection after every 10 generation-1 ones
once enough of them survived, and each walks every tracked object of the process: in a cold
compile of a 12-layer GPT-2's training step on a CPU, 9 full collections were ~1 s of the
call's 5 s of CPU, rescanning a heap that only grew. Inside :func:`deferred_full_gc` the
generation-2 threshold is raised; generations 0 and 1 still collect (young cycles, most of a
compile's garbage, are freed as before, and everything acyclic is freed by reference counting at
once). Afterwards the threshold is put back, and since the generation-2 counter is then past it,
the full collection that was deferred runs at the next generation-1 collection: postponed, not
skipped. Nested and concurrent compiles share one adjustment (the outermost restores it); a
threshold that someone else changed in between is left as they set it.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_DEFERRED_THRESHOLD = 1_000_000  # generation-1 collections before a full one: not within a compile
_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] | None = None


@contextlib.contextmanager
def deferred_full_gc() -> Iterator[None]:
    """Run the body with full collections deferred (see the module docstring)."""
    _enter()
    try:
        yield
    finally:
        _exit()


def _enter() -> None:
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gen0, gen1, gen2 = _saved
            gc.set_threshold(gen0, gen1, max(gen2, _DEFERRED_THRESHOLD))
        _depth += 1


def _exit() -> None:
    global _depth, _saved
    with _lock:
        _depth -= 1
        if _depth == 0 and _saved is not None:
            gen0, gen1, gen2 = _saved
            if gc.get_threshold() == (gen0, gen1, max(gen2, _DEFERRED_THRESHOLD)):  # nobody changed it since
                gc.set_threshold(*_saved)
            _saved = None
