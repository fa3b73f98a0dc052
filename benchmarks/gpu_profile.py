"""Where a step's time goes: GPU kernels, host-side torch ops and tc's own Python.

    from gpu_profile import report
    report(step, label="tc dynamic 8x512")   # step: a no-argument callable, already warm

Prints, per step: wall time, GPU kernel time, kernel launches, the kernels that take the most GPU
time, the torch ops that take the most host time, and (``python_top``) the Python functions with
the most time of their own under cProfile (the backward too: run on the calling thread there):
the host side of a launch-bound step.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time

import torch


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _wall(step, steps: int) -> float:
    _sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _sync()
    return (time.perf_counter() - start) / steps * 1e3


def report(step, label: str, steps: int = 10, top: int = 12, python_top: int = 15) -> dict:
    for _ in range(3):
        step()
    wall = _wall(step, steps)
    acts = [torch.profiler.ProfilerActivity.CPU] + [torch.profiler.ProfilerActivity.CUDA] * torch.cuda.is_available()
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        _sync()
    events = prof.key_averages()
    gpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    launches = sum(e.count for e in gpu) / steps
    gpu_ms = sum(e.self_device_time_total for e in gpu) / steps / 1e3
    print(f"\n=== {label}: wall {wall:.3f} ms/step, GPU kernels {gpu_ms:.3f} ms/step, {launches:.0f} launches/step")
    for e in sorted(gpu, key=lambda e: -e.self_device_time_total)[:top]:
        print(f"  gpu {e.self_device_time_total / steps / 1e3:8.3f} ms  x{e.count / steps:5.0f}  {e.key[:90]}")
    cpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    for e in sorted(cpu, key=lambda e: -e.self_cpu_time_total)[:top]:
        print(f"  cpu {e.self_cpu_time_total / steps / 1e3:8.3f} ms  x{e.count / steps:5.0f}  {e.key[:90]}")
    if python_top:
        # the backward runs on the calling thread (autograd's device threads are not profiled)
        profiler = cProfile.Profile()
        with torch.autograd.set_multithreading_enabled(False):
            profiler.enable()
            for _ in range(steps):
                step()
            _sync()
            profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(python_top)
        lines = [line for line in text.getvalue().splitlines() if line.strip()]
        print("  python (tottime over", steps, "steps):")
        for line in lines[lines.index(next(x for x in lines if "ncalls" in x)):][:python_top + 1]:
            print("   ", line[:150])
    synced = idle_gaps(step) if torch.cuda.is_available() else {}
    return {"label": label, "wall_ms": wall, "gpu_ms": gpu_ms, "launches": launches, **synced}


def idle_gaps(step, steps: int = 5, top: int = 8) -> dict:
    """Steps run one at a time (synchronised after each, as ``models.py`` times them): the median
    step, the GPU's idle time inside a step (waiting for the host: launch latency the back-to-back
    wall above hides), and the longest idle gaps, named by the kernels on either side."""
    times = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            _sync()
            start = time.perf_counter()
            step()
            _sync()
            times.append((time.perf_counter() - start) * 1e3)
    kernels = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start)
    gaps, idle, end, before = [], 0.0, None, None
    for s, e, name in kernels:
        if end is not None and s > end:
            gaps.append((s - end, before, name))
            idle += s - end
        if end is None or e > end:
            end, before = e, name
    median = sorted(times)[len(times) // 2]
    # gaps between steps (the synchronisation) are not the step's: drop the steps - 1 longest
    between = sorted(g for g, _, _ in gaps)[-(steps - 1):] if steps > 1 and gaps else []
    idle_ms = (idle - sum(between)) / 1e3 / steps
    print(f"  synced: {median:.3f} ms/step (median of {steps}), GPU idle inside a step {idle_ms:.3f} ms; longest gaps:")
    for g, a, b in sorted(gaps, reverse=True)[steps - 1:steps - 1 + top]:
        print(f"    {g / 1e3:7.3f} ms  after {a[:60]}  before {b[:60]}")
    return {"synced_ms": median, "idle_ms": idle_ms}

