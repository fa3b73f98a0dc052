"""The shortcuts that make a cache hit cheap (``cache/guards.py``) keep every fact guarded.

A hit checks module constants by identity first (``x is K or`` the typed comparison), a
constant tuple of a module (a conv's ``stride``) in one check, a torch container's length by its
``_modules``, and a module's hooks through the process-wide hook-handle counter plus a weak
reference to the module checked last. Each change below must make the compiled model compute what
eager computes, on fresh inputs, forward and backward.
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import tree_close
from torch import nn

import tc_capture


class ConvBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.seq = nn.Sequential(nn.Linear(16, 8), nn.ReLU())
        self.scale = 2.0

    def forward(self, x):
        y = nn.functional.adaptive_avg_pool2d(self.conv(x), (2, 2)).flatten(1) * self.scale
        return self.seq(y)


def _replace_parameter(m):
    m.conv.weight = nn.Parameter(torch.randn_like(m.conv.weight))


def _set_data_same_shape(m):
    m.seq[0].weight.data = torch.randn(8, 16)


def _set_data_other_strides(m):
    m.seq[0].weight.data = torch.randn(16, 8).t()


def _requires_grad_off(m):
    m.conv.bias.requires_grad_(False)


def _to_double(m):
    m.to(torch.float64)


def _reassign_stride(m):
    m.conv.stride = (2, 2)


def _stride_of_other_types(m):
    m.conv.stride = [1, 2]  # a list now: the constant tuple check must not take it for a tuple


def _reassign_float_attribute(m):
    m.scale = 3.0


def _int_for_float_attribute(m):
    m.scale = 2  # == 2.0, another type


def _equal_new_float_object(m):
    m.scale = float("2.0")  # same value and type, another object: still a hit's answer


def _swap_submodule_same_type(m):
    m.seq[1] = nn.ReLU()


def _swap_submodule_other_type(m):
    m.seq[1] = nn.Tanh()


def _append_to_sequential(m):
    m.seq.append(nn.Sigmoid())


def _hook_on_submodule(m):
    m.seq[0].register_forward_hook(lambda mod, args, out: out * 3)


def _tensor_hook_then_module_hook(m):
    torch.randn(2, requires_grad=True).register_hook(lambda g: g)  # moves the handle counter only
    m.conv.register_forward_pre_hook(lambda mod, args: (args[0] * 0.5,))


CHANGES = [_replace_parameter, _set_data_same_shape, _set_data_other_strides, _requires_grad_off, _to_double,
           _reassign_stride, _stride_of_other_types, _reassign_float_attribute, _int_for_float_attribute,
           _equal_new_float_object, _swap_submodule_same_type, _swap_submodule_other_type, _append_to_sequential,
           _hook_on_submodule, _tensor_hook_then_module_hook]


def _input(m):
    p = next(m.parameters())
    return torch.randn(2, 3, 4, 4, dtype=p.dtype, requires_grad=True)


def _check(m, compiled):
    for _ in range(2):  # a miss, then a hit, each on fresh inputs
        x = _input(m)
        x_eager = x.detach().clone().requires_grad_()
        got, want = compiled(x), m(x_eager)
        tree_close(want, got)
        got.sum().backward()
        want.sum().backward()
        tree_close(x_eager.grad, x.grad)


@pytest.mark.parametrize("change", CHANGES, ids=[c.__name__.strip("_") for c in CHANGES])
def test_a_change_after_compiling_matches_eager(change):
    m = ConvBlock()
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(m)
    _check(m, compiled)
    change(m)
    _check(m, compiled)


def test_a_hooked_copy_swapped_in_runs_its_hooks():
    """A copy brings its hooks along without creating a hook handle: the hook shortcut (no new
    handle since the last check) holds only for the module object it checked."""
    donor = nn.Linear(16, 8)
    donor.register_forward_hook(lambda mod, args, out: out + 7)
    m = ConvBlock()
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(m)
    _check(m, compiled)
    m.seq[0] = copy.deepcopy(donor)
    _check(m, compiled)


def test_hook_shortcut_follows_a_removed_then_readded_hook():
    m = ConvBlock()
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(m)
    _check(m, compiled)
    handle = m.seq[0].register_forward_hook(lambda mod, args, out: out * 3)
    _check(m, compiled)
    handle.remove()
    _check(m, compiled)
    m.seq[0].register_forward_hook(lambda mod, args, out: out - 1)
    _check(m, compiled)


def test_constants_of_other_types_are_other_entries():
    calls = []

    def backend(graph, example):
        calls.append(graph)
        return tc_capture.interpret_backend(graph, example)

    def f(x, k):
        return x * k

    compiled = tc_capture.optimize(backend)(f)
    x = torch.arange(4)
    for k in (2, 2.0, True, 2, 2.0):
        got = compiled(x, k)
        want = f(x, k)
        assert got.dtype == want.dtype and torch.equal(got, want), (k, got, want)
    assert len(calls) == 3
