"""Real models under eager, torch.compile and tc.compile, side by side in one run.

Cells: ResNet-50 and ViT-B/16 (torchvision), BERT-base, GPT-2 and a LLaMA-style decoder
(8 layers, hidden 2048) from transformers with random weights, each in inference (no_grad,
bf16 autocast) and training (forward, backward, AdamW step, bf16 autocast).

Honest by construction: every (model, task, variant) cell runs in a process of its own, so
``tc`` is never imported where torch.compile or eager is measured (and no compiler's caches,
patches or allocator state leak into another's cell). Per cell: median step time from CUDA
events after warm-up, speedup over eager, first-call time (cold caches; for tc also the warm
start: the first call of a fresh process whose caches the cell filled, ``import tc`` included,
and ``warm_same_process_s``, again in the cell's process after ``tc.reset()``), peak memory
(``torch.cuda.max_memory_allocated``) of the steady-state steps and of the first call, and a
check against eager of the outputs and, when training, of the first step's gradients. The table
is printed last, with a JSON file and a PNG bar chart of speedups beside it.

Timed in interleaved rounds: the cells of one (model, task) are compiled one after another, then
all wait, warm, while each times ``--steps`` steps in turn, ``--rounds`` times (the order rotated
each round); a cell's time is the median of all its steps. The GPU host's CPU speed drifts by
20-40% within a minute (a pure-Python loop, timed between cells of one run), and these steps are
bound by the host: timed one cell after another, a ratio measured the drift as much as the code.

    python benchmarks/models.py                      # every cell (CPU: small sizes)
    python benchmarks/models.py --models gpt2 --tasks infer --variants eager,tc
    python benchmarks/models.py --models bert --shapes bert=32x512   # batch x sequence
    python benchmarks/models.py --tasks train --variants eager,torch.compile-ro,tc-ro --compile-optimizer

``--compile-optimizer``: training cells compile ``opt.step`` too, with the variant's compiler and
mode (``torch.compile(opt.step, mode=...)`` / ``tc.compile(opt.step, mode=...)``; eager's stays
eager), so that under ``-ro`` the whole step (forward, backward, AdamW) can be CUDA graphs.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import subprocess
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

VARIANTS = ("eager", "torch.compile", "tc")
# Also measurable: "tc-ro" (tc with mode="reduce-overhead") and "torch.compile-ro".
TASKS = ("infer", "train")


# ---- models -------------------------------------------------------------------------------------
def _resnet50(small: bool, shape: tuple | None = None) -> tuple[torch.nn.Module, Callable]:
    import torchvision

    model = torchvision.models.resnet18(num_classes=10) if small else torchvision.models.resnet50()
    batch, size = (2, 32) if small else (32, 224)
    batch = shape[0] if shape else batch
    return model, lambda dev: (torch.randn(batch, 3, size, size, device=dev),)


def _vit(small: bool, shape: tuple | None = None) -> tuple[torch.nn.Module, Callable]:
    import torchvision

    if small:
        model = torchvision.models.VisionTransformer(32, 8, 2, 2, 64, 128, num_classes=10)
        return model, lambda dev: (torch.randn(2, 3, 32, 32, device=dev),)
    batch = shape[0] if shape else 32
    return torchvision.models.vit_b_16(), lambda dev: (torch.randn(batch, 3, 224, 224, device=dev),)


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


def _batch_seq(small: bool, shape: tuple | None, default: tuple) -> tuple[int, int]:
    return (2, 32) if small else (shape or default)


def _bert(small: bool, shape: tuple | None = None):
    size = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128) if small else {}
    return _hf("BertConfig", "BertModel", size, *_batch_seq(small, shape, (16, 128)), 30522)


def _gpt2(small: bool, shape: tuple | None = None):
    size = dict(n_embd=64, n_layer=2, n_head=2) if small else {}
    return _hf("GPT2Config", "GPT2LMHeadModel", size, *_batch_seq(small, shape, (8, 512)), 50257)


def _llama(small: bool, shape: tuple | None = None):
    size = (dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, vocab_size=1000)
            if small else dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
                               num_attention_heads=16, num_key_value_heads=16, vocab_size=32000))
    return _hf("LlamaConfig", "LlamaForCausalLM", size, *_batch_seq(small, shape, (4, 512)), size["vocab_size"])


MODELS = {"resnet50": _resnet50, "vit_b_16": _vit, "bert": _bert, "gpt2": _gpt2, "llama": _llama}


# ---- models of other families (``--models mobilenet_v3,efficientnet_b0,distilbert,t5``): the issue's
# table is re-measured beyond the five above; not in the default run ------------------------------
def _torchvision(name: str, small_name: str):
    def make(small: bool, shape: tuple | None = None):
        import torchvision

        model = getattr(torchvision.models, small_name if small else name)(num_classes=10 if small else 1000)
        batch, size = (2, 32) if small else (shape[0] if shape else 64, 224)
        return model, lambda dev: (torch.randn(batch, 3, size, size, device=dev),)
    return make


def _distilbert(small: bool, shape: tuple | None = None):
    size = dict(dim=64, n_layers=2, n_heads=2, hidden_dim=128) if small else {}
    return _hf("DistilBertConfig", "DistilBertModel", size, *_batch_seq(small, shape, (32, 256)), 30522)


class Seq2SeqWrapper(torch.nn.Module):
    """An encoder-decoder model on token ids, its decoder fed the same ids (teacher forcing)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, decoder_input_ids=ids).logits


