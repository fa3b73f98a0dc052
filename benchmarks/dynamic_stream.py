"""A variable-length stream: GPT-2 over many sequence lengths and batch sizes, shuffled.

For each variant, in a process of its own (tc is never imported where torch.compile runs): the
number of compiles, the wall time of the whole stream (compiles included) and the steady-state
step time (the stream again, every shape already compiled), inference (no_grad) or training
(forward, backward, AdamW step). Variants: eager; torch.compile default and with mark_dynamic;
tc default (automatic dynamic), with mark_dynamic, and with dynamic=True. Every variant is also
timed alone at one size (``FIXED``, after its stream: its dynamic graph serves it), next to
``tc-static``, a ``dynamic=False`` tc compile of that size only: a dynamic graph's step time
against a static one's at the same size.

    python benchmarks/dynamic_stream.py                      # CUDA: GPT-2 small, 16 lengths 8..1024, batches 1/4/8
    python benchmarks/dynamic_stream.py --tasks infer --variants eager,tc
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

import torch

VARIANTS = ("eager", "torch.compile", "torch.compile-mark", "tc", "tc-mark", "tc-dynamic", "tc-static")
FIXED = (8, 512)  # (batch, length) at which every variant is timed alone (CPU: (3, 32)), tc-static too
TASKS = ("infer", "train")


def _stream(small: bool) -> list[tuple[int, int]]:
    lengths = [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 640, 768, 1024]
    batches = [1, 4, 8]
    if small:
        lengths, batches = [8, 11, 16, 23, 32, 45], [1, 3]
    shapes = [(b, n) for n in lengths for b in batches]
    random.Random(0).shuffle(shapes)
    return shapes


def _model(device: str, small: bool) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64) if small else GPT2Config()
    config.attn_pdrop = config.embd_pdrop = config.resid_pdrop = 0.0
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).to(device)


def _compiled(model: torch.nn.Module, variant: str) -> tuple[torch.nn.Module, object]:
    """The model as the variant runs it, and a function counting its compiles so far."""
    if variant == "eager":
        return model, lambda: 0
    if variant.startswith("torch.compile"):
        import torch._dynamo.testing

        counter = torch._dynamo.testing.CompileCounter()

        def counting(gm, example_inputs):  # count the graphs, then compile with inductor
            counter(gm, example_inputs)
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(gm, example_inputs)

        return torch.compile(model, backend=counting), lambda: counter.frame_count
    import tc
    import tc_capture

    dynamic = {"tc-dynamic": True, "tc-static": False}.get(variant)
    compiled = tc.compile(model, dynamic=dynamic)
    return compiled, lambda: sum(len(e) for c in list(tc_capture.api.ALL_CACHES) for e in c.entries.values())


def _step(model, variant, task, ids, opt, device):
    if variant.endswith("-mark"):
        if variant.startswith("tc"):
            import tc
            tc.mark_dynamic(ids, 0)
            tc.mark_dynamic(ids, 1)
        else:
            torch._dynamo.mark_dynamic(ids, 0)
            torch._dynamo.mark_dynamic(ids, 1)
    with torch.autocast(device, torch.bfloat16, enabled=device == "cuda"):
        if task == "infer":
            with torch.no_grad():
                return model(ids).logits
        loss = model(ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def run_cell(task: str, variant: str, device: str, profile: bool = False) -> dict:
    small = device == "cpu"
    model = _model(device, small)
    model.train(task == "train")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4) if task == "train" else None
    compiled, compiles = _compiled(model, variant)
    shapes = _stream(small)
    fixed = FIXED if not small else (3, 32)
    if variant == "tc-static":  # no stream: a graph compiled for the fixed size alone
        shapes = [fixed]
    vocab = model.config.vocab_size

    def run_stream() -> float:
        torch.manual_seed(1)
        start = time.perf_counter()
        for batch, length in shapes:
            _step(compiled, variant, task, torch.randint(0, vocab, (batch, length), device=device), opt, device)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    total = run_stream()
    steady = run_stream()
    ids = torch.randint(0, vocab, fixed, device=device)
    _step(compiled, variant, task, ids, opt, device)  # the stream's graphs cover it; static: warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(20):
        _step(compiled, variant, task, ids, opt, device)
    if device == "cuda":
        torch.cuda.synchronize()
    fixed_ms = (time.perf_counter() - start) / 20 * 1e3
    if profile:
        from gpu_profile import report

        report(lambda: _step(compiled, variant, task, ids, opt, device), f"{task} {variant} {fixed[0]}x{fixed[1]}")
    return {"task": task, "variant": variant, "compiles": compiles(), "stream_s": total,
            "steady_ms": steady / len(shapes) * 1e3, "shapes": len(shapes),
            "fixed_ms": fixed_ms}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    parser.add_argument("--profile", action="store_true", help="CUDA: the fixed size's kernels and host time")
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.cell:
        task, variant = args.cell.split(",")
        print(json.dumps(run_cell(task, variant, device, args.profile)))
        return 0
    rows = []
    for task in args.tasks.split(","):
        for variant in args.variants.split(","):
            try:
                done = subprocess.run([sys.executable, __file__, "--cell", f"{task},{variant}"] + ["--profile"] * args.profile,
                                      capture_output=True,
                                      text=True, env=os.environ.copy(), timeout=args.timeout)
            except subprocess.TimeoutExpired:
                print(f"{task} {variant}: over {args.timeout} s")
                continue
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode or not lines:
                print(f"{task} {variant}: failed\n{done.stderr[-1500:]}")
                continue
            if args.profile:
                print("\n".join(line for line in done.stdout.splitlines() if not line.startswith("{")))
            rows.append(json.loads(lines[-1]))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'task':6} {'variant':20} {'compiles':>8} {'stream s':>9} {'steady ms':>10} {'vs eager':>9} "
          f"{'fixed ms':>12}")
    for task in args.tasks.split(","):
        eager = next((r["steady_ms"] for r in rows if r["task"] == task and r["variant"] == "eager"), None)
        for r in (r for r in rows if r["task"] == task):
            ratio = f"{eager / r['steady_ms']:.2f}x" if eager else "-"
            stream = f"{r['stream_s']:9.1f}" if r["variant"] != "tc-static" else f"{'-':>9}"
            print(f"{task:6} {r['variant']:20} {r['compiles']:8d} {stream} {r['steady_ms']:10.2f} {ratio:>9} "
                  f"{r['fixed_ms']:12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
