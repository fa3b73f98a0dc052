"""``torch._higher_order_ops.associative_scan`` under tc against a sequential loop (the scan's
definition), gradients included: tc captures the ``"pointwise"`` mode as ops (scans.py). Eager
refuses ``"pointwise"`` on CPU tensors, so the CPU tests let capture take that path on the CPU
(``POINTWISE_DEVICES``) and compare with the loop; the CUDA tests (GPU host) compare with torch."""

from __future__ import annotations

import pytest
import torch
from torch._higher_order_ops.associative_scan import associative_scan

import tc
import tc_capture
from tc_capture.interp import scans


def ssm(left, right):  # Mamba's recurrence h = a * h + b, as an associative pair combine
    a_left, b_left = left
    a_right, b_right = right
    return a_left * a_right, a_right * b_left + b_right


def add(x, y):
    return x + y


def keyed(left, right):  # dicts in, a dict out; non-commutative through the matrix-free 2x2 form
    return {"a": left["a"] * right["a"], "b": right["a"] * left["b"] + right["b"]}


def loop_scan(combine_fn, xs, dim, reverse=False):
    """The definition: out[i] = combine(out[i - 1], x[i]) along ``dim``, element by element."""
    leaves, rebuild = _flat(xs)
    n = leaves[0].shape[dim]
    order = range(n - 1, -1, -1) if reverse else range(n)
    acc, outs = None, {}
    for i in order:
        item = rebuild([x.select(dim, i) for x in leaves])
        acc = item if acc is None else combine_fn(acc, item)
        outs[i] = _flat(acc)[0]
    return rebuild([torch.stack([outs[i][k] for i in range(n)], dim) for k in range(len(leaves))])


def _flat(tree):
    if isinstance(tree, dict):
        keys = list(tree)
        return [tree[k] for k in keys], lambda leaves: dict(zip(keys, leaves))
    if isinstance(tree, tuple):
        return list(tree), tuple
    return [tree], lambda leaves: leaves[0]


@pytest.fixture
def pointwise_on_cpu(monkeypatch):
    monkeypatch.setattr(scans, "POINTWISE_DEVICES", ("cpu", *scans.POINTWISE_DEVICES))


def _inputs(kind, shape, seed, requires_grad=True):
    g = torch.Generator().manual_seed(seed)
    a = (torch.rand(shape, generator=g, dtype=torch.float64) * 1.5).requires_grad_(requires_grad)
    b = torch.randn(shape, generator=g, dtype=torch.float64).requires_grad_(requires_grad)
    if kind == "tensor":
        return b
    if kind == "dict":
        return {"a": a, "b": b}
    return (a, b)


CASES = [  # (combine_fn, kind, shape, dim, reverse)
    (add, "tensor", (3, 7), 1, False),
    (add, "tensor", (5,), 0, True),
    (ssm, "tuple", (2, 3, 8, 4), 2, False),  # Mamba's layout: batch, channels, time, state
    (ssm, "tuple", (2, 3, 5, 4), -2, True),
    (ssm, "tuple", (1, 6, 1), 2, False),  # a scan of length one
    (ssm, "tuple", (9, 0, 2), 0, False),  # zero-size besides the scan dim
    (keyed, "dict", (4, 13), -1, False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].__name__}-{c[1]}-{c[2]}-{c[3]}-{c[4]}")
def test_pointwise_scan_matches_the_loop(pointwise_on_cpu, case):
    combine_fn, kind, shape, dim, reverse = case

    def f(xs):
        out = associative_scan(combine_fn, xs, dim, reverse=reverse, combine_mode="pointwise")
        return _flat(out)[0][-1] * 2  # through an op after the scan

    compiled = tc.compile(f, fullgraph=True)
    for seed in (1, 2):  # two calls, other values
        xs = _inputs(kind, shape, seed)
        leaves = _flat(xs)[0]
        want = _flat(loop_scan(combine_fn, xs, dim, reverse))[0][-1] * 2
        got = compiled(xs)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        if want.numel():
            weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(seed), dtype=want.dtype)
            gw = torch.autograd.grad((want * weights).sum(), leaves, materialize_grads=True)
            gg = torch.autograd.grad((got * weights).sum(), leaves, materialize_grads=True)
            for x, y in zip(gg, gw):
                torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


def test_non_contiguous_operands(pointwise_on_cpu):
    def f(a, b):
        return associative_scan(ssm, (a, b), 0, combine_mode="pointwise")[1]

    a, b = (t.detach().transpose(0, 1).requires_grad_() for t in _inputs("tuple", (6, 11), 3))
    got = tc.compile(f, fullgraph=True)(a, b)
    want = loop_scan(ssm, (a, b), 0)[1]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.autograd.grad(got.sum(), a)[0], torch.autograd.grad(want.sum(), a)[0],
                               rtol=1e-12, atol=1e-12)


def test_generic_mode_is_a_break_with_a_reason():
    def f(x):
        return associative_scan(add, x, 0, combine_mode="generic") + 1

    x = torch.randn(6, 3)
    report = tc.explain(f, x)
    assert report.graph_break_count >= 1
    assert any("combine_mode='generic'" in str(r) for r in report.break_reasons)
    torch.testing.assert_close(tc.compile(f)(x), torch.cumsum(x, 0) + 1)


def test_operands_of_other_lengths_are_a_break(pointwise_on_cpu):
    def f(a, b):
        return associative_scan(ssm, (a, b), 0, combine_mode="pointwise")

    with pytest.raises(tc_capture.GraphBreakError, match="torch checks them"):
        tc.compile(f, fullgraph=True)(torch.randn(5, 2), torch.randn(4, 2))


def test_pointwise_on_cpu_raises_as_eager():
    def f(x):
        return associative_scan(add, x, 0, combine_mode="pointwise")

    with pytest.raises(ValueError, match="CUDA"):
        f(torch.randn(4))
    with pytest.raises(ValueError, match="CUDA"):
        tc.compile(f)(torch.randn(4))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_pointwise_scan_on_cuda(dtype):
    """On the GPU, against the loop: torch's own eager pointwise scan gets ``a``'s gradient wrong
    on torch 2.11 (scans.py), so the loop, not torch, is the reference."""
    a = (torch.rand(2, 4, 16, 3, device="cuda", dtype=dtype) + 0.5).requires_grad_()
    b = torch.randn(2, 4, 16, 3, device="cuda", dtype=dtype, requires_grad=True)

    def f(a, b):
        return associative_scan(ssm, (a, b), 2, combine_mode="pointwise")[1]

    got, want = tc.compile(f, fullgraph=True)(a, b), loop_scan(ssm, (a, b), 2)[1]
    tol = 1e-12 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    for x, y in zip(torch.autograd.grad(got.sum(), (a, b)), torch.autograd.grad(want.sum(), (a, b))):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol)