def _t5(small: bool, shape: tuple | None = None):
    import transformers

    size = (dict(d_model=64, d_ff=128, num_layers=2, num_heads=2, d_kv=32, vocab_size=1000) if small else
            dict(d_model=512, d_ff=2048, num_layers=6, num_heads=8, d_kv=64, vocab_size=32128))
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(**size))
    model.config.use_cache = False
    batch, seq = _batch_seq(small, shape, (16, 256))
    return Seq2SeqWrapper(model), lambda dev: (torch.randint(0, size["vocab_size"], (batch, seq), device=dev),)


OTHER_MODELS = {"mobilenet_v3": _torchvision("mobilenet_v3_large", "mobilenet_v3_small"),
                "efficientnet_b0": _torchvision("efficientnet_b0", "efficientnet_b0"),
                "distilbert": _distilbert, "t5": _t5}
DEFAULT_MODELS = tuple(MODELS)
MODELS.update(OTHER_MODELS)


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


# Steps run before the timed ones: at least WARM_STEPS and WARM_SECONDS of them. On the H100 host
# the first ~0.4 s of steps after a cold compile ran 20-45% slower than later ones, for tc and
# torch.compile alike (GPT-2 inference: tc 6.5 vs 4.5 ms, torch.compile 5.3 vs 3.8 ms a step);
# timing the 4th to 13th step measured that transient, not the steady state a training run sees.
WARM_STEPS, WARM_SECONDS, WARM_MAX_STEPS = 3, 2.0, 500


REWARM_SECONDS = 0.3  # before each round


def _warm_up(step: Callable, timer: Timer, seconds: float = WARM_SECONDS) -> None:
    start, done = time.perf_counter(), 0
    while done < WARM_MAX_STEPS and (done < WARM_STEPS or time.perf_counter() - start < seconds):
        step()
        done += 1
    timer.sync()


# --compile-optimizer (set in the cell's process): training steps compile opt.step like the model
COMPILE_OPTIMIZER = False


def _wrap(variant: str, model: torch.nn.Module) -> Callable:
    mode = "reduce-overhead" if variant.endswith("-ro") else None
    if variant.startswith("torch.compile"):
        # Dynamo's caches are per code object: without a reset, later cells of one model class
        # recompile past its limit and silently run eagerly (a 0.05 s "compile" in an old run).
        torch._dynamo.reset()
        compiled = torch.compile(model, mode=mode)
        if mode is None:
            return compiled

        def step_begin(*args):
            # torch's documented call for a training loop under CUDA graphs (one step's graphs,
            # model and optimizer, may overwrite the previous step's outputs)
            torch.compiler.cudagraph_mark_step_begin()
            return compiled(*args)
        return step_begin
    if variant.startswith("tc"):
        import tc  # only in the processes that measure tc

        # "tc-max": max-autotune (several configs timed per Triton kernel), for profile_cell.py
        return tc.compile(model, mode=mode, options={"max_autotune": True} if "-max" in variant else None)
    if variant == "eager+tc-imported":  # does importing tc change eager's speed? (a control)
        import tc  # noqa: F401
    return model


