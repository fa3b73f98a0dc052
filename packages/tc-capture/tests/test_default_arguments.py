"""Default arguments of functions called inside a compiled function are the function's own
objects, as in eager: a list default appended to on every call grows across calls, an ndarray or
tensor default written in place between calls is read with its new values. (They were constants
baked at capture: the list was empty again on every call, the ndarray kept its first values.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tc_capture
from tc_capture.api import interpret_backend


def grows(x, acc=[]):  # noqa: B006 - the mutable default is the point
    acc.append(1)
    return x * len(acc)


W = np.ones(3, dtype=np.float32)


def scaled(x, w=W):
    return x * torch.from_numpy(w)


T = torch.ones(3)


def shifted(x, *, t=T):
    return x + t


def through_defaults(x):
    return grows(x) + scaled(x) + shifted(x)


@pytest.fixture
def fresh_defaults():
    grows.__defaults__[0].clear()
    W[:] = 1
    T.fill_(1)
    yield


def test_defaults_are_the_functions_own_objects(fresh_defaults):
    compiled = tc_capture.optimize(interpret_backend, fullgraph=True)(through_defaults)
    for call in range(1, 4):
        x = torch.randn(3)
        got = compiled(x)
        assert len(grows.__defaults__[0]) == call
        grows.__defaults__[0].pop()  # the eager run below appends the same item again
        torch.testing.assert_close(got, through_defaults(x))
        W[0] += 1.5
        T[1] -= 2.0
