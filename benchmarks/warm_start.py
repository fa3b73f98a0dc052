"""Where the warm first call of a cached model spends its time, phase by phase.

For tiny random-weight models (GPT-2, BERT and LLaMA configs from transformers, a small CNN), in
inference and training: a first subprocess compiles and runs the model once to fill a fresh
``TC_CACHE_DIR``; a second, fresh subprocess (nothing in memory, the artifact cache warm) times
its first call and breaks it into phases:

    import      ``import tc`` (and what it pulls in)
    capture     tc_capture's symbolic interpretation and entry building (back end excluded)
    autograd    tc_autograd: trace to ATen, functionalize, joint graph, partition (or its cache)
    inductor    tc_inductor.compile less kernel loading (cache key, graph-cache lookup, wrapper)
    kernels     loading compiled kernels (the ``compile_kernels`` stage on a cache hit)
    rest        everything else in the first call: guards, running the model, the backward

The phases are measured by wrapping functions from outside (no product code changes), so the
script is light and says nothing about steady-state speed.

    python benchmarks/warm_start.py                       # every model, both tasks
    python benchmarks/warm_start.py --models gpt2 --tasks infer --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODELS = ("gpt2", "bert", "llama", "cnn")
TASKS = ("infer", "train")
PHASES = ("import", "capture", "autograd", "inductor", "kernels", "rest")


# ---- models (only imported in the child) ---------------------------------------------------------
def _hf(config_cls: str, model_cls: str, config: dict):
    import torch
    import transformers

    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config))
    model.config.use_cache = False

    class HFWrapper(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module):
            super().__init__()
            self.model = inner

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            out = self.model(input_ids=ids)
            return out.logits if hasattr(out, "logits") else out.last_hidden_state

    return HFWrapper(model), (torch.randint(0, 1000, (2, 32)),)


def build(name: str):
    import torch

    if name == "gpt2":
        return _hf("GPT2Config", "GPT2LMHeadModel", dict(n_embd=64, n_layer=2, n_head=2, vocab_size=1000))
    if name == "bert":
        return _hf("BertConfig", "BertModel", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                                   intermediate_size=128, vocab_size=1000))
    if name == "llama":
        return _hf("LlamaConfig", "LlamaForCausalLM", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                                           num_attention_heads=2, vocab_size=1000))
    torch.manual_seed(0)
    layers = []
    for cin, cout in ((3, 16), (16, 32), (32, 32)):
        layers += [torch.nn.Conv2d(cin, cout, 3, padding=1), torch.nn.BatchNorm2d(cout), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    return model, (torch.randn(2, 3, 32, 32),)


# ---- the child: one first call, timed --------------------------------------------------------------
class Clock:
    """Wall time per phase; nested calls of one wrapped function count once (the outermost)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.depth: dict[str, int] = {}

    def wrap(self, owner, attr: str, phase: str, after=None) -> None:
        original = getattr(owner, attr)

        def timed(*args, **kwargs):
            depth = self.depth.get(phase, 0)
            self.depth[phase] = depth + 1
            start = time.perf_counter()
            try:
                result = original(*args, **kwargs)
            finally:
                self.depth[phase] = depth
            if depth == 0:
                self.add(phase, time.perf_counter() - start)
                if after is not None:
                    after(result)
            return result

        setattr(owner, attr, timed)

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds


def child(model_name: str, task: str) -> dict:
    start = time.perf_counter()
    import tc

    imported = time.perf_counter() - start
    import torch

    import tc_autograd.api
    import tc_capture.cache.frame_cache
    import tc_inductor

    clock = Clock()
    clock.wrap(tc_capture.cache.frame_cache, "capture_region", "capture")
    clock.wrap(tc_capture.cache.frame_cache, "build_entry", "capture")
    clock.wrap(tc_autograd.api.Compiled, "__init__", "autograd")

    def kernel_stages(compiled) -> None:
        clock.add("kernels", getattr(compiled, "timings", {}).get("compile_kernels", 0.0))

    clock.wrap(tc_inductor, "compile", "inductor", after=kernel_stages)
    model, inputs = build(model_name)
    if task == "train":
        model.train()
    else:
        model.eval()
    tc.reset()
    compiled = tc.compile(model)
    start = time.perf_counter()
    if task == "infer":
        with torch.no_grad():
            compiled(*inputs)
    else:
        compiled(*inputs).float().pow(2).mean().backward()
    total = time.perf_counter() - start
    s = clock.seconds
    inductor = s.get("inductor", 0.0)
    autograd = s.get("autograd", 0.0) - inductor  # the inductor runs inside tc_autograd's compile
    capture = s.get("capture", 0.0) - s.get("autograd", 0.0)
    phases = {"import": imported, "capture": capture, "autograd": autograd,
              "inductor": inductor - s.get("kernels", 0.0), "kernels": s.get("kernels", 0.0),
              "rest": total - capture - autograd - inductor}
    return {"phases": phases, "first_call": total}


# ---- the parent ----------------------------------------------------------------------------------
def run_child(model: str, task: str, cache_dir: str) -> dict:
    env = dict(os.environ, TC_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, __file__, "--child", model, task], env=env, capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{model} {task} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(model: str, task: str, repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="tc-warm-") as cache_dir:
        cold = run_child(model, task, cache_dir)
        warm = [run_child(model, task, cache_dir) for _ in range(repeat)]
    phases = {p: statistics.median(w["phases"][p] for w in warm) for p in PHASES}
    return {"model": model, "task": task, "cold": cold["first_call"], "phases": phases,
            "first_call": statistics.median(w["first_call"] for w in warm)}


def table(rows: list[dict]) -> str:
    head = ["model", "task", "cold call"] + list(PHASES) + ["warm call", "warm+import"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        p = r["phases"]
        cells = [r["model"], r["task"], f"{r['cold'] * 1e3:.0f}"] + [f"{p[k] * 1e3:.0f}" for k in PHASES]
        cells += [f"{r['first_call'] * 1e3:.0f}", f"{(r['first_call'] + p['import']) * 1e3:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n(ms; phases are medians over the warm runs; 'warm call' excludes import)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--repeat", type=int, default=2, help="warm runs per cell (median)")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "TASK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    rows = []
    for model in args.models.split(","):
        for task in args.tasks.split(","):
            rows.append(measure(model, task, args.repeat))
            print(f"{model} {task}: warm first call {rows[-1]['first_call'] * 1e3:.0f} ms", file=sys.stderr)
    print(table(rows))


if __name__ == "__main__":
    main()