def _step_fn(task: str, fn: Callable, model: torch.nn.Module, inputs: tuple, device: str,
             optimizer_variant: str | None = None) -> tuple[Callable, Any]:
    """The step of ``task``; with ``optimizer_variant``, AdamW's ``step`` compiled as that variant."""
    autocast = lambda: torch.autocast(device, dtype=torch.bfloat16)  # noqa: E731
    if task == "infer":
        def infer():
            with torch.no_grad(), autocast():
                return fn(*inputs)
        return infer, None
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    # compiled after the model: no torch._dynamo.reset() here, which would drop the model's code
    opt_step = opt.step if optimizer_variant in (None, "eager") else _compile_step(optimizer_variant, opt)

    def train():
        with autocast():
            out = fn(*inputs)
            loss = out.float().pow(2).mean()
        loss.backward()
        opt_step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return train, opt


def _compile_step(variant: str, opt: torch.optim.Optimizer) -> Callable:
    mode = "reduce-overhead" if variant.endswith("-ro") else None
    if variant.startswith("torch.compile"):
        return torch.compile(opt.step, mode=mode)
    import tc  # only in the processes that measure tc

    return tc.compile(opt.step, mode=mode)


class Cell:
    """One (model, task, variant) cell in this process: compiled and warm once made; ``time``
    times steps (any number of rounds); ``finish`` gives the row, plus ``check`` data (outputs,
    gradients) for the parent."""

    def __init__(self, name: str, task: str, variant: str, base: torch.nn.Module, make_inputs: Callable,
                 device: str):
        self.name, self.task, self.variant, self.base, self.device = name, task, variant, base, device
        model = _prepared(base, task, device)
        torch.manual_seed(0)
        self.model, self.inputs, self.timer = model, make_inputs(device), Timer(device)
        self.fn = _wrap(variant, model)
        self.step, _ = _step_fn(task, self.fn, model, self.inputs, device, variant if COMPILE_OPTIMIZER else None)
        _reset_peak(device)
        self.timer.sync()
        t0 = time.perf_counter()
        self.first = self.step()
        self.timer.sync()
        self.first_call = time.perf_counter() - t0
        self.peak_first = _peak(device)
        _warm_up(self.step, self.timer)
        _reset_peak(device)
        self.times: list[float] = []

    def time(self, steps: int) -> list[float]:
        """``steps`` synchronised steps, after a short warm-up (the cell may have waited while
        others were timed)."""
        _warm_up(self.step, self.timer, REWARM_SECONDS)
        times = self.timer.time_steps(self.step, steps)
        self.times += times
        return times

    def finish(self) -> dict:
        row = {"model": self.name, "task": self.task, "variant": self.variant,
               "median_s": statistics.median(self.times), "timed_steps": len(self.times),
               "first_call_s": self.first_call,
               "compiled_optimizer": COMPILE_OPTIMIZER and self.task == "train" and self.variant != "eager",
               "peak_mem_gb": _peak(self.device), "peak_mem_first_gb": self.peak_first}
        if self.variant.startswith("tc"):  # (the parent measures it in a fresh process too)
            row["warm_same_process_s"] = _warm_first_call(self.model, self.inputs, self.task, self.device, self.timer)
        if self.task == "infer":
            return {"row": row, "output": self.first.detach().float().cpu(), "grads": None}
        del self.step, self.model, self.fn
        output, grads = _training_check(self.variant, self.base, self.inputs, self.device)
        cell = {"row": row, "output": output, "grads": grads}
        if self.variant == "eager":  # the float32 reference training cells are also judged against
            output, grads = _training_check(self.variant, self.base, self.inputs, self.device, dtype=None)
            cell["fp32"] = {"output": output, "grads": grads}
        return cell


def _training_check(variant: str, base: torch.nn.Module, inputs: tuple, device: str,
                    dtype: torch.dtype | None = torch.bfloat16) -> tuple:
    """A forward and backward of a fresh copy of the model (after the timing, so it warms no
    cache the first call is timed with), dropout off so that the variants agree, batch norm in
    training mode: the output and a sample of the gradients, to compare with eager's. ``dtype``
    None: no autocast (eager's float32 reference)."""
    model = copy.deepcopy(base).to(device)
    model.train()
    for m in model.modules():
        if not isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.training = False  # dropout (nn.Dropout and transformers' attention dropout) off
    fn = _wrap(variant, model)
    with torch.autocast(device, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        out = fn(*inputs)
    # a fixed random projection: mean(out ** 2) of a layer-normed output is ~1 whatever the
    # weights, so its gradients are rounding noise that no two implementations share
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)).to(device)
    (out.float() * weights).sum().backward()
    return out.detach().float().cpu(), _grad_sample(model)


