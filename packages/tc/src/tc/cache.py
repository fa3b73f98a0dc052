"""Portable cache bundles: move a warm artifact cache to another machine of the same kind."""

from __future__ import annotations

from typing import Any

import tc_runtime

from .backends import artifact_cache


def save_cache_artifacts(key: bytes | str | None = None) -> bytes:
    """Everything in the local artifact cache, as one versioned bundle, signed (HMAC-SHA256)
    with ``key`` when given. A bundle is code: keep the key secret, as you would a signing key."""
    return tc_runtime.save_artifacts(artifact_cache(), key=key)


def load_cache_artifacts(data: bytes, key: bytes | str | None = None, trust: bool = False) -> Any:
    """Load a bundle made by :func:`save_cache_artifacts`; returns what was loaded and skipped.

    The bundle's signature must match ``key``; unsigned or mis-signed bundles raise
    ``tc_runtime.BundleError`` unless ``trust=True``: its kernels and wrappers run at later compiles."""
    return tc_runtime.load_artifacts(data, artifact_cache(), key=key, trust=trust)
