"""Every fact the module-state guards check fails them when it changes: the entry recompiles,
the result equals eager, and the recompile log names the guard that failed."""

from __future__ import annotations

import logging

import pytest
import torch
from helpers import tree_close
from torch import nn

import tc_capture


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.lin = nn.Linear(4, 4)
        self.act = nn.ReLU()

    def forward(self, x):
        # The input follows the parameters' dtype and device: a change of theirs alone fails a guard.
        x = x.to(device=self.w.device, dtype=self.w.dtype)
        return self.act(self.lin(x @ self.w))


def _set_data_other_shape(m):
    m.w.data = torch.randn(4, 6)
    m.lin = nn.Linear(6, 4)
    return "self.w: Parameter float32[4, 4]"


def _set_data_other_strides(m):
    m.w.data = torch.randn(4, 4).t()
    return "self.w: Parameter float32[4, 4] stride=(4, 1)"


def _requires_grad_off(m):
    m.lin.weight.requires_grad_(False)
    return "self.lin.weight: Parameter float32[4, 4] stride=(4, 1) cpu requires_grad"


def _replace_submodule(m):
    m.act = nn.Tanh()
    return "type(self.act) is ReLU"


def _forward_hook(m):
    m.lin.register_forward_hook(lambda mod, args, out: out * 3)
    return "self.lin has no hooks"


def _forward_pre_hook(m):
    m.act.register_forward_pre_hook(lambda mod, args: (args[0] - 1,))
    return "self.act has no hooks"


def _to_double(m):
    m.to(torch.float64)
    return "self.w: Parameter float32[4, 4]"


def _to_meta(m):
    m.to("meta")
    return "self.w: Parameter float32[4, 4] stride=(4, 1) cpu"


CHANGES = [_set_data_other_shape, _set_data_other_strides, _requires_grad_off, _replace_submodule,
           _forward_hook, _forward_pre_hook, _to_double, _to_meta]


def _counting_backend(calls):
    return lambda graph, example: calls.append(graph) or tc_capture.interpret_backend(graph, example)


@pytest.mark.parametrize("change", CHANGES, ids=[c.__name__.strip("_") for c in CHANGES])
def test_each_guarded_module_fact_recompiles_and_names_its_guard(change, caplog):
    m, calls = Block(), []
    compiled = tc_capture.optimize(_counting_backend(calls))(m)
    x = torch.randn(3, 4)
    tree_close(m(x), compiled(x))
    tree_close(m(x), compiled(torch.randn(3, 4) * 0 + x))  # a hit: no new graph
    assert len(calls) == 1
    expected = change(m)
    x = torch.randn(3, 4)
    logging.getLogger("tc.recompiles").setLevel(logging.DEBUG)
    try:
        with caplog.at_level(logging.DEBUG, logger="tc.recompiles"):
            got = compiled(x)
    finally:
        logging.getLogger("tc.recompiles").setLevel(logging.WARNING)
    want = m(x)
    if got.device.type == "meta":
        assert (got.shape, got.dtype, got.device) == (want.shape, want.dtype, want.device)
    else:
        tree_close(want, got)
        x2 = torch.randn(3, 4)
        tree_close(m(x2), compiled(x2))
    assert len(calls) == 2, "the changed state must fail a guard and recompile once"
    messages = [r.getMessage() for r in caplog.records]
    assert any("failed guard" in msg and expected in msg for msg in messages), (expected, messages)


def test_global_module_hook_fails_the_guard_of_a_function_calling_a_module():
    """A hook registered for every module after capture: the graph inlined the module's forward
    without it, so the guard must fail (the function is compiled, not the module)."""
    lin, calls = nn.Linear(4, 4), []
    compiled = tc_capture.optimize(_counting_backend(calls))(lambda x: lin(x) * 2)
    x = torch.randn(2, 4)
    tree_close(lin(x) * 2, compiled(x))
    handle = nn.modules.module.register_module_forward_hook(lambda mod, args, out: out + 100)
    try:
        tree_close(lin(x) * 2, compiled(x))
    finally:
        handle.remove()
    tree_close(lin(x) * 2, compiled(x))
    # With the hook the old entry's guard failed: the call was compiled again (around the module
    # call, which breaks: global hooks are not captured); without it the first entry hits again.
    assert len(calls) == 2


