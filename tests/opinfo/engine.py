"""The OpInfo sweep's engine: one OpInfo's sample inputs, through tc, against eager.

Each sample becomes a small function ``fn(t0, t1, ...) -> op(...)`` over its tensors (the other
arguments are constants), generated as straight-line source so capture sees a plain call. Two
paths run it:

- ``inductor``: a hand-built torch-level ``tc_ir`` graph holding the one call, traced to ATen by
  ``tc_autograd.aot`` and compiled by ``tc_inductor.compile`` (forward, and backward where the
  OpInfo supports autograd). No capture and no fallback: a compile-time refusal (``declined``:
  data-dependent output shapes, ``NotImplementedError``) counts as a fallback, any other
  exception as a crash.
- ``tc``: ``tc.compile(fn)``, the whole pipeline, whose fallbacks warn.

Each path compiles on one draw of the samples and runs that draw and a second, fresh draw of
the same shapes; values, dtypes, shapes and gradients are compared with eager. A sample's
outcome is ``pass``, ``fallback`` (right answer, and tc warned that it ran something eagerly),
``mismatch`` (a wrong answer: the worst), ``crash`` (tc raised where eager works) or ``skip``
(eager itself rejects the sample, or its arguments cannot be passed to a function).
"""

from __future__ import annotations

import itertools
import math
import operator
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import attrs
import torch

OUTCOMES = ("pass", "fallback", "mismatch", "crash", "skip")
RANK = {"skip": 0, "pass": 1, "fallback": 2, "mismatch": 4, "crash": 3}  # a wrong answer is the worst

# Ops whose values come from a random generator (tc draws its own numbers: README of tc-inductor,
# "Not eager's numbers") or are uninitialised memory: only shapes and dtypes are compared.
NONDETERMINISTIC = {
    "bernoulli", "normal", "normal.in_place", "normal.number_mean", "uniform", "cauchy", "exponential",
    "geometric", "log_normal", "multinomial", "randint", "randn", "rand", "randint_like", "randn_like",
    "rand_like", "randperm", "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout.with_train",
    "nn.functional.feature_alpha_dropout.without_train", "nn.functional.rrelu", "empty", "empty_like",
    "new_empty", "empty_strided", "new_empty_strided", "empty_permuted", "nn.functional.multi_head_attention_forward",
    "torch._scaled_mm", "sparse.sampled_addmm",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",  # random pooling regions
    "pca_lowrank",  # a random projection: singular vectors come back with either sign
}
# Ops with some such outputs (positions among the flattened outputs, which lead a backward's
# values too): only those are compared by shape and dtype. _efficient_attention_forward's philox
# seed and offset are drawn (uninitialised when dropout is 0).
NONDETERMINISTIC_OUTPUTS = {"torch.ops.aten._efficient_attention_forward": frozenset({2, 3}),
                            "torch.ops.aten._flash_attention_forward": frozenset({2, 3})}  # philox seed, offset
TOL = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-7, 1e-7), torch.float16: (1e-2, 1e-2),
       torch.bfloat16: (2e-2, 2e-2), torch.complex64: (1e-4, 1e-4), torch.complex128: (1e-7, 1e-7)}


@attrs.define
class SampleOutcome:
    path: str  # inductor | tc
    phase: str  # fwd | bwd
    dtype: str
    index: int  # the sample's position
    outcome: str
    detail: str = ""


def op_key(op: Any) -> str:
    """``name`` or ``name.variant``: how the sweep names an OpInfo."""
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def op_table() -> dict[str, Any]:
    from torch.testing._internal.common_methods_invocations import op_db

    return {op_key(op): op for op in op_db}


# ---- a sample as a function of its tensors --------------------------------------------------------

@attrs.define
class Call:
    """A sample's call: ``fn(*tensors)`` runs the op; ``tensors`` are the sample's tensors."""

    fn: Callable
    tensors: list
    source: str
    sample: Any = None


