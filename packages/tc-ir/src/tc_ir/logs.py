"""Logging and debug dumps shared by every tc package.

``TC_LOGS=graph_breaks,recompiles,guards,graph,output_code,perf_hints,fusion`` turns on the
named areas (``all`` turns on every area); each area logs through the standard ``logging``
logger ``tc.<area>``. An area not in :data:`AREAS` is an error that lists them (a typo must not
silently log nothing). ``TC_DEBUG_DIR=path`` makes :func:`dump` write every stage's text there.

The areas of every package are listed here, in the one package they all import, so that
``TC_LOGS`` is checked the same way whichever packages are installed.
"""

from __future__ import annotations

import difflib
import itertools
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

AREAS: dict[str, str] = {
    "graph_breaks": "each graph break: reason and the user's file:line (tc_capture)",
    "recompiles": "each recompilation and the guard that failed (tc_capture)",
    "guards": "the guards of each cache entry, and their generated source (tc_capture)",
    "graph": "each captured graph as text (tc_capture)",
    "aot": "forward and backward ATen graphs, trace-cache hits (tc_autograd)",
    "fusion": "the scheduler's fusion decisions (tc_inductor)",
    "output_code": "generated wrappers and kernels, also when read back from the cache (tc_inductor)",
    "perf_hints": "what kept code slower than it could be: extern calls, recompiled kernels, timings",
    "cache": "artifact-cache reads and writes (tc_runtime)",
    "cudagraphs": "CUDA-graph recordings, and why a call ran without one (tc_runtime)",
}
_configured: set[str] = set()
_counter = itertools.count()


def _areas() -> set[str]:
    areas = {a.strip() for a in os.environ.get("TC_LOGS", "").split(",") if a.strip()}
    unknown = sorted(areas - set(AREAS) - {"all"})
    if unknown:
        raise ValueError(f"TC_LOGS: unknown area(s) {', '.join(map(repr, unknown))}{_did_you_mean(unknown)}; "
                         f"valid areas: all, {', '.join(AREAS)}")
    return areas


def _did_you_mean(unknown: list[str]) -> str:
    close = [m for a in unknown for m in difflib.get_close_matches(a, AREAS, n=1)]
    return f" (did you mean {', '.join(map(repr, close))}?)" if close else ""


def describe() -> str:
    """The areas ``TC_LOGS`` accepts, one a line, with what each shows."""
    return "\n".join(f"{name:13} {what}" for name, what in AREAS.items())


def enabled(area: str) -> bool:
    """True when ``TC_LOGS`` names ``area`` (or ``all``), or its logger was set to DEBUG by hand."""
    areas = _areas()
    return area in areas or "all" in areas or get_logger(area).isEnabledFor(logging.DEBUG)


def get_logger(area: str) -> logging.Logger:
    """The logger of one area, printing to stderr at DEBUG level when ``TC_LOGS`` names it."""
    if area not in AREAS:
        raise ValueError(f"tc_ir.logs: {area!r} is not a log area; add it to tc_ir.logs.AREAS ({', '.join(AREAS)})")
    logger = logging.getLogger(f"tc.{area}")
    if area not in _configured:
        _configured.add(area)
        areas = _areas()
        if area in areas or "all" in areas:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(f"[tc.{area}] %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.DEBUG)
    return logger


def dump(stage: str, name: str, text: str | Callable[[], str]) -> Path | None:
    """Write ``text`` as ``TC_DEBUG_DIR/<n>_<stage>_<name>.txt``; returns the path (None when off).
    ``text`` may be a function making it, called only when dumps are on (formatting a large graph
    for nothing cost a warm start milliseconds per graph)."""
    root = os.environ.get("TC_DEBUG_DIR")
    if not root:
        return None
    path = Path(root) / f"{next(_counter):04d}_{stage}_{name}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text() if callable(text) else text)
    return path
