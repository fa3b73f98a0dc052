"""Profile one cell of benchmarks/models.py under tc and torch.compile: where the GPU time goes.

    python benchmarks/profile_cell.py gpt2 infer        # top kernels, launch counts, graph breaks

Prints, per variant (``gpu_profile.report``): wall and GPU time per step, kernel launches, the
kernels and host-side torch ops that take the most time and the Python functions with the most
time of their own (the host side of a launch-bound step); for tc, the graph and graph-break count
of the model's forward. Both compilers run in this process: compare kernels here, not wall times.
tc is imported only when a tc variant is asked for: ``profile_cell.py gpt2 infer torch.compile``
profiles torch.compile in a process where tc never was; ``tc-max`` is tc with max-autotune
(``TRITON_PRINT_AUTOTUNING=1`` prints each kernel's chosen config), ``TC_PROFILE_TOP=N`` lists
N kernels. ``--compile-optimizer`` compiles
training's ``opt.step`` with each variant's compiler, as ``models.py`` does:

    python benchmarks/profile_cell.py resnet50 train tc-ro --compile-optimizer
"""

from __future__ import annotations

import copy
import os
import sys

from gpu_profile import report
from models import MODELS, _step_fn, _wrap  # noqa: E402  (benchmarks/ is the working directory's sibling)


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--compile-optimizer"]
    compile_optimizer = len(args) < len(sys.argv) - 1
    name, task = args[0], args[1]
    base, make_inputs = MODELS[name](False)
    inputs = make_inputs("cuda")
    variants = args[2:] or ("torch.compile", "tc")
    if any(v.startswith("tc") for v in variants):
        import tc

        explained = tc.explain(copy.deepcopy(base).cuda().eval(), *inputs)
        print(f"tc capture: {explained.graph_count} graph(s), {explained.graph_break_count} break(s)")
        for b in explained.break_reasons[:10]:
            print("   ", b)
    for variant in variants:
        model = copy.deepcopy(base).cuda().train(task == "train")
        fn = _wrap(variant, model)
        step, _ = _step_fn(task, fn, model, inputs, "cuda", variant if compile_optimizer else None)
        report(step, f"{variant} {name} {task}", top=int(os.environ.get("TC_PROFILE_TOP", 15)), python_top=25)


if __name__ == "__main__":
    main()
