"""Profile one cell of benchmarks/models.py under tc and torch.compile: where the GPU time goes.

    python benchmarks/profile_cell.py gpt2 infer        # top kernels, launch counts, graph breaks

Prints, per variant: kernels launched per step, total CUDA time per step, the 15 kernels that
take the most time, and for tc the graph and graph-break count of the model's forward.
"""

from __future__ import annotations

import copy
import sys

import torch
from models import MODELS, _step_fn, _wrap  # noqa: E402  (benchmarks/ is the working directory's sibling)

import tc


def profile(step, steps: int = 5) -> list:
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    return [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]


def main() -> None:
    name, task = sys.argv[1], sys.argv[2]
    base, make_inputs = MODELS[name](False)
    inputs = make_inputs("cuda")
    report = tc.explain(copy.deepcopy(base).cuda().eval(), *inputs)
    print(f"tc capture: {report.graph_count} graph(s), {report.graph_break_count} break(s)")
    for b in report.break_reasons[:10]:
        print("   ", b)
    for variant in sys.argv[3:] or ("torch.compile", "tc"):
        model = copy.deepcopy(base).cuda().train(task == "train")
        fn = _wrap(variant, model)
        step, _ = _step_fn(task, fn, model, inputs, "cuda")
        events = profile(step)
        launches = sum(e.count for e in events) / 5
        total = sum(e.self_device_time_total for e in events) / 5 / 1e3
        print(f"\n== {variant}: {launches:.0f} kernel launches/step, {total:.2f} ms CUDA time/step")
        for e in sorted(events, key=lambda e: -e.self_device_time_total)[:15]:
            print(f"  {e.self_device_time_total / 5 / 1e3:8.3f} ms  x{e.count / 5:5.0f}  {e.key[:100]}")


if __name__ == "__main__":
    main()
