"""A wrapper with many inputs checks their layouts in one batch (``wrapper.LayoutBatch``).

The batch is learned from the first call's inputs once they are laid out; a later call whose
inputs match it skips the per-input checks, any other call runs them. Each call must compute what
the graph computes on these inputs, whatever layout they come in.
"""

from __future__ import annotations

import torch
from inductor_helpers import assert_same, build

import tc_inductor
import tc_ir

aten = torch.ops.aten
N = 6


def _graph(inputs):
    def body(g, *xs):
        return tuple(g.call(aten.add.Tensor, g.call(aten.mul.Tensor, x, x), 1.0) for x in xs)

    return build(body, inputs)


def _inputs():
    return [torch.randn(4, 6) for _ in range(N)]


def _compile(inputs, backend="cpp"):
    return tc_inductor.compile(_graph(inputs), inputs, {"backend": backend, "cache": False})


def _batch(k):
    return k._fn.__globals__["_lb"]


def test_many_inputs_are_checked_in_one_batch_learned_at_the_first_call():
    inputs = _inputs()
    k = _compile(inputs)
    assert "_lb.check(" in k.source
    assert _batch(k).guards is None
    fresh = _inputs()
    assert_same(k(*fresh), tc_ir.interpret(_graph(inputs), fresh))
    assert _batch(k).guards is not None and _batch(k).guards.check(*fresh)


def test_an_input_in_another_layout_after_the_batch_was_learned_is_laid_out():
    inputs = _inputs()
    k = _compile(inputs)
    k(*_inputs())
    for position in (0, N - 1):
        fresh = _inputs()
        fresh[position] = torch.randn(6, 4).t()  # same shape, column-major
        assert not _batch(k).guards.check(*fresh)
        assert_same(k(*fresh), tc_ir.interpret(_graph(inputs), fresh))
    fresh = _inputs()
    assert_same(k(*fresh), tc_ir.interpret(_graph(inputs), fresh))


def test_a_first_call_in_another_layout_learns_the_compiled_layout():
    inputs = _inputs()
    k = _compile(inputs)
    first = _inputs()
    first[2] = torch.randn(6, 4).t()
    assert_same(k(*first), tc_ir.interpret(_graph(inputs), first))
    assert not _batch(k).guards.check(*first)  # learned from the laid-out copy, not this input
    fresh = _inputs()
    assert _batch(k).guards.check(*fresh)
    assert_same(k(*fresh), tc_ir.interpret(_graph(inputs), fresh))


def test_few_inputs_keep_their_own_checks():
    inputs = _inputs()[:2]
    k = _compile(inputs)
    assert "_lb.check(" not in k.source and "in0.stride()" in k.source


def test_one_tensor_at_two_inputs_still_passes_the_batch():
    # Tied weights: TensorGuards' check fails whenever one tensor is passed twice, so the batch
    # holds the first position only and the other is checked by identity.
    inputs = _inputs()
    k = _compile(inputs)
    tied = _inputs()
    tied[4] = tied[1]
    assert_same(k(*tied), tc_ir.interpret(_graph(inputs), tied))
    assert _batch(k).check(*tied)
    untied = list(tied)
    untied[4] = tied[1].clone()  # same layout, another tensor: the per-input checks decide
    assert not _batch(k).check(*untied)
    assert_same(k(*untied), tc_ir.interpret(_graph(inputs), untied))
    untied[4] = torch.randn(6, 4).t()
    assert_same(k(*untied), tc_ir.interpret(_graph(inputs), untied))
    assert_same(k(*tied), tc_ir.interpret(_graph(inputs), tied))
