"""One rank of the 2-process gloo runs behind ``tests/test_distributed.py``.

Run as ``python distributed_workers.py RANK WORLD STORE_FILE OUT_JSON CASE...``. Each case trains
a model wrapped in DDP or FSDP twice on this rank, side by side: eagerly, and with ``tc.compile``
applied where the case says (around the wrapper, inside it, or on a parent module). Both twins
start from the same seed and get the same per-rank data; after every step the loss, every
gradient and every parameter (and buffer) of the compiled twin must match the eager one. What
tc did is recorded too: graphs compiled (a counting back end in front of the inductor), graph
breaks (the ``tc.graph_breaks`` log that ``TC_LOGS=graph_breaks`` prints) and ``tc`` warnings.

The result of each case (an error's traceback, or nothing) goes to OUT_JSON; the test process
asserts on it. Both ranks run the same cases in the same order, so a failure on one rank is
normally a failure on both; a rank stuck in a collective is ended by the process group's
timeout, and the test process kills both ranks at its own deadline.
"""

from __future__ import annotations

import copy
import datetime
import json
import logging
import os
import re
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tc_models import CNN, MLP, TinyTransformer, inputs_for  # noqa: E402

import tc  # noqa: E402

STEPS = 3
TOL_LOSS = 1e-4  # as tests/test_compile.py: values at 1e-4, trained parameters at 1e-3
TOL_TRAINED = 1e-3
COLLECTIVE_TIMEOUT_S = 60
# A ``tc``/``tc_capture`` warning that says a region, a graph or the whole call runs in Python;
# the note that a call "captured N graphs with M graph breaks" is about breaks, not a fallback.
_EAGER_WORDS = re.compile(r"eager|in Python|captured no graph|natively", re.IGNORECASE)
_BREAKS_NOTE = re.compile(r"captured [1-9]\d* graphs with \d+ graph breaks")


def _says_eager(message: str) -> bool:
    return not _BREAKS_NOTE.search(message) and bool(_EAGER_WORDS.search(message))


# ---- models a case needs beyond tests/tc_models.py -------------------------------------------------
class Outer(nn.Module):
    """A plain model holding a DDP-wrapped block as a submodule (``model.layer = DDP(...)``)."""

    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(32, 32)
        self.layer = MLP()

    def forward(self, x):
        return self.layer(F.relu(self.pre(x))).log_softmax(-1)


def _outer_with_ddp_layer() -> Outer:
    model = Outer()
    model.layer = DDP(model.layer)
    return model


# ---- wrappers: (eager twin, compiled twin, module whose parameters the optimizer steps) -----------
# The twin is copied before either is wrapped: FSDP replaces the wrapped module's parameters.
def _ddp(model, backend):
    twin = copy.deepcopy(model)
    return DDP(model), tc.compile(DDP(twin), backend=backend)


def _ddp_of_compiled(model, backend):
    twin = copy.deepcopy(model)
    return DDP(model), DDP(tc.compile(twin, backend=backend))


def _compiled_parent(model, backend):
    """``model`` holds DDP submodules already; the parent is compiled."""
    twin = copy.deepcopy(model)
    return model, tc.compile(twin, backend=backend)


def _fsdp1(model, backend):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    twin = copy.deepcopy(model)
    wrap = lambda m: FSDP(m, use_orig_params=True, device_id=torch.device("cpu"))  # noqa: E731
    return wrap(model), tc.compile(wrap(twin), backend=backend)


def _fsdp2(model, backend):
    from torch.distributed.fsdp import fully_shard

    twin = copy.deepcopy(model)
    for m in (model, twin):
        for unit in _shard_units(m):
            fully_shard(unit)
        fully_shard(m)
    return model, tc.compile(twin, backend=backend)


def _shard_units(model: nn.Module) -> list[nn.Module]:
    """FSDP2's usual layout: one shard group per layer (a ModuleList's items), then the root."""
    units = []
    for child in model.children():
        if isinstance(child, nn.ModuleList):
            units += list(child)
        elif any(True for _ in child.parameters()):
            units.append(child)
    return units


@dataclass(frozen=True)
class Case:
    make: Callable[[], nn.Module]
    wrap: Callable
    optimizer: Callable
    data: type  # the model class whose inputs tc_models.inputs_for makes


_SGD = lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9)  # noqa: E731
_ADAMW = lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.01)  # noqa: E731

CASES = {
    "ddp_mlp": Case(MLP, _ddp, _SGD, MLP),
    "ddp_cnn": Case(CNN, _ddp, _SGD, CNN),
    "ddp_transformer": Case(TinyTransformer, _ddp, _ADAMW, TinyTransformer),
    "ddp_submodule": Case(_outer_with_ddp_layer, _compiled_parent, _ADAMW, MLP),
    "ddp_of_compiled": Case(MLP, _ddp_of_compiled, _SGD, MLP),
    "fsdp_mlp": Case(MLP, _fsdp1, _SGD, MLP),
    "fsdp_cnn": Case(CNN, _fsdp1, _SGD, CNN),
    "fsdp_transformer": Case(TinyTransformer, _fsdp1, _ADAMW, TinyTransformer),
    "fully_shard_mlp": Case(MLP, _fsdp2, _ADAMW, MLP),
    "fully_shard_transformer": Case(TinyTransformer, _fsdp2, _ADAMW, TinyTransformer),
}


