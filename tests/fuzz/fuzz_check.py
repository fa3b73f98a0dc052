"""Run one generated program eagerly and through ``tc.compile``, and say how they differ.

Both sides get the same fresh inputs, each carved (with the program's layouts) out of its own
copy of the bases. Compared: every output (dtype, shape, values; for outputs that view an input,
which input and the view's strides and offset; which outputs share memory with each other), the
bases after the call (input mutations) and, in gradient mode, the gradients of the bases for a
random-weighted sum of the outputs and the mutated inputs (and that no two gradients share memory
that eager keeps apart). The compiled function is called twice, with two different sets of inputs.

Tolerances are per dtype. bf16: eager rounds every intermediate to bf16, tc's kernels compute in
float32 and round where results are stored, so a mismatch in a program touching bf16 is
re-checked with ``emulate_precision_casts=True`` (tc rounds where eager does): if that passes,
the difference is bf16 rounding (kind ``bf16-rounding``, documented, not a bug). Emulation does not
reproduce eager's every rounding (a gradient eager sums in bf16 from several paths, each rounded):
a mismatch that remains is also compared with the program run eagerly on float64 copies of its
float inputs, and if tc's values match that reference at bf16's tolerance (where eager's do not),
the difference is eager's rounding, also ``bf16-rounding``.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import attrs
import torch
from fuzz_program import Program, carve_inputs, example_inputs

import tc

TOLERANCE = {torch.float64: (1e-7, 1e-7), torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}
FALLBACK_WORDS = ("eagerly", "eager instead", "falling back")


@attrs.define
class Outcome:
    """What happened: ``kind`` is ``pass``, ``invalid`` (eager itself raises: not a program),
    ``error`` (tc raises where eager works), ``meta`` (dtype/shape/count), ``value``,
    ``alias``, ``mutation``, ``grad``, ``requires_grad`` or ``bf16-rounding``;
    ``fallbacks`` are the warnings saying a graph ran eagerly."""

    kind: str
    detail: str = ""
    fallbacks: list[str] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        return self.kind in ("pass", "invalid", "bf16-rounding")


class Mismatch(Exception):
    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


@attrs.define
class Side:
    """One side's results: outputs, bases after the call, grads of the bases, input views, and
    which outputs (and which grads) share memory with each other."""

    outs: tuple
    bases: list
    grads: list | None
    views: list
    shared_outs: set = attrs.field(factory=set)
    shared_grads: set = attrs.field(factory=set)


class FloatsSeen(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the floating dtypes of every tensor an eager run's ops read or produce (only: the
    values and gradients of a run under this mode are not eager's, see ``check``)."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: set[torch.dtype] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves((args, kwargs, out)):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                self.dtypes.add(t.dtype)
        return out


def run_side(fn: Callable, program: Program, values: list[torch.Tensor], weights: Callable,
             seen: FloatsSeen | None = None) -> Side:
    grad = program.grad
    leaves = [v.clone().requires_grad_(grad and v.is_floating_point()) for v in values]
    # A non-leaf holder (a clone) lets the program write to inputs that require grad.
    holders = [leaf.clone() if leaf.requires_grad else leaf for leaf in leaves]
    inputs = carve_inputs(program.inputs, holders)
    with torch.set_grad_enabled(grad), seen or contextlib.nullcontext():
        outs = fn(*inputs)
    views = [_input_view(o, holders) for o in outs]
    grads = None
    if grad:
        terms = [(t.float() * weights(k, t)).sum() for k, t in enumerate([*outs, *holders])
                 if isinstance(t, torch.Tensor) and t.requires_grad]
        wrt = [leaf for leaf in leaves if leaf.requires_grad]
        if terms and wrt:
            grads = list(torch.autograd.grad(sum(terms), wrt, allow_unused=True))
    return Side(tuple(outs), [h.detach() for h in holders], grads, views, _sharing(outs), _sharing(grads or []))


def _sharing(values: Any) -> set[tuple[int, int]]:
    """Pairs (i, j), i < j, of non-empty tensors among ``values`` with one storage."""
    storages = [v.untyped_storage().data_ptr() if isinstance(v, torch.Tensor) and v.numel() else None for v in values]
    return {(i, j) for j, b in enumerate(storages) for i, a in enumerate(storages[:j]) if a is not None and a == b}


def _input_view(out: Any, holders: list[torch.Tensor]) -> Any:
    if not isinstance(out, torch.Tensor):
        return None
    for i, h in enumerate(holders):
        if out.numel() and h.numel() and out.untyped_storage().data_ptr() == h.untyped_storage().data_ptr():
            return (i, tuple(out.stride()), out.storage_offset())
    return None


def make_weights(seed: int) -> Callable:
    cache: dict[int, torch.Tensor] = {}

    def weights(k: int, t: torch.Tensor) -> torch.Tensor:
        if k not in cache or cache[k].shape != t.shape:
            gen = torch.Generator().manual_seed(seed * 1000 + k)
            cache[k] = torch.randn(t.shape, generator=gen).to(t.device)
        return cache[k]

    return weights


def compare(want: Side, got: Side, tol: tuple) -> None:
    if len(got.outs) != len(want.outs):
        raise Mismatch("meta", f"{len(got.outs)} outputs, eager {len(want.outs)}")
    for k, (g, w) in enumerate(zip(got.outs, want.outs)):
        _close(g, w, f"output {k}", "value", tol)
        if isinstance(w, torch.Tensor) and g.requires_grad != w.requires_grad:
            raise Mismatch("requires_grad", f"output {k}: {g.requires_grad}, eager {w.requires_grad}")
    for k, (g, w) in enumerate(zip(got.views, want.views)):
        if g != w:
            raise Mismatch("alias", f"output {k} views (input, stride, offset) {g}, eager {w}")
    if got.shared_outs != want.shared_outs:  # a write to one output shows in another, or not
        raise Mismatch("alias", f"outputs sharing memory {sorted(got.shared_outs)}, eager {sorted(want.shared_outs)}")
    if extra := got.shared_grads - want.shared_grads:  # accumulating into one .grad would change another
        raise Mismatch("alias", f"grads sharing memory {sorted(extra)}, distinct in eager")
    for i, (g, w) in enumerate(zip(got.bases, want.bases)):
        _close(g, w, f"input {i} after the call", "mutation", tol)
    if (got.grads is None) != (want.grads is None):
        raise Mismatch("grad", f"grads {'missing' if got.grads is None else 'unexpected'}")
    for i, (g, w) in enumerate(zip(got.grads or [], want.grads or [])):
        if (g is None) != (w is None):
            g = torch.zeros_like(w) if g is None else g
            w = torch.zeros_like(g) if w is None else w
        if g is not None:
            _close(g, w, f"grad of input {i}", "grad", tol)


def _close(g: Any, w: Any, what: str, kind: str, tol: tuple) -> None:
    if not isinstance(w, torch.Tensor):
        if g != w:
            raise Mismatch(kind, f"{what}: {g!r}, eager {w!r}")
        return
    if not isinstance(g, torch.Tensor) or g.dtype != w.dtype or g.shape != w.shape:
        spec = (g.dtype, tuple(g.shape)) if isinstance(g, torch.Tensor) else type(g).__name__
        raise Mismatch("meta", f"{what}: {spec}, eager {(w.dtype, tuple(w.shape))}")
    atol, rtol = TOLERANCE.get(w.dtype, (0.0, 0.0))
    if tol is not None and w.is_floating_point():  # a less precise float fed this one
        atol, rtol = max(atol, tol[0]), max(rtol, tol[1])
    elif tol == TOLERANCE[torch.bfloat16]:  # integers cast from bf16 values (then re-checked)
        atol, rtol = tol
    scale = 1.0 + (w.detach().double().abs().nan_to_num(0, 0, 0).max().item() if w.numel() else 0.0)
    try:
        torch.testing.assert_close(g.detach(), w.detach(), atol=atol * scale, rtol=rtol, equal_nan=True)
    except AssertionError as e:
        raise Mismatch(kind, f"{what}: {str(e).splitlines()[-3:]}") from None


def tolerance(program: Program, seen: set | None = None) -> tuple | None:
    """bf16 anywhere (an input or a cast): every comparison at bf16's tolerance. Otherwise floats
    at the tolerance of the least precise float the eager run computed with (``seen``): an f64
    value computed from f32 ones carries f32 rounding, so f32 anywhere compares f64 at f32's."""
    if any(s.dtype == torch.bfloat16 for s in program.inputs) or any("bfloat16" in line for line in program.lines):
        return TOLERANCE[torch.bfloat16]
    for dtype in (torch.bfloat16, torch.float32):
        if dtype in (seen or ()):
            return TOLERANCE[dtype]
    return None


