"""Real models under eager, torch.compile and tc.compile, side by side in one run.

Cells: ResNet-50 and ViT-B/16 (torchvision), BERT-base, GPT-2 and a LLaMA-style decoder
(8 layers, hidden 2048) from transformers with random weights, each in inference (no_grad,
bf16 autocast) and training (forward, backward, AdamW step, bf16 autocast).

Per cell and variant: median step time from CUDA events after warm-up, speedup over eager,
first-call time (cold caches; and for tc with a warm artifact cache after ``tc.reset()``),
peak memory, and a check of the outputs against eager. The table is printed last, with a JSON
file and a PNG bar chart of speedups beside it.

    python benchmarks/models.py                      # every cell (CPU: small sizes)
    python benchmarks/models.py --models gpt2 --tasks infer --variants eager,tc
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Cold means cold: every compiler gets fresh cache directories for this run.
_CACHE_ROOT = tempfile.mkdtemp(prefix="tc-bench-")
for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TC_CACHE_DIR"):
    os.environ.setdefault(var, os.path.join(_CACHE_ROOT, var.lower()))

import torch  # noqa: E402

import tc  # noqa: E402

VARIANTS = ("eager", "torch.compile", "tc")
# Also measurable: "tc-ro" (tc with mode="reduce-overhead") and "torch.compile-ro".
TASKS = ("infer", "train")


# ---- models -------------------------------------------------------------------------------------
def _resnet50(small: bool) -> tuple[torch.nn.Module, Callable]:
    import torchvision

    model = torchvision.models.resnet18(num_classes=10) if small else torchvision.models.resnet50()
    batch, size = (2, 32) if small else (32, 224)
    return model, lambda dev: (torch.randn(batch, 3, size, size, device=dev),)


def _vit(small: bool) -> tuple[torch.nn.Module, Callable]:
    import torchvision

    if small:
        model = torchvision.models.VisionTransformer(32, 8, 2, 2, 64, 128, num_classes=10)
        return model, lambda dev: (torch.randn(2, 3, 32, 32, device=dev),)
    return torchvision.models.vit_b_16(), lambda dev: (torch.randn(32, 3, 224, 224, device=dev),)


def _hf(config_cls: str, model_cls: str, config: dict, batch: int, seq: int, vocab: int):
    import transformers

    cfg = getattr(transformers, config_cls)(**config)
    model = getattr(transformers, model_cls)(cfg)
    model.config.use_cache = False
    return HFWrapper(model), lambda dev: (torch.randint(0, vocab, (batch, seq), device=dev),)


class HFWrapper(torch.nn.Module):
    """Calls a transformers model on token ids and returns plain tensors (logits or hidden state)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=ids)
        return out.logits if hasattr(out, "logits") else out.last_hidden_state


def _bert(small: bool):
    size = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128) if small else {}
    return _hf("BertConfig", "BertModel", size, 2 if small else 16, 32 if small else 128, 30522)


def _gpt2(small: bool):
    size = dict(n_embd=64, n_layer=2, n_head=2) if small else {}
    return _hf("GPT2Config", "GPT2LMHeadModel", size, 2 if small else 8, 32 if small else 512, 50257)


def _llama(small: bool):
    size = (dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, vocab_size=1000)
            if small else dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
                               num_attention_heads=16, num_key_value_heads=16, vocab_size=32000))
    return _hf("LlamaConfig", "LlamaForCausalLM", size, 2 if small else 4, 32 if small else 512, size["vocab_size"])


MODELS = {"resnet50": _resnet50, "vit_b_16": _vit, "bert": _bert, "gpt2": _gpt2, "llama": _llama}


# ---- one cell -----------------------------------------------------------------------------------
class Timer:
    def __init__(self, device: str):
        self.cuda = device == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def time_steps(self, step: Callable, n: int) -> list[float]:
        times = []
        for _ in range(n):
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                step()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
        return times


def _wrap(variant: str, model: torch.nn.Module) -> Callable:
    mode = "reduce-overhead" if variant.endswith("-ro") else None
    if variant.startswith("torch.compile"):
        # Dynamo's caches are per code object: without a reset, later cells of one model class
        # recompile past its limit and silently run eagerly (a 0.05 s "compile" in an old run).
        torch._dynamo.reset()
        return torch.compile(model, mode=mode)
    if variant.startswith("tc"):
        return tc.compile(model, mode=mode)
    return model


def _step_fn(task: str, fn: Callable, model: torch.nn.Module, inputs: tuple, device: str) -> tuple[Callable, Any]:
    autocast = lambda: torch.autocast(device, dtype=torch.bfloat16)  # noqa: E731
    if task == "infer":
        def infer():
            with torch.no_grad(), autocast():
                return fn(*inputs)
        return infer, None
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

    def train():
        with autocast():
            out = fn(*inputs)
            loss = out.float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return train, opt


