"""Where tc's cold first call goes: one cell of benchmarks/models.py, first step under cProfile.

    TC_CACHE_DIR=$(mktemp -d) python benchmarks/cold_profile.py gpt2 train --out prof/

Runs the cell's first step (capture, joint graph, lowering, code generation, Triton and C++
builds, the first launches) with an empty cache under cProfile, on the calling thread for the
backward, and prints the wall time and the functions with the most cumulative and own time;
``--out`` keeps the pstats file. Run it in a fresh process with a fresh ``TC_CACHE_DIR`` (and a
fresh ``TRITON_CACHE_DIR``) so that nothing is warm. Work in the compile pool's worker processes
is not seen here, only the time spent waiting for it.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path

import torch
from models import MODELS, _step_fn, _wrap  # noqa: E402  (benchmarks/ is the working directory's sibling)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("task", choices=("infer", "train"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--out", help="folder for the pstats file")
    args = parser.parse_args()
    base, make_inputs = MODELS[args.model](args.device != "cuda")
    model = base.to(args.device).train(args.task == "train")
    inputs = make_inputs(args.device)
    step, _ = _step_fn(args.task, _wrap("tc", model), model, inputs, args.device)
    profiler = cProfile.Profile()
    with torch.autograd.set_multithreading_enabled(False):
        start = time.perf_counter()
        profiler.enable()
        step()
        if args.device == "cuda":
            torch.cuda.synchronize()
        profiler.disable()
    print(f"cold first call ({args.model} {args.task}, {args.device}): {time.perf_counter() - start:.2f} s under cProfile")
    for order in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(args.top)
        print(f"--- by {order}\n" + "\n".join(line[:170] for line in text.getvalue().splitlines() if line.strip()))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(Path(args.out) / f"cold_{args.model}_{args.task}.prof")


if __name__ == "__main__":
    main()
