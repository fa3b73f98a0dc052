"""Building kernels: C++ through g++ into a cached shared object, in parallel, once per hash.

A shared object runs code when it is loaded, so one is loaded only from bytes that match the
digest recorded when this user built or restored it (``tc_ir.storage``): a planted, damaged or
foreign ``.so`` in the cache is rebuilt, never loaded. The verified bytes are copied into a
private ``0700`` directory of this process and loaded from there, so what is loaded is what
was checked."""

from __future__ import annotations

import collections
import concurrent.futures
import ctypes
import functools
import hashlib
import itertools
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import tc_ir
from tc_ir import storage

from . import artifacts

CXX_FLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-fno-math-errno", "-w", "-std=c++17"]

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_loaded: dict[str, concurrent.futures.Future] = {}
_lock = threading.Lock()
_loads = itertools.count()
# Kernels this process has built or loaded, by kind (tc_inductor.compile_counters): tests check that
# running a symbolic graph at another size builds nothing new.
COUNTERS: collections.Counter = collections.Counter()
_log = tc_ir.logs.get_logger("perf_hints")


class CompilerNotFound(RuntimeError):
    """No C++ compiler: set CXX, install g++, or run on CUDA tensors (Triton)."""


def cache_dir() -> Path:
    """``<cache root>/inductor`` when the cache may be trusted, else a private directory of this
    process (the warning says why): files there are never shared between processes."""
    return storage.trusted_subdir(storage.cache_root(), "inductor") or storage.private_dir()


def verified_read(path: Path) -> bytes | None:
    """The bytes of a cache file if they match their recorded digest (None: rebuild it)."""
    return storage.read_verified(path.parent, path)


def ensure_file(path: Path, data: bytes) -> None:
    """Make ``path`` hold exactly ``data`` (a kernel source about to be imported): whatever else
    is there, planted or damaged, is replaced first."""
    if storage.read_regular(path) != data:
        storage.trusted_subdir(path.parent.parent, path.parent.name)
        storage.write_atomic(path, data)


def verified_write(path: Path, data: bytes) -> None:
    """Write a cache file and record its digest (see :func:`verified_read`)."""
    if storage.trusted_subdir(path.parent.parent, path.parent.name) is not None:
        storage.write_verified(path.parent, path, data)


@functools.cache
def compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if not cxx:
        raise CompilerNotFound(
            "tc_inductor's C++ backend needs a C++ compiler (g++ or clang++) on PATH, or CXX set; "
            "none was found. Install one (e.g. `apt-get install g++`) or use CUDA tensors.")
    return cxx


@functools.cache
def toolchain_key() -> str:
    """What a compiled object depends on besides its source: flags and machine.

    Not the compiler's version: any compiler's build of a source is a correct kernel for this
    CPU, and leaving it out lets a machine without a compiler load objects from a bundle."""
    cpu = ""
    try:
        cpu = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        pass
    return hashlib.sha256("\n".join([" ".join(CXX_FLAGS), platform.machine(), cpu]).encode()).hexdigest()[:16]


def source_hash(source: str) -> str:
    return hashlib.sha256((toolchain_key() + source).encode()).hexdigest()[:24]


def workers() -> concurrent.futures.ThreadPoolExecutor:
    """The compile pool: g++ processes and Triton compiles (which release the GIL in MLIR and ptxas)."""
    global _pool
    if _pool is None:
        _pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1),
                                                      thread_name_prefix="tc-compile")
    return _pool


def compile_cpp_async(source: str, store: Any = None) -> concurrent.futures.Future:
    """Start building ``source`` (each g++ runs as its own worker process); a future of the CDLL.

    With an artifact ``store``, a shared object missing here is taken from it, and one built here
    is put in it (kind ``"cpp_so"``, keyed by the source hash), so a bundle carries it."""
    if store is None:
        compiler()  # no store to fall back on: say now that nothing can be built
    key = source_hash(source)
    with _lock:
        if key not in _loaded:
            COUNTERS["cpp_kernels"] += 1
            _loaded[key] = workers().submit(_build_and_load, source, key, store)
        return _loaded[key]


def _build_and_load(source: str, key: str, store: Any) -> ctypes.CDLL:
    out = cache_dir() / "cpp" / f"{key}.so"
    data = verified_read(out)
    if data is not None:
        return _load_verified(data, key)
    if store is not None:
        lib = _restore(store, key, out)
        if lib is not None:
            return lib
    data = _build(source, key)
    verified_write(out, data)
    if store is not None:
        artifacts.store_put(store, "cpp_so", key, data)
    return _load_verified(data, key)


def _restore(store: Any, key: str, out: Path) -> ctypes.CDLL | None:
    """The stored object for ``key``, recorded in the local cache and loaded; None if unusable."""
    data = artifacts.store_get(store, "cpp_so", key)
    if not data or not data.startswith(b"\x7fELF"):
        return None
    try:
        lib = _load_verified(data, key)
    except OSError as e:  # damaged in a way the store did not see: build it instead
        _log.debug("stored kernel %s does not load (%s); building it", key, e)
        return None
    verified_write(out, data)
    return lib


def _load_verified(data: bytes, key: str) -> ctypes.CDLL:
    """Load exactly these (verified) bytes: a copy in this process's private directory, under a
    name of its own, so nothing can swap the file between the check and ``dlopen``."""
    private = storage.private_dir() / f"{key}-{os.getpid()}-{threading.get_ident()}-{next(_loads)}.so"
    private.write_bytes(data)
    try:
        return ctypes.CDLL(str(private))
    finally:
        private.unlink(missing_ok=True)  # the mapping stays; the name is not reused


def _build(source: str, key: str) -> bytes:
    """The shared object built from ``source`` (in a private temporary directory)."""
    with tempfile.TemporaryDirectory(prefix="tc-build-") as tmp:
        src = Path(tmp) / f"{key}.cpp"
        src.write_text(source)
        so = Path(tmp) / f"{key}.so"
        try:
            proc = subprocess.run([compiler(), *CXX_FLAGS, str(src), "-o", str(so)], capture_output=True, text=True)
        except OSError as e:
            raise CompilerNotFound(f"cannot run {compiler()}: {e}") from e
        if proc.returncode != 0:
            raise RuntimeError(f"g++ failed on a generated kernel:\n{proc.stderr[-4000:]}\n--- source ---\n{source}")
        return so.read_bytes()
