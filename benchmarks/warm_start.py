"""The warm start: the first call of a compiled model in a fresh process whose on-disk cache is warm.

For tiny random-weight models (GPT-2, BERT and LLaMA configs from transformers, a small CNN), in
inference and training: a first subprocess compiles and runs the model once to fill a fresh
``TC_CACHE_DIR`` (and ``TRITON_CACHE_DIR``); then fresh subprocesses (nothing in memory, the caches
warm) time ``import tc`` and the first call, phase by phase:

    user        ``import torch``, the model's library and building the model (the user pays it
                without tc; shown, not in the total)
    import      ``import tc`` and ``tc.compile(model)`` on top of that: what tc adds to the process
    fake        creating capture's FakeTensorMode; the first one imports ``torch._dynamo`` (torch's
                code, ~1 s of CPU here), and with it sympy, triton and torch._inductor
    capture     tc_capture's symbolic interpretation and guards, less the back end and ``fake``
    trace       tc_autograd: its trace cache (or the trace, functionalization, partition)
    lower       tc_inductor.compile less ``kernels``: cache key and graph-cache read (lowering,
                scheduling and code generation on a miss)
    kernels     loading compiled kernels (``.so`` / Triton binaries; builds on a miss) and the
                generated wrapper
    run         everything else in the first call: the compiled code running, the backward
    total       import + every phase of the first call (the warm-start figure; torch excluded)

and counts what the call rebuilt instead of reading back: ``traces`` (tc_autograd traces),
``lowerings`` (tc_inductor graph lowerings), ``builds`` (C++ compiler runs), and artifact-cache
misses by kind. A warm start should show zero of each. The warm process also checks its outputs
(and, training, its gradients) against eager's. The phases are measured by wrapping functions from
outside (no product code changes); ``--cpu`` shows CPU seconds (user + system, every thread of the
process) instead of wall time, for a loaded machine where wall time mostly measures the neighbours.

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
PHASES = ("import", "fake", "capture", "trace", "lower", "kernels", "run")
COUNTS = ("traces", "lowerings", "builds", "misses")


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
        return _hf("GPT2Config", "GPT2LMHeadModel", dict(n_embd=64, n_layer=2, n_head=2, vocab_size=1000,
                                                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    if name == "bert":
        return _hf("BertConfig", "BertModel", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                                   intermediate_size=128, vocab_size=1000, hidden_dropout_prob=0.0,
                                                   attention_probs_dropout_prob=0.0))
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
def _now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


class Clock:
    """Wall and CPU seconds per phase; nested calls of one wrapped function count once (the
    outermost), and ``calls`` counts the outermost calls."""

    def __init__(self):
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.depth: dict[str, int] = {}

    def wrap(self, owner, attr: str, phase: str, after=None) -> bool:
        """Time ``owner.attr`` as ``phase``; False (nothing wrapped) when it is not there."""
        original = getattr(owner, attr, None)
        if original is None:
            print(f"warm_start: {getattr(owner, '__name__', owner)}.{attr} not found; {phase} not measured",
                  file=sys.stderr)
            return False

        def timed(*args, **kwargs):
            depth = self.depth.get(phase, 0)
            self.depth[phase] = depth + 1
            start = _now()
            try:
                result = original(*args, **kwargs)
            finally:
                self.depth[phase] = depth
            if depth == 0:
                end = _now()
                self.add(phase, end[0] - start[0], end[1] - start[1])
                self.calls[phase] = self.calls.get(phase, 0) + 1
                if after is not None:
                    after(result)
            return result

        setattr(owner, attr, timed)
        return True

    def add(self, phase: str, wall: float, cpu: float | None = None) -> None:
        self.wall[phase] = self.wall.get(phase, 0.0) + wall
        self.cpu[phase] = self.cpu.get(phase, 0.0) + (wall if cpu is None else cpu)


def _instrument(clock: Clock) -> None:
    """Wrap the stages of a compile (names of the packages' internals: a renamed one is reported
    as not measured, and its time shows under ``run``)."""
    import torch._subclasses.fake_tensor as fake_tensor

    import tc_autograd.api
    import tc_capture.cache.frame_cache as frame_cache
    import tc_inductor
    import tc_inductor.codegen.build as build

    inductor_compile = sys.modules["tc_inductor.compile"]  # the package's ``compile`` is the function

    clock.wrap(frame_cache.FrameCache, "miss", "miss")  # capture, back end and guards of one entry
    clock.wrap(fake_tensor.FakeTensorMode, "__init__", "fake")
    clock.wrap(tc_autograd.api.Compiled, "__init__", "autograd")  # a variant: trace (or cache) + inductor
    clock.wrap(tc_autograd.api, "_trace", "traces")
    clock.wrap(inductor_compile.GraphLowering, "run", "lowerings")
    clock.wrap(build, "_build", "builds")  # one C++ compiler run

    clock.wrap(inductor_compile, "_load", "kernels")  # kernels built or loaded, and the wrapper's exec
    clock.wrap(tc_inductor, "compile", "inductor")


def _phases(clock: Clock, seconds: dict[str, float], first_call: float, imported: float) -> dict[str, float]:
    """Disjoint phases from the nested wrapped timings (``seconds`` is clock.wall or clock.cpu)."""
    s = {k: seconds.get(k, 0.0) for k in ("miss", "fake", "autograd", "inductor", "kernels")}
    phases = {"import": imported, "fake": s["fake"], "trace": s["autograd"] - s["inductor"],
              "lower": s["inductor"] - s["kernels"], "kernels": s["kernels"]}
    # a variant compiled later (the backward's at the first backward) runs outside the capture miss
    compiled_in_miss = min(s["autograd"], max(0.0, s["miss"] - s["fake"]))
    phases["capture"] = max(0.0, s["miss"] - s["fake"] - compiled_in_miss)
    phases["run"] = max(0.0, first_call - s["miss"] - (s["autograd"] - compiled_in_miss))
    return phases


def _check(model, compiled, inputs, task: str, got) -> None:
    """The warm process's answers are eager's: outputs, and in training the gradients."""
    import torch

    if task == "infer":
        with torch.no_grad():
            torch.testing.assert_close(got, model(*inputs), rtol=1e-4, atol=1e-4)
        return
    mine = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    want = model(*inputs)
    torch.testing.assert_close(got, want.detach(), rtol=1e-4, atol=1e-4)
    want.float().pow(2).mean().backward()
    for (name, p), g in zip(model.named_parameters(), mine):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-4, msg=lambda m, name=name: f"grad of {name}: {m}")


def child(model_name: str, task: str) -> dict:
    start = _now()
    import torch

    # The user's part first: torch, the model's library (transformers imports torch._dynamo) and
    # the model. ``import tc`` after it is what tc adds to the process.
    model, inputs = build(model_name)
    model.train() if task == "train" else model.eval()
    after_torch = _now()
    import tc

    compiled = tc.compile(model)  # the back ends load here
    after_tc = _now()
    loaded = set(sys.modules)
    clock = Clock()
    _instrument(clock)
    if set(sys.modules) - loaded:  # the wrapping itself must not load what the first call would
        print(f"warm_start: instrumenting imported {sorted(set(sys.modules) - loaded)}", file=sys.stderr)
    begin = _now()
    if task == "infer":
        with torch.no_grad():
            got = compiled(*inputs)
    else:
        got = compiled(*inputs)
        got.float().pow(2).mean().backward()
    end = _now()
    _check(model, compiled, inputs, task, got.detach())
    store = tc.backends.artifact_cache()
    misses = {kind: row["misses"] for kind, row in store.counters.by_kind.items() if row["misses"]}
    counts = {"traces": clock.calls.get("traces", 0), "lowerings": clock.calls.get("lowerings", 0),
              "builds": clock.calls.get("builds", 0), "misses": misses}
    modules = [m for m in ("torch._dynamo", "sympy", "networkx", "triton", "transformers") if m in sys.modules]
    out = {"user": {"wall": after_torch[0] - start[0], "cpu": after_torch[1] - start[1]},
           "counts": counts, "modules": modules}
    for i, kind in enumerate(("wall", "cpu")):
        first_call = end[i] - begin[i]
        phases = _phases(clock, getattr(clock, kind), first_call, after_tc[i] - after_torch[i])
        out[kind] = {"phases": phases, "first_call": first_call, "total": phases["import"] + first_call}
    return out


# ---- the parent ----------------------------------------------------------------------------------
def run_child(model: str, task: str, cache_dir: str) -> dict:
    env = dict(os.environ, TC_CACHE_DIR=cache_dir, TRITON_CACHE_DIR=os.path.join(cache_dir, "triton"))
    out = subprocess.run([sys.executable, __file__, "--child", model, task], env=env, capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{model} {task} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(model: str, task: str, repeat: int, kind: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="tc-warm-") as cache_dir:
        cold = run_child(model, task, cache_dir)
        warm = [run_child(model, task, cache_dir) for _ in range(repeat)]
    phases = {p: statistics.median(w[kind]["phases"][p] for w in warm) for p in PHASES}
    counts = warm[-1]["counts"]
    return {"model": model, "task": task, "cold": cold[kind]["total"], "phases": phases,
            "user": statistics.median(w["user"][kind] for w in warm),
            "total": statistics.median(w[kind]["total"] for w in warm), "counts": counts,
            "modules": warm[-1]["modules"]}


def table(rows: list[dict], kind: str) -> str:
    head = ["model", "task", "cold", "user", *PHASES, "total", *COUNTS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        p, c = r["phases"], r["counts"]
        misses = ", ".join(f"{k} {v}" for k, v in sorted(c["misses"].items())) or "0"
        cells = [r["model"], r["task"], f"{r['cold'] * 1e3:.0f}", f"{r['user'] * 1e3:.0f}"]
        cells += [f"{p[k] * 1e3:.0f}" for k in PHASES] + [f"**{r['total'] * 1e3:.0f}**"]
        cells += [str(c["traces"]), str(c["lowerings"]), str(c["builds"]), misses]
        lines.append("| " + " | ".join(cells) + " |")
    what = "CPU ms (user + system, all threads)" if kind == "cpu" else "wall ms"
    loaded = sorted({m for r in rows for m in r["modules"]})
    return "\n".join(lines) + (f"\n({what}; medians over the warm runs; 'cold' is import + first call with an empty "
                               f"cache; 'total' is import + first call, the 'user' column excluded; counts "
                               f"are the last warm run's; modules loaded by then: {', '.join(loaded)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--repeat", type=int, default=2, help="warm runs per cell (median)")
    parser.add_argument("--cpu", action="store_true", help="CPU seconds instead of wall time")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "TASK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    kind = "cpu" if args.cpu else "wall"
    rows = []
    for model in args.models.split(","):
        for task in args.tasks.split(","):
            rows.append(measure(model, task, args.repeat, kind))
            print(f"{model} {task}: warm start {rows[-1]['total'] * 1e3:.0f} ms", file=sys.stderr)
    print(table(rows, kind))


if __name__ == "__main__":
    main()
