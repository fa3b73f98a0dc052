"""Inputs in any layout (gaps, offsets, broadcast) and ``_foreach_*_`` writes, against eager.

Outputs that view an input are rebuilt by replaying the trace's view ops on the real input, so
their strides, offset and gradients are eager's whatever the input's layout.
"""

from __future__ import annotations

import pytest
import torch
from autograd_tracer import trace

import tc_autograd


def compile_fn(fn, *inputs):
    return tc_autograd.aot(trace(fn, list(inputs)), list(inputs))


LAYOUTS = {
    "step": lambda base: base[:, ::2],
    "columns": lambda base: base[..., :3],
    "offset": lambda base: base[1:],
    "transposed": lambda base: base.t(),
    "expanded": lambda base: base[:1].expand(4, 8),
}
VIEWS = {
    "t": lambda x: x.t(),
    "slice_t": lambda x: x[1:].t(),
    "select": lambda x: x.select(1, 1),
    "unsqueeze_step": lambda x: x.unsqueeze(0)[..., ::2],
    "narrow_permute": lambda x: x.narrow(0, 1, 2).permute(1, 0),
    "mixed": lambda x: (x.t(), x * 2, x[0]),
}


def _views_of_inputs(layout, view, grad):
    torch.manual_seed(0)
    base = torch.randn(4, 8, requires_grad=grad)
    compiled = compile_fn(view, LAYOUTS[layout](base.detach().clone().requires_grad_(grad)))
    for _ in range(2):  # a second call with fresh values
        base = torch.randn(4, 8, requires_grad=grad)
        other = base.detach().clone().requires_grad_(grad)
        want, got = view(LAYOUTS[layout](base)), compiled(LAYOUTS[layout](other))
        for w, g in zip(torch.utils._pytree.tree_leaves(want), torch.utils._pytree.tree_leaves(got)):
            torch.testing.assert_close(g, w)
            if w._base is not None:  # a view of the input: same memory, same layout
                assert (g.stride(), g.storage_offset()) == (w.stride(), w.storage_offset())
                assert g.untyped_storage().data_ptr() == other.untyped_storage().data_ptr()
        if grad:
            leaves = torch.utils._pytree.tree_leaves(want)
            weights = [torch.randn(w.shape) for w in leaves]
            sum((w * c).sum() for w, c in zip(leaves, weights)).backward()
            sum((g * c).sum() for g, c in zip(torch.utils._pytree.tree_leaves(got), weights)).backward()
            torch.testing.assert_close(other.grad, base.grad)


@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_output_views_of_inputs_in_any_layout(layout, view, grad):
    _views_of_inputs(layout, VIEWS[view], grad)


def write_then_view(x):
    x.mul_(2.0)
    return x.t(), x.sum()


@pytest.mark.parametrize("layout", ["step", "columns", "offset", "transposed"])
def test_grad_inputs_with_gaps_are_written_in_place_as_eager(layout):
    base = torch.randn(4, 8, requires_grad=True)
    compiled = compile_fn(write_then_view, LAYOUTS[layout](base.detach().clone().requires_grad_() * 1))
    mine = base.detach().clone().requires_grad_()
    want_x, got_x = LAYOUTS[layout](base * 1), LAYOUTS[layout](mine * 1)
    want, got = write_then_view(want_x), compiled(got_x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_x, want_x)
    (want[0].exp().sum() + want[1]).backward()
    (got[0].exp().sum() + got[1]).backward()
    torch.testing.assert_close(mine.grad, base.grad)


@pytest.mark.parametrize("fill", ["fill_", "zero_"])
def test_fill_on_an_expanded_input_writes_its_memory_as_eager(fill):
    def fn(x):
        getattr(x.expand(2, *x.shape), fill)(*([1.5] if fill == "fill_" else []))
        return x + 1

    small = torch.randn(1, 4)
    compiled = compile_fn(fn, small.clone().expand(3, 4))
    a = torch.randn(1, 4)
    b = a.clone()
    torch.testing.assert_close(compiled(b.expand(3, 4)), fn(a.expand(3, 4)))
    torch.testing.assert_close(b, a)


def test_writes_to_self_overlapping_inputs_are_refused_before_running():
    x = torch.randn(6).as_strided((3, 3), (1, 1))   # rows overlap, not by broadcasting
    with pytest.raises(NotImplementedError, match="overlaps itself"):
        compile_fn(lambda t: t.fill_(1.0), x.clone().as_strided((3, 3), (1, 1)))


def foreach_step(ps, gs, ms):
    torch._foreach_mul_(ms, 0.9)
    torch._foreach_add_(ms, gs)
    torch._foreach_addcmul_(ps, ms, gs, value=-0.1)
    torch._foreach_lerp_(gs, ms, 0.5)
    roots = torch._foreach_sqrt(torch._foreach_abs(ps))
    return roots


def test_foreach_inplace_writes_reach_every_list_element():
    def make():
        return [torch.randn(3, 4), torch.randn(5), torch.randn(2, 2).t()]

    ps, gs, ms = make(), make(), make()
    compiled = compile_fn(lambda *t: foreach_step(list(t[:3]), list(t[3:6]), list(t[6:])), *ps, *gs, *ms)
    ps, gs, ms = make(), make(), make()
    mine = [t.clone() for t in (*ps, *gs, *ms)]
    want = foreach_step(ps, gs, ms)
    got = compiled(*mine)
    torch.testing.assert_close(list(got), list(want))
    torch.testing.assert_close(mine, [*ps, *gs, *ms])


def write_first_read_second(a, b):
    a.add_(1.0)
    return b * 2