def check(program: Program, seed: int = 0, options: dict | None = None) -> Outcome:
    """Run ``program`` eagerly and compiled (two calls, fresh inputs each) and compare."""
    fn = program.function()
    compiled = tc.compile(fn, options=options)
    fallbacks: list[str] = []
    for call in range(2):
        values = example_inputs(program, seed * 2 + call + 1)
        weights = make_weights(seed * 2 + call)
        seen = FloatsSeen()
        try:
            # The dtypes come from a run of their own: under a Python dispatch mode, eager's
            # autograd loses the history of ``_foreach_*_`` writes through views (wrong gradients,
            # missed version checks), so the run compared with tc's is a plain one.
            run_side(fn, program, values, weights, seen)
            want = run_side(fn, program, values, weights)
        except Exception as e:  # eager refuses: not a valid program (an in-place write it forbids...)
            return Outcome("invalid", f"{type(e).__name__}: {e}")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = run_side(compiled, program, values, weights)
        except Exception as e:
            return Outcome("error", f"{type(e).__name__}: {str(e)[:400]}", fallbacks)
        fallbacks += [str(w.message)[:300] for w in caught if any(s in str(w.message) for s in FALLBACK_WORDS)]
        try:
            compare(want, got, tolerance(program, seen.dtypes))
        except Mismatch as m:
            outcome = Outcome(m.kind, f"call {call + 1}: {m.detail}", fallbacks)
            if _is_rounding(program, seed, options, outcome, fn, values, weights, want, got):
                return Outcome("bf16-rounding", outcome.detail, fallbacks)
            return outcome
    return Outcome("pass", "", fallbacks)


