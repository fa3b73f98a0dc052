"""The local artifact directory: resolved in one place, and trusted only for what this user wrote.

Every tc package that keeps files across processes (tc_runtime's artifact cache, tc_inductor's
shared objects, kernel sources and graph records) goes through here, so the rules hold for all:

* one root: ``$TC_CACHE_DIR``, else ``$XDG_CACHE_HOME/tc``, else ``~/.cache/tc``;
* directories are created ``0700``; a root or sub-directory that is not a directory owned by this
  user, or that is group- or world-writable, is not used (one warning; compile in memory);
* files are opened without following links and without blocking (``O_NOFOLLOW | O_NONBLOCK``),
  and read only when they are regular files owned by this user and not writable by others: a FIFO
  or device in the cache is skipped, never waited on;
* every file read back is checked against a digest recorded when this user wrote it: an
  HMAC-SHA256 under a per-user secret kept in the root (``.tc-key``, ``0600``). A planted or
  edited file fails the check (a recomputed plain sha256 is not enough) and is rebuilt; it is
  never executed or loaded.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import marshal
import os
import secrets
import stat
import tempfile
import threading
import types
import warnings
from pathlib import Path

from .logs import get_logger

log = get_logger("cache")
KEY_FILE = ".tc-key"
DIGEST_SUFFIX = ".digest"
_warned: set[str] = set()
_lock = threading.Lock()
_private: Path | None = None


def cache_root(override: str | os.PathLike[str] | None = None) -> Path:
    """The cache root (not created): ``override``, ``$TC_CACHE_DIR``, ``$XDG_CACHE_HOME/tc``, ``~/.cache/tc``."""
    if override:
        return Path(override).expanduser()
    if os.environ.get("TC_CACHE_DIR"):
        return Path(os.environ["TC_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "tc"


def untrusted_reason(st: os.stat_result, what: str) -> str | None:
    """Why a file or directory of this ``lstat`` must not be trusted (None when it may)."""
    if st.st_uid != os.geteuid():
        return f"{what} is owned by uid {st.st_uid}, not by this user ({os.geteuid()})"
    if st.st_mode & 0o022:
        return f"{what} is group- or world-writable (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def trusted_dir(path: Path) -> Path | None:
    """``path`` created ``0700`` if missing (parents too); None, with one warning, if it is not
    a directory of this user's that only this user can write."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError as e:
        return _refuse(path, f"cannot create or read it ({e})")
    if not stat.S_ISDIR(st.st_mode):
        return _refuse(path, "it is not a directory (a link or a file)")
    why = untrusted_reason(st, "it")
    return _refuse(path, why) if why else path


def trusted_subdir(root: Path | None, *parts: str) -> Path | None:
    """``root/parts...``, each level checked by :func:`trusted_dir`; None if any level fails."""
    if root is None or trusted_dir(root) is None:
        return None
    path = root
    for part in parts:
        path = trusted_dir(path / part)
        if path is None:
            return None
    return path


def _refuse(path: Path, why: str) -> None:
    with _lock:
        first = str(path) not in _warned
        _warned.add(str(path))
    if first:
        warnings.warn(f"tc: not using the cache directory {path}: {why}; compiling in memory", stacklevel=4)
    return None


def private_dir() -> Path:
    """A ``0700`` directory of this process (removed by nobody: it lives in the temp dir), for
    files that must exist on disk when the cache cannot be used."""
    global _private
    with _lock:
        if _private is None:
            _private = Path(tempfile.mkdtemp(prefix="tc-private-"))
        return _private


