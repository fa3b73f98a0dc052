"""Where a host-bound step's CPU time goes: one cell of benchmarks/models.py, without a profiler.

    python benchmarks/host_split.py gpt2 infer tc          # also: eager, torch.compile

Prints the median over 60 synchronised steps of ``host`` (until ``step()`` returns: what the CPU
spends enqueueing the step) and ``total`` (until the GPU is done). For tc it then wraps, from
outside, the guards, the runners, the generated wrappers and, inside the wrappers, the
allocations (``empty_strided``), the Triton launches (``k0``, ``k1``, ...), the extern calls
(``ext_*``) and the input layouts (``_layout``), and prints the time and count of each per step
(the wrapping itself adds ~0.5 µs a call), with each launcher's launch path (``_direct``: the C
launcher; ``_via_run``: Triton's ``JITFunction.run``). Run one variant per process: tc is
imported only for a tc variant. A profiler's overhead scales with the Python calls a step makes,
which differ between the compilers: this measures each without one.
"""

from __future__ import annotations

import collections
import copy
import gc
import re
import statistics
import sys
import time

import torch
from models import MODELS, _step_fn, _wrap  # noqa: E402  (benchmarks/ is the working directory's sibling)

CATEGORIES = ("guard", "run", "wrapper", "alloc", "launch", "extern", "layout")


def _measure(step, n: int = 60) -> tuple[float, float]:
    hosts, totals = [], []
    for _ in range(n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        enqueued = time.perf_counter()
        torch.cuda.synchronize()
        hosts.append(enqueued - start)
        totals.append(time.perf_counter() - start)
    return statistics.median(hosts) * 1e3, statistics.median(totals) * 1e3


def _instrument(acc: dict, counts: dict) -> collections.Counter:
    """Wrap tc's guards, runners, wrappers and the wrappers' globals; the launch paths found."""
    def timed(fn, category):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                acc[category] += time.perf_counter() - start
                counts[category] += 1
        return wrapper

    compiled_graph = sys.modules["tc_inductor.compile"].CompiledGraph
    frame_cache = sys.modules["tc_capture.cache.frame_cache"].FrameCache
    paths = collections.Counter()
    for graph in [o for o in gc.get_objects() if isinstance(o, compiled_graph)]:
        env = graph._fn.__globals__
        for name, value in list(env.items()):
            launcher = re.fullmatch(r"k\d+", name)
            if launcher and hasattr(value, "launch"):  # a TritonLauncher: the wrapper calls k<n>.launch(...)
                paths[getattr(value.launch, "__name__", type(value.launch).__name__)] += 1
                value.launch = timed(value.launch, "launch")
                continue
            category = ("alloc" if name in ("empty_strided", "empty") else "extern" if name.startswith("ext_")
                        else "launch" if launcher else "layout" if name == "_layout" else None)
            if category and callable(value):
                env[name] = timed(value, category)
        graph._fn = timed(graph._fn, "wrapper")
    for cache in [o for o in gc.get_objects() if isinstance(o, frame_cache)]:
        for entries in cache.entries.values():
            for entry in entries:
                entry.guard, entry.run = timed(entry.guard, "guard"), timed(entry.run, "run")
    return paths


def main() -> None:
    name, task, variant = sys.argv[1:4]
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    base, make_inputs = MODELS[name](False, None)
    model = copy.deepcopy(base).cuda().train(task == "train")
    if task == "infer":
        for m in model.modules():
            m.eval()
    torch.manual_seed(0)
    step, _ = _step_fn(task, _wrap(variant, model), model, make_inputs("cuda"), "cuda")
    start = time.perf_counter()
    while time.perf_counter() - start < 3:  # past the first steps' transient (models.py's warm-up)
        step()
    host, total = _measure(step)
    print(f"{variant} {name} {task}: host {host:.2f} ms, total {total:.2f} ms a step")
    if not variant.startswith("tc"):
        return
    acc, counts = collections.defaultdict(float), collections.defaultdict(int)
    paths = _instrument(acc, counts)
    _measure(step, 5)
    acc.clear()
    counts.clear()
    n = 60
    host, total = _measure(step, n)
    print(f"  instrumented: host {host:.2f} ms, total {total:.2f} ms; launchers by launch path: {dict(paths)}")
    for category in CATEGORIES:
        print(f"    {category:8s} {acc[category] / n * 1e3:7.3f} ms  x{counts[category] / n:6.1f}")


if __name__ == "__main__":
    main()
