"""Cache keys: the caller's content hashed together with the environment that makes it valid.

A compiled artifact is only reusable under the same torch, triton, Python, device and tc code, so
those are part of every key (a changed version is a different key, i.e. a clean miss), and they are
written into each entry's metadata so that a bundle from another machine can be filtered.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import platform
import struct
import sys
from pathlib import Path
from typing import Any

import attrs
import torch

from ..config import config

# Distribution name -> import name of every tc package; read as metadata, never imported.
OUR_PACKAGES = {"tcjit-ir": "tc_ir", "tcjit-capture": "tc_capture", "tcjit-autograd": "tc_autograd",
                "tcjit-inductor": "tc_inductor", "tcjit-runtime": "tc_runtime", "tcjit": "tc"}


@attrs.frozen
class Environment:
    """What an artifact was built under. Two entries are interchangeable only if these are equal."""

    python: str
    torch: str
    triton: str | None
    device: str
    ours: str  # one hash over our packages' versions (and sources, see Config.fingerprint_sources)

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Environment | None:
        """Parse metadata written by :meth:`as_dict`; None when it is missing or malformed."""
        fields = attrs.fields_dict(cls)
        if not isinstance(data, dict) or set(data) != set(fields):
            return None
        if not all(isinstance(v, str) or (v is None and k == "triton") for k, v in data.items()):
            return None
        return cls(**data)

    def mismatch(self, other: Environment) -> str | None:
        """Why an artifact built under ``other`` cannot be used here (None if it can)."""
        diffs = [f"{name} {getattr(other, name)!r} != {getattr(self, name)!r}"
                 for name in attrs.fields_dict(Environment) if getattr(self, name) != getattr(other, name)]
        return "; ".join(diffs) or None


@functools.cache
def current_environment() -> Environment:
    """The environment of this process (computed once: it reads metadata and hashes sources)."""
    return Environment(
        python=f"{sys.implementation.name}-{sys.version_info.major}.{sys.version_info.minor}",
        torch=torch.__version__,
        triton=_dist_version("triton"),
        device=_device_tag(),
        ours=_ours_fingerprint(config.fingerprint_sources),
    )


def cache_key(*parts: Any, env: Environment | None = None) -> str:
    """A 64-hex-digit key over ``parts`` (str, bytes, numbers, None, lists, tuples, dicts,
    torch dtypes/devices/sizes) and the environment.

    >>> k = cache_key("graph text", ("f32", (8, 256)), {"max_autotune": False})
    """
    h = hashlib.sha256(b"tc-key-1")
    _feed(h, (env or current_environment()).as_dict())
    for part in parts:
        _feed(h, part)
    return h.hexdigest()


def _feed(h: Any, value: Any) -> None:
    """Type-tagged, length-prefixed encoding, so ("ab", "c") and ("a", "bc") hash differently."""
    if isinstance(value, (torch.dtype, torch.device)):
        value = str(value)
    if value is None or isinstance(value, bool):
        h.update(b"n" if value is None else (b"T" if value else b"F"))
    elif isinstance(value, (str, bytes, bytearray)):
        raw = value.encode() if isinstance(value, str) else bytes(value)
        h.update((b"s" if isinstance(value, str) else b"b") + struct.pack(">Q", len(raw)) + raw)
    elif isinstance(value, (int, float)):
        _feed(h, f"{type(value).__name__}:{value!r}")
    elif isinstance(value, (list, tuple)):
        h.update(b"l" + struct.pack(">Q", len(value)))
        for item in value:
            _feed(h, item)
    elif isinstance(value, dict):
        h.update(b"d" + struct.pack(">Q", len(value)))
        for k in sorted(value, key=repr):
            _feed(h, k)
            _feed(h, value[k])
    else:
        raise TypeError(f"cache_key: cannot hash a {type(value).__name__}; pass its text or bytes")


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _device_tag() -> str:
    # Compiled kernels are specific to the GPU architecture; C++ code to the CPU's.
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"cuda-sm{major}{minor}"
    return f"cpu-{platform.machine()}"


def _ours_fingerprint(with_sources: bool) -> str:
    h = hashlib.sha256()
    for dist, module in sorted(OUR_PACKAGES.items()):
        _feed(h, (dist, _dist_version(dist)))
        if with_sources:
            _feed(h, _source_digest(module))
    return h.hexdigest()[:16]


def _source_digest(module: str) -> str | None:
    """Hash of a package's .py files, found without importing it (editable installs change code
    without changing the version number)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    h = hashlib.sha256()
    for location in spec.submodule_search_locations:
        root = Path(location)
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()