def read_regular(path: Path, max_bytes: int = 1 << 32) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of this user's that others cannot write;
    None (skipped, logged) for anything else: missing, a link, a FIFO or device, foreign, too big."""
    found = read_regular_stat(path, max_bytes)
    return None if found is None else found[0]


def read_regular_stat(path: Path, max_bytes: int = 1 << 32) -> tuple[bytes, os.stat_result] | None:
    """:func:`read_regular`, with the ``fstat`` of the file read (its inode, to delete only it)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as e:  # ELOOP for a link, EACCES...
        log.warning("cache: skipping %s (%s)", path, e)
        return None
    try:
        st = os.fstat(fd)
        why = "not a regular file" if not stat.S_ISREG(st.st_mode) else untrusted_reason(st, "the file")
        if why is None and st.st_size > max_bytes:
            why = f"{st.st_size} bytes, more than {max_bytes}"
        if why:
            log.warning("cache: skipping %s: %s", path, why)
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(max_bytes + 1)[:max_bytes], st
    except OSError as e:
        log.warning("cache: skipping %s (%s)", path, e)
        return None
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` as ``path`` (mode ``0600``): readers see the old file or the whole new one."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def local_key(root: Path) -> bytes | None:
    """This user's secret for the digests of ``root`` (created on first use); None if unusable."""
    path = root / KEY_FILE
    key = read_regular(path, 64)
    if key is not None and len(key) == 32:
        return key
    try:
        fd, temp = tempfile.mkstemp(dir=root, prefix=".tmp-key-")
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
        try:
            os.link(temp, path)  # atomic, and fails if another process made one first
        except FileExistsError:
            if key is not None:  # a damaged key file: replace it (its digests are lost anyway)
                os.replace(temp, path)
        finally:
            Path(temp).unlink(missing_ok=True)
    except OSError as e:
        log.warning("cache: cannot create the key file in %s (%s)", root, e)
        return None
    key = read_regular(path, 64)
    return key if key is not None and len(key) == 32 else None


def digest(key: bytes, label: str, data: bytes) -> str:
    """HMAC-SHA256 of ``label`` (what the bytes are, e.g. their file name) and ``data``."""
    return hmac.new(key, label.encode() + b"\0" + data, "sha256").hexdigest()


def write_verified(root: Path, path: Path, data: bytes) -> bool:
    """Write ``path`` (under ``root``) and record its digest beside it (``<name>.digest``)."""
    key = local_key(root)
    if key is None:
        return False
    try:
        write_atomic(path, data)
        write_atomic(path.with_name(path.name + DIGEST_SUFFIX), digest(key, path.name, data).encode())
    except OSError as e:
        log.warning("cache: cannot write %s (%s)", path, e)
        return False
    return True


def read_verified(root: Path, path: Path, max_bytes: int = 1 << 32) -> bytes | None:
    """The bytes of ``path`` if they match the digest recorded when this user wrote them; None
    (a miss: the caller rebuilds) when absent, unreadable, special, foreign or not matching."""
    data = read_regular(path, max_bytes)
    if data is None:
        return None
    key = local_key(root)
    recorded = read_regular(path.with_name(path.name + DIGEST_SUFFIX), 128)
    if key is not None and recorded is not None and hmac.compare_digest(recorded, digest(key, path.name, data).encode()):
        return data
    log.warning("cache: %s does not match the digest recorded when it was written; rebuilding it", path)
    for stale in (path, path.with_name(path.name + DIGEST_SUFFIX)):
        try:
            if stat.S_ISREG(os.lstat(stale).st_mode):
                stale.unlink()
        except OSError:
            pass
    return None


def compiled_code(source: str, filename: str) -> types.CodeType:
    """``compile(source, filename, "exec")``, read back from ``<cache root>/code`` when this
    Python compiled the same source before: generated code of a large graph (ResNet-50's training
    wrapper, its guard) is tens to hundreds of ms of ``compile`` in every warm process. The code
    object is kept as ``marshal`` bytes (what a ``.pyc`` holds) in a digest-checked file of this
    user (:func:`read_verified`); without a usable cache it is compiled each time."""
    key = hashlib.sha256(f"{importlib.util.MAGIC_NUMBER.hex()}\0{filename}\0{source}".encode()).hexdigest()[:32]
    root = trusted_subdir(cache_root(), "code")
    path = root / f"{key}.marshal" if root is not None else None
    data = read_verified(root, path) if path is not None else None
    if data is not None:
        try:
            code = marshal.loads(data)
            if isinstance(code, types.CodeType) and code.co_filename == filename:
                return code
        except (ValueError, EOFError, TypeError):  # damaged in a way the digest did not see
            pass
    code = compile(source, filename, "exec")
    if path is not None:
        write_verified(root, path, marshal.dumps(code))
    return code
