"""A compiled function called while a torch function or dispatch mode is active runs eagerly (one
warning naming the mode): eager routes every op through the mode, compiled code would not. tc had
ignored the mode (a mode turning ``add`` into ``sub`` changed eager's answer, not tc's), and
``with torch.device(...)`` / ``torch.set_default_device`` did not reach factories in the graph."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import tc


@pytest.fixture(autouse=True)
def _fresh():
    tc.reset()


class AddIsSub(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.add, torch.Tensor.add, torch.Tensor.__add__):
            func = torch.sub
        return func(*args, **(kwargs or {}))


class Seen(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def add_and_make(x, y):
    return x + y, torch.zeros(2)


@pytest.mark.parametrize("first_under_mode", [False, True])
def test_a_function_mode_is_honoured(first_under_mode):
    compiled = tc.compile(add_and_make)
    x, y = torch.ones(3), torch.full((3,), 2.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for under in (first_under_mode, not first_under_mode, first_under_mode):
            if under:
                with AddIsSub():
                    got, want = compiled(x, y), add_and_make(x, y)
            else:
                got, want = compiled(x, y), add_and_make(x, y)
            torch.testing.assert_close(got, want)
    assert sum("AddIsSub" in str(w.message) for w in caught) == 1


def test_a_dispatch_mode_sees_eagers_ops():
    compiled = tc.compile(add_and_make)
    x, y = torch.ones(3), torch.ones(3)
    compiled(x, y)
    with Seen() as mine, pytest.warns(UserWarning, match="Seen"):
        compiled(x, y)
    with Seen() as eager:
        add_and_make(x, y)
    assert mine.ops == eager.ops


def test_the_default_device_context_reaches_factories():
    compiled = tc.compile(add_and_make)
    x = torch.ones(3)
    compiled(x, x)
    with torch.device("meta"), pytest.warns(UserWarning, match="DeviceContext"):
        _, made = compiled(x, x)
    assert made.device.type == "meta"
