"""Logging and debug dumps shared by every tc package.

``TC_LOGS=graph_breaks,recompiles,guards,graph,output_code,perf_hints,fusion`` turns on the
named areas (``all`` turns on every area); each area logs through the standard ``logging``
logger ``tc.<area>``. ``TC_DEBUG_DIR=path`` makes :func:`dump` write every stage's text there.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
from pathlib import Path

_configured: set[str] = set()
_counter = itertools.count()


def _areas() -> set[str]:
    return {a.strip() for a in os.environ.get("TC_LOGS", "").split(",") if a.strip()}


def enabled(area: str) -> bool:
    """True when ``TC_LOGS`` names ``area`` (or ``all``), or its logger was set to DEBUG by hand."""
    areas = _areas()
    return area in areas or "all" in areas or get_logger(area).isEnabledFor(logging.DEBUG)


def get_logger(area: str) -> logging.Logger:
    """The logger of one area, printing to stderr at DEBUG level when ``TC_LOGS`` names it."""
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


def dump(stage: str, name: str, text: str) -> Path | None:
    """Write ``text`` as ``TC_DEBUG_DIR/<n>_<stage>_<name>.txt``; returns the path (None when off)."""
    root = os.environ.get("TC_DEBUG_DIR")
    if not root:
        return None
    path = Path(root) / f"{next(_counter):04d}_{stage}_{name}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
