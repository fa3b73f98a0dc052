"""Triton compiles in worker processes, so that they run in parallel.

Triton's frontend (Python AST → TTIR) holds the GIL, so compiles in threads barely overlap and
slow down our own code generation. Each CUDA kernel is therefore compiled first in a worker
process (``triton_worker.py``: Triton without torch), which writes it into Triton's on-disk
cache, builds the kernel's C launcher there too (gcc, once per argument signature), and replies
with the kernel's hash and the signature, constants and attributes it compiled for. The parent
then loads it from there without Triton's own cache key (``triton_load.py``: that key hashes
Triton's sources, seconds in a fresh process); where that fails, its ``JITFunction.warmup``
finds the worker's entry (same kernel file, arguments, target and environment: the same key),
and a different hash is logged (``TC_LOGS=perf_hints``: the parent then compiled it again).

The pool starts with the first CUDA kernel generated, with ``TC_COMPILE_WORKERS`` processes
(default: the usable CPUs, at most 16; ``0``: compile in-process, in threads), and serves every
later graph of the process. Workers are started with ``subprocess`` (fork + exec, so a parent
that has initialised CUDA is safe) and stopped at interpreter exit. A failed compile or a dead
worker only costs time: the parent compiles the kernel itself, as without the pool. Autotuned
kernels (``max_autotune``: several configs, benchmarked here) and matmul templates still
compile in this process.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import tc_ir

from . import triton_worker

WORKER = Path(triton_worker.__file__)
MAX_WORKERS = 16
_log = tc_ir.logs.get_logger("perf_hints")


class CompileError(RuntimeError):
    """The worker could not compile the kernel (the message is its error)."""


class WorkerCrashed(RuntimeError):
    """The worker process died (or could not start) before it replied."""


def worker_count() -> int:
    """``TC_COMPILE_WORKERS`` if set, else the CPUs this process may use, at most 16."""
    env = os.environ.get("TC_COMPILE_WORKERS", "").strip()
    if env.isdigit():
        return int(env)
    if env:
        _log.warning("TC_COMPILE_WORKERS=%r is not a number of processes; using the default", env)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(cpus, MAX_WORKERS)


class Worker:
    """One worker process; ``request`` sends a job and waits for its reply (one job at a time)."""

    def __init__(self):
        try:
            self.proc = subprocess.Popen([sys.executable, "-P", str(WORKER)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, close_fds=True)
        except OSError as e:
            raise WorkerCrashed(f"cannot start a Triton compile worker: {e}") from e

    def request(self, job: dict) -> Any:
        try:
            triton_worker.write_message(self.proc.stdin, job)
            reply = triton_worker.read_message(self.proc.stdout)
        except (OSError, ValueError):
            reply = None
        if reply is None:
            self.close()
            raise WorkerCrashed(f"Triton compile worker {self.proc.pid} exited ({self.proc.returncode})")
        status, value = reply
        if status != "ok":
            raise CompileError(value)
        return value

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout: float = 5.0) -> None:
        """End of input ends the worker; one that does not stop in ``timeout`` is killed."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class CompilePool:
    """``n`` worker processes, each driven by one thread of a thread pool.

    ``submit(job)`` returns a future of the worker's reply: it raises ``CompileError`` with the
    worker's error text, or ``WorkerCrashed`` (the next job on that thread starts a new worker).
    """

    def __init__(self, n: int):
        self.n = n
        self._threads = concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix="tc-triton-worker")
        self._local = threading.local()
        self._workers: list[Worker] = []
        self._lock = threading.Lock()
        self.crashes = 0

    def start(self, target: tuple | None = None) -> list[concurrent.futures.Future]:
        """Start every worker now: each imports Triton and, given the ``target``, compiles a
        throwaway kernel for it (set-up that a first compile pays), while the caller goes on."""
        return [self.submit({"op": "start", "target": target}) for _ in range(self.n)]

    def submit(self, job: dict) -> concurrent.futures.Future:
        return self._threads.submit(self._run, job)

    def pids(self) -> list[int]:
        with self._lock:
            return [w.proc.pid for w in self._workers if w.alive()]

    def _run(self, job: dict) -> Any:
        worker = None
        try:
            worker = self._worker()
            return worker.request(job)
        except WorkerCrashed:
            with self._lock:
                self.crashes += 1
                if worker in self._workers:
                    self._workers.remove(worker)
            self._local.worker = None
            raise

    def _worker(self) -> Worker:
        worker = getattr(self._local, "worker", None)
        if worker is None:
            worker = self._local.worker = Worker()
            with self._lock:
                self._workers.append(worker)
        return worker

    def shutdown(self) -> None:
        """Stop the workers (running compiles finish first) and wait for them: no zombies."""
        self._threads.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            workers, self._workers = self._workers, []
        for w in workers:
            w.close()


