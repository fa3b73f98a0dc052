"""The default device (``torch.set_default_device``, ``with torch.device(...)``) as ambient state:
capture writes it into the graph's factories, guards it, and sets torch's ``DeviceContext`` mode
aside while it captures and runs a region. Calls under that mode alone had run eagerly."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._device import DeviceContext

import tc_capture
from tc_capture.api import interpret_backend
from tc_capture.cache.default_device import default_device, only_device_modes, redirected, set_aside


@pytest.fixture(autouse=True)
def _no_default_device():
    yield
    torch.set_default_device(None)


class Passing(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def makes(x):
    return x + 1, torch.arange(3), torch.full((2,), 1.5, dtype=torch.float64), torch.ones(2, device="cpu")


def _factory_nodes(graph) -> dict:
    return {getattr(n.target, "__name__", n.target): n for n in graph.calls}


def test_capture_writes_the_default_device_into_factories():
    x = torch.randn(3)
    with torch.device("meta"):
        r = tc_capture.capture(makes, x)
        want = makes(x)
    (graph,) = r.graphs
    nodes = _factory_nodes(graph)
    assert nodes["arange"].kwargs["device"] == torch.device("meta")
    assert nodes["full"].kwargs["device"] == torch.device("meta")
    assert nodes["ones"].kwargs["device"] == "cpu"  # given: kept
    assert [n.spec.device.type for n in (nodes["arange"], nodes["full"], nodes["ones"])] == ["meta", "meta", "cpu"]
    assert [t.device for t in r.result] == [t.device for t in want]
    assert "default device is meta" in r.guards


def test_without_a_default_device_factories_are_left_as_written():
    r = tc_capture.capture(makes, torch.randn(3))
    assert "device" not in _factory_nodes(r.graphs[0])["arange"].kwargs
    assert "no default device is set" in r.guards


def test_the_innermost_device_context_is_the_default():
    assert default_device() is None
    torch.set_default_device("meta")
    assert default_device() == torch.device("meta")
    with torch.device("cpu"):
        assert default_device() == torch.device("cpu")
        assert only_device_modes()
        with Passing():
            assert not only_device_modes()
            assert default_device() == torch.device("cpu")
    torch.set_default_device(None)
    assert default_device() is None and only_device_modes()


def test_set_aside_empties_the_stack_and_puts_it_back():
    torch.set_default_device("meta")
    with torch.device("cpu"):
        before = torch.overrides._get_current_function_mode_stack()
        with set_aside():
            assert torch._C._len_torch_function_stack() == 0
            assert torch.empty(0).device.type == "cpu"
            assert default_device() == torch.device("cpu")  # still readable
            with torch.device("meta"):  # one entered meanwhile is the innermost
                assert default_device() == torch.device("meta")
        assert torch.overrides._get_current_function_mode_stack() == before
    assert default_device() == torch.device("meta")


def test_a_call_made_while_the_mode_is_set_aside_still_gets_its_device():
    """A compiled function called from inside tc's own work (a back end, a compiled region)."""
    f = tc_capture.optimize(interpret_backend)(makes)
    x = torch.randn(3)
    with torch.device("meta"), set_aside():
        got = f(x)
    assert [t.device.type for t in got] == ["cpu", "meta", "meta", "cpu"]


def test_which_calls_a_device_context_redirects():
    assert redirected(torch.zeros) and redirected(torch.arange) and redirected(torch.tensor)
    assert not redirected(torch.zeros_like) and not redirected(torch.Tensor.new_zeros) and not redirected(torch.add)
    assert not redirected([])  # unhashable


def test_a_changed_default_device_recompiles():
    compiled = []

    def backend(graph, example_inputs):
        compiled.append(graph)
        return interpret_backend(graph, example_inputs)

    f = tc_capture.optimize(backend)(makes)
    x = torch.randn(3)
    for device in ("meta", None, "meta", "cpu", None):
        torch.set_default_device(device)
        assert [t.device for t in f(x)] == [t.device for t in makes(x)]
    torch.set_default_device(None)
    assert len(compiled) == 3


def test_a_cache_hit_makes_no_call_through_the_mode(monkeypatch):
    """Guards and the compiled code run with the mode set aside: under it each torch call they
    make (a tensor's ``stride()``, each op of the graph) would run the mode's Python hook."""
    through = []
    hook = DeviceContext.__torch_function__

    def counted(self, func, types, args=(), kwargs=None):
        through.append(func)
        return hook(self, func, types, args, kwargs)

    monkeypatch.setattr(DeviceContext, "__torch_function__", counted)
    f = tc_capture.optimize(interpret_backend)(makes)
    x = torch.randn(3)
    with torch.device("meta"):
        f(x)
        through.clear()
        got = f(x)
        assert through == []
        want = makes(x)
        assert through  # eager's calls go through it
    assert [t.device for t in got] == [t.device for t in want]
