"""Run one zoo case through ``tc.compile`` and eager, and say how they compare.

Inference: ``model.eval()`` under ``torch.no_grad()``; every tensor in the output is compared
(logits, losses, and HF key/value caches). Training: ``model.train()`` with every dropout and
stochastic-depth probability at zero (so the step is deterministic; batch norm still uses batch
statistics and updates its running buffers), ``loss.backward()``; the loss, the gradient of every
parameter and every buffer afterwards are compared. Each task runs twice with different random
inputs (the second call hits the compiled code, or recompiles), on a fresh copy of one seeded
model: eager runs the original, tc a ``copy.deepcopy``.
"""

from __future__ import annotations

import copy
import os
import re
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from zoo_models import FLOAT32_INSIDE, ZooCase

import tc

# Tolerances (float32 on the CPU): |tc - eager| <= ATOL * max(1, max|eager|) + RTOL * |eager|,
# elementwise per tensor. The scaled atol keeps tiny gradients of a large tensor from failing on
# summation order alone; a real error (a wrong view, a dropped update) is far above these.
TOL = {"infer": (1e-3, 1e-4), "train": (2e-3, 2e-4)}  # (rtol, atol)
# A tensor outside that tolerance still matches if tc is as close to a float64 run of the same
# model as eager float32 is (|tc - f64| <= FP64_FACTOR * |eager - f64| + FP64_ATOL, in max norm):
# ill-conditioned gradients (batch norm over 2 values at a 1x1 feature map) differ by more than
# any fixed tolerance between two correct float32 summation orders. torch's own dynamo
# benchmarks judge accuracy the same way.
FP64_FACTOR, FP64_ATOL = 3.0, 1e-5
# A case that still fails is run again with the model and inputs in float64, through tc and
# eager both: in float64 two correct runs agree to ~1e-10 however ill-conditioned the model (timm's
# dla46_c: eager float32 is 3.7 from float64 in its stem's weight gradient, tc float64 5e-11 from
# eager float64), so that run tells a chaotic float32 step from a wrong one. It must agree to
# |tc - eager| <= F64_RERUN_TOL * (max(1, max|eager|) + |eager|), elementwise.
F64_RERUN_TOL = 1e-7
# ... or to this, for the models that compute a part in float32 on purpose (zoo_models.FLOAT32_INSIDE)
F32_INSIDE_TOL = 1e-5
# Where the cases run: "cpu" (C++ kernels; CI), or "cuda" on a GPU host (Triton kernels), with
# TF32 off so that eager's float32 convolutions and matmuls are float32 as on the CPU.
DEVICE = torch.device(os.environ.get("TC_ZOO_DEVICE", "cpu"))
# TC_ZOO_FLOAT64=1: every case runs in float64 only, tc and eager both, to F64_RERUN_TOL. Where
# float32 can only tell a wrong answer from chaos through the rerun, float64 tells any wrong
# kernel at once (NOTES §30: a ptxas miscompile showed only as chaos-sized errors in float32).
FLOAT64_ONLY = os.environ.get("TC_ZOO_FLOAT64") == "1"


@dataclass
class ZooResult:
    """One row of the zoo table."""

    model: str
    task: str
    match: bool = False
    max_abs_err: float = float("nan")
    worst: str = ""  # the tensor with the largest error beyond tolerance
    graphs: int = -1
    breaks: int = -1
    fallbacks: int = 0
    compile_s: float = float("nan")
    error: str = ""
    float64_rerun: str = ""  # the float64 rerun's verdict, when the float32 comparison failed
    break_reasons: tuple[str, ...] = ()
    fallback_messages: tuple[str, ...] = ()
    known: str = ""  # the finding of a known failure (test_zoo.KNOWN)

    @property
    def ok(self) -> bool:
        return self.match and not self.fallbacks and not self.error


def run_case(case: ZooCase, task: str) -> ZooResult:
    """Compile ``case`` for ``task`` ("infer" or "train"), compare with eager, count graphs."""
    result = ZooResult(case.name, task)
    if FLOAT64_ONLY:
        return _float64_only(result, case, task)
    torch.manual_seed(0)
    if DEVICE.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    eager = case.build().to(DEVICE)
    _set_mode(eager, task)
    compiled_model = copy.deepcopy(eager)
    explain_model = copy.deepcopy(eager)
    reference = copy.deepcopy(eager).double()
    first = _on_device(case.inputs(torch.Generator().manual_seed(1)))
    try:
        _explain(result, explain_model, first, task)
        compiled = tc.compile(compiled_model)
        values_only = True  # every tensor past tolerance differs in finite values alone
        for call, inputs in enumerate([first, _on_device(case.inputs(torch.Generator().manual_seed(2)))]):
            expected = _run(eager, case, inputs, task)
            f64 = _float64_run(reference, case, inputs, task)
            start = time.perf_counter()
            actual = _with_warnings(result, lambda i=inputs: _run(compiled, case, i, task, compiled_model))
            if call == 0:
                result.compile_s = time.perf_counter() - start
            values_only = _compare(result, expected, actual, f64, task, prefix=f"call{call + 1}.") and values_only
        if not result.match and values_only:  # a dtype, shape or NaN difference stands as it is
            _rerun_in_float64(result, case, task)
    except Exception as e:  # a crash where eager works is a result, reported in the table
        result.match, result.error = False, _error_text(e)
    return result


