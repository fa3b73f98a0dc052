"""Building kernels: C++ through g++ into a cached shared object, in parallel, once per hash."""

from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import tc_ir

from . import artifacts

CXX_FLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-fno-math-errno", "-w", "-std=c++17"]

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_loaded: dict[str, concurrent.futures.Future] = {}
_lock = threading.Lock()
_log = tc_ir.logs.get_logger("perf_hints")


class CompilerNotFound(RuntimeError):
    """No C++ compiler: set CXX, install g++, or run on CUDA tensors (Triton)."""


def cache_dir() -> Path:
    root = os.environ.get("TC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tc")
    path = Path(root) / "inductor"
    path.mkdir(parents=True, exist_ok=True)
    return path


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
            _loaded[key] = workers().submit(_build_and_load, source, key, store)
        return _loaded[key]


def _build_and_load(source: str, key: str, store: Any) -> ctypes.CDLL:
    out = cache_dir() / "cpp" / f"{key}.so"
    if not out.exists() and store is not None:
        lib = _restore(store, key, out)
        if lib is not None:
            return lib
    if not out.exists():
        _build(source, key, out)
        if store is not None:
            artifacts.store_put(store, "cpp_so", key, out.read_bytes())
    return ctypes.CDLL(str(out))


def _restore(store: Any, key: str, out: Path) -> ctypes.CDLL | None:
    """The stored object for ``key`` written to ``out`` and loaded; None (nothing left) if unusable."""
    data = artifacts.store_get(store, "cpp_so", key)
    if not data or not data.startswith(b"\x7fELF"):
        return None
    artifacts.write_atomic(out, data)
    try:
        return ctypes.CDLL(str(out))
    except OSError as e:  # damaged in a way the store did not see: build it instead
        _log.debug("stored kernel %s does not load (%s); building it", key, e)
        out.unlink(missing_ok=True)
        return None


def _build(source: str, key: str, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        src = Path(tmp) / f"{key}.cpp"
        src.write_text(source)
        so = Path(tmp) / f"{key}.so"
        try:
            proc = subprocess.run([compiler(), *CXX_FLAGS, str(src), "-o", str(so)], capture_output=True, text=True)
        except OSError as e:
            raise CompilerNotFound(f"cannot run {compiler()}: {e}") from e
        if proc.returncode != 0:
            raise RuntimeError(f"g++ failed on a generated kernel:\n{proc.stderr[-4000:]}\n--- source ---\n{source}")
        (out.parent / f"{key}.cpp").write_text(source)
        os.replace(so, out)
