"""A cold first call's timeline: when each Triton kernel compiled in the worker pool, and for how long.

    TC_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d) python benchmarks/cold_timeline.py gpt2 train

Runs one cell of benchmarks/models.py's first step with empty caches (give it fresh cache
directories, as above) and prints, in seconds from the call's start: the wall time; per kind of
event (a worker compile, the whole ahead-of-time warm-up of a kernel, its artifact-store writes,
tc_inductor's code generation and kernel loads) the count, first start, last end, sum, median and
maximum; when tc_inductor generated and loaded each graph; and the slowest worker compiles by
kernel name and pointer count. With ``$OUT`` set, the Triton source of each compile over 3 s
is written there. This is how the 11-13 s kernel that a GPT-2 training forward waited on was
found (benchmarks/NOTES.md §21): ``cold_profile.py`` shows where this process spends its time,
not what it waits for.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from pathlib import Path

import torch
from models import MODELS, _step_fn, _wrap  # noqa: E402  (benchmarks/ is the working directory's sibling)

import tc  # noqa: F401  (its modules are wrapped below)
from tc_inductor.codegen import triton as triton_codegen
from tc_inductor.codegen import triton_compile

_start = [0.0]
_events: list[tuple[str, float, float, str]] = []
_lock = threading.Lock()
_sources: dict[str, str] = {}


def _wrap_timed(owner, attr: str, label: str, name_of=lambda args: "") -> None:
    fn = getattr(owner, attr)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            with _lock:
                _events.append((label, start - _start[0], time.perf_counter() - _start[0], name_of(args)))
    setattr(owner, attr, timed)


def _kernel_name(args) -> str:
    name = f"{getattr(getattr(args[0], 'fn', None), '__name__', '?')}[{len(args[1])}p]"
    _sources[name] = getattr(args[0], "src", "")
    return name


def main() -> None:
    compile_module = sys.modules["tc_inductor.compile"]
    _wrap_timed(triton_compile, "precompile", "worker compile", _kernel_name)
    _wrap_timed(triton_codegen, "_warmup", "warm-up (all)")
    _wrap_timed(triton_codegen, "_save_compiled", "store compiled")
    _wrap_timed(triton_codegen, "_save_description", "store description")
    _wrap_timed(compile_module, "_generate", "inductor generate")
    _wrap_timed(compile_module, "_load", "inductor load")
    name, task = sys.argv[1], sys.argv[2]
    base, make_inputs = MODELS[name](False)
    model = base.cuda().train(task == "train")
    step, _ = _step_fn(task, _wrap("tc", model), model, make_inputs("cuda"), "cuda")
    _start[0] = time.perf_counter()
    step()
    torch.cuda.synchronize()
    print(f"cold first call {name} {task}: {time.perf_counter() - _start[0]:.2f} s; "
          f"{triton_compile.worker_count()} compile workers")
    by_kind = collections.defaultdict(list)
    for label, start, end, kernel in _events:
        by_kind[label].append((start, end, kernel))
    for label, spans in by_kind.items():
        durations = sorted(end - start for start, end, _ in spans)
        print(f"{label:20s} n={len(spans):4d} first start {min(s for s, _, _ in spans):6.2f} "
              f"last end {max(e for _, e, _ in spans):6.2f} sum {sum(durations):7.2f} "
              f"median {durations[len(durations) // 2]:5.2f} max {durations[-1]:5.2f}")
    for label in ("inductor generate", "inductor load"):
        for start, end, _ in sorted(by_kind.get(label, [])):
            print(f"  {label}: {start:6.2f} -> {end:6.2f}")
    slowest = sorted(((end - start, kernel) for start, end, kernel in by_kind.get("worker compile", [])), reverse=True)
    print("slowest worker compiles:", ", ".join(f"{kernel} {seconds:.1f} s" for seconds, kernel in slowest[:6]))
    if os.environ.get("OUT"):
        for seconds, kernel in slowest:
            if seconds > 3:
                (Path(os.environ["OUT"]) / f"{kernel.split('[')[0]}.py").write_text(_sources.get(kernel, ""))


if __name__ == "__main__":
    main()