def test_why_names_a_guard_whose_module_read_fails():
    """``why`` reads each module path in the guard that first needs it: a submodule that is gone
    names that guard (the read raised), rather than a bare exception."""
    m, calls = Block(), []
    compiled = tc_capture.optimize(_counting_backend(calls))(m)
    x = torch.randn(3, 4)
    compiled(x)
    (entry,) = compiled._cache.entries[0]
    del m._modules["lin"]
    m.__dict__["lin"] = nn.Linear(4, 4)  # by hand: not where nn.Module keeps submodules
    F = [m, x]
    assert not entry.guard(F, entry_cells(compiled))
    reason = entry.why(F, entry_cells(compiled))
    assert "self.lin" in reason and "KeyError" in reason, reason


def entry_cells(compiled):
    return compiled._cache.closure


def test_a_hook_replaced_by_another_fails_the_guard():
    """Same number of hooks, other hook: the registrations are guarded (by handle id), not
    their count, so the new hook runs."""
    m, calls = Block(), []
    handle = m.lin.register_forward_hook(lambda mod, args, out: out * 2)
    compiled = tc_capture.optimize(_counting_backend(calls))(m)
    x = torch.randn(3, 4)
    tree_close(m(x), compiled(x))
    handle.remove()
    m.lin.register_forward_hook(lambda mod, args, out: out - 5)
    tree_close(m(x), compiled(x))
    assert len(calls) == 2


def test_a_backward_hook_added_later_fails_the_guard():
    m, calls = Block(), []
    compiled = tc_capture.optimize(_counting_backend(calls))(m)
    x = torch.randn(3, 4)
    compiled(x)
    seen = []
    m.lin.register_full_backward_hook(lambda mod, gin, gout: seen.append(gout[0].shape))
    x = torch.randn(3, 4, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    compiled(x).sum().backward()
    m(x_eager).sum().backward()
    # The hook ran once in each (the module call now breaks: backward hooks are not captured).
    assert seen == [torch.Size([3, 4])] * 2 and len(calls) > 1
    tree_close(x_eager.grad, x.grad)


@pytest.mark.parametrize("names", [["a", "b", "c"], ["0", "1", "2"]], ids=["named", "positional"])
@pytest.mark.parametrize("change", ["delattr", "add", "replace"])
def test_sequential_items_follow_their_positions(names, change):
    """``Sequential`` indexes by position; the guard reads the name at that position from
    ``_modules`` (no ``Sequential.__getitem__`` walk) and guards the names' order, so removing
    a submodule by name shifts the positions and recompiles (a positional ``Sequential`` ran its
    old module after ``delattr(seq, '0')``: a wrong answer)."""
    from collections import OrderedDict

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.seq = nn.Sequential(OrderedDict((n, nn.Linear(4, 4)) for n in names))

        def forward(self, x):
            return self.seq[1](x) + 2 * self.seq[-1](x)

    fn = Holder()
    seq = fn.seq
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(fn)
    x = torch.randn(2, 4)
    tree_close(fn(x), compiled(x))
    guard = compiled._cache.entries[0][0].guard_source.split("def why")[0]
    assert f"._modules[{names[1]!r}]" in guard and "__getitem__" not in guard, guard
    if change == "delattr":
        delattr(seq, names[0])
    elif change == "add":
        seq.add_module("z", nn.Linear(4, 4))
    else:
        setattr(seq, names[2], nn.Linear(4, 4))
    x = torch.randn(2, 4)
    tree_close(fn(x), compiled(x))
