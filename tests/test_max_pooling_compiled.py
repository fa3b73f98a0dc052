"""Max pooling through ``tc.compile`` (lowered to generated code: tc_inductor/lowering/pooling.py)
against eager: 1-d, 2-d and 3-d modules with and without returned indices, training (input
gradients), inference under ``no_grad``, channels-last models, NaN inputs and symbolic sizes, on
fresh inputs; no graph may fall back to eager."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tc

KERNELS = {"cpp": {"backend": "cpp"}, "triton": {"backend": "triton"}}


@pytest.fixture(autouse=True)
def _fresh_caches():
    tc.reset()


def _run(fn, make, options, grad=True, calls=3, **compile_kw):
    """``tc.compile(fn)`` on ``calls`` fresh inputs from ``make``: outputs (values and strides)
    and, where ``grad``, the input gradient for a random cotangent, as eager's; no fallback."""
    compiled = tc.compile(fn, options=options, **compile_kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(calls):
            x = make()
            a, b = x.clone().requires_grad_(grad), x.clone().requires_grad_(grad)
            got, want = compiled(a), fn(b)
            got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
            for r, e in zip(got, want, strict=True):
                torch.testing.assert_close(r, e, equal_nan=True)
                assert all(s == t for s, t, n in zip(r.stride(), e.stride(), r.shape) if n > 1), (r.stride(), e.stride())
            if grad:
                cotangent = torch.randn_like(want[0])
                (ga,), (gb,) = torch.autograd.grad(got[0], [a], cotangent), torch.autograd.grad(want[0], [b], cotangent)
                torch.testing.assert_close(ga, gb, equal_nan=True)
                assert all(s == t for s, t, n in zip(ga.stride(), gb.stride(), ga.shape) if n > 1)
    tc_warnings = [str(w.message) for w in caught if str(w.message).startswith("tc:")]
    assert not tc_warnings, tc_warnings


@pytest.mark.parametrize("kernels", list(KERNELS))
def test_modules_with_indices(kernels):
    """What the user sees of the indices (``return_indices=True``) is eager's int64 flat index."""
    pool1 = nn.MaxPool1d(3, 2, 1, return_indices=True)
    pool2 = nn.MaxPool2d(3, 1, 1, dilation=1, ceil_mode=True, return_indices=True)

    def fn(x):
        values, indices = pool2(torch.relu(x))
        v1, i1 = pool1(x.flatten(2))
        return values * 2, indices, v1, i1

    _run(fn, lambda: torch.randn(2, 3, 7, 8), KERNELS[kernels])


def test_1d_2d_3d_training():
    def fn(x):
        a = nn.functional.max_pool2d(x, 2, 2, 0, 1, True)
        b = nn.functional.max_pool3d(x.unsqueeze(1), (2, 3, 3), 2, 1)
        c = nn.functional.max_pool1d(x.flatten(2), 3, 3, 1, 2)
        return a.sum((2, 3)) + b.sum((1, 2, 3, 4)).unsqueeze(1) + c.sum(2)

    _run(fn, lambda: torch.randn(2, 4, 9, 11), KERNELS["cpp"])


def test_inference_without_grad():
    pool = nn.MaxPool2d(3, 2, 1)
    with torch.no_grad():
        _run(lambda x: pool(x) + 1, lambda: torch.randn(2, 3, 10, 9), KERNELS["cpp"], grad=False)


def test_channels_last_model_and_nan():
    conv = nn.Conv2d(3, 8, 3).to(memory_format=torch.channels_last)

    def make():
        x = torch.randn(2, 3, 12, 12)
        x[0, :, 2:5, 2:5] = float("nan")
        return x.contiguous(memory_format=torch.channels_last)

    def fn(x):
        return nn.functional.max_pool2d(torch.relu(conv(x)), 3, 2, 1) * 3

    _run(fn, make, KERNELS["cpp"])


def test_symbolic_sizes():
    shapes = iter([(2, 3, 9, 9), (3, 3, 11, 7), (2, 3, 16, 13), (4, 3, 5, 6)])
    _run(lambda x: nn.functional.max_pool2d(x.sin(), 3, 2, 1, ceil_mode=True), lambda: torch.randn(next(shapes)),
         KERNELS["cpp"], calls=4, dynamic=True)
