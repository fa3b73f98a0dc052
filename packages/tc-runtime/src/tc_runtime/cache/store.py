"""The on-disk artifact cache: bytes in, bytes out, keyed by (kind, key).

Layout (``LAYOUT`` is bumped when it changes, so old trees are simply ignored)::

    <root>/.tc-key                           this user's secret for the entries' digests (0600)
    <root>/v2/<kind>/<key[:2]>/<key>.bin     one entry (see entry.py for its bytes)
    <root>/v2/<kind>/<key[:2]>/.tmp-*        a write in progress (or left by a crash)

Guarantees: a write is a temp file in the same directory + ``os.replace``, so readers see a whole
old entry or a whole new one, never a mix, and any number of processes may share a root. A read
checks length and an HMAC-SHA256 under this user's local key (``tc_ir.storage``); a corrupt,
truncated, planted or edited entry is deleted and reported as a miss. The root is used only when
it is a ``0700``-style directory of this user's (else one warning, and every get is a miss and
every put is dropped: the caller compiles in memory); entries are opened without following links
or blocking, and only regular files of this user's are read (a FIFO is skipped). I/O errors are
logged and treated as misses or dropped writes: the cache never breaks a compile.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from tc_ir import storage
from tc_ir.logs import get_logger

from ..config import config
from . import entry
from .keys import Environment, cache_key, current_environment

LAYOUT = "v2"
log = get_logger("cache")

_KIND = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_KEY = re.compile(r"[A-Za-z0-9_-]{2,128}")
_STALE_TEMP_S = 3600.0


@attrs.define
class Counters:
    """What this cache object has seen, for tests and for the timing report."""

    hits: int = 0
    misses: int = 0
    corrupt: int = 0
    env_mismatch: int = 0
    puts: int = 0
    io_errors: int = 0
    # {kind: {"hits": n, "misses": n}}: which stage of a compile read its result back, and which built it
    by_kind: dict[str, dict[str, int]] = attrs.field(factory=dict)

    def count(self, kind: str, outcome: str) -> None:
        row = self.by_kind.setdefault(kind, {"hits": 0, "misses": 0})
        row[outcome] += 1


@attrs.frozen
class EntryInfo:
    kind: str
    key: str
    path: Path
    size: int
    mtime: float


class ArtifactCache:
    """Content-addressed store of compiled artifacts shared by every tc package.

    >>> cache = ArtifactCache(tmp_path)
    >>> k = cache.key(graph_text, input_specs, options)
    >>> if (src := cache.get("triton", k)) is None:
    ...     src = generate(); cache.put("triton", k, src)
    """

    def __init__(self, root: str | os.PathLike[str] | None = None, *, env: Environment | None = None):
        self.root = Path(root).expanduser() if root is not None else config.resolved_cache_dir()
        self.env = env or current_environment()
        self.counters = Counters()
        self._key: bytes | None | bool = False  # False: not looked up yet

    def local_key(self) -> bytes | None:
        """The key of this user's entries; None when the root is not trusted (nothing is used)."""
        if self._key is False:
            root = storage.trusted_dir(self.root)
            self._key = storage.local_key(root) if root is not None else None
        return self._key

    def __repr__(self) -> str:
        return f"ArtifactCache({str(self.root)!r})"

    @property
    def base(self) -> Path:
        return self.root / LAYOUT

    def key(self, *parts: Any) -> str:
        """Hash of ``parts`` and this cache's environment (see :func:`cache_key`)."""
        return cache_key(*parts, env=self.env)

    def path(self, kind: str, key: str) -> Path:
        """Where the entry (kind, key) lives; raises ValueError for names unsafe as paths."""
        if not isinstance(kind, str) or not _KIND.fullmatch(kind):
            raise ValueError(f"bad cache kind {kind!r} (letters, digits, '_.-', at most 64)")
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise ValueError(f"bad cache key {key!r} (letters, digits, '_-', 2 to 128)")
        return self.base / kind / key[:2] / f"{key}.bin"

    # -- the protocol other packages use ------------------------------------------------------

    def get(self, kind: str, key: str) -> bytes | None:
        """The bytes stored under (kind, key), or None on a miss (absent, corrupt, other env)."""
        found = self.read_entry(kind, key)
        if found is None:
            self.counters.count(kind, "misses")
            return None
        meta, data = found
        if Environment.from_dict(meta.get("env")) != self.env:
            # Built elsewhere (a key made without the environment); another process may want it.
            self.counters.env_mismatch += 1
            self.counters.misses += 1
            self.counters.count(kind, "misses")
            return None
        self.counters.hits += 1
        self.counters.count(kind, "hits")
        _touch(self.path(kind, key))
        return data

    def put(self, kind: str, key: str, data: bytes) -> None:
        """Store ``data`` under (kind, key), atomically; replaces any previous entry."""
        self.write_entry(kind, key, data, self.env.as_dict())

    # -- entry-level access, used by bundles ---------------------------------------------------

    def read_entry(self, kind: str, key: str) -> tuple[dict[str, Any], bytes] | None:
        """(meta, data) of a valid entry; deletes a corrupt one. Does not check the environment."""
        path = self.path(kind, key)
        secret = self.local_key()
        found = storage.read_regular_stat(path, config.max_entry_bytes + (1 << 20)) if secret else None
        if found is None:  # absent, untrusted root, or not a regular file of this user's
            self.counters.misses += 1
            return None
        blob, inode = found[0], found[1].st_ino
        try:
            meta, data = entry.decode(blob, secret)
            if meta.get("kind") != kind or meta.get("key") != key:
                raise entry.CorruptEntry(f"entry names ({meta.get('kind')}, {meta.get('key')})")
        except entry.CorruptEntry as e:
            self._drop_corrupt(path, inode, str(e))
            return None
        return meta, data

    def write_entry(self, kind: str, key: str, data: bytes, env: dict[str, Any]) -> None:
        """Write one entry with the given environment metadata (a bundle keeps the producer's)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"cache data must be bytes, not {type(data).__name__}")
        path = self.path(kind, key)
        secret = self.local_key()
        if secret is None or storage.trusted_subdir(self.root, LAYOUT, kind, key[:2]) is None:
            self.counters.io_errors += 1
            return
        meta = {"kind": kind, "key": key, "env": env, "created": time.time()}
        try:
            _atomic_write(path, entry.encode(meta, bytes(data), secret))
        except OSError as e:
            self._io_error("write", path, e)
            return
        self.counters.puts += 1

    def contains(self, kind: str, key: str) -> bool:
        """True when a file exists for (kind, key); says nothing about its integrity."""
        return self.path(kind, key).is_file()

    # -- accounting -----------------------------------------------------------------------------

    def entries(self, kind: str | None = None) -> Iterator[EntryInfo]:
        """Every entry file under the current layout (optionally of one kind)."""
        kinds = [self.base / kind] if kind else _subdirs(self.base)
        for kind_dir in kinds:
            for shard in _subdirs(kind_dir):
                yield from _entries_in(kind_dir.name, shard)

    def size(self) -> int:
        """Total bytes of the entries (headers included)."""
        return sum(e.size for e in self.entries())

    def stats(self) -> dict[str, dict[str, int]]:
        """{kind: {"entries": n, "bytes": b}}."""
        out: dict[str, dict[str, int]] = {}
        for e in self.entries():
            row = out.setdefault(e.kind, {"entries": 0, "bytes": 0})
            row["entries"] += 1
            row["bytes"] += e.size
        return out

    def clear(self, kind: str | None = None) -> int:
        """Delete every entry (of one kind) and leftover temp files; returns entries removed."""
        removed = sum(_unlink(e.path) for e in list(self.entries(kind)))
        for temp in self.base.glob(f"{kind or '*'}/*/.tmp-*"):
            _unlink(temp)
        return removed

    def prune(self, max_bytes: int) -> int:
        """Delete least-recently-used entries until the total is at most ``max_bytes``."""
        for temp in self.base.glob("*/*/.tmp-*"):
            if _age(temp) > _STALE_TEMP_S:
                _unlink(temp)
        by_age = sorted(self.entries(), key=lambda e: e.mtime)
        total, removed = sum(e.size for e in by_age), 0
        for e in by_age:
            if total <= max_bytes:
                break
            total -= e.size
            removed += _unlink(e.path)
        return removed

    # -- failure handling -----------------------------------------------------------------------

    def _drop_corrupt(self, path: Path, inode: int, why: str) -> None:
        self.counters.corrupt += 1
        self.counters.misses += 1
        log.warning("cache: corrupt entry %s (%s); deleted, will rebuild", path, why)
        try:
            # Only unlink the file we read: a concurrent writer may have replaced it meanwhile.
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        except OSError:
            pass

    def _io_error(self, what: str, path: Path, error: OSError) -> None:
        self.counters.io_errors += 1
        if what == "read":
            self.counters.misses += 1
        log.warning("cache: %s of %s failed (%s); continuing without it", what, path, error)
        return None


def _atomic_write(path: Path, blob: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            if config.fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        _unlink(Path(temp))
        raise


def _entries_in(kind: str, shard: Path) -> Iterator[EntryInfo]:
    for path in shard.glob("*.bin"):
        try:
            st = path.stat()
        except OSError:
            continue  # removed by another process while we listed
        yield EntryInfo(kind, path.stem, path, st.st_size, st.st_mtime)


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir())
    except OSError:
        return []


def _unlink(path: Path) -> int:
    try:
        path.unlink()
        return 1
    except OSError:
        return 0


def _touch(path: Path) -> None:
    # mtime doubles as "last used" for prune(); best effort.
    try:
        os.utime(path)
    except OSError:
        pass


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0
