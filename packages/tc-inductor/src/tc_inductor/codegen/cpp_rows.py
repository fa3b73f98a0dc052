"""Row caching for the C++ backend's multi-pass reductions (softmax, layer norm).

A reduction kernel walks each row once per stage; later stages recompute what earlier ones
already did (``exp(x - max)`` in softmax, ``x + residual - mean`` in layer norm). When a row is
small enough, the earlier stage writes such values into a per-thread stack array and the later
stage reads them back, so each expensive value is computed once and each input row is read
once or twice instead of once per stage.
"""

from __future__ import annotations

import functools
import math

import sympy

from .. import kir
from ..kir import Ops, UOp

ROW_LIMIT = 4096  # elements of a row cached at most (stack arrays: row x 8 bytes each)
TOTAL_BYTES = 64 * 1024  # stack bytes of all row arrays of one kernel at most
_CHEAP = frozenset({Ops.LOAD, Ops.CONST, Ops.INDEX, Ops.REDUCED})


def row_size(rranges: tuple) -> int | None:
    """The static number of elements in a row, or None when symbolic or too large to cache."""
    if not all(isinstance(s, (int, sympy.Integer)) or getattr(s, "is_Integer", False) for s in rranges):
        return None
    n = math.prod(int(s) for s in rranges)
    return n if 0 < n <= ROW_LIMIT else None


@functools.cache
def varies(u: UOp) -> bool:
    """Whether ``u`` changes along the row (reads or computes from the reduction variables)."""
    if u.op is Ops.LOAD and any(s.name.startswith("r") for s in sympy.sympify(u.arg[1]).free_symbols):
        return True
    if u.op is Ops.INDEX and any(s.name.startswith("r") for s in sympy.sympify(u.arg).free_symbols):
        return True
    return any(varies(s) for s in u.src)


def roots(stage: kir.Stage) -> list[UOp]:
    return [s.value for s in stage.inner]


def wanted(stage: kir.Stage, available: dict) -> list[UOp]:
    """The largest values of ``stage``'s row loop found in ``available``, each once."""
    found: dict[UOp, None] = {}
    seen: set = set()

    def walk(u: UOp) -> None:
        if u in seen:
            return
        seen.add(u)
        if u in available:
            found[u] = None
            return
        for s in u.src:
            walk(s)

    for r in roots(stage):
        walk(r)
    return list(found)


def worth_caching(u: UOp) -> bool:
    return u.op not in _CHEAP and varies(u)
