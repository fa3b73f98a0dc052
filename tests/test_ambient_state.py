"""Process state that changes what a graph computes is guarded: a compiled function called under
autocast after a call without it (or the reverse), or after ``torch.set_default_dtype``, gives
eager's dtypes and values. tc traced once and kept the first call's casts (float32 where eager's
matmul gives bfloat16, and the reverse)."""

from __future__ import annotations

import contextlib

import pytest
import torch

import tc


@pytest.fixture(autouse=True)
def _fresh():
    tc.reset()
    yield
    torch.set_default_dtype(torch.float32)


def mm_and_factory(x, w):
    return x @ w, torch.ones(2) + x.sum()


def _same(got, want):
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("order", [(False, True, False), (True, False, True)])
def test_autocast_on_and_off_between_calls(backend, order):
    compiled = tc.compile(mm_and_factory, backend=backend)
    for on in order:
        x, w = torch.randn(4, 4), torch.randn(4, 4)
        ctx = torch.autocast("cpu", torch.bfloat16) if on else contextlib.nullcontext()
        with ctx:
            got, want = compiled(x, w), mm_and_factory(x, w)
        _same(got, want)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_default_dtype_changed_between_calls(backend):
    compiled = tc.compile(mm_and_factory, backend=backend)
    x, w = torch.randn(4, 4, dtype=torch.float64), torch.randn(4, 4, dtype=torch.float64)
    for dtype in (torch.float32, torch.float64, torch.float32):
        torch.set_default_dtype(dtype)
        _same(compiled(x, w), mm_and_factory(x, w))
