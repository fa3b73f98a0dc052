"""Lifetime: compiled functions and modules that the user drops are freed, with their parameters,
their closures' captures and their cache entries, whether or not ``tc.reset()`` ran."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import tc


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.norm = torch.nn.LayerNorm(4)

    def forward(self, x):
        y = self.norm(self.lin(x)).relu()
        print(end="")  # a graph break: two regions, two cache entries
        return y * 2


def _closure():
    captured = torch.randn(5)

    def f(x):
        return x * captured + 1

    return f, weakref.ref(captured)


def _use_module(backend):
    m = _Block()
    refs = {"module": weakref.ref(m), "weight": weakref.ref(m.lin.weight), "norm bias": weakref.ref(m.norm.bias)}
    compiled = tc.compile(m, backend=backend)
    x = torch.randn(2, 4, requires_grad=True)
    compiled(x).sum().backward()
    torch.testing.assert_close(compiled(x), m(x))
    return compiled, refs


def _use_closure(backend):
    f, captured = _closure()
    refs = {"function": weakref.ref(f), "captured tensor": captured}
    compiled = tc.compile(f, backend=backend)
    for _ in range(2):
        x = torch.randn(5)
        torch.testing.assert_close(compiled(x), f(x))
    return compiled, refs


@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("reset", [False, True], ids=["no_reset", "after_reset"])
@pytest.mark.parametrize("use", [_use_module, _use_closure], ids=["module", "closure"])
def test_dropped_compiled_objects_are_freed(use, reset, backend):
    compiled, refs = use(backend)
    if reset:
        tc.reset()
    del compiled
    gc.collect()
    alive = [name for name, ref in refs.items() if ref() is not None]
    assert not alive, f"still alive after del + gc.collect(): {alive}"


def test_dropping_one_instance_keeps_the_shared_cache_for_the_others():
    """Instances of one block class share compiled entries; dropping one frees its parameters
    and leaves the others compiled and correct."""
    a, b = _Block(), _Block()
    ca, cb = tc.compile(a, backend="eager"), tc.compile(b, backend="eager")
    x = torch.randn(3, 4)
    torch.testing.assert_close(ca(x), a(x))
    torch.testing.assert_close(cb(x), b(x))
    weight = weakref.ref(a.lin.weight)
    del a, ca
    gc.collect()
    assert weight() is None
    x = torch.randn(3, 4)
    torch.testing.assert_close(cb(x), b(x))


def test_a_compiled_function_still_works_after_reset():
    f, _ = _closure()
    compiled = tc.compile(f, backend="eager")
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), f(x))
    tc.reset()
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), f(x))


def test_a_users_back_end_and_what_it_holds_go_with_the_compiled_function():
    held = torch.randn(5)

    def backend(gm, example_inputs, _held=held):
        return gm.forward

    ref = weakref.ref(held)
    compiled = tc.compile(lambda x: x.sin() + 1, backend=backend)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), x.sin() + 1)
    del held, backend, compiled
    gc.collect()
    assert ref() is None