def run_cell(name: str, task: str, variant: str, base: torch.nn.Module, make_inputs: Callable,
             device: str, steps: int, reference: Any) -> dict:
    model = copy.deepcopy(base).to(device)
    model.train(task == "train")
    if task == "infer":
        for m in model.modules():  # dropout off, so outputs are comparable
            m.eval()
    torch.manual_seed(0)
    inputs = make_inputs(device)
    timer = Timer(device)
    fn = _wrap(variant, model)
    step, _ = _step_fn(task, fn, model, inputs, device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    timer.sync()
    t0 = time.perf_counter()
    first = step()
    timer.sync()
    first_call = time.perf_counter() - t0
    for _ in range(3):
        step()
    median = statistics.median(timer.time_steps(step, steps))
    row = {"model": name, "task": task, "variant": variant, "median_s": median, "first_call_s": first_call,
           "peak_mem_gb": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None}
    if variant.startswith("tc"):
        row["warm_first_call_s"] = _warm_first_call(model, inputs, task, device, timer)
    row["output"] = first.detach().float().cpu()
    row["check"] = _check(row["output"], reference)
    return row


def _warm_first_call(model: torch.nn.Module, inputs: tuple, task: str, device: str, timer: Timer) -> float:
    tc.reset()
    fresh = copy.deepcopy(model)
    step, _ = _step_fn(task, tc.compile(fresh), fresh, inputs, device)
    timer.sync()
    t0 = time.perf_counter()
    step()
    timer.sync()
    return time.perf_counter() - t0


def _check(out: torch.Tensor, reference: torch.Tensor | None) -> str:
    if reference is None:
        return "ref"
    err = ((out - reference).norm() / reference.norm().clamp_min(1e-12)).item()
    return f"ok ({err:.1e})" if err < 3e-2 else f"MISMATCH ({err:.1e})"


# ---- the whole table ----------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    small = device == "cpu"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    rows = []
    for name in args.models.split(","):
        try:
            base, make_inputs = MODELS[name](small)
        except ImportError as e:
            print(f"skip {name}: {e}", flush=True)
            continue
        for task in args.tasks.split(","):
            reference = None
            for variant in args.variants.split(","):
                torch.manual_seed(0)
                try:
                    row = run_cell(name, task, variant, base, make_inputs, device, args.steps, reference)
                except Exception as e:
                    traceback.print_exc()
                    row = {"model": name, "task": task, "variant": variant, "error": f"{type(e).__name__}: {e}"}
                if variant == "eager" and "output" in row:
                    reference = row["output"]
                row.pop("output", None)
                rows.append(row)
                print(json.dumps(row), flush=True)
    report(rows, Path(args.out), device)


def report(rows: list[dict], out: Path, device: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    eager = {(r["model"], r["task"]): r.get("median_s") for r in rows if r["variant"] == "eager"}
    for r in rows:
        base = eager.get((r["model"], r["task"]))
        r["speedup"] = base / r["median_s"] if base and r.get("median_s") else None
    (out / "models.json").write_text(json.dumps({"device": _device_name(device), "rows": rows}, indent=1))
    _chart(rows, out / "models.png")
    print(format_table(rows, device))


def format_table(rows: list[dict], device: str) -> str:
    head = (f"{'model':10} {'task':6} {'variant':14} {'step ms':>9} {'speedup':>8} {'1st call s':>10} "
            f"{'warm s':>7} {'mem GB':>7}  check")
    lines = [f"device: {_device_name(device)}", head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:10} {r['task']:6} {r['variant']:14} ERROR {r['error'][:80]}")
            continue
        fmt = lambda v, f: format(v, f) if v is not None else "-"  # noqa: E731
        lines.append(f"{r['model']:10} {r['task']:6} {r['variant']:14} {r['median_s'] * 1e3:9.2f} "
                     f"{fmt(r['speedup'], '8.2f')} {r['first_call_s']:10.1f} {fmt(r.get('warm_first_call_s'), '7.1f')} "
                     f"{fmt(r['peak_mem_gb'], '7.1f')}  {r['check']}")
    for variant in sorted({r["variant"] for r in rows} - {"eager"}):
        s = [r["speedup"] for r in rows if r["variant"] == variant and r.get("speedup")]
        if s:
            geo = math.exp(sum(map(math.log, s)) / len(s))
            lines.append(f"geometric-mean speedup over eager, {variant}: {geo:.2f}x over {len(s)} cells")
    return "\n".join(lines)


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else f"CPU ({os.cpu_count()} cores)"


def _chart(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"no matplotlib: no chart at {path}", file=sys.stderr)
        return
    cells = sorted({(r["model"], r["task"]) for r in rows})
    fig, ax = plt.subplots(figsize=(max(6, len(cells) * 1.2), 4))
    width = 0.38
    for i, variant in enumerate(("torch.compile", "tc")):
        vals = [next((r.get("speedup") or 0 for r in rows if (r["model"], r["task"]) == c and r["variant"] == variant), 0)
                for c in cells]
        ax.bar([x + i * width for x in range(len(cells))], vals, width, label=variant)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([x + width / 2 for x in range(len(cells))], [f"{m}\n{t}" for m, t in cells], fontsize=8)
    ax.set_ylabel("speedup over eager")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
