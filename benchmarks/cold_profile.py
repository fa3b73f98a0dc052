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
import importlib.util
import io
import os
import pstats
import time
from pathlib import Path

import torch
from models import MODELS, _hf, _step_fn, _wrap  # noqa: E402  (benchmarks/ is the working directory's sibling)

# (label, file suffix, function): where a cold call's time goes, summed over calls (outermost only)
PHASES = (
    ("capture", "resume/compile_region.py", "capture_region"),
    ("aten trace (forward)", "tc_autograd/api.py", "_trace"),
    ("joint trace", "tc_autograd/joint.py", "trace"),
    ("partition", "tc_autograd/partition.py", "partition"),
    ("inductor compile (all)", "tc_inductor/compile.py", "compile"),
    ("  rewrite", "tc_inductor/rewrites.py", "rewrite"),
    ("  lowering", "tc_inductor/graph_lowering.py", "run"),
    ("  scheduling", "tc_inductor/scheduler.py", "schedule"),
    ("  codegen", "tc_inductor/compile.py", "_generate"),
    ("    wrapper source", "tc_inductor/wrapper.py", "generate"),
    ("  load (kernel builds, wrapper exec)", "tc_inductor/compile.py", "_load"),
    ("    waiting on workers", "~", "<method 'acquire' of '_thread.lock' objects>"),
    ("builtins.compile", "~", "<built-in method builtins.compile>"),
    ("graph copies", "tc_ir/text.py", "copy_graph"),
)


def _phases(profiler: cProfile.Profile) -> str:
    stats = pstats.Stats(profiler).stats
    lines = []
    for label, suffix, func in PHASES:
        hits = [(cc, nc, tt, ct) for (file, _, name), (cc, nc, tt, ct, _) in stats.items()
                if name == func and file.endswith(suffix)]
        if hits:
            lines.append(f"{label:40s} {sum(h[3] for h in hits):8.2f} s  ({sum(h[0] for h in hits)} calls)")
    return "\n".join(lines)


# (label, module, attribute path) timed by --no-profile: each where its caller looks it up
TIMED = (
    ("capture", "tc_capture.cache.frame_cache", "capture_region"),
    ("guards", "tc_capture.resume.compile_region", "compile_guards"),
    ("joint trace", "tc_autograd.api", "trace"),
    ("clean passes", "tc_autograd.passes", "clean"),
    ("partition", "tc_autograd.api", "split"),
    ("trace cache entry", "tc_autograd.api", "_cache_put"),
    ("inductor compile (all)", "tc_inductor.compile", "_compile|compile"),
    ("  rewrite", "tc_inductor.compile", "rewrite"),
    ("  lowering", "tc_inductor.compile", "GraphLowering.run"),
    ("  scheduling", "tc_inductor.compile", "schedule"),
    ("  codegen (kernels, wrapper)", "tc_inductor.compile", "_generate"),
    ("    wrapper source", "tc_inductor.compile", "generate"),
    ("  load (kernel builds, wrapper exec)", "tc_inductor.compile", "_load"),
)


def _time_compiles() -> list[float]:
    """This process's CPU seconds inside tc's frame compiles (capture, tc_autograd, tc_inductor;
    not the first run of what they made), summed into the returned list's first item; the
    phases of TIMED follow it, in order (a phase's outermost calls only)."""
    import importlib

    from tc_capture.cache.frame_cache import FrameCache

    totals = [0.0] * (len(TIMED) + 1)

    def timer(inner, slot):
        depth = [0]

        def timed(*args, **kwargs):
            start = time.process_time()
            depth[0] += 1
            try:
                return inner(*args, **kwargs)
            finally:
                depth[0] -= 1
                if not depth[0]:
                    totals[slot] += time.process_time() - start
        return timed

    FrameCache._compile = timer(FrameCache._compile, 0)
    for slot, (_, module, paths) in enumerate(TIMED, 1):
        for path in paths.split("|"):  # the first that this checkout has
            owner = importlib.import_module(module)
            *parents, attr = path.split(".")
            for name in parents:
                owner = getattr(owner, name)
            if hasattr(owner, attr):
                setattr(owner, attr, timer(getattr(owner, attr), slot))
                break
    return totals