_pool: CompilePool | None = None
_pool_lock = threading.Lock()
_disabled = False


def pool(target: tuple | None = None) -> CompilePool | None:
    """The process's compile pool, started on first use (its workers warmed up for ``target``);
    None when compiles stay in-process."""
    global _pool
    if _disabled:
        return None
    with _pool_lock:
        if _pool is None:
            n = worker_count()
            if n == 0:
                return None
            _pool = CompilePool(n)
            _pool.start(target)
        return _pool


def shutdown() -> None:
    """Stop the pool's workers (at interpreter exit; a later ``pool()`` starts new ones)."""
    global _pool
    with _pool_lock:
        p, _pool = _pool, None
    if p is not None:
        p.shutdown()


def _forget_in_child() -> None:
    """A forked child shares its parent's pipes to the workers: it starts its own pool if it compiles."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


atexit.register(shutdown)
os.register_at_fork(after_in_child=_forget_in_child)


_targets: dict[int, tuple] = {}


def current_target(device: int) -> tuple:
    """``(backend, arch, warp_size)`` of the current device, as Triton's driver reports it
    (read once per device: the worker must compile for what ``warmup`` here would)."""
    if device not in _targets:
        from triton.runtime import driver

        t = driver.active.get_current_target()
        _targets[device] = (t.backend, t.arch, t.warp_size)
    return _targets[device]


def compile_job(path: str, name: str, pointers: list[str], ints: list[int], kwargs: dict, target: tuple,
                describe: bool = False, launcher: bool = False) -> dict:
    """The request that compiles the jitted ``name`` of the module file ``path`` as
    ``fn.warmup(*args, grid=(1,), **kwargs)`` would in this process.

    ``pointers`` are Triton type strings (``"*fp32"``), ``ints`` the int arguments, ``kwargs``
    the constexprs and options (``XBLOCK``, ``num_warps``...), ``target`` ``(backend, arch,
    warp_size)`` as this process's driver reports it. The environment goes along: Triton's
    knobs (which write theirs there) and cache-invalidating variables, ``TRITON_CACHE_DIR``
    included, must be this process's for the cache keys to agree. ``describe``: the reply is
    ``{"hash", "src", "launcher"}`` (``triton_worker.compile_kernel``), not the hash alone;
    ``launcher``: the worker also builds Triton's C launcher of the kernel."""
    return {"op": "compile", "path": str(path), "name": name, "pointers": list(pointers), "ints": list(ints),
            "kwargs": dict(kwargs), "target": tuple(target), "env": dict(os.environ), "describe": describe,
            "launcher": launcher}


def precompile(fn: Any, pointers: list[str], ints: list[int], kwargs: dict, target: tuple) -> dict | None:
    """Compile the ``JITFunction`` ``fn`` in a worker and wait; the worker's description of the
    compiled kernel (``{"hash", "src", "launcher"}``, see ``compile_job``: the worker also builds
    the kernel's C launcher, on an NVIDIA target), or None (no pool, or it failed: logged, and
    the caller's ``warmup`` compiles it in-process)."""
    global _disabled
    p = pool(target)
    if p is None:
        return None
    from triton import knobs

    # JITFunction.run resolves debug from the function and the knob: pass what it resolves to here
    kwargs = {"debug": bool(fn.debug or knobs.runtime.debug), **kwargs}
    try:
        job = compile_job(fn.fn.__code__.co_filename, fn.fn.__name__, pointers, ints, kwargs, target, describe=True,
                          launcher=_launchers_in_workers())
        return p.submit(job).result()
    except WorkerCrashed as e:
        _log.debug("%s; compiling %s in-process", e, fn)
        if p.crashes > 2 * p.n:  # workers that keep dying cost more than they save
            _log.info("Triton compile workers keep crashing; compiling in-process from now on")
            _disabled = True
        return None
    except Exception as e:
        _log.debug("Triton compile worker failed on %s (%s: %s); compiling it in-process", fn, type(e).__name__, e)
        return None


def _launchers_in_workers() -> bool:
    """Whether workers build the C launchers too (``TC_TRITON_LAUNCHERS_IN_WORKERS=0``: the
    loading thread here builds them, as Triton does)."""
    return os.environ.get("TC_TRITON_LAUNCHERS_IN_WORKERS", "1") != "0"


def check_hash(fn: Any, expected: str | None, compiled: Any) -> None:
    """Log when the parent's kernel is not the one the worker compiled (so it compiled it again)."""
    digest = getattr(compiled, "hash", None)
    if expected is not None and digest != expected:
        _log.debug("Triton cache key of %s differs between worker (%s) and parent (%s)", fn, expected, digest)

