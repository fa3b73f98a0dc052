"""``TC_LOGS=recompiles``: each recompile names, for every cache entry tried, the guard that failed
with the value it expected and the value it found."""

from __future__ import annotations

import logging

import torch
from helpers import tree_close
from torch import nn

import tc_capture


def _log(caplog, fn, *calls) -> list[str]:
    logger = logging.getLogger("tc.recompiles")
    logger.setLevel(logging.DEBUG)
    try:
        with caplog.at_level(logging.DEBUG, logger="tc.recompiles"):
            for args in calls:
                fn(*args)
    finally:
        logger.setLevel(logging.WARNING)
    return [r.getMessage() for r in caplog.records if r.name == "tc.recompiles"]


def scale(x, k):
    return x * k + 1


def test_each_entry_tried_names_its_failed_guard_expected_and_actual(caplog):
    # dynamic=False: by default the second size would make the dim a symbol (automatic dynamic)
    f = tc_capture.optimize(tc_capture.interpret_backend, dynamic=False)(scale)
    calls = [(torch.randn(3), 2), (torch.randn(4), 2), (torch.randn(5), 2)]
    messages = _log(caplog, f, *calls)
    assert len(messages) == 2, messages
    last = messages[-1]
    assert "2 entries tried" in last
    assert "entry 0: failed guard: x: Tensor float32[3] stride=(1,) cpu (actual: Tensor float32[5] stride=(1,) cpu)" in last
    assert "entry 1: failed guard: x: Tensor float32[4] stride=(1,) cpu (actual: Tensor float32[5] stride=(1,) cpu)" in last
    x = torch.randn(5)
    tree_close(f(x, 2), scale(x, 2))


def test_a_constant_guard_shows_the_value_found(caplog):
    f = tc_capture.optimize(tc_capture.interpret_backend)(scale)
    x = torch.randn(3)
    (message,) = _log(caplog, f, (x, 2), (x, 3))
    assert "failed guard: k == 2 (actual: 3 (int))" in message, message
    tree_close(f(x, 3), scale(x, 3))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.act(self.lin(x))


def test_module_state_guards_show_the_value_found(caplog):
    m = Net()
    f = tc_capture.optimize(tc_capture.interpret_backend)(m)
    x = torch.randn(2, 3)
    f(x)
    m.act = nn.Tanh()
    (swapped,) = _log(caplog, f, (x,))
    assert "type(self.act) is ReLU (actual: a Tanh module)" in swapped, swapped
    caplog.clear()
    m.lin.register_forward_hook(lambda mod, args, out: out * 2)
    (hooked,) = _log(caplog, f, (x,))
    assert "entry 1: failed guard: self.lin has no hooks (actual: _forward_hooks=[" in hooked, hooked
    tree_close(f(x), m(x))
    caplog.clear()
    with torch.no_grad():
        (grad,) = _log(caplog, f, (x,))
        tree_close(f(x), m(x))
    assert "grad mode is on (actual: False (bool))" in grad, grad
