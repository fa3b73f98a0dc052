"""Outputs written into input buffers (``inplace_outputs``): only where no wrong answer can come of it.

Each case compiles a graph with a pair output -> input, runs it on fresh inputs, and compares with
the interpreter run on clones taken before the call (the in-place write changes the input)."""

from __future__ import annotations

import operator

import pytest
import torch
from inductor_helpers import assert_same, build

import tc_inductor
import tc_ir

aten = torch.ops.aten


def run(fn, inputs, pairs, expect_inplace: int):
    g = build(fn, inputs)
    compiled = tc_inductor.compile(g, inputs, {"inplace_outputs": pairs, "cache": False})
    assert compiled.stats["inplace_outputs"] == expect_inplace, compiled.source
    for _ in range(2):  # a second call on other inputs
        fresh = [torch.randn_like(t) if isinstance(t, torch.Tensor) else t for t in inputs]
        fresh = [f.as_strided(t.shape, t.stride()) if isinstance(t, torch.Tensor) and not t.is_contiguous() else f
                 for f, t in zip(fresh, inputs)]
        expected = tc_ir.interpret(g, [t.clone() if isinstance(t, torch.Tensor) else t for t in fresh])
        got = compiled(*fresh)
        assert_same(got, expected)
        outs = list(tc_ir.leaves(got))
        for position, index in pairs.items():
            if position < len(outs) and index < len(fresh):  # written in place exactly when planned
                assert (outs[position] is fresh[index]) == bool(expect_inplace)
    return compiled, got, fresh


def test_pointwise_update_is_in_place():
    x, y = torch.randn(8, 5), torch.randn(8, 5)
    compiled, got, fresh = run(lambda g, a, b: (g.call(aten.add.Tensor, g.call(aten.mul.Tensor, a, 2.0), b),),
                               [x, y], {0: 0}, 1)
    assert got[0] is fresh[0]
    assert "in place" in compiled.source


def test_old_value_read_after_the_write_by_an_extern_is_not_in_place():
    x = torch.randn(6, 6)

    def fn(g, a):
        new = g.call(aten.add.Tensor, a, 1.0)
        return new, g.call(aten.mm.default, new, a)  # reads a after new is written
    run(fn, [x], {0: 0}, 0)


def test_old_value_read_after_the_write_by_a_kernel_is_not_in_place():
    x = torch.randn(16, 8)

    def fn(g, a):
        new = g.call(aten.add.Tensor, a, 1.0)
        prod = g.call(aten.mm.default, new, g.call(aten.t.default, new))  # a barrier between the two kernels
        return new, g.call(aten.add.Tensor, g.call(aten.sum.default, prod), g.call(aten.sum.default, a))
    run(fn, [x], {0: 0}, 0)


def test_old_value_read_in_the_same_kernel_at_another_index_is_not_in_place():
    x = torch.randn(7, 7)
    # new[i, j] = x[i, j] + x[j, i]: written in place, a later element would read a written one
    run(lambda g, a: (g.call(aten.add.Tensor, a, g.call(aten.t.default, a)),), [x], {0: 0}, 0)


def test_output_that_is_a_view_is_not_in_place():
    x = torch.randn(4, 4)
    run(lambda g, a: (g.call(aten.t.default, g.call(aten.mul.Tensor, a, 3.0)),), [x], {0: 0}, 0)


def test_mismatched_layout_is_not_in_place():
    x = torch.randn(5, 9).t()  # non-contiguous input; the output is contiguous
    g = build(lambda g, a: (g.call(aten.mul.Tensor, a, 3.0),), [x])
    compiled = tc_inductor.compile(g, [x], {"inplace_outputs": {0: 0}, "cache": False})
    if compiled.output_strides and tuple(compiled.output_strides[0]) != x.stride():
        assert compiled.stats["inplace_outputs"] == 0
    fresh = torch.randn(5, 9).t()
    expected = tc_ir.interpret(g, [fresh.clone()])
    assert_same(compiled(fresh), expected)