def _is_rounding(program: Program, seed: int, options: dict | None, outcome: Outcome, fn: Callable,
                 values: list[torch.Tensor], weights: Callable, want: Side, got: Side) -> bool:
    """Whether a mismatch in a program touching bf16 is rounding: it passes when tc rounds where
    eager does, or tc's values match a float64 run of the program (see the module's docstring)."""
    if options or tolerance(program) is None or outcome.kind in ("error", "meta"):
        return False
    if check(program, seed, {"emulate_precision_casts": True}).kind == "pass":
        return True
    wider = [v.double() if v.is_floating_point() else v for v in values]
    try:
        reference = _cast_like(run_side(fn, program, wider, weights), want)
        compare(reference, got, TOLERANCE[torch.bfloat16])
    except (Mismatch, RuntimeError, TypeError):  # far from float64 too, or float64 is not a program
        return False
    return True


def _cast_like(side: Side, like: Side) -> Side:
    """``side``'s tensors cast to the dtypes of ``like``'s (a float64 run read as eager's dtypes)."""
    def cast(values: Any, dtypes: Any) -> Any:
        return [v.to(d.dtype) if isinstance(v, torch.Tensor) and isinstance(d, torch.Tensor) else v
                for v, d in zip(values, dtypes)]

    grads = None if side.grads is None or like.grads is None else cast(side.grads, like.grads)
    return Side(tuple(cast(side.outs, like.outs)), cast(side.bases, like.bases), grads, like.views,
                like.shared_outs, like.shared_grads)
