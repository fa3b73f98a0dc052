"""The compiled optimizer step: steps/s of AdamW and SGD over a GPT-2-sized parameter list.

Variants, each in a process of its own (tc is never imported where torch.compile runs):
eager ``foreach=True`` (the CUDA default), eager ``fused=True``, ``torch.compile(opt.step)`` and
``tc.compile(opt.step)`` (both over the foreach optimizer). Every variant starts from the same
parameters, gradients and state, and after the timed steps its parameters are compared with eager
foreach's after as many steps (same tolerance as the test suite's).

    python benchmarks/optimizer.py                     # CUDA: GPT-2 small's 148 tensors, 124M values
    python benchmarks/optimizer.py --opts adamw --steps 50
    python benchmarks/optimizer.py --opts all --steps 5  # every variant: Adam, amsgrad, maximize, lr tensor...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

VARIANTS = ("eager-foreach", "eager-fused", "torch.compile", "tc")
OPTS = ("adamw", "sgd")  # timed by default; --opts all: every variant of OPTIMIZERS (each checked against eager)
OPTIMIZERS = {  # name -> (class, keyword arguments); "lr_tensor": lr given as a 0-dim tensor
    "adamw": ("AdamW", {"lr": 1e-3, "weight_decay": 0.01}),
    "adam": ("Adam", {"lr": 1e-3}),
    "adam_amsgrad_wd": ("Adam", {"lr": 1e-3, "amsgrad": True, "weight_decay": 0.1}),
    "adamw_maximize": ("AdamW", {"lr": 1e-3, "maximize": True}),
    "adamw_lr_tensor": ("AdamW", {"lr_tensor": 1e-3, "weight_decay": 0.01}),
    "sgd": ("SGD", {"lr": 1e-2, "momentum": 0.9}),
    "sgd_plain": ("SGD", {"lr": 1e-2}),
    "sgd_nesterov_wd": ("SGD", {"lr": 1e-2, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    "sgd_maximize_lr_tensor": ("SGD", {"lr_tensor": 1e-2, "momentum": 0.9, "maximize": True}),
}


def _shapes(small: bool) -> list[tuple[int, ...]]:
    """GPT-2 small's parameter shapes (12 layers, hidden 768, vocab 50257, 1024 positions)."""
    h, layers = (64, 2) if small else (768, 12)
    shapes = [(50257 if not small else 1000, h), (1024 if not small else 64, h)]
    for _ in range(layers):
        shapes += [(h,), (h,), (h, 3 * h), (3 * h,), (h, h), (h,), (h,), (h,), (h, 4 * h), (4 * h,), (4 * h, h), (h,)]
    return shapes + [(h,), (h,)]


def _state(device: str) -> list[torch.nn.Parameter]:
    g = torch.Generator(device="cpu").manual_seed(0)
    params = []
    for shape in _shapes(device == "cpu"):
        p = torch.nn.Parameter(torch.randn(shape, generator=g).to(device))
        p.grad = torch.randn(shape, generator=g).to(device)
        params.append(p)
    return params


def _optimizer(name: str, params: list, variant: str) -> torch.optim.Optimizer:
    kind = {"fused": True} if variant == "eager-fused" else {"foreach": True}
    cls, kwargs = OPTIMIZERS[name]
    kwargs = dict(kwargs)
    if "lr_tensor" in kwargs:
        kwargs["lr"] = torch.tensor(kwargs.pop("lr_tensor"))
    return getattr(torch.optim, cls)(params, **kwargs, **kind)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run_cell(opt_name: str, variant: str, steps: int, device: str, profile: bool = False) -> dict:
    params = _state(device)
    opt = _optimizer(opt_name, params, variant)
    step = opt.step
    if variant == "torch.compile":
        step = torch.compile(opt.step)
    elif variant == "tc":
        import tc

        step = tc.compile(opt.step)
    start = time.perf_counter()
    step()  # first call: compiles; also creates the optimizer state
    _sync(device)
    first = time.perf_counter() - start
    for _ in range(3):  # the second call recompiles once the state exists
        step()
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    per_step = (time.perf_counter() - start) / steps
    if profile:  # more steps: the reference below takes as many
        from gpu_profile import report

        report(step, f"{opt_name} {variant}", steps=5)
        steps += 3 + 5 * 3  # report: warm-up, then timed, profiled and cProfiled steps
    reference = _state(device)
    ref_opt = _optimizer(opt_name, reference, "eager-foreach")
    for _ in range(4 + steps):
        ref_opt.step()
    worst = max(float((p - r).detach().abs().max()) for p, r in zip(params, reference))
    ok = all(torch.allclose(p, r, rtol=1e-4, atol=1e-5) for p, r in zip(params, reference))
    return {"opt": opt_name, "variant": variant, "ms": per_step * 1e3, "first_s": first, "ok": ok, "worst": worst}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--opts", default=",".join(OPTS))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--profile", action="store_true", help="CUDA: each cell's kernels and host time (gpu_profile.py)")
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # internal: "opt,variant" in this process
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.cell:
        opt_name, variant = args.cell.split(",")
        print(json.dumps(run_cell(opt_name, variant, args.steps, device, args.profile)))
        return 0
    print(f"device: {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}; "
          f"{len(_shapes(device == 'cpu'))} tensors, {sum(torch.Size(s).numel() for s in _shapes(device == 'cpu')):,} values")
    rows = []
    opts = list(OPTIMIZERS) if args.opts == "all" else args.opts.split(",")
    for opt_name in opts:
        for variant in args.variants.split(","):
            done = subprocess.run([sys.executable, __file__, "--cell", f"{opt_name},{variant}", "--steps", str(args.steps)]
                                  + ["--profile"] * args.profile,
                                  capture_output=True, text=True, env=os.environ.copy())
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode or not lines:
                print(f"{opt_name} {variant}: failed\n{done.stderr[-2000:]}")
                continue
            if args.profile:
                print("\n".join(line for line in done.stdout.splitlines() if not line.startswith("{")))
            rows.append(json.loads(lines[-1]))
            print(lines[-1], flush=True)  # each cell as it ends: a run cut short still reports
    print(f"\n{'optimizer':9} {'variant':14} {'ms/step':>8} {'steps/s':>8} {'vs foreach':>10} {'first s':>8} {'matches':>8}")
    for opt_name in opts:
        base = next((r["ms"] for r in rows if r["opt"] == opt_name and r["variant"] == "eager-foreach"), None)
        for r in (r for r in rows if r["opt"] == opt_name):
            ratio = f"{base / r['ms']:.2f}x" if base else "-"
            print(f"{opt_name:9} {r['variant']:14} {r['ms']:8.3f} {1e3 / r['ms']:8.0f} {ratio:>10} {r['first_s']:8.2f} "
                  f"{'yes' if r['ok'] else 'NO ' + format(r['worst'], '.2g'):>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