# ---- what tc did ---------------------------------------------------------------------------------
class _Record(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _counting_backend(graphs: list[list[str]], ran: Counter):
    """The inductor, recording the ops of each graph it compiles (``graphs``) and counting the
    ops that compiled graphs run (``ran``)."""

    @tc.tc_ir_backend
    def counting(graph, example_inputs):
        ops = [getattr(n.target, "__name__", str(n.target)) for n in graph.calls]
        graphs.append(ops)
        compiled = tc.backends.inductor(graph, example_inputs)

        def run(*inputs):
            ran.update(ops)
            return compiled(*inputs)

        return run

    return counting


# The op each parameterized layer's forward records: a forward of the model runs at least these
# in compiled graphs when the wrapped module's forward was compiled.
_LAYER_OPS = {nn.Linear: "linear", nn.Conv2d: "conv2d", nn.BatchNorm2d: "batch_norm", nn.LayerNorm: "layer_norm",
              nn.Embedding: "embedding"}


def _layer_ops(model: nn.Module) -> Counter:
    return Counter(_LAYER_OPS[type(m)] for m in model.modules() if type(m) in _LAYER_OPS)


def _local(t):
    """A DTensor's (FSDP2) local shard; plain tensors as they are."""
    return t.to_local() if hasattr(t, "to_local") else t


# ---- one case ------------------------------------------------------------------------------------
def _close(what: str, actual, expected, tol: float) -> None:
    if expected is None or actual is None:
        assert actual is None and expected is None, f"{what}: one twin has None ({actual is None}, {expected is None})"
        return
    torch.testing.assert_close(_local(actual), _local(expected), atol=tol, rtol=tol, msg=lambda m: f"{what}: {m}")


def _loss(fn, x):
    loss = fn(*x).float().pow(2).mean()
    loss.backward()
    return loss.detach()


def _compare_step(step: int, ref, twin, losses) -> None:
    _close(f"step {step} loss", losses[1], losses[0], TOL_LOSS)
    for (name, p), q in zip(ref.named_parameters(), twin.parameters(), strict=True):
        _close(f"step {step} grad of {name}", q.grad, p.grad, TOL_TRAINED)


def _compare_state(step: int, ref, twin) -> None:
    for (name, p), q in zip(ref.named_parameters(), twin.parameters(), strict=True):
        _close(f"step {step} parameter {name} after the optimizer step", q, p, TOL_TRAINED)
    for (name, b), c in zip(ref.named_buffers(), twin.buffers(), strict=True):
        _close(f"step {step} buffer {name}", c.float(), b.float(), TOL_TRAINED)


def _train(case: Case, rank: int, backend, ran: Counter, ran_per_step: list) -> Counter:
    """Train the twins side by side; the layer ops one forward of the model runs."""
    torch.manual_seed(0)  # the same initial weights on every rank and in both twins
    model = case.make().train()
    layer_ops = _layer_ops(model)
    ref, twin = case.wrap(model, backend)
    opts = [case.optimizer(m.parameters()) for m in (ref, twin)]
    shapes = case.data()
    for step in range(STEPS):
        torch.manual_seed(1000 + 17 * rank + step)  # different data on each rank, fresh each step
        x = inputs_for(shapes)
        ran.clear()
        losses = [_loss(fn, x) for fn in (ref, twin)]
        ran_per_step.append(dict(ran))
        _compare_step(step, ref, twin, losses)
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
        _compare_state(step, ref, twin)
    return layer_ops


def run_case(name: str, rank: int) -> dict:
    graphs: list[list[str]] = []
    ran, ran_per_step = Counter(), []
    breaks = _Record()
    log = logging.getLogger("tc.graph_breaks")
    log.addHandler(breaks)
    old_level = log.level
    log.setLevel(logging.DEBUG)
    error, layer_ops, start = None, Counter(), time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            layer_ops = _train(CASES[name], rank, _counting_backend(graphs, ran), ran, ran_per_step)
    except Exception:
        error = traceback.format_exc()
    finally:
        log.removeHandler(breaks)
        log.setLevel(old_level)
    tc.reset()
    tc_warnings = [str(w.message) for w in caught if str(w.message).startswith(("tc:", "tc_"))]
    return {"error": error, "graphs": graphs, "breaks": breaks.lines, "tc_warnings": tc_warnings,
            "layer_ops": dict(layer_ops), "compiled_ops_per_step": ran_per_step,
            "eager_warnings": [m for m in tc_warnings if _says_eager(m)],
            "seconds": round(time.perf_counter() - start, 2)}


def main(argv: list[str]) -> None:
    rank, world, store, out, *cases = argv
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=int(rank), world_size=int(world),
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    results = {}
    try:
        for name in cases:
            results[name] = run_case(name, int(rank))
            with open(out, "w") as f:  # after each case: a later hang still leaves these
                json.dump(results, f, indent=1)
            dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