def as_call(op: Any, sample: Any, method: bool = False) -> Call:
    """Straight-line source ``def fn(t0, ...): return op(<input>, <args>, <kwargs>)``, or with
    ``method`` ``return t0.<method>(<args>, <kwargs>)``."""
    tensors: list = []
    consts: dict[str, Any] = {"op": op.op}

    def render(v: Any) -> str:
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return f"t{len(tensors) - 1}"
        if isinstance(v, list):
            return "[" + ", ".join(render(x) for x in v) + "]"
        if type(v) is tuple:
            return "(" + "".join(render(x) + ", " for x in v) + ")"
        if v is None or isinstance(v, (bool, str)) or (isinstance(v, (int, float)) and math.isfinite(v)):
            return repr(v)
        name = f"c{len(consts)}"
        consts[name] = v
        return name

    args = [render(sample.input), *(render(a) for a in sample.args)]
    args += [f"{k}={render(v)}" for k, v in sample.kwargs.items()]
    params = ", ".join(f"t{i}" for i in range(len(tensors)))
    call = f"{args[0]}.{op.method_variant.__name__}({', '.join(args[1:])})" if method else f"op({', '.join(args)})"
    source = f"def fn({params}):\n    return {call}\n"
    namespace = dict(consts)
    exec(compile(source, f"<opinfo {op_key(op)}>", "exec"), namespace)
    return Call(namespace["fn"], tensors, source, sample)


def via_method(op: Any, calls: list) -> list:
    """The calls through the Tensor method where the OpInfo's op is a lambda inside
    ``torch.testing._internal`` (capture calls torch internals eagerly: the op would never reach
    a graph) and the first argument is a tensor."""
    internal = "torch.testing" in (getattr(op.op, "__module__", "") or "")
    name = getattr(op.method_variant, "__name__", "")
    if not internal or not hasattr(torch.Tensor, name) or not all(isinstance(c.sample.input, torch.Tensor) for c in calls):
        return calls
    return [as_call(op, c.sample, method=True) for c in calls]


def same_structure(a: Call, b: Call) -> bool:
    return a.source == b.source and all(
        x.shape == y.shape and x.dtype == y.dtype and x.requires_grad == y.requires_grad
        for x, y in zip(a.tensors, b.tensors))


# ---- running and comparing --------------------------------------------------------------------------

def leaves(value: Any) -> list:
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in leaves(v)]
    return [value]


def shape_only(op: Any, sample: Any = None) -> bool | frozenset:
    """Which outputs of ``op`` are compared by shape and dtype only: all (True), some, or none.
    A sample with attention dropout (``dropout_p > 0``: scaled_dot_product_attention) draws
    its own mask, as random ops do."""
    key = op_key(op)
    dropout = getattr(sample, "kwargs", {}).get("dropout_p", 0)
    return key in NONDETERMINISTIC or isinstance(dropout, float) and dropout > 0 or NONDETERMINISTIC_OUTPUTS.get(key, False)


def compare(got: Any, expected: Any, unchecked: bool | frozenset) -> str:
    """'' when equal (within the dtype's tolerance), else what differs. ``unchecked``: True (no
    output's values are compared), or the positions of the outputs whose values are not."""
    g, e = leaves(got), leaves(expected)
    if len(g) != len(e):
        return f"{len(g)} outputs, eager {len(e)}"
    for i, (r, x) in enumerate(zip(g, e)):
        values_free = unchecked is True or (bool(unchecked) and i in unchecked)
        if isinstance(x, torch.Tensor):
            if not isinstance(r, torch.Tensor):
                return f"output {i}: {type(r).__name__}, eager a tensor"
            if r.shape != x.shape or r.dtype != x.dtype:
                return f"output {i}: {tuple(r.shape)} {r.dtype}, eager {tuple(x.shape)} {x.dtype}"
            if values_free:
                continue
            atol, rtol = TOL.get(x.dtype, (0, 0))
            try:
                torch.testing.assert_close(r.detach(), x.detach(), atol=atol, rtol=rtol, equal_nan=True,
                                           check_stride=False, check_device=True)
            except AssertionError as err:
                return f"output {i}: " + " ".join(str(err).split())[:300]
        elif not values_free and r != x and not (isinstance(x, float) and math.isnan(x) and math.isnan(r)):
            return f"output {i}: {r!r}, eager {x!r}"
    return ""


