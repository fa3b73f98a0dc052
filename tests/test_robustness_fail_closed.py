"""Fail closed through the whole pipeline: a failure injected at each stage (capture, tracing,
lowering, scheduling, code generation, build, load) runs the graph eagerly with exactly one
warning naming the user's file:line, values and gradients equal to eager; with
``options={"fallback": False}`` or ``fullgraph=True``, a clear error instead."""

from __future__ import annotations

import importlib
import itertools
import warnings

import pytest
import torch

import tc
import tc_autograd
import tc_capture.cache.frame_cache
import tc_inductor.codegen.build
import tc_inductor.graph_lowering

_pipeline = importlib.import_module("tc_inductor.compile")  # the module; tc_inductor.compile is the function

STAGES = {
    "capture": (tc_capture.cache.frame_cache, "capture_region"),
    "tracing": (tc_autograd, "aot"),
    "lowering": (tc_inductor.graph_lowering.GraphLowering, "run"),
    "scheduling": (_pipeline, "schedule"),
    "codegen": (_pipeline, "_generate"),
    "build": (tc_inductor.codegen.build, "compile_cpp_async"),
    "load": (_pipeline, "_load"),
}
_unique = itertools.count(1)


def _boom(*args, **kwargs):
    raise RuntimeError("injected failure")


def _make_fn():
    # A constant of its own, so no cache (kernel sources, built objects) can skip a stage.
    k = 1.0 + next(_unique) / 1024

    def fn(x, w):
        return torch.tanh(x @ w) * k + x.sum()

    return fn


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("stage", list(STAGES))
def test_each_stage_fails_closed(stage, grad, monkeypatch):
    monkeypatch.setattr(*STAGES[stage], _boom)
    fn = _make_fn()
    compiled = tc.compile(fn, options={"cache": False})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x, w = torch.randn(4, 4, requires_grad=grad), torch.randn(4, 4, requires_grad=grad)
            out = compiled(x, w)
            x2, w2 = x.detach().requires_grad_(grad), w.detach().requires_grad_(grad)
            expect = fn(x2, w2)
            torch.testing.assert_close(out, expect)
            if grad:
                out.sum().backward()
                expect.sum().backward()
                torch.testing.assert_close(x.grad, x2.grad)
                torch.testing.assert_close(w.grad, w2.grad)
    ours = [w for w in caught if "injected failure" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    where = f"{__file__}:{fn.__code__.co_firstlineno}"
    assert where in str(ours[0].message), str(ours[0].message)
    assert ours[0].filename == __file__


@pytest.mark.parametrize("stage", ["tracing", "codegen"])
def test_fallback_false_raises_the_back_ends_error(stage, monkeypatch):
    monkeypatch.setattr(*STAGES[stage], _boom)
    compiled = tc.compile(_make_fn(), options={"cache": False, "fallback": False})
    with pytest.raises(tc.BackendCompilerFailed, match="injected failure"):
        compiled(torch.randn(4, 4), torch.randn(4, 4))


def test_fullgraph_raises_a_clear_error_for_a_capture_failure(monkeypatch):
    monkeypatch.setattr(*STAGES["capture"], _boom)
    fn = _make_fn()
    with pytest.raises(tc_capture.CompileError, match="injected failure") as err:
        tc.compile(fn, fullgraph=True)(torch.randn(4, 4), torch.randn(4, 4))
    assert f"{__file__}:{fn.__code__.co_firstlineno}" in str(err.value)


class _Sub(torch.Tensor):
    pass


def _quantized():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.randn(4), 0.1, 10, torch.quint8)


@pytest.mark.parametrize("make, fn", [
    (lambda: torch.randn(4).as_subclass(_Sub), lambda x: x.sin() + 1),
    (lambda: torch.randn(3, 3).relu().to_sparse(), lambda x: (x * 2).to_dense()),
    (_quantized, lambda x: x.dequantize() * 2),
], ids=["subclass", "sparse_coo", "quantized"])
def test_unusual_inputs_through_the_inductor_match_eager(make, fn):
    compiled = tc.compile(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            x = make()
            out, expect = compiled(x), fn(x)
            assert type(out) is type(expect)
            torch.testing.assert_close(out, expect)
    assert len([w for w in caught if str(w.message).startswith("tc:")]) <= 1