def _model(name: str, small: bool, layers: int | None):
    if name == "resnet50" and importlib.util.find_spec("torchvision") is None:
        layers = layers or 50  # no torchvision here: the same graph from _resnet50
    if layers is None:
        return MODELS[name](small)
    if name == "gpt2":
        return _hf("GPT2Config", "GPT2LMHeadModel", dict(n_embd=64, n_layer=layers, n_head=2), 2, 32, 50257)
    if name == "bert":
        return _hf("BertConfig", "BertModel", dict(hidden_size=64, num_hidden_layers=layers, num_attention_heads=2,
                                                   intermediate_size=128), 2, 32, 30522)
    if name == "resnet50":
        return _resnet50(), lambda dev: (torch.randn(2, 3, 32, 32, device=dev),)
    raise SystemExit(f"--layers is for gpt2, bert and resnet50, not {name}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("task", choices=("infer", "train"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--out", help="folder for the pstats file")
    parser.add_argument("--layers", type=int, help="small widths but this many layers (GPT-2/BERT), or "
                        "ResNet-50 itself on small images (resnet50): the graph sizes of the real models on a CPU")
    parser.add_argument("--cpu-time", action="store_true", help="profile this process's CPU time, not wall time "
                        "(steady figures on a shared machine; waiting on compile workers then counts ~0)")
    parser.add_argument("--no-profile", action="store_true", help="no profiler: only the call's wall and CPU seconds "
                        "(with the C++ back end, this process's CPU is tc's and torch's own work: kernels build in workers)")
    parser.add_argument("--backend", help="tc_inductor's back end (e.g. triton: interpreted on a CPU)")
    args = parser.parse_args()
    if args.backend:
        os.environ["TC_INDUCTOR_BACKEND"] = args.backend
    base, make_inputs = _model(args.model, args.device != "cuda", args.layers)
    model = base.to(args.device).train(args.task == "train")
    inputs = make_inputs(args.device)
    step, _ = _step_fn(args.task, _wrap("tc", model), model, inputs, args.device)
    compile_cpu = _time_compiles()
    profiler = cProfile.Profile(time.process_time) if args.cpu_time else cProfile.Profile()
    with torch.autograd.set_multithreading_enabled(False):
        start, cpu = time.perf_counter(), time.process_time()
        if not args.no_profile:
            profiler.enable()
        step()
        if args.device == "cuda":
            torch.cuda.synchronize()
        profiler.disable()
    print(f"cold first call ({args.model} {args.task}, {args.device}): {time.perf_counter() - start:.2f} s"
          f"{'' if args.no_profile else ' under cProfile'}, {time.process_time() - cpu:.2f} s of this process's CPU, "
          f"{compile_cpu[0]:.2f} s of it compiling")
    if args.no_profile:
        print("--- CPU seconds per phase\n" + "\n".join(f"{label:40s} {t:6.2f}" for (label, _, _), t in
                                                     zip(TIMED, compile_cpu[1:])))
        return
    for order in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(args.top)
        print(f"--- by {order}\n" + "\n".join(line[:170] for line in text.getvalue().splitlines() if line.strip()))
    print("--- phases (cumulative seconds)\n" + _phases(profiler))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(Path(args.out) / f"cold_{args.model}_{args.task}.prof")


class _Bottleneck(torch.nn.Module):
    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        conv = lambda i, o, k, s=1: torch.nn.Conv2d(i, o, k, s, k // 2, bias=False)  # noqa: E731
        self.body = torch.nn.Sequential(conv(cin, width, 1), torch.nn.BatchNorm2d(width), torch.nn.ReLU(),
                                        conv(width, width, 3, stride), torch.nn.BatchNorm2d(width), torch.nn.ReLU(),
                                        conv(width, width * 4, 1), torch.nn.BatchNorm2d(width * 4))
        self.down = (torch.nn.Sequential(conv(cin, width * 4, 1, stride), torch.nn.BatchNorm2d(width * 4))
                     if stride != 1 or cin != width * 4 else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + (x if self.down is None else self.down(x)))


def _resnet50(num_classes: int = 10) -> torch.nn.Module:
    """torchvision's ResNet-50 layer for layer (bottlenecks 3, 4, 6, 3), for machines without it."""
    layers, cin = [torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
                   torch.nn.MaxPool2d(3, 2, 1)], 64
    for i, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for b in range(blocks):
            layers.append(_Bottleneck(cin, width, 2 if b == 0 and i > 0 else 1))
            cin = width * 4
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(cin, num_classes)]
    return torch.nn.Sequential(*layers)


if __name__ == "__main__":
    main()
