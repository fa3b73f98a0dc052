"""Triton compile time of N generated kernels: in-process (serial, threads) vs worker processes.

    python3 packages/tc-inductor/benchmarks/compile_workers.py [--kernels 32] [--workers 16]

Prints a table of wall-clock seconds per mode. On a GPU host the kernels are compiled for the
GPU; elsewhere for a stand-in sm_90 target (Triton's wheel brings ptxas). Each mode starts from
an empty ``TRITON_CACHE_DIR``. ``processes`` is what ``tc_inductor`` does: a worker compiles,
then this process's ``warmup`` loads the result from the cache; the ``compiled here`` column
counts the kernels this process compiled itself (0 when the workers' cache keys agree).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
import triton  # noqa: E402
from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

from tc_inductor import kir  # noqa: E402
from tc_inductor.codegen import triton_compile, triton_worker  # noqa: E402
from tc_inductor.codegen.triton import TritonBackend, heuristic_config, kernel_function_name  # noqa: E402
from tc_inductor.config import Options  # noqa: E402

UNARY = [kir.Ops.EXP, kir.Ops.SIN, kir.Ops.TANH, kir.Ops.SQRT, kir.Ops.LOG1P, kir.Ops.SIGMOID, kir.Ops.ERF]


def kernels(n: int, directory: Path) -> list[tuple[Path, str, dict]]:
    """``n`` distinct pointwise kernels for a CUDA device: files, function names, configs."""
    out = []
    for i in range(n):
        x = kir.xvars(2)
        v = kir.load("a", x[0] * 256 + x[1], torch.float32)
        for j in range(3 + i % 4):
            v = kir.binary(kir.Ops.ADD, kir.unary(UNARY[(i + j) % len(UNARY)], v), kir.const(i + j / 10, torch.float32))
        k = kir.Kernel((512, 256), (), (kir.Stage((kir.Store("b", x[0] * 256 + x[1], v, torch.float32),), ()),),
                       (("a", torch.float32),), (("b", torch.float32),), ())
        source = TritonBackend().generate(k, "kernel", Options(), "cuda")
        path = directory / f"bench_{i}.py"
        path.write_text(source)
        out.append((path, kernel_function_name(source), heuristic_config(k, False)))
    return out


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(f"{path.stem}_{time.monotonic_ns()}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def run(mode: str, specs: list, workers: int, target: tuple) -> tuple[float, int]:
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"triton-{mode}-")
    fns = [(load(p, n), cfg) for p, n, cfg in specs]
    compiled_here = []
    knobs.compilation.listener = lambda **kw: compiled_here.append(not kw["cache_hit"])
    pool = triton_compile.CompilePool(workers) if mode == "processes" else None
    if pool is not None:
        for f in pool.start(target):
            f.result()  # started while a graph is lowered: not part of the compile time

    def one(fn_cfg):
        fn, cfg = fn_cfg
        if pool is not None:
            job = triton_compile.compile_job(fn.fn.__code__.co_filename, fn.fn.__name__, ["*fp32", "*fp32"],
                                             [512 * 256], {"debug": False, **cfg}, target)
            pool.submit(job).result()
        fn.warmup(torch.float32, torch.float32, 512 * 256, grid=(1,), **cfg)

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(1 if mode == "serial" else workers) as threads:
        list(threads.map(one, fns))
    elapsed = time.perf_counter() - start
    if pool is not None:
        pool.shutdown()
    return elapsed, sum(compiled_here)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=32)
    parser.add_argument("--workers", type=int, default=triton_compile.worker_count() or 1)
    args = parser.parse_args()
    if torch.cuda.is_available():
        target = triton_compile.current_target(torch.cuda.current_device())
    else:
        target = ("cuda", 90, 32)
        driver.set_active(triton_worker.TargetOnly(GPUTarget(*target)))
    specs = kernels(args.kernels, Path(tempfile.mkdtemp(prefix="tc-bench-kernels-")))
    print(f"triton {triton.__version__}, target {target}, {args.kernels} kernels, {args.workers} workers, "
          f"{os.cpu_count()} CPUs")
    print(f"{'mode':<10} {'seconds':>8} {'compiled here':>14}")
    for mode in ("serial", "threads", "processes"):
        seconds, here = run(mode, specs, args.workers, target)
        print(f"{mode:<10} {seconds:>8.2f} {here:>14}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
