"""Portable cache bundles: move a warm artifact cache to another machine of the same kind."""

from __future__ import annotations

from typing import Any

import tc_runtime

from .backends import artifact_cache


def save_cache_artifacts() -> bytes:
    """Everything in the local artifact cache, as one versioned bundle."""
    return tc_runtime.save_artifacts(artifact_cache())


def load_cache_artifacts(data: bytes) -> Any:
    """Load a bundle made by :func:`save_cache_artifacts`; returns what was loaded and skipped."""
    return tc_runtime.load_artifacts(data, artifact_cache())