def _error_text(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


def _rerun_in_float64(result: ZooResult, case: ZooCase, task: str) -> None:
    """Decide a float32 mismatch by the same two calls in float64 (``F64_RERUN_TOL``): a match
    there makes the case match, with the float32 tensor that failed kept in ``float64_rerun``."""
    try:
        _, worst, worst_name = _float64_calls(result, case, task)
    except Exception as e:  # the model does not run in float64 (or tc fails there): the mismatch stands
        result.float64_rerun = f"not run: {type(e).__name__}: {str(e)[:120]}"
        return
    if worst_name:
        result.float64_rerun = f"mismatch too: {worst_name} off by {worst:.3g}"
        result.worst = f"{result.worst} (float64: {worst_name})"
    else:
        result.float64_rerun = f"matches (float32 failed at {result.worst}: ill-conditioned)"
        result.match, result.worst = True, ""


def _float64_only(result: ZooResult, case: ZooCase, task: str) -> ZooResult:
    """``TC_ZOO_FLOAT64=1``: the case's two calls in float64, to ``F64_RERUN_TOL``."""
    try:
        result.max_abs_err, _, result.worst = _float64_calls(result, case, task)
        result.match = not result.worst
    except Exception as e:  # a crash where eager works is a result, reported in the table
        result.match, result.error = False, _error_text(e)
    return result


def _float64_calls(result: ZooResult, case: ZooCase, task: str) -> tuple[float, float, str]:
    """The case's two calls with model and inputs in float64, through tc and eager: the largest
    error of any tensor, then the largest past ``F64_RERUN_TOL`` (``F32_INSIDE_TOL``) and its
    tensor ("" when every tensor agrees)."""
    torch.manual_seed(0)
    eager = case.build().to(DEVICE).double()
    _set_mode(eager, task)
    compiled_model = copy.deepcopy(eager)
    compiled = tc.compile(compiled_model)
    tol = F32_INSIDE_TOL if case.name in FLOAT32_INSIDE else F64_RERUN_TOL
    largest, worst, worst_name = 0.0, 0.0, ""
    for seed in (1, 2):
        inputs = _on_device(case.inputs(torch.Generator().manual_seed(seed)))
        inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
        expected = _run(eager, case, inputs, task)
        actual = _with_warnings(result, lambda i=inputs: _run(compiled, case, i, task, compiled_model))
        _check_structure(expected, actual)
        for name, want in expected.items():
            err, excess = _error(actual[name], want, tol, tol)
            largest = max(largest, err)
            if excess > 0 and (not worst_name or err > worst):
                worst, worst_name = err, f"call{seed}.{name}"
    return largest, worst, worst_name


def _on_device(inputs: dict[str, Any]) -> dict[str, Any]:
    """A case's inputs (made on the CPU from a seeded generator) on ``DEVICE``."""
    return {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _float64_run(reference: torch.nn.Module, case: ZooCase, inputs: dict[str, Any], task: str) -> dict:
    """The float64 run's tensors, or none when the model does not run in float64."""
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    try:
        return _run(reference, case, inputs, task)
    except Exception:  # the check then falls back to the plain tolerance alone
        return {}


def _set_mode(model: torch.nn.Module, task: str) -> None:
    model.train(task == "train")
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0
        if isinstance(getattr(m, "drop_prob", None), float):  # timm DropPath (stochastic depth)
            m.drop_prob = 0.0


def _explain(result: ZooResult, model: torch.nn.Module, inputs: dict[str, Any], task: str) -> None:
    with torch.set_grad_enabled(task == "train"):
        report = tc.explain(model, **_model_kwargs(inputs, task))
    result.graphs, result.breaks = report.graph_count, report.graph_break_count
    result.break_reasons = tuple(str(b) for b in report.break_reasons)
    if report.graph_count == 0:  # the whole forward runs eagerly: nothing of the model was compiled
        result.fallbacks += 1
        result.fallback_messages += ("no graph captured: " + "; ".join(result.break_reasons)[:250],)


def _model_kwargs(inputs: dict[str, Any], task: str) -> dict[str, Any]:
    """The model's arguments: HF models get ``labels`` (and compute their loss) only in training."""
    return {k: v for k, v in inputs.items() if k != "target" and (task == "train" or k != "labels")}


def _run(model: Any, case: ZooCase, inputs: dict[str, Any], task: str,
         params_of: torch.nn.Module | None = None) -> dict[str, torch.Tensor]:
    """Outputs (inference) or loss, gradients and buffers (training), flattened by name."""
    owner = params_of if params_of is not None else model
    if task == "infer":
        with torch.no_grad():
            return dict(_flatten(model(**_model_kwargs(inputs, task)), "out"))
    owner.zero_grad(set_to_none=True)
    loss = case.loss(model(**_model_kwargs(inputs, task)), inputs)
    loss.backward()
    found = {"loss": loss.detach()}
    found.update({f"grad.{n}": p.grad for n, p in owner.named_parameters() if p.grad is not None})
    found.update({f"buffer.{n}": b for n, b in owner.named_buffers()})
    missing = [n for n, p in owner.named_parameters() if p.requires_grad and p.grad is None]
    found.update({f"nograd.{n}": torch.zeros(()) for n in missing})
    return found


def _flatten(value: Any, path: str, depth: int = 0):
    """Every tensor inside an output: tuples, lists, dicts, ModelOutputs and cache objects."""
    if isinstance(value, torch.Tensor):
        yield path, value
    elif depth > 6 or value is None or isinstance(value, (str, int, float, bool, torch.nn.Module)):
        return
    elif isinstance(value, dict):
        for k in value:
            yield from _flatten(value[k], f"{path}.{k}", depth + 1)
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            yield from _flatten(v, f"{path}[{i}]", depth + 1)
    elif hasattr(value, "__dict__"):  # e.g. a DynamicCache and its layers' keys and values
        for k, v in sorted(vars(value).items()):
            yield from _flatten(v, f"{path}.{k}", depth + 1)


_MANY_BREAKS_NOTE = re.compile(r"captured [1-9]\d* graphs with \d+ graph breaks")


def _with_warnings(result: ZooResult, fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    # tc's once-per-function note that a call captured graphs but broke many times is about
    # breaks (counted by the case), not an eager fallback; "captured no graph" is a fallback
    ours = [str(w.message) for w in caught if str(w.message).startswith(("tc:", "tc_"))
            and not _MANY_BREAKS_NOTE.search(str(w.message))]
    result.fallbacks += len(ours)
    result.fallback_messages += tuple(m[:300] for m in ours)
    for w in caught:
        if not str(w.message).startswith(("tc:", "tc_")):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return out


def _compare(result: ZooResult, expected: dict, actual: dict, f64: dict, task: str, prefix: str) -> bool:
    """Compare one call's tensors into ``result``; False when a tensor differs in dtype, shape or
    NaN places (no float64 rerun can excuse that)."""
    rtol, atol = TOL[task]
    _check_structure(expected, actual)
    worst_excess, values_only = 0.0, True
    for name, want in expected.items():
        err, excess = _error(actual[name], want, rtol, atol)
        values_only = values_only and excess != float("inf")
        # only a finite value difference can be excused (until §29 a dtype difference was too)
        if 0 < excess < float("inf") and name in f64 and _as_close_to_f64(actual[name], want, f64[name]):
            excess = 0.0
        result.max_abs_err = err if result.max_abs_err != result.max_abs_err else max(result.max_abs_err, err)
        if excess > worst_excess:
            worst_excess, result.worst = excess, prefix + name
    result.match = not result.worst  # stays False once a tensor of an earlier call failed
    return values_only


def _check_structure(expected: dict, actual: dict) -> None:
    if set(expected) != set(actual):
        raise AssertionError(f"outputs differ in structure: {sorted(set(expected) ^ set(actual))[:4]}")


def _as_close_to_f64(got: torch.Tensor, want: torch.Tensor, ref: torch.Tensor) -> bool:
    """Whether tc's float32 result is about as close to the float64 run as eager's float32 is."""
    if got.shape != ref.shape or not got.is_floating_point():
        return False
    got, want, ref = (t.detach().double() for t in (got, want, ref))
    tc_err, eager_err = (got - ref).abs().max().item(), (want - ref).abs().max().item()
    return tc_err <= FP64_FACTOR * eager_err + FP64_ATOL * max(1.0, ref.abs().max().item())


def _error(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> tuple[float, float]:
    """(max abs error, how far past tolerance: > 0 fails). Shape, dtype or NaN placement differences fail."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf"), float("inf")
    if want.numel() == 0:
        return 0.0, 0.0
    got, want = got.detach().double(), want.detach().double()
    if not torch.equal(got.isnan(), want.isnan()):
        return float("inf"), float("inf")
    got, want = got.nan_to_num(), want.nan_to_num()
    diff = (got - want).abs()
    allowed = atol * max(1.0, want.abs().max().item()) + rtol * want.abs()
    return diff.max().item(), (diff - allowed).max().item()
