"""A read that the object itself did not answer is guarded: an attribute found missing
(``getattr``'s default, ``hasattr`` false) or found on the class (a class-level default, a
method) holds only until the instance gets its own.

Without these guards the cached entry kept the first call's branch after the code set the
attribute. transformers' ``capture_outputs`` installs its recording hooks behind
``getattr(model, "_output_capturing_hooks_installed", False)``: the second call installed them
again, every hidden state was recorded twice, and Segformer's decode head zipped stage 0 with the
projection of stage 1 (a crash there; a wrong answer where the shapes agree).

Each test runs an eager twin and a compiled twin with the same state, on fresh inputs per call.
"""

from __future__ import annotations

import logging

import torch
from helpers import tree_close
from torch import nn

import tc_capture


def _twins(make, calls=3):
    """Eager and compiled copies of ``make()`` called ``calls`` times on fresh inputs; the
    number of graphs compiled."""
    graphs = []

    def backend(graph, example):
        graphs.append(graph)
        return tc_capture.interpret_backend(graph, example)

    torch.manual_seed(0)
    eager = make()
    twin = make()
    if isinstance(eager, nn.Module):
        twin.load_state_dict(eager.state_dict())
    compiled = tc_capture.optimize(backend)(twin)
    for i in range(calls):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(i))
        tree_close(eager(x), compiled(x), f"call {i}")
    return len(graphs)


class ProbedFlag(nn.Module):
    def forward(self, x):
        if not getattr(self, "_done", False):
            self._done = True
            return x + 1
        return x - 1


class HasattrFlag(nn.Module):
    def forward(self, x):
        if hasattr(self, "_done"):
            return x - 1
        self._done = True
        return x + 1


class ClassDefault(nn.Module):
    _done = False  # hidden by the instance's own once set

    def forward(self, x):
        if self._done:
            return x - 1
        self._done = True
        return x + 1


class HooksOnce(nn.Module):
    """The ``capture_outputs`` pattern: hooks installed once, behind a flag, record the stages'
    outputs (a hook registered inside captured code is a graph break)."""

    def __init__(self):
        super().__init__()
        self.stages = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.seen = []

    def forward(self, x):
        if not getattr(self, "_hooks_installed", False):
            for s in self.stages:
                s.register_forward_hook(lambda m, a, out: self.seen.append(out))
            self._hooks_installed = True
        self.seen.clear()
        for s in self.stages:
            x = s(x)
        return torch.stack(self.seen).sum(0) + len(self.seen)


def test_flag_probed_with_getattr_default_is_guarded():
    assert _twins(ProbedFlag) == 2


def test_flag_probed_with_hasattr_is_guarded():
    assert _twins(HasattrFlag) == 2


def test_class_level_default_hidden_by_the_instance_is_guarded():
    assert _twins(ClassDefault) == 2


def test_hooks_installed_once_behind_a_flag_are_installed_once():
    _twins(HooksOnce, calls=4)


def test_probe_of_a_plain_object_argument_is_guarded():
    class Options:
        pass

    def fn(x, opts):
        scale = getattr(opts, "scale", None)
        return x if scale is None else x * scale

    _set_between_calls(fn, Options(), "scale", 3.0)


def test_probe_of_an_object_with_its_own_getattribute_is_guarded():
    class Record:
        def __getattribute__(self, name):
            return object.__getattribute__(self, name)

    def fn(x, rec):
        return x + 1 if hasattr(rec, "shift") else x - 1

    _set_between_calls(fn, Record(), "shift", 1)


def _set_between_calls(fn, obj, name, value) -> None:
    """``fn(x, obj)`` compiled against eager, before and (twice) after ``obj.name = value``."""
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(fn)
    x = torch.randn(3)
    tree_close(fn(x, obj), compiled(x, obj))
    setattr(obj, name, value)
    for _ in range(2):
        x = torch.randn(3)
        tree_close(fn(x, obj), compiled(x, obj))


def test_a_method_replaced_on_the_instance_is_called():
    class Scaled(nn.Module):
        def scale(self, x):
            return x * 2

        def forward(self, x):
            return self.scale(x) + 1

    m = Scaled()
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(m)
    x = torch.randn(3)
    tree_close(m(x), compiled(x))
    m.scale = lambda x: x * 5
    for _ in range(2):
        x = torch.randn(3)
        tree_close(m(x), compiled(x))


