"""Compiled kernels in an artifact store, so a bundle of the store warms another machine.

A store is any object with ``get(kind, key) -> bytes | None`` and ``put(kind, key, data)``
(``tc_runtime.ArtifactCache`` in the umbrella). The store checks its own integrity; what we add
is a fall-back: anything we cannot read back is treated as missing, and the caller builds.

Several files go into one entry as a small length-prefixed archive (no pickle: restoring an
entry writes files, it never runs code)::

    b"TCKA1\\n" then, per file: u32 name length, name (utf-8, "dir/file"), u64 size, bytes
"""

from __future__ import annotations

import json
import os
import re
import struct
import threading
from pathlib import Path
from typing import Any

import tc_ir

_log = tc_ir.logs.get_logger("perf_hints")
MAGIC = b"TCKA1\n"
_SAFE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def store_get(store: Any, kind: str, key: str) -> bytes | None:
    """``store.get``, with a failing store read as a miss (we then build)."""
    try:
        data = store.get(kind, key)
    except Exception as e:  # a broken store must never break a compile
        _log.debug("artifact store get(%s, %s) failed (%s: %s); building", kind, key, type(e).__name__, e)
        return None
    return data if isinstance(data, (bytes, bytearray)) else None


def store_put(store: Any, kind: str, key: str, data: bytes) -> None:
    try:
        store.put(kind, key, data)
    except Exception as e:
        _log.debug("artifact store put(%s, %s) failed (%s: %s)", kind, key, type(e).__name__, e)


def write_atomic(path: Path, data: bytes) -> None:
    """Readers see the old file or the whole new one, never a part (concurrent processes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# ---- the archive -------------------------------------------------------------------------------

def pack(files: dict[str, bytes]) -> bytes:
    """``{"dir/file": bytes}`` → one archive."""
    parts = [MAGIC]
    for name, data in sorted(files.items()):
        raw = name.encode()
        parts += [struct.pack("<I", len(raw)), raw, struct.pack("<Q", len(data)), bytes(data)]
    return b"".join(parts)


def unpack(data: bytes) -> dict[str, bytes]:
    """The files of an archive; ``ValueError`` when it is truncated, padded or names a path outside."""
    if not data.startswith(MAGIC):
        raise ValueError("not a tc kernel archive")
    files, pos = {}, len(MAGIC)
    while pos < len(data):
        (n,) = _read(data, pos, "<I")
        name = data[pos + 4:pos + 4 + n].decode()
        pos += 4 + n
        (size,) = _read(data, pos, "<Q")
        pos += 8
        if pos + size > len(data):
            raise ValueError("truncated archive")
        files[_checked_name(name)] = data[pos:pos + size]
        pos += size
    return files


def _read(data: bytes, pos: int, fmt: str) -> tuple:
    if pos + struct.calcsize(fmt) > len(data):
        raise ValueError("truncated archive")
    return struct.unpack_from(fmt, data, pos)


def _checked_name(name: str) -> str:
    parts = name.split("/")
    if len(parts) != 2 or not all(_SAFE.match(p) and p not in (".", "..") for p in parts):
        raise ValueError(f"bad file name in archive: {name!r}")
    return name


# ---- Triton's cache directories ----------------------------------------------------------------

def pack_dirs(root: Path, dirs: list[str], extra: dict[str, bytes] | None = None) -> bytes:
    """The files of ``root/<dir>`` for each dir (Triton's per-kernel cache directories), and
    ``extra`` files (``{"dir/file": bytes}``, restored beside them)."""
    files = {name: bytes(data) for name, data in (extra or {}).items()}
    for d in dirs:
        for path in sorted((root / d).iterdir()):
            if path.is_file() and _SAFE.match(path.name) and ".tmp" not in path.name and path.name != "lock":
                files.setdefault(f"{d}/{path.name}", path.read_bytes())
    return pack(files)


def restore_dirs(data: bytes, root: Path) -> list[str]:
    """Write an archive's files under ``root``; the directories written.

    Triton's group files (``__grp__*.json``) list their files by absolute path: they are pointed
    at ``root``, and written last, so Triton sees a hit only once every file it lists is there."""
    files = unpack(data)
    groups = {n: _relocated_group(b, root / n.split("/")[0]) for n, b in files.items() if _is_group(n)}
    if all(_same_file(root / n, groups.get(n, b)) for n, b in files.items()):
        return sorted({n.split("/")[0] for n in files})  # already there (a warm Triton cache): nothing to write
    for name, blob in files.items():
        if name not in groups:
            write_atomic(root / name, blob)
    for name, blob in groups.items():
        write_atomic(root / name, blob)
    return sorted({n.split("/")[0] for n in files})


def _same_file(path: Path, data: bytes) -> bool:
    """Whether ``path`` holds ``data``: compared in full for small files (group and metadata
    json), by size for the rest (binaries and IR named by the hash of what produced them)."""
    try:
        if len(data) <= 4096:
            return path.read_bytes() == data
        return path.stat().st_size == len(data)
    except OSError:
        return False


def _is_group(name: str) -> bool:
    base = name.split("/")[1]
    return base.startswith("__grp__") and base.endswith(".json")


def _relocated_group(blob: bytes, directory: Path) -> bytes:
    try:
        group = json.loads(blob)
        paths = group["child_paths"]
        group["child_paths"] = {child: str(directory / Path(p).name) for child, p in paths.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"bad Triton group file: {e}") from e
    return json.dumps(group).encode()