def _grad_sample(model: torch.nn.Module, count: int = 8, max_numel: int = 4_000_000) -> dict:
    """Gradients of up to ``count`` parameters spread over the model (small enough to ship
    between processes), plus the norm of every parameter's gradient."""
    named = [(n, p) for n, p in model.named_parameters() if p.grad is not None]
    small = [(n, p) for n, p in named if p.numel() <= max_numel]
    picked = small[:: max(1, len(small) // count)][:count]
    return {"sample": {n: p.grad.detach().float().cpu() for n, p in picked},
            "norms": {n: p.grad.detach().float().norm().item() for n, p in named}}


def _reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _peak(device: str) -> float | None:
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**30


def _warm_first_call(model: torch.nn.Module, inputs: tuple, task: str, device: str, timer: Timer) -> float:
    """tc's first call again in this process, after ``tc.reset()``: the artifact cache warm, the
    imports and everything else in memory already (``warm_same_process_s``)."""
    import tc

    tc.reset()
    fresh = copy.deepcopy(model)
    step, _ = _step_fn(task, tc.compile(fresh), fresh, inputs, device)
    timer.sync()
    t0 = time.perf_counter()
    step()
    timer.sync()
    return time.perf_counter() - t0


def _rel(out: torch.Tensor, reference: torch.Tensor) -> float:
    return ((out - reference).norm() / reference.norm().clamp_min(1e-12)).item()


def _errors(cell: dict, reference: dict) -> list[float] | str:
    """Relative errors of ``cell``'s output and gradients against ``reference``'s (or the
    reason they cannot be compared)."""
    errs = [_rel(cell["output"], reference["output"])]
    grads, ref_grads = cell.get("grads"), reference.get("grads")
    if grads and ref_grads:
        # relative to the parameter's gradient, or to a thousandth of the whole gradient where the
        # parameter's is ~0 in exact arithmetic (attention key biases) and only rounding is left
        floor = 1e-3 * math.sqrt(sum(v * v for v in ref_grads["norms"].values()))
        errs += [(g - ref_grads["sample"][n]).norm().item() / max(ref_grads["sample"][n].norm().item(), floor)
                 for n, g in grads["sample"].items() if n in ref_grads["sample"]]
        errs += [abs(v - ref_grads["norms"][n]) / max(ref_grads["norms"][n], floor)
                 for n, v in grads["norms"].items() if n in ref_grads["norms"]]
        if set(grads["norms"]) != set(ref_grads["norms"]):
            return "parameters with gradients differ"
    return errs


def check(cell: dict, reference: dict | None) -> str:
    """Outputs (and gradients when training) against eager's cell, as relative errors.

    Training cells are also judged against eager in float32 (the eager cell's ``fp32``): deep
    bf16 networks with batch norm (ResNet-50) differ from eager-bf16 by rounding noise as large as
    the gradients of some layers, whatever the compiler; a cell whose error from float32 is within
    3x eager-bf16's own (or below 5e-2) is as accurate as eager and reads ok."""
    if reference is None:
        return "ref"
    errs = _errors(cell, reference)
    if isinstance(errs, str):
        return f"MISMATCH ({errs})"
    worst = max(errs)
    # bf16 autocast: outputs ~1e-2; gradients of a random model through 12 layers a little more
    if worst < 5e-2:
        return f"ok ({worst:.1e})"
    exact = reference.get("fp32")
    if exact is not None:
        mine, eagers = _errors(cell, exact), _errors(reference, exact)
        if not isinstance(mine, str) and not isinstance(eagers, str):
            verdict = "ok" if max(mine) <= max(5e-2, 3 * max(eagers)) else "MISMATCH"
            return f"{verdict} (fp32: {max(mine):.1e}, eager-bf16 {max(eagers):.1e})"
    return f"MISMATCH ({worst:.1e})"


# ---- the whole table: one process per cell, timed in interleaved rounds --------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help=f"any of {', '.join(MODELS)}")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--steps", type=int, default=10, help="timed steps per cell and round")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds, interleaved across a model's cells")
    parser.add_argument("--shapes", default="", help="per model, e.g. bert=32x512,resnet50=64")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    parser.add_argument("--compile-optimizer", action="store_true",
                        help="training: compile opt.step with the variant's compiler and mode")
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # internal: run one cell in this process
    parser.add_argument("--ctl", help=argparse.SUPPRESS)  # internal: the cell's command pipes
    parser.add_argument("--warm", help=argparse.SUPPRESS)  # internal: a warm first call in this process
    args = parser.parse_args()
    if args.cell:
        return _worker(args)
    if args.warm:
        return _warm_worker(args)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for name in args.models.split(","):
        for task in args.tasks.split(","):
            variants = args.variants.split(",")
            # compiled one after another (first-call times are not shared with another compile)
            workers = [_CellProcess(name, task, variant, args) for variant in variants]
            for r in range(args.rounds):
                live = [w for w in workers if w.ok]
                first = r % max(len(live), 1)  # who goes first rotates
                for w in live[first:] + live[:first]:
                    w.command("time", "timed")
            reference = None
            for variant, w in zip(variants, workers):
                cell = w.finish()
                row = cell["row"]
                if "error" not in row and variant.startswith("tc"):
                    row["warm_first_call_s"] = _warm_in_fresh_process(name, task, variant, args)
                if "error" not in row:
                    row["check"] = check(cell, reference)
                    if variant == "eager":
                        reference = cell
                rows.append(row)
                print(json.dumps(row), flush=True)
    report(rows, Path(args.out), device)


class _CellProcess:
    """A cell in a fresh Python process, driven through a pair of pipes, one line per command and
    reply: made (compiled, warm) here, then ``time`` (a round) and ``finish``, whose result comes
    back through a file. ``ok`` turns False when the process failed (its file says why)."""

    def __init__(self, name: str, task: str, variant: str, args: argparse.Namespace):
        self.key = (name, task, variant)
        self.result = Path(tempfile.mkdtemp(prefix="cell-", dir=_CACHE_ROOT)) / "cell.pt"
        cmd_r, cmd_w = os.pipe()
        reply_r, reply_w = os.pipe()
        cmd = [sys.executable, __file__, "--cell", f"{name},{task},{variant}", "--steps", str(args.steps),
               "--shapes", args.shapes, "--out", str(self.result), "--ctl", f"{cmd_r},{reply_w}",
               *(["--compile-optimizer"] if args.compile_optimizer else [])]
        self.proc = subprocess.Popen(cmd, env=dict(os.environ), pass_fds=(cmd_r, reply_w))
        os.close(cmd_r)
        os.close(reply_w)
        self.commands, self.replies = os.fdopen(cmd_w, "w", buffering=1), os.fdopen(reply_r)
        self.ok = True
        self._expect("ready")

    def _expect(self, want: str) -> None:
        self.ok = self.ok and self.replies.readline().strip() == want  # "" where the process died

    def command(self, cmd: str, want: str) -> None:
        try:
            self.commands.write(cmd + "\n")
        except BrokenPipeError:
            self.ok = False
            return
        self._expect(want)

    def finish(self) -> dict:
        if self.ok:
            self.command("finish", "done")
        self.commands.close()
        code = self.proc.wait()
        self.replies.close()
        if not self.result.exists():
            name, task, variant = self.key
            return {"row": {"model": name, "task": task, "variant": variant,
                            "error": f"cell process exited with {code}"}}
        return torch.load(self.result, weights_only=False)


def _warm_in_fresh_process(name: str, task: str, variant: str, args: argparse.Namespace) -> float | None:
    """tc's warm start: the first call of a fresh process whose caches the cell's process filled
    (the same ``TC_CACHE_DIR`` and ``TRITON_CACHE_DIR``), ``import tc`` included; None if it failed."""
    with tempfile.TemporaryDirectory(prefix="warm-", dir=_CACHE_ROOT) as tmp:
        result = Path(tmp) / "warm.json"
        cmd = [sys.executable, __file__, "--warm", f"{name},{task},{variant}", "--shapes", args.shapes,
               "--out", str(result), *(["--compile-optimizer"] if args.compile_optimizer else [])]
        subprocess.run(cmd, env=dict(os.environ), check=False)
        return json.loads(result.read_text())["warm_first_call_s"] if result.exists() else None


def _warm_worker(args: argparse.Namespace) -> None:
    """The process of :func:`_warm_in_fresh_process`: the model and inputs are made first (the
    user pays for them without tc), then timed: ``import tc``, ``tc.compile``, the first step."""
    name, task, variant, device, shape = _child_setup(args, args.warm)
    base, make_inputs = MODELS[name](device == "cpu", shape)
    model = _prepared(base, task, device)
    inputs = make_inputs(device)
    timer = Timer(device)
    timer.sync()
    t0 = time.perf_counter()
    step, _ = _step_fn(task, _wrap(variant, model), model, inputs, device, variant if COMPILE_OPTIMIZER else None)
    step()
    timer.sync()
    Path(args.out).write_text(json.dumps({"warm_first_call_s": time.perf_counter() - t0}))


def _child_setup(args: argparse.Namespace, cell: str) -> tuple[str, str, str, str, tuple | None]:
    """A cell's or warm start's process: (model, task, variant, device, shape) of ``cell``
    ("model,task,variant"), with the run's settings applied (TF32, --compile-optimizer, the seed)."""
    global COMPILE_OPTIMIZER
    COMPILE_OPTIMIZER = args.compile_optimizer
    name, task, variant = cell.split(",")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    shapes = dict(item.split("=") for item in args.shapes.split(",") if item)
    torch.manual_seed(0)
    return name, task, variant, device, tuple(int(v) for v in shapes[name].split("x")) if name in shapes else None


def _prepared(base: torch.nn.Module, task: str, device: str) -> torch.nn.Module:
    """A copy of ``base`` on ``device`` in the task's mode (inference: every module in eval, so
    dropout is off and outputs are comparable)."""
    model = copy.deepcopy(base).to(device)
    model.train(task == "train")
    if task == "infer":
        for m in model.modules():
            m.eval()
    return model


def _worker(args: argparse.Namespace) -> None:
    name, task, variant, device, shape = _child_setup(args, args.cell)
    cmd_r, reply_w = (int(fd) for fd in args.ctl.split(","))
    commands, replies = os.fdopen(cmd_r), os.fdopen(reply_w, "w", buffering=1)
    reply = "ready"
    try:
        base, make_inputs = MODELS[name](device == "cpu", shape)
        cell = Cell(name, task, variant, base, make_inputs, device)
        replies.write("ready\n")
        for line in commands:
            if line.strip() == "time":
                reply = "timed"
                cell.time(args.steps)
                replies.write("timed\n")
            else:
                reply = "done"
                result = cell.finish()
                break
        else:
            return  # the parent went away
        # the point of a process per cell: tc's imports never touch another compiler's numbers
        result["row"]["tc_imported"] = "tc" in sys.modules
    except Exception as e:
        traceback.print_exc()
        result = {"row": {"model": name, "task": task, "variant": variant, "error": f"{type(e).__name__}: {e}"}}
        reply = f"failed ({reply})"
    torch.save(result, args.out)
    replies.write(reply + "\n")


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
            f"{'warm s':>7} {'mem GB':>7} {'x eager':>7} {'1st GB':>7}  check")
    lines = [f"device: {_device_name(device)}", head, "-" * len(head)]
    eager_mem = {(r["model"], r["task"]): r.get("peak_mem_gb") for r in rows if r["variant"] == "eager"}
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:10} {r['task']:6} {r['variant']:14} ERROR {r['error'][:80]}")
            continue
        fmt = lambda v, f: format(v, f) if v is not None else "-"  # noqa: E731
        base = eager_mem.get((r["model"], r["task"]))
        ratio = r["peak_mem_gb"] / base if base and r.get("peak_mem_gb") is not None else None
        leak = "  (tc imported!)" if r.get("tc_imported") and not r["variant"].startswith("tc") else ""
        variant = r["variant"] + ("+opt" if r.get("compiled_optimizer") else "")
        lines.append(f"{r['model']:10} {r['task']:6} {variant:14} {r['median_s'] * 1e3:9.2f} "
                     f"{fmt(r['speedup'], '8.2f')} {r['first_call_s']:10.1f} {fmt(r.get('warm_first_call_s'), '7.1f')} "
                     f"{fmt(r['peak_mem_gb'], '7.2f')} {fmt(ratio, '7.2f')} {fmt(r.get('peak_mem_first_gb'), '7.2f')}  "
                     f"{r['check']}{leak}")
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