def test_unchanged_absence_hits_the_cache_and_a_change_is_named(caplog):
    class Probe(nn.Module):
        def forward(self, x):
            return x * getattr(self, "gain", 2.0)

    m, graphs = Probe(), []
    compiled = tc_capture.optimize(lambda g, ex: graphs.append(g) or tc_capture.interpret_backend(g, ex))(m)
    for _ in range(2):
        x = torch.randn(3)
        tree_close(m(x), compiled(x))
    assert len(graphs) == 1
    m.gain = 5.0
    logging.getLogger("tc.recompiles").setLevel(logging.DEBUG)
    try:
        with caplog.at_level(logging.DEBUG, logger="tc.recompiles"):
            x = torch.randn(3)
            tree_close(m(x), compiled(x))
    finally:
        logging.getLogger("tc.recompiles").setLevel(logging.WARNING)
    assert len(graphs) == 2
    assert any("has no .gain" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_a_submodule_forward_replaced_after_the_capture_is_called():
    """accelerate and PEFT replace ``module.forward`` on the instance: a forward replaced (again,
    or removed) after the first call must run, as in eager."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(x) + 1

    net = Net()
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(net)
    original = net.lin.forward
    x = torch.randn(2, 3)
    for scale in (None, 10.0, 20.0, None):
        if scale is None:
            net.lin.__dict__.pop("forward", None)
        else:
            net.lin.forward = lambda x, s=scale: original(x) * s
        tree_close(compiled(x), net(x))


def test_a_class_constant_set_on_the_class_after_the_capture_is_read_again():
    """``Model.use_relu = True`` (a class-level switch) or a class-level scale changed between
    calls: eager reads the class's new value; the cached entry had baked the old one in."""
    class Net(nn.Module):
        scale = 2.0
        use_relu = False
        mode = "sum"

        def forward(self, x):
            y = x * self.scale
            y = y.relu() if self.use_relu else y
            return y.sum() if self.mode == "sum" else y.mean()

    net = Net()
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(net)
    x = torch.randn(5)
    for change in (None, ("scale", 3.0), ("use_relu", True), ("mode", "mean"), ("scale", 3)):
        if change is not None:
            setattr(Net, *change)
        tree_close(compiled(x), net(x))
        assert type(compiled(x * 0)) is torch.Tensor


def test_a_method_replaced_on_the_class_after_the_capture_runs():
    """``nn.Linear.forward = patched`` or ``Net.helper = other`` after the first call: the inlined
    method was the class's old one; eager calls the new one."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def helper(self, x):
            return x + 1

        def forward(self, x):
            return self.helper(self.lin(x))

    net = Net()
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(net)
    x = torch.randn(2, 3)
    original = nn.Linear.forward
    tree_close(compiled(x), net(x))
    try:
        nn.Linear.forward = lambda self, x: original(self, x) * 10
        tree_close(compiled(x), net(x))
    finally:
        nn.Linear.forward = original
    tree_close(compiled(x), net(x))
    Net.helper = lambda self, x: x - 1
    tree_close(compiled(x), net(x))


def test_a_constant_of_a_users_module_set_between_calls_is_read_again(tmp_path, monkeypatch):
    """``config.SCALE`` / ``config.USE_RELU`` in a module of the user's, set between calls: eager
    reads the new value; the cached entry had baked in the old one."""
    (tmp_path / "tc_test_cfg.py").write_text("SCALE = 2.0\nUSE_RELU = False\nNAMES = ('a', 'b')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import tc_test_cfg as cfg

    def fn(x):
        y = x * cfg.SCALE
        y = y.relu() if cfg.USE_RELU else y
        return y * len(cfg.NAMES)

    compiled = tc_capture.optimize(tc_capture.interpret_backend)(fn)
    x = torch.randn(5)
    for change in (None, ("SCALE", 3.0), ("USE_RELU", True), ("NAMES", ("a",)), ("SCALE", 3)):
        if change is not None:
            monkeypatch.setattr(cfg, *change)
        tree_close(compiled(x), fn(x))