def test_a_written_input_sharing_memory_with_another_is_refused():
    x = torch.randn(3, 3)
    with pytest.raises(NotImplementedError, match="shares memory"):
        compile_fn(write_first_read_second, x, x.t())


def test_sharing_memory_on_a_later_call_needs_a_variant_that_refuses():
    compiled = compile_fn(write_first_read_second, torch.randn(3, 3), torch.randn(3, 3))
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    torch.testing.assert_close(compiled(a.clone(), b), write_first_read_second(a.clone(), b))
    x = torch.randn(3, 3)
    with pytest.raises(NotImplementedError, match="shares memory") as info:
        compiled(x, x.t())
    assert info.value.tc_while_compiling  # nothing ran: the caller may run the graph eagerly
    torch.testing.assert_close(compiled(a.clone(), b), write_first_read_second(a.clone(), b))


@pytest.mark.parametrize("case", ["same_twice", "self_as_other", "rows_of_one"])
def test_foreach_on_lists_whose_tensors_share_memory_applies_element_by_element(case):
    def fn(x, y):
        lists = {"same_twice": ([x, x], [y, y]), "self_as_other": ([x, y], [y, x]),
                 "rows_of_one": ([x[0], x[1]], [x[1], x[0]])}[case]
        torch._foreach_mul_(lists[0], 0.5)
        torch._foreach_add_(lists[0], lists[1], alpha=2.0)
        return x + y

    compiled = compile_fn(fn, torch.randn(2, 3), torch.randn(2, 3))
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    mine = [x.clone(), y.clone()]
    torch.testing.assert_close(compiled(*mine), fn(x, y))
    torch.testing.assert_close(mine, [x, y])


# A view taken before a ``_foreach_*_`` write to its base (or a base written through a list that
# holds it) sees the write in value and in gradient, as in eager: these ops bump versions only in
# their eager kernels, so the fake trace must bump them for autograd to regenerate the view.
FOREACH_WRITES = {
    "mul_scalar": lambda ts, others: torch._foreach_mul_(ts, 0.5),
    "add_list": lambda ts, others: torch._foreach_add_(ts, others, alpha=2.0),
    "addcmul": lambda ts, others: torch._foreach_addcmul_(ts, others, others, value=0.3),
    "lerp": lambda ts, others: torch._foreach_lerp_(ts, others, 0.25),
    "exp": lambda ts, others: torch._foreach_exp_(ts),
}
VIEWS_BEFORE = {
    "select": lambda t: t.select(0, 1),
    "expand": lambda t: t.expand(2, *t.shape),
    "step_t": lambda t: t[:, ::2].t(),
    "reshape": lambda t: t.reshape(-1),
}


def _view_then_write(write, view, of_input):
    def fn(x, y, other):
        base = x if of_input else x * 1.5
        seen, also = view(base), view(y)
        write([base, y], [other, other])
        return seen * 1.0, also + 1.0, base.sum()
    return fn


@pytest.mark.parametrize("of_input", [True, False], ids=["input", "intermediate"])
@pytest.mark.parametrize("view", list(VIEWS_BEFORE))
@pytest.mark.parametrize("write", list(FOREACH_WRITES))
def test_a_view_taken_before_a_foreach_write_gets_the_write_in_its_gradient(write, view, of_input):
    fn = _view_then_write(FOREACH_WRITES[write], VIEWS_BEFORE[view], of_input)

    def fresh():
        leaves = [torch.randn(4, 6, requires_grad=True) for _ in range(3)]
        return leaves, [t.clone() for t in leaves]  # non-leaf copies: writable, as in eager

    leaves, inputs = fresh()
    compiled = compile_fn(fn, *inputs)
    for _ in range(2):  # a second call with fresh values
        leaves, inputs = fresh()
        mine = [t.detach().clone().requires_grad_() for t in leaves]
        want, got = fn(*inputs), compiled(*[t.clone() for t in mine])
        for w, g in zip(want, got):
            torch.testing.assert_close(g, w)
        cotangents = [torch.randn(w.shape) for w in want]
        torch.autograd.backward(want, cotangents)
        torch.autograd.backward(got, cotangents)
        for m, leaf in zip(mine, leaves):
            torch.testing.assert_close(m.grad, leaf.grad)


@pytest.mark.parametrize("shape", [(5, 0), (0, 5), (3, 0, 2)], ids=str)
def test_a_write_into_an_empty_expanded_input_that_requires_grad_is_traced(shape):
    """An empty input expanded from a non-leaf that requires grad (fuzz seeds 98551, 101293,
    102693) is written in place as eager allows, wholly and in part: no element shares memory, so
    it gets a writable twin like any input and a partial write is not refused as one into
    broadcast memory; before, both failed the trace (an eager fallback)."""
    def fn(x, y):
        x.sin_()
        x[:, :1].mul_(2)  # a partial write: into a broadcast input with elements, refused
        return y * 2, x + 1

    base_shape = tuple(1 if n > 1 else n for n in shape)
    leaf = torch.randn(base_shape, requires_grad=True)
    y = torch.randn(3, requires_grad=True)
    x = leaf.clone().expand(shape)
    compiled = compile_fn(fn, x, y)
    for _ in range(2):
        ya, yb = (y.detach().clone().requires_grad_() for _ in range(2))
        got, want = compiled(leaf.clone().expand(shape), ya), fn(leaf.clone().expand(shape), yb)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
            assert g.shape == w.shape and g.requires_grad == w.requires_grad
        (got[0].sum() + got[1].sum()).backward()
        (want[0].sum() + want[1].sum()).backward()
        torch.testing.assert_close(ya.grad, yb.grad)
        y = torch.randn(3, requires_grad=True)