def grads_of(fn: Callable, tensors: list, cotangent_seed: int) -> tuple[Any, list]:
    """Outputs, and gradients of ``sum(out * cotangent)`` for every input that requires grad."""
    inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]
    out = fn(*inputs)
    diff = [o for o in leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    wrt = [t for t in inputs if t.requires_grad]
    if not diff or not wrt:
        return out, []
    gen = torch.Generator(device=diff[0].device).manual_seed(cotangent_seed)
    loss = sum((o * torch.randn(o.shape, generator=gen, device=o.device, dtype=o.dtype)).sum() for o in diff)
    grads = torch.autograd.grad(loss, wrt, allow_unused=True)
    return out, [g if g is not None else torch.zeros_like(t) for g, t in zip(grads, wrt)]


def tc_warnings(caught: list) -> list[str]:
    """Warnings tc gave (fallbacks, graph breaks): what makes a right answer a 'fallback'."""
    return [str(w.message) for w in caught if str(w.message).startswith("tc")]


# What the packages raise to say "not this op" at compile time (data-dependent output shapes, ops
# they do not model): a clean refusal, which the umbrella turns into an eager fallback with a warning.
DECLINED = ("DynamicOutputShapeException", "DataDependentOutputException", "UnsupportedOperatorException")


def declined(e: BaseException) -> bool:
    """Whether a compile-time exception of the hand-built path is a clean refusal, not a bug."""
    while e is not None:
        if isinstance(e, NotImplementedError) or type(e).__name__ in DECLINED:
            return True
        e = e.__cause__ or e.__context__
    return False


def run_path(compiled: Callable, eager_fn: Callable, draws: list, phase: str,
             unchecked: bool | frozenset) -> tuple[str, str]:
    """Run ``compiled`` on every draw (after compiling on the first); (outcome, detail)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n, call in enumerate(draws):
            expected = eager_value(eager_fn, call, phase)
            try:
                got = eager_value(compiled, call, phase)
            except Exception as e:
                return "crash", f"draw {n}: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
            diff = compare(got, expected, unchecked)
            if diff:
                return "mismatch", f"draw {n} {phase}: {diff}"
    said = tc_warnings(caught)
    return ("fallback", said[0][:300]) if said else ("pass", "")


def eager_value(fn: Callable, call: Call, phase: str) -> Any:
    if phase == "fwd":
        with torch.no_grad():
            return fn(*[t.detach() for t in call.tensors])
    return grads_of(fn, call.tensors, 0)


# ---- the two paths ------------------------------------------------------------------------------------

def compile_tc(call: Call, options: dict) -> Callable:
    import tc

    tc.reset()
    return tc.compile(call.fn, options=options or None)


def compile_inductor(call: Call, options: dict) -> Callable:
    """A hand-built torch-level graph of the one call, through tc_autograd and tc_inductor."""
    import tc_autograd
    import tc_inductor
    import tc_ir

    if any(t.layout != torch.strided for t in call.tensors):  # a TensorSpec describes strided tensors only
        raise NotImplementedError("inputs of a sparse layout cannot be graph inputs")
    g = tc_ir.Graph("opinfo")
    nodes = [g.input(f"t{i}", tc_ir.TensorSpec.from_tensor(t)) for i, t in enumerate(call.tensors)]
    with torch.no_grad():
        example = call.fn(*[t.detach() for t in call.tensors])
    out = g.call(call.fn, *nodes)
    if isinstance(example, (tuple, list)):
        out = tuple(g.call(operator.getitem, out, i) for i in range(len(example)))
    g.output(out)

    def kernels(graph, inputs):
        return tc_inductor.compile(graph, inputs, options=options or None)

    compiled = tc_autograd.aot(g, list(call.tensors), fw_compiler=kernels, bw_compiler=kernels,
                               decompositions=tc_inductor.decompositions())
    return lambda *ts: compiled(*ts)


PATHS = {"inductor": compile_inductor, "tc": compile_tc}


def run_sample(op: Any, path: str, phase: str, draws: list, options: dict) -> tuple[str, str]:
    """One sample on one path: compile on its first draw, run every draw."""
    if path == "tc":
        draws = via_method(op, draws)
    first = draws[0]
    try:
        eager_value(first.fn, first, phase)
    except Exception as e:  # eager rejects it: nothing to compare
        return "skip", f"eager raises {type(e).__name__}"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = PATHS[path](first, options)
    except Exception as e:
        text = f"compile: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
        return ("fallback" if declined(e) else "crash"), text
    outcome, detail = run_path(compiled, first.fn, draws, phase, shape_only(op, first.sample))
    said = tc_warnings(caught)
    if outcome == "pass" and said:
        return "fallback", said[0][:300]
    if outcome == "pass" and path == "tc":
        broke = graph_break(first)
        if broke:
            return "fallback", broke
    return outcome, detail


def graph_break(call: Call) -> str:
    """Why ``tc.compile`` ran the op eagerly (a graph break, so no warning), or ''."""
    import tc

    report = tc.explain(call.fn, *[t.detach() for t in call.tensors])
    if report.graph_break_count:
        return "graph break: " + "; ".join(str(b.reason) for b in report.break_reasons)[:300]
    if not any(report.ops_per_graph):
        return "no graph: the op ran eagerly"
    return ""


def run_error_sample(path: str, call: Call, options: dict) -> tuple[str, str]:
    """An OpInfo error input: eager raises, so tc must raise too (any exception, at compile or
    run time); returning a value instead (an index out of range read as garbage) is a wrong answer."""
    tensors = [t.detach() for t in call.tensors]
    try:
        with torch.no_grad():
            call.fn(*tensors)
    except Exception as e:
        expected = e
    else:
        return "skip", "eager does not raise"
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            PATHS[path](call, options)(*tensors)
    except Exception as e:
        return "pass", f"raises {type(e).__name__} (eager {type(expected).__name__})"
    return "mismatch", f"returns a value where eager raises {type(expected).__name__}: {str(expected)[:200]}"


def error_outcomes(op: Any, device: str, paths: tuple, options: dict) -> list[SampleOutcome]:
    try:
        calls = [as_call(op, e.sample_input) for e in op.error_inputs(device)]
    except Exception as e:  # the OpInfo's own generator (some need a GPU, some are not written)
        return [SampleOutcome("-", "err", "-", -1, "skip", f"error inputs: {type(e).__name__}")]
    results = []
    for index, call in enumerate(calls):
        for path in paths:
            try:
                outcome, detail = run_error_sample(path, call, options)
            except Exception as e:  # a bug of this harness: counted, never hidden
                outcome, detail = "crash", f"harness: {type(e).__name__}: {e}"
            results.append(SampleOutcome(path, "err", "-", index, outcome, detail))
    return results


def draws_of(op: Any, device: str, dtype: torch.dtype, grad: bool, limit: int) -> list[list[Call]]:
    """Per sample, its calls from two seeded draws (one when the second's shapes differ)."""
    per_draw = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        samples = itertools.islice(op.sample_inputs(device, dtype, requires_grad=grad), limit or None)
        per_draw.append([as_call(op, s) for s in samples])
    return [[a, b] if same_structure(a, b) else [a] for a, b in zip(*per_draw)]


def second_dtype(op: Any, device: str) -> torch.dtype | None:
    """float64 where the op takes it (same kernels, cheap), else int64, else none."""
    supported = op.supported_dtypes(device)
    return next((d for d in (torch.float64, torch.int64) if d in supported), None)


def sweep_op(op: Any, *, paths=("inductor", "tc"), device="cpu", samples=4, options=None,
             second=True, errors=True, dtype=torch.float32) -> list[SampleOutcome]:
    """Every outcome of one OpInfo: forward and backward in ``dtype`` (float32 unless asked) on
    each path, forward in a second dtype (first two samples) through ``tc.compile``, and the
    OpInfo's error inputs (eager raises: tc must raise too) on each path."""
    options = dict(options or {})
    results: list[SampleOutcome] = []
    plans = [(dtype, "fwd", paths, samples)]
    if op.supports_autograd and (dtype.is_floating_point or dtype.is_complex):
        plans.append((dtype, "bwd", paths, samples))
    other = second_dtype(op, device) if second else None
    if other is not None and "tc" in paths:
        plans.append((other, "fwd", ("tc",), min(samples, 2) if samples else 2))
    for dtype, phase, on, limit in plans:
        if dtype not in op.supported_dtypes(device):
            continue
        try:
            sample_draws = draws_of(op, device, dtype, phase == "bwd", limit)
        except Exception as e:  # the OpInfo's own sample generator
            results.append(SampleOutcome("-", phase, str(dtype), -1, "skip", f"samples: {type(e).__name__}: {e}"))
            continue
        for index, draws in enumerate(sample_draws):
            for path in on:
                try:
                    outcome, detail = run_sample(op, path, phase, draws, options)
                except Exception as e:  # a bug of this harness: counted, never hidden
                    outcome, detail = "crash", "harness: " + "".join(traceback.format_exception_only(e)).strip()
                results.append(SampleOutcome(path, phase, str(dtype).removeprefix("torch."), index, outcome, detail))
    if errors:
        results += error_outcomes(op, device, paths, options)
    return results


def op_outcome(results: list[SampleOutcome], path: str) -> str:
    """The worst outcome of one op on one path (``skip`` when nothing ran)."""
    mine = [r.outcome for r in results if r.path == path]
    return max(mine, key=RANK.__getitem__) if mine else "skip"
