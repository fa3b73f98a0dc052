"""Symbolic sizes through tc_autograd where torch computes with sizes as floats or bounds them:
training batch norm / group norm (a ``SymFloat`` element count, carried as
``tc_ir.spec.SizeFloat``) and a valid conv + max-pool (contiguous strides ``Max(1, s - 2)``,
written ``s - 2`` under a guard). Run with the reference interpreter at many sizes against eager:
forward values, input and parameter gradients."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from torch._decomp import get_decompositions

import tc_autograd
import tc_ir
from tc_ir.spec import SizeFloat

s0, s1, s2 = tc_ir.sym("s0"), tc_ir.sym("s1"), tc_ir.sym("s2")
TOL = dict(atol=1e-4, rtol=1e-4)
aten = torch.ops.aten
# the decompositions that compute with the element count as a float (what tc_inductor asks for)
DECOMPOSITIONS = get_decompositions([aten.native_batch_norm, aten.native_batch_norm_backward,
                                     aten._native_batch_norm_legit_functional, aten.native_group_norm,
                                     aten.native_group_norm_backward])


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True)


def _graph(kind: str) -> tc_ir.Graph:
    g = tc_ir.Graph(kind)
    x = g.input("x", tc_ir.TensorSpec((s0, 4, s1, s2), requires_grad=True))
    w = g.input("w", tc_ir.TensorSpec((4,), requires_grad=True))
    b = g.input("b", tc_ir.TensorSpec((4,), requires_grad=True))
    if kind == "batch_norm":
        y = g.call(F.batch_norm, x, None, None, w, b, True)
    elif kind == "group_norm":
        y = g.call(F.group_norm, x, 2, w, b)
    else:
        k = g.input("k", tc_ir.TensorSpec((4, 4, 3, 3), requires_grad=True))
        y = g.call(F.max_pool2d, g.call(F.conv2d, x, k, w), 2)
        y = g.call(torch.mul, y, g.call("view", b, [1, 4, 1, 1]))
    g.output(g.call(torch.tanh, y))
    return g


def _eager(kind: str, x, w, b, k=None):
    if kind == "batch_norm":
        return torch.tanh(F.batch_norm(x, None, None, w, b, True))
    if kind == "group_norm":
        return torch.tanh(F.group_norm(x, 2, w, b))
    return torch.tanh(F.max_pool2d(F.conv2d(x, k, w), 2) * b.view(1, 4, 1, 1))


@pytest.mark.parametrize("kind", ["batch_norm", "group_norm", "conv_max_pool"])
def test_one_trace_over_sizes(kind):
    params = [torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)]
    if kind == "conv_max_pool":
        params.append(torch.randn(4, 4, 3, 3, requires_grad=True))
    f = tc_autograd.aot(_graph(kind), [torch.randn(2, 4, 9, 8, requires_grad=True), *params],
                        decompositions=DECOMPOSITIONS)
    text = str(f.joint_graph)
    if kind != "conv_max_pool":
        assert "SizeFloat(" in text, text
    else:
        assert "Max(" not in text, text
        assert {"s1 - 2 >= 1", "floor(s1/2) - 1 >= 1"} <= {str(r) for r in f.guards}, f.guards
    for n, h, w in [(2, 9, 8), (3, 12, 7), (5, 6, 11), (2, 10, 10)]:
        x = torch.randn(n, 4, h, w, requires_grad=True)
        refs = [_leaf(x), *map(_leaf, params)]
        out = f(x, *params)
        want = _eager(kind, *refs)
        torch.testing.assert_close(out, want, **TOL)
        cot = torch.randn_like(want)
        got = torch.autograd.grad(out, [x, *params], cot)
        expected = torch.autograd.grad(want, refs, cot)
        for a, e in zip(got, expected):
            torch.testing.assert_close(a, e, **TOL)
    assert len(f.variants) == 1 and next(iter(f.variants.values())).other is None  # traced once


def test_a_size_zero_under_a_max_traces_again():
    """A contiguous copy of ``x[:, 2:]`` has strides ``(Max(1, s1 - 2), 1)``, written ``s1 - 2``
    under the guard ``s1 - 2 >= 1``: a width of 2 (an empty slice) fails it and traces again
    (torch then pins ``s1 == 2``); both traces serve their sizes, strides as eager's."""
    g = tc_ir.Graph("tail")
    x = g.input("x", tc_ir.TensorSpec((s0, s1)))
    tail = g.call("contiguous", g.call(operator.getitem, x, (slice(None), slice(2, None))))
    g.output(g.call(torch.mul, g.call("t", tail), 2.0))
    f = tc_autograd.aot(g, [torch.randn(3, 8)])
    assert any(str(r) == "s1 - 2 >= 1" for r in f.guards), f.guards
    assert "Max(" not in str(f.inference_graph)
    for shape in [(3, 8), (4, 5), (3, 2), (5, 2), (2, 9)]:
        x = torch.randn(shape)
        got, want = f(x), x[:, 2:].contiguous().t() * 2.0
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()
    variant = next(iter(f.variants.values()))
    assert variant.other is not None and variant.other.other is None  # two traces


def test_size_float_evaluates_with_one_rounding():
    n = tc_ir.sym("n")
    value = SizeFloat(n / (n - 1))
    for k in [2, 3, 7, 1000003]:
        assert tc_ir.spec.size_value(value, {n: k}) == k / (k - 1.0)
        assert tc_ir.spec.size_value(SizeFloat(1 / n), {n: k}) == 1.0 / k
    assert tc_ir.spec.parse_dim(str(value)) == value
    with pytest.raises(TypeError):
        int(value.xreplace({n: 7}))  # never truncated by a reader that expects an int