def test_mismatched_dtype_is_not_in_place():
    x = torch.randn(5, 3)
    run(lambda g, a: (g.call(aten._to_copy.default, g.call(aten.mul.Tensor, a, 3.0), kwargs={"dtype": torch.float64}),),
        [x], {0: 0}, 0)


def test_input_also_returned_is_not_in_place():
    x = torch.randn(5, 3)
    run(lambda g, a: (g.call(aten.add.Tensor, a, 1.0), a), [x], {0: 0}, 0)


def test_output_returned_twice_is_not_in_place():
    x = torch.randn(5, 3)

    def fn(g, a):
        new = g.call(aten.add.Tensor, a, 1.0)
        return new, new
    run(fn, [x], {0: 0}, 0)


def test_foreach_extern_runs_in_place():
    xs = [torch.randn(4, 3), torch.randn(7)]
    ys = [torch.randn(4, 3), torch.randn(7)]

    def fn(g, a, b, c, d):
        out = g.call(aten._foreach_add.List, [a, b], [c, d], kwargs={"alpha": 0.5})
        return g.call(operator.getitem, out, 0), g.call(operator.getitem, out, 1)
    run(fn, xs + ys, {0: 0, 1: 1}, 2)


def test_foreach_extern_reading_self_in_another_argument_is_not_in_place():
    xs = [torch.randn(4, 3), torch.randn(4, 3)]

    def fn(g, a, b):
        out = g.call(aten._foreach_add.List, [a, b], [b, a])  # element 1 would read a written element 0
        return g.call(operator.getitem, out, 0), g.call(operator.getitem, out, 1)
    run(fn, xs, {0: 0, 1: 1}, 0)


def test_foreach_extern_with_old_value_read_later_is_not_in_place():
    xs = [torch.randn(4, 3), torch.randn(5)]

    def fn(g, a, b):
        out = g.call(aten._foreach_mul.Scalar, [a, b], 2.0)
        first = g.call(operator.getitem, out, 0)
        return first, g.call(operator.getitem, out, 1), g.call(aten.add.Tensor, first, a)
    # only the pair whose old value is read later: lowered into kernels (lowering/foreach.py), the
    # other element may be written in place; as an extern, neither is
    run(fn, xs, {0: 0}, 0)


@pytest.mark.parametrize("pairs", [{}, {5: 0}, {0: 7}])
def test_pairs_out_of_range_are_ignored(pairs):
    x = torch.randn(3)
    run(lambda g, a: (g.call(aten.add.Tensor, a, 1.0),), [x], pairs, 0)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_a_kernel_that_recomputes_the_written_value_does_not_write_it_in_place(backend):
    """A layer norm's shift recomputes its input at each row's first element from the input's
    own inputs (scheduler._served). Written in place, that input's first element would already
    hold the new value when a later part of the row recomputes it: the update is allocated."""
    x, w, b = torch.randn(6, 40), torch.randn(40), torch.randn(40)

    def fn(g, a, w, b):
        new = g.call(aten.add.Tensor, g.call(aten.mul.Tensor, a, 3.0), 1.0)
        normed = g.call(operator.getitem, g.call(aten.native_layer_norm.default, new, [40], w, b, 1e-5), 0)
        return new, normed
    g = build(fn, [x, w, b])
    compiled = tc_inductor.compile(g, [x, w, b], {"inplace_outputs": {0: 0}, "cache": False, "backend": backend})
    assert compiled.stats["kernels"] == 1 and compiled.stats["inplace_outputs"] == 0
    for _ in range(2):
        fresh = [torch.randn_like(x), w, b]
        expected = tc_ir.interpret(g, [t.clone() for t in fresh])
        got = compiled(*fresh)
        assert_same(got, expected)
        assert got[0] is not fresh[0]
