"""A Triton compile worker process: runs as a script, never imported by tc_inductor.

``triton_compile.py`` starts it as ``python -P triton_worker.py`` (``-P``: this folder, which
holds a ``triton.py``, stays off ``sys.path``), so it imports Triton and the standard library
only: not torch (seconds of import, and CUDA memory), not tc_inductor. Requests arrive on stdin
and replies leave on the original stdout, each a length-prefixed pickle of plain data; anything
Triton prints goes to stderr. End of stdin ends the worker.

A compile request names a kernel module file and its jitted function, the pointer types and int
arguments, the keyword arguments of ``JITFunction.warmup`` (constexprs, num_warps...), the
target, and the parent's environment. The worker runs the parent's own path,
``fn.warmup(...)``, with a driver that reports that target and no GPU, so the compile key, and so
the entry written to Triton's on-disk cache, is the one the parent's ``warmup`` looks up.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import struct
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]  # our triton.py is not triton
    sys.modules.setdefault("torch", None)  # Triton's argument specialisation imports torch when it can
    os.environ.pop("TRITON_INTERPRET", None)  # read as Triton is imported: we compile for real
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # prints (Triton's dumps, warnings) go to stderr, never into the reply stream
    requests = sys.stdin.buffer
    while (job := read_message(requests)) is not None:
        write_message(replies, handle(job))


def read_message(stream) -> object | None:
    """One length-prefixed pickle from ``stream``; None at its end."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack("<Q", head)
    data = stream.read(size)
    return pickle.loads(data) if len(data) == size else None


def write_message(stream, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def handle(job: dict) -> tuple[str, object]:
    """``("ok", result)`` or ``("error", text)``: a failing kernel never ends the worker."""
    try:
        if job["op"] == "start":
            warm_up(job["target"])
            return "ok", os.getpid()
        return "ok", compile_kernel(job)
    except BaseException as e:  # reported to the parent, which compiles it itself
        return "error", f"{type(e).__name__}: {e}\n{''.join(traceback.format_exception(e)[-6:])}"


def compile_kernel(job: dict) -> str | dict:
    """Compile as ``JITFunction.warmup`` in the parent would; the compiled kernel's cache hash,
    or, for a job with ``describe``, ``{"hash", "src", "launcher"}``: the hash, what the parent
    needs to load the kernel without Triton's cache key (``triton_load.describe`` of the
    kernel's ``src``), and whether Triton's C launcher for it is built (``build_launcher``)."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver
    from triton.runtime.jit import MockTensor

    apply_environment(job["env"])
    driver.set_active(TargetOnly(GPUTarget(*job["target"])))
    fn = kernel_function(job["path"], job["name"])
    args = [MockTensor(t.removeprefix("*")) for t in job["pointers"]] + list(job["ints"])
    kernel = fn.warmup(*args, grid=(1,), **job["kwargs"])
    if not job.get("describe"):
        return kernel.hash
    return {"hash": kernel.hash, "src": describe(kernel.src),
            "launcher": build_launcher(kernel) if job.get("launcher") else "not asked"}


def describe(src) -> dict:
    """``triton_load.describe`` (this script imports nothing of tc_inductor: kept equal by a test)."""
    import json

    plain = {"signature": dict(src.signature), "constants": sorted(map(list, src.constants.items())),
             "attrs": sorted(map(list, src.attrs.items()))}
    return json.loads(json.dumps(plain, default=lambda obj: obj._asdict() if hasattr(obj, "_asdict") else vars(obj)))


def build_launcher(kernel) -> str:
    """Build Triton's C launcher of ``kernel`` (gcc, once per argument signature) into Triton's
    cache, where the parent's first load of the kernel finds it: built here, beside the other
    compiles, not in the parent when it loads the kernel. ``"built"``, or why not (no CUDA
    driver library here: the parent builds it)."""
    if kernel.metadata.target.backend != "cuda":
        return "not a CUDA kernel"
    try:
        from triton.backends.nvidia.driver import CudaLauncher

        CudaLauncher(kernel.src, kernel.metadata)
        return "built"
    except Exception as e:
        return f"{type(e).__name__}: {e}"


WARM_UP_KERNEL = """import triton
import triton.language as tl


@triton.jit
def tc_warm_up(in_ptr, out_ptr, n, XBLOCK: tl.constexpr):
    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(out_ptr + i, tl.exp(tl.load(in_ptr + i, i < n)), i < n)
"""


def warm_up(target: tuple | None) -> None:
    """Import Triton and, given the target, compile a throwaway kernel into a cache of its own: a
    process's first compile also pays for setting up Triton's compiler (~0.5 s), better paid
    while the parent is still lowering than when its kernels arrive."""
    import triton.compiler  # noqa: F401

    if target is None:
        return
    with tempfile.TemporaryDirectory(prefix="tc-warm-up-") as tmp:
        path = os.path.join(tmp, "tc_warm_up.py")
        with open(path, "w") as f:
            f.write(WARM_UP_KERNEL)
        compile_kernel({"path": path, "name": "tc_warm_up", "pointers": ["*fp32", "*fp32"], "ints": [1000],
                        "kwargs": {"XBLOCK": 128}, "target": target, "env": dict(os.environ, TRITON_CACHE_DIR=tmp)})
        _modules.pop(path, None)


class TargetOnly:
    """A driver for compiling without a GPU: reports one target, nothing else.

    The "device" is the target itself, so a ``JITFunction``'s per-device caches (its binder and
    compiled kernels) are kept per target when jobs for several GPUs share this worker."""

    def __init__(self, target):
        self.target = target

    def get_current_device(self):
        return (self.target.backend, self.target.arch, self.target.warp_size)

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target


def apply_environment(env: dict) -> None:
    """The parent's environment (Triton's knobs write theirs there), less the interpreter."""
    for key in set(os.environ) - set(env):
        del os.environ[key]
    os.environ.update(env)
    os.environ.pop("TRITON_INTERPRET", None)


_modules: dict[str, object] = {}


def kernel_function(path: str, name: str):
    """The jitted ``name`` of the module file ``path``, imported once (as the parent does)."""
    if path not in _modules:
        spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _modules[path] = module
    return getattr(_modules[path], name)


if __name__ == "__main__":
    main()
