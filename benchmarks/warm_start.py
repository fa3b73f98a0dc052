"""The warm start: the first call of a compiled model in a fresh process whose on-disk cache is warm.

For tiny random-weight models (GPT-2, BERT and LLaMA configs from transformers, a small CNN), or
with ``--full`` the benchmark-size models of ``benchmarks/models.py`` (its ``MODELS`` and its step:
bf16 autocast; training is forward, backward and an AdamW step), in inference and training: a
first subprocess compiles and runs the model once to fill a fresh ``TC_CACHE_DIR`` (and
``TRITON_CACHE_DIR``); then fresh subprocesses (nothing in memory, the caches warm) time
``import tc`` and the first call, phase by phase:

    user        ``import torch``, the model's library and building the model (the user pays it
                without tc; shown, not in the total)
    import      ``import tc`` and ``tc.compile(model)`` on top of that: what tc adds to the process
    fake        creating capture's ShapeEnv and FakeTensorMode; the first one imports ``torch._dynamo``
                (torch's code, ~1 s of CPU here), and with it triton and torch._inductor
    capture     tc_capture's symbolic interpretation and guards, less the back end and ``fake``
    trace       tc_autograd: its trace cache (or the trace, functionalization, partition)
    lower       tc_inductor.compile less ``kernels``: cache key and graph-cache read (lowering,
                scheduling and code generation on a miss)
    kernels     loading compiled kernels (builds on a miss) and the generated wrapper, wherever it
                happens (a size-bucketed Triton kernel loads at its first launch), of which
      triton    the Triton back end's kernels: importing their sources, and on a GPU loading the
                binaries from Triton's cache (or the artifact store) and their launchers
      cpp       the C++ back end's kernels: ``.so`` files read, checked and loaded (g++ on a miss)
    opt         ``--full`` training: the AdamW step (eager, as in models.py; its first step
                allocates the optimizer state: eager pays it too)
    run         everything else in the first call: the compiled code running, the backward (on a
                GPU, up to the synchronize after the call), of which
      launch    each Triton kernel's first launch: compared with Triton's own launch path before
                tc's launcher takes over (``triton_launch.TritonLauncher._first``)
    total       import + every phase of the first call (the warm-start figure; torch excluded)
    eager 1st   the reference: eager's first call in a fresh process (wall), which creates the CUDA
                libraries' handles and workspaces that a compiled first call creates too

and counts what the call rebuilt instead of reading back: ``traces`` (tc_autograd traces),
``lowerings`` (tc_inductor graph lowerings), ``builds`` (C++ compiler runs), and artifact-cache
misses by kind (a warm start should show zero of each), and ``loaded``: the kernels loaded per
back end. The warm process also checks its answers against eager's: outputs (and, tiny models
training, gradients); ``--full`` training compares the step's loss with an eager copy's (the
AdamW step clears the gradients), with dropout off so that they agree. The phases are measured by
wrapping functions from outside (no product code changes); ``--cpu`` shows CPU seconds (user +
system, every thread of the process) instead of wall time, for a loaded machine where wall time
mostly measures the neighbours. Python's bytecode cache is warm too: the children run without
``PYTHONDONTWRITEBYTECODE`` (which left every process compiling tc's ~200 source files, 0.3-0.6 s
here), so the cold child writes ``__pycache__`` beside tc's sources (``--no-bytecode-cache`` keeps the
variable). ``--profile``: one more warm process per cell runs under cProfile
(not one the table's medians come from), and ``$OUT`` (default ``./bench_out``) gets the top 25
functions by cumulative time of ``import tc`` + ``tc.compile`` and of the first call, as text and
as pstats files, with the table as JSON.

    python benchmarks/warm_start.py                       # every tiny model, both tasks, CPU
    python benchmarks/warm_start.py --models gpt2 --tasks infer --repeat 3
    python benchmarks/warm_start.py --device cuda --full --models resnet50,gpt2 --tasks infer,train --profile
    python benchmarks/warm_start.py --device cpu --full --models resnet50 --shapes resnet50=2 --tasks infer
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODELS = ("gpt2", "bert", "llama", "cnn")
FULL_MODELS = ("resnet50", "gpt2", "bert", "vit_b_16", "llama",  # benchmarks/models.py's MODELS
               "mobilenet_v3", "efficientnet_b0", "distilbert", "t5")
TASKS = ("infer", "train")
PHASES = ("import", "fake", "capture", "trace", "lower", "kernels", "triton", "cpp", "opt", "run", "launch")
COUNTS = ("traces", "lowerings", "builds", "misses", "loaded")
HERE = os.path.dirname(os.path.abspath(__file__))


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
    """A tiny model and its inputs, on the CPU."""
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


def build_full(name: str, device: str, shape: tuple | None):
    """``benchmarks/models.py``'s model ``name`` at its benchmark size (``shape`` as its
    ``--shapes``) on ``device``, its inputs, and that module (for its step)."""
    import torch

    sys.path.insert(0, HERE)
    import models as bench  # its cache variables are setdefault: the parent's TC_/TRITON_CACHE_DIR stay

    with contextlib.suppress(OSError):
        os.rmdir(bench._CACHE_ROOT)  # its own cache root: unused here (the parent set every variable)

    if device == "cuda":  # as models.py's cells
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    base, make_inputs = bench.MODELS[name](False, shape)
    torch.manual_seed(0)
    return base.to(device), make_inputs(device), bench


def _dropout_off(model) -> None:
    """Training with dropout off (batch norm keeps batch statistics), as models.py's own gradient
    check does: the compiled step and the eager copy's then compute the same function."""
    import torch

    model.train()
    for m in model.modules():
        if not isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.training = False


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

    def wrap(self, owner, attr: str, phase: str, after=None, outside: str | None = None) -> bool:
        """Time ``owner.attr`` as ``phase``; False (nothing wrapped) when it is not there. With
        ``outside``, time spent while no call of that phase is running is also added to
        ``<phase>_outside`` (a kernel loaded at its first launch, not in ``_load``)."""
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
                if outside is not None and not self.depth.get(outside, 0):
                    self.add(f"{phase}_outside", end[0] - start[0], end[1] - start[1])
                self.calls[phase] = self.calls.get(phase, 0) + 1
                if after is not None:
                    after(result)
            return result

        static = isinstance(inspect.getattr_static(owner, attr, None), staticmethod)
        setattr(owner, attr, staticmethod(timed) if static else timed)
        return True

    def count(self, owner, attr: str, name: str) -> None:
        """Count every call of ``owner.attr`` (nested ones too) as ``name``."""
        original = getattr(owner, attr)

        def counted(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return original(*args, **kwargs)

        setattr(owner, attr, counted)

    def add(self, phase: str, wall: float, cpu: float | None = None) -> None:
        self.wall[phase] = self.wall.get(phase, 0.0) + wall
        self.cpu[phase] = self.cpu.get(phase, 0.0) + (wall if cpu is None else cpu)


def _instrument(clock: Clock) -> None:
    """Wrap the stages of a compile (names of the packages' internals: a renamed one is reported
    as not measured, and its time shows under ``run``)."""
    import torch._subclasses.fake_tensor as fake_tensor
    import torch.fx.experimental.symbolic_shapes as symbolic_shapes

    import tc_autograd.api
    import tc_capture.cache.frame_cache as frame_cache
    import tc_inductor
    import tc_inductor.codegen.build as build
    import tc_inductor.codegen.registry as registry
    import tc_inductor.codegen.triton_launch as triton_launch

    inductor_compile = sys.modules["tc_inductor.compile"]  # the package's ``compile`` is the function

    clock.wrap(frame_cache.FrameCache, "miss", "miss")  # capture, back end and guards of one entry
    clock.wrap(fake_tensor.FakeTensorMode, "__init__", "fake")
    clock.wrap(symbolic_shapes.ShapeEnv, "__init__", "fake")  # the first imports torch._dynamo (CNN)
    clock.wrap(tc_autograd.api.Compiled, "__init__", "autograd")  # a variant: trace (or cache) + inductor
    clock.wrap(tc_autograd.api, "_trace", "traces")
    clock.wrap(inductor_compile.GraphLowering, "run", "lowerings")
    clock.wrap(build, "_build", "builds")  # one C++ compiler run

    # kernels built or loaded, and the wrapper's exec; a forward's deferred load (``defer_load``)
    # runs after its inductor.compile returned, inside tc_autograd's compile
    clock.wrap(inductor_compile, "_load", "kernels", outside="inductor")
    clock.wrap(triton_launch.TritonLauncher, "_first", "launch")  # a part of run
    clock.wrap(tc_inductor, "compile", "inductor")
    registry._load_builtin()  # tc.compile imported both back ends already: a no-op (checked by the caller)
    for entry in registry.BACKENDS:
        backend = type(entry.backend)
        if entry.name not in ("triton", "cpp"):
            continue
        clock.count(backend, "load", f"loaded_{entry.name}")  # one per kernel of a compiled graph
        for attr in ("start", "load", "_launcher"):  # Triton's _launcher also runs at a first launch
            if hasattr(backend, attr):
                clock.wrap(backend, attr, entry.name, outside="kernels")


def _phases(clock: Clock, seconds: dict[str, float], first_call: float, imported: float) -> dict[str, float]:
    """Disjoint phases from the nested wrapped timings (``seconds`` is clock.wall or clock.cpu);
    ``triton`` and ``cpp`` are parts of ``kernels``, ``launch`` of ``run``."""
    s = {k: seconds.get(k, 0.0) for k in ("miss", "fake", "autograd", "inductor", "kernels", "kernels_outside",
                                          "triton", "cpp", "triton_outside", "cpp_outside", "opt", "launch")}
    late = s["triton_outside"] + s["cpp_outside"]  # kernels loaded while running, after their graph's _load
    deferred = s["kernels_outside"]  # in tc_autograd's compile, after inductor.compile returned
    phases = {"import": imported, "fake": s["fake"], "trace": s["autograd"] - s["inductor"] - deferred,
              "lower": s["inductor"] - (s["kernels"] - deferred), "kernels": s["kernels"] + late,
              "triton": s["triton"], "cpp": s["cpp"], "opt": s["opt"], "launch": s["launch"]}
    # a variant compiled later (the backward's at the first backward) runs outside the capture miss
    compiled_in_miss = min(s["autograd"], max(0.0, s["miss"] - s["fake"]))
    phases["capture"] = max(0.0, s["miss"] - s["fake"] - compiled_in_miss)
    phases["run"] = max(0.0, first_call - s["miss"] - (s["autograd"] - compiled_in_miss) - late - s["opt"])
    return phases


def _check(model, compiled, inputs, task: str, got, tol: float) -> None:
    """The warm process's answers are eager's: outputs, and in training the gradients."""
    import torch

    if task == "infer":
        with torch.no_grad():
            torch.testing.assert_close(got, model(*inputs), rtol=tol, atol=tol)
        return
    mine = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    want = model(*inputs)
    torch.testing.assert_close(got, want.detach(), rtol=tol, atol=tol)
    want.float().pow(2).mean().backward()
    for (name, p), g in zip(model.named_parameters(), mine):
        if g is None or p.grad is None:  # a parameter the output does not use (BERT's pooler)
            assert g is None and p.grad is None, f"grad of {name}: {g} (tc), {p.grad} (eager)"
            continue
        torch.testing.assert_close(g, p.grad, rtol=tol, atol=tol, msg=lambda m, name=name: f"grad of {name}: {m}")


def _check_full(reference, inputs, task: str, got, device: str, bench) -> str:
    """A benchmark-size step's answer against the eager model's (``reference``: the model itself in
    inference, an eager copy taken before the step in training), as models.py compares its cells:
    "ok (error)" or "MISMATCH (error)", shown in the table (a GPU run's other cells still run)."""
    import torch

    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
        want = reference(*inputs)
        want = want.float().pow(2).mean() if task == "train" else want  # the step's loss
    err = bench._rel(got.float(), want.float())
    return f"ok ({err:.1e})" if err < 5e-2 else f"MISMATCH ({err:.1e})"  # bf16 autocast, as models.py's check


def _prepare(args):
    """The user's part: the model on its device, its inputs, and what its answer is checked with."""
    import torch

    shapes = dict(item.split("=") for item in args.shapes.split(",") if item)
    if args.full:
        shape = tuple(int(v) for v in shapes[args.child[0]].split("x")) if args.child[0] in shapes else None
        model, inputs, bench = build_full(args.child[0], args.device, shape)
        _dropout_off(model) if args.child[1] == "train" else model.eval()
        reference = copy.deepcopy(model) if args.child[1] == "train" else model  # the step updates the weights
        return model, inputs, bench, reference
    model, inputs = build(args.child[0])
    model, inputs = model.to(args.device), tuple(t.to(args.device) for t in inputs)
    model.train() if args.child[1] == "train" else model.eval()
    torch.manual_seed(0)
    return model, inputs, None, model


def _tiny_step(compiled, inputs, task: str):
    import torch

    def step():
        if task == "infer":
            with torch.no_grad():
                return compiled(*inputs)
        out = compiled(*inputs)
        out.float().pow(2).mean().backward()
        return out
    return step


class _Profile:
    """cProfile over some sections of the child (``--profile``), written as text and pstats files."""

    def __init__(self, prefix: str | None):
        import cProfile

        self.prefix, self.sections = prefix, {}
        self.make = cProfile.Profile

    def __call__(self, name: str):
        if self.prefix is None:
            return contextlib.nullcontext()
        self.sections[name] = profile = self.make()
        return profile

    def write(self, title: str) -> None:
        if self.prefix is None:
            return
        import io
        import pstats

        text = io.StringIO()
        for name, profile in self.sections.items():
            profile.dump_stats(f"{self.prefix}_{name}.prof")
            text.write(f"==== {title}: {name}, top 25 by cumulative time (under cProfile: slower than the table) ====\n")
            pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(25)
        with open(f"{self.prefix}.txt", "w") as f:
            f.write(text.getvalue())


def eager_child(args) -> dict:
    """The reference: eager's own first call in a fresh process (CUDA libraries, cuBLAS and cuDNN
    handles and workspaces are created there; a compiled model's first call pays them too)."""
    import torch

    model, inputs, bench, _ = _prepare(args)
    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    step = bench._step_fn(args.child[1], model, model, inputs, args.device)[0] if bench else _tiny_step(
        model, inputs, args.child[1])
    sync()
    begin = time.perf_counter()
    step()
    sync()
    return {"eager": time.perf_counter() - begin}


def child(args) -> dict:
    start = _now()
    import torch

    # The user's part first: torch, the model's library (transformers imports torch._dynamo) and
    # the model. ``import tc`` after it is what tc adds to the process.
    model, inputs, bench, reference = _prepare(args)
    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    after_torch = _now()
    profile = _Profile(args.profile_to)
    with profile("import_and_compile"):
        import tc

        compiled = tc.compile(model)  # the back ends load here
    after_tc = _now()
    task = args.child[1]
    clock = Clock()
    clock.wrap(torch.optim.AdamW, "step", "opt")  # before the step binds it
    step = bench._step_fn(task, compiled, model, inputs, args.device)[0] if bench else _tiny_step(compiled, inputs, task)
    loaded = set(sys.modules)
    _instrument(clock)
    if set(sys.modules) - loaded:  # the wrapping itself must not load what the first call would
        print(f"warm_start: instrumenting imported {sorted(set(sys.modules) - loaded)}", file=sys.stderr)
    skipped = _now()  # the step's construction (an optimizer) and the instrumenting: not the warm start's
    with profile("first_call"):
        begin = _now()
        got = step()
        sync()
        end = _now()
    profile.write(f"{args.child[0]} {task} on {args.device}")
    if bench:
        check = _check_full(reference, inputs, task, got.detach(), args.device, bench)
    else:
        _check(model, compiled, inputs, task, got.detach(), 2e-3 if cuda else 1e-4)
        check = "ok"
    store = tc.backends.artifact_cache()
    misses = {kind: row["misses"] for kind, row in store.counters.by_kind.items() if row["misses"]}
    counts = {"traces": clock.calls.get("traces", 0), "lowerings": clock.calls.get("lowerings", 0),
              "builds": clock.calls.get("builds", 0), "misses": misses,
              "loaded": {b: clock.calls[f"loaded_{b}"] for b in ("triton", "cpp") if clock.calls.get(f"loaded_{b}")}}
    modules = [m for m in ("torch._dynamo", "sympy", "networkx", "triton", "transformers") if m in sys.modules]
    out = {"user": {"wall": after_torch[0] - start[0], "cpu": after_torch[1] - start[1]},
           "counts": counts, "modules": modules, "skipped": skipped[0] - after_tc[0], "check": check}
    for i, kind in enumerate(("wall", "cpu")):
        first_call = end[i] - begin[i]
        phases = _phases(clock, getattr(clock, kind), first_call, after_tc[i] - after_torch[i])
        out[kind] = {"phases": phases, "first_call": first_call, "total": phases["import"] + first_call}
    return out


# ---- the parent ----------------------------------------------------------------------------------
def run_child(model: str, task: str, cache_dir: str, args, profile_to: str | None = None,
              eager: bool = False) -> dict:
    env = dict(os.environ, TC_CACHE_DIR=cache_dir, TRITON_CACHE_DIR=os.path.join(cache_dir, "triton"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_dir, "torchinductor"))
    if not args.no_bytecode_cache:  # the cold child writes tc's .pyc files, as any installed package has them
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    cmd = [sys.executable, __file__, "--child", model, task, "--device", args.device, "--shapes", args.shapes,
           *(["--full"] if args.full else []), *(["--profile-to", profile_to] if profile_to else []),
           *(["--eager-child"] if eager else [])]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{model} {task} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(model: str, task: str, args, kind: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="tc-warm-") as cache_dir:
        cold = run_child(model, task, cache_dir, args)
        warm = [run_child(model, task, cache_dir, args) for _ in range(args.repeat)]
        eager = [run_child(model, task, cache_dir, args, eager=True)["eager"] for _ in range(args.repeat)]
        if args.profile:  # one more warm process, under cProfile: not among the timed ones
            os.makedirs(args.out, exist_ok=True)
            run_child(model, task, cache_dir, args, os.path.join(args.out, f"warm_start_profile_{model}_{task}"))
    phases = {p: statistics.median(w[kind]["phases"][p] for w in warm) for p in PHASES}
    counts = warm[-1]["counts"]
    return {"model": model, "task": task, "device": args.device, "full": args.full, "cold": cold[kind]["total"],
            "phases": phases, "user": statistics.median(w["user"][kind] for w in warm),
            "total": statistics.median(w[kind]["total"] for w in warm), "counts": counts,
            "eager_first_call": statistics.median(eager),
            "modules": warm[-1]["modules"], "warm_totals": [w[kind]["total"] for w in warm],
            "check": warm[-1]["check"]}


def table(rows: list[dict], kind: str) -> str:
    head = ["model", "task", "cold", "user", *PHASES, "total", "eager 1st", *COUNTS, "check"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        p, c = r["phases"], r["counts"]
        misses = ", ".join(f"{k} {v}" for k, v in sorted(c["misses"].items())) or "0"
        loaded = ", ".join(f"{k} {v}" for k, v in sorted(c.get("loaded", {}).items())) or "0"
        cells = [r["model"], r["task"], f"{r['cold'] * 1e3:.0f}", f"{r['user'] * 1e3:.0f}"]
        cells += [f"{p[k] * 1e3:.0f}" for k in PHASES] + [f"**{r['total'] * 1e3:.0f}**"]
        cells.append(f"{r['eager_first_call'] * 1e3:.0f}" if "eager_first_call" in r else "-")
        cells += [str(c["traces"]), str(c["lowerings"]), str(c["builds"]), misses, loaded, r.get("check", "-")]
        lines.append("| " + " | ".join(cells) + " |")
    what = "CPU ms (user + system, all threads)" if kind == "cpu" else "wall ms"
    loaded = sorted({m for r in rows for m in r["modules"]})
    return "\n".join(lines) + (f"\n({what}; medians over the warm runs; 'cold' is import + first call with an empty "
                               f"cache; 'total' is import + first call, the 'user' column excluded; 'eager 1st' is "
                               f"eager's own first call in a fresh process (wall); 'triton' and "
                               f"'cpp' are parts of 'kernels', 'launch' of 'run'; 'opt' is eager AdamW's step; "
                               f"counts are the last warm run's; modules loaded by then: {', '.join(loaded)})")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help=f"default: {','.join(MODELS)}; with --full: {','.join(FULL_MODELS)}")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--repeat", type=int, default=2, help="warm runs per cell (median)")
    parser.add_argument("--cpu", action="store_true", help="CPU seconds instead of wall time")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--full", action="store_true", help="benchmarks/models.py's models at benchmark size")
    parser.add_argument("--shapes", default="", help="with --full, as models.py's: e.g. bert=32x512,resnet50=2")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="keep PYTHONDONTWRITEBYTECODE: every process compiles tc's sources (~0.3-0.6 s)")
    parser.add_argument("--profile", action="store_true", help="one more warm process per cell under cProfile")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench_out"), help="--profile's files (default $OUT)")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "TASK"), help=argparse.SUPPRESS)
    parser.add_argument("--profile-to", help=argparse.SUPPRESS)
    parser.add_argument("--eager-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return args
    known = FULL_MODELS if args.full else MODELS
    args.models = args.models or ",".join(known)
    unknown = [m for m in args.models.split(",") if m not in known]
    if unknown or not set(args.tasks.split(",")) <= set(TASKS):
        parser.error(f"unknown models {unknown} (known{' with --full' if args.full else ''}: {', '.join(known)}) "
                     f"or tasks {args.tasks} (known: {', '.join(TASKS)})")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: torch.cuda.is_available() is False here (no GPU, no driver, or a CPU "
                         f"build of torch {torch.__version__}); run it on the GPU host or use --device cpu")
    return args


def main() -> None:
    args = _arguments()
    if args.child:
        print(json.dumps(eager_child(args) if args.eager_child else child(args)))
        return
    kind = "cpu" if args.cpu else "wall"
    rows = []
    for model in args.models.split(","):
        for task in args.tasks.split(","):
            try:
                rows.append(measure(model, task, args, kind))
            except RuntimeError as e:  # a child failed: its stderr's tail, and the other cells still run
                print(f"warm_start: {e}", file=sys.stderr)
                continue
            print(f"{model} {task}: warm start {rows[-1]['total'] * 1e3:.0f} ms", file=sys.stderr)
    print(table(rows, kind))
    if args.profile:
        path = os.path.join(args.out, "warm_start.json")
        os.makedirs(args.out, exist_ok=True)  # no cell ran: its profiles did not make it
        with open(path, "w") as f:
            json.dump({"kind": kind, "rows": rows, "table": table(rows, kind)}, f, indent=1)
        print(f"profiles and {path} written", file=sys.stderr)


if __name__ == "__main__":
    main()
