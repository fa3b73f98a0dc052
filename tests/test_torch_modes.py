"""Calls under torch modes. A compiled function called while a torch function or dispatch mode is
active runs eagerly (one warning naming the mode): eager routes every op through the mode,
compiled code would not. tc had ignored the mode (a mode turning ``add`` into ``sub`` changed
eager's answer, not tc's).

The exception is the mode ``torch.set_default_device`` and ``with torch.device(...)`` enter (a
``DeviceContext``, alone or nested): those calls are compiled, the default device a guarded part
of the ambient state that capture writes into the graph's factories. They had run eagerly (a
silent slowdown of every LLM script that sets a default device)."""

from __future__ import annotations

import contextlib
import copy
import warnings

import pytest
import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode
from torch.utils._device import DeviceContext
from torch.utils._python_dispatch import TorchDispatchMode

import tc


@pytest.fixture(autouse=True)
def _fresh():
    tc.reset()
    yield
    torch.set_default_device(None)
    torch.set_default_dtype(torch.float32)


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




# ---- the default device: torch.set_default_device / with torch.device(...) ---------------------------
class MyDeviceContext(DeviceContext):
    """Not torch's own mode: what it does to calls is not known to be only a default device."""


class FunctionsSeen(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(getattr(func, "__name__", repr(func)))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def under(how: str, device: str | None):
    """A default device set as ``how`` says (``None``: none set)."""
    if device is None:
        yield
    elif how == "set_default_device":
        torch.set_default_device(device)
        try:
            yield
        finally:
            torch.set_default_device(None)
    else:
        with torch.device(device):
            yield


@contextlib.contextmanager
def no_fallback():
    """tc's warnings (an eager fallback, a recompile limit) raise instead."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="tc")
        yield


class Counting:
    """A back end (torch.compile's contract) that counts the graphs it compiles and notes, when it
    compiles and when it runs, the torch function modes active and the device a tensor made
    without one gets: what tc's own work sees."""

    def __init__(self):
        self.graphs, self.modes, self.own_devices = [], [], []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        self._note()

        def run(*args):
            self._note()
            return gm(*args)

        return run

    def _note(self):
        self.modes.append(torch._C._len_torch_function_stack())
        self.own_devices.append(torch.empty(0).device.type)


def factories(x):
    n = x.shape[0]
    made = (torch.arange(n), torch.zeros(n, 2), torch.ones(2, dtype=torch.float16), torch.full((2,), 7.0),
            torch.tensor([1.0, 2.0]), torch.linspace(0, 1, 5), torch.eye(3), torch.arange(n) * 2 + 1,
            torch.empty(3).fill_(4.0), torch.zeros(2, device=None), torch.as_tensor(x) + 1)
    kept = (torch.zeros(2, device="cpu"), x.new_zeros(2), torch.zeros_like(x), x.new_ones(3), x * 2)
    return made, kept


def random_factories(x):
    return torch.rand(2), torch.randn(2, 3), torch.randint(0, 5, (4,)), torch.randperm(4), x + 1


def _leaves(out) -> list:
    return [t for item in out for t in (_leaves(item) if isinstance(item, (tuple, list)) else [item])]


def _same(got, want, values: bool = True, **tol) -> None:
    """Same devices, dtypes and shapes as eager's, and values where they are data (not on meta)."""
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert (g.device, g.dtype, g.shape) == (w.device, w.dtype, w.shape)
        if values and w.device.type != "meta":
            torch.testing.assert_close(g, w, **tol)


HOW = ["set_default_device", "with"]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("how", HOW)
def test_factories_get_the_default_device_in_the_compiled_graph(how, device, backend):
    compiled = tc.compile(factories, backend=backend, options={"fallback": False})
    with under(how, device), no_fallback():
        for _ in range(2):
            x = torch.randn(4, device="cpu")  # new_*, *_like and explicit devices keep it
            _same(compiled(x), factories(x))
        report = tc.explain(factories, x)
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert f"default device is {device}" in report.guards


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_random_factories_get_the_default_device(device):
    compiled = tc.compile(random_factories, options={"fallback": False})
    with under("set_default_device", device), no_fallback():
        x = torch.randn(4, device="cpu")
        _same(compiled(x), random_factories(x), values=False)
        assert f"default device is {device}" in tc.explain(random_factories, x).guards


def test_a_call_under_another_default_device_captures_again():
    seen = Counting()
    compiled = tc.compile(factories, backend=seen)
    x = torch.randn(4)
    with no_fallback():
        for device in (None, "cpu", "meta", None, "meta", "cpu"):
            with under("set_default_device", device):
                _same(compiled(x), factories(x))
    assert len(seen.graphs) == 3  # one per default device: none, cpu, meta


@pytest.mark.parametrize("how", HOW)
def test_tc_captures_compiles_and_runs_with_the_mode_set_aside(how):
    seen = Counting()
    compiled = tc.compile(factories, backend=seen)
    with under(how, "meta"):
        compiled(torch.randn(4, device="cpu"))
        compiled(torch.randn(4, device="cpu"))
        assert torch.empty(0).device.type == "meta"  # the mode is back after each call
    assert len(seen.graphs) == 1
    assert seen.modes == [0, 0, 0] and seen.own_devices == ["cpu", "cpu", "cpu"]


def moves_to_the_default_device(x):
    device = torch.get_default_device()
    return x.to(device) * 2, torch.zeros(1, device=device), torch.ones(1).device == device


def test_get_default_device_inside_a_compiled_function():
    seen = Counting()
    compiled = tc.compile(moves_to_the_default_device, backend=seen)
    x = torch.randn(3)
    with no_fallback():
        for how, device in [("with", "meta"), ("set_default_device", "cpu"), ("with", None), ("with", "meta")]:
            with under(how, device):
                *got, got_same = compiled(x)
                *want, want_same = moves_to_the_default_device(x)
                _same(got, want)
                assert got_same is want_same is True
    assert len(seen.graphs) == 3


def test_the_innermost_default_device_wins():
    seen = Counting()
    compiled = tc.compile(factories, backend=seen)
    x = torch.randn(4)
    with no_fallback():
        torch.set_default_device("meta")
        with torch.device("cpu"):
            _same(compiled(x), factories(x))
            assert _leaves(compiled(x))[0].device.type == "cpu"
            with torch.device("meta"):
                _same(compiled(x), factories(x))
        _same(compiled(x), factories(x))
    assert len(seen.graphs) == 2  # cpu, meta


@pytest.mark.parametrize("mode", ["function", "dispatch", "subclass"])
def test_another_mode_beside_a_default_device_still_runs_eagerly(mode):
    compiled = tc.compile(add_and_make)
    x, y = torch.ones(3), torch.full((3,), 2.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if mode == "function":
            with torch.device("cpu"), AddIsSub():
                got, want = compiled(x, y), add_and_make(x, y)
            torch.testing.assert_close(got, want)
            name = "AddIsSub"
        elif mode == "dispatch":
            with torch.device("cpu"), Seen() as mine:
                compiled(x, y)
            with torch.device("cpu"), Seen() as eager:
                add_and_make(x, y)
            assert mine.ops == eager.ops
            name = "Seen"
        else:
            with MyDeviceContext("meta"):
                got, want = compiled(x, y), add_and_make(x, y)
            _same(got, want)
            name = "MyDeviceContext"
    assert sum(name in str(w.message) for w in caught) == 1


MODE = FunctionsSeen()


def enters_a_mode(x, y):
    z = x * 2
    MODE.__enter__()
    w = torch.relu(z + y) * 3 + x
    MODE.__exit__(None, None, None)
    return w


def test_a_mode_entered_at_a_graph_break_runs_the_rest_eagerly():
    compiled = tc.compile(enters_a_mode)
    x, y = torch.randn(4), torch.randn(4)
    with pytest.warns(UserWarning, match="FunctionsSeen"):
        compiled(x, y)
    for _ in range(2):
        MODE.seen.clear()
        got = compiled(x, y)
        mine = list(MODE.seen)
        MODE.seen.clear()
        want = enters_a_mode(x, y)
        torch.testing.assert_close(got, want)
        assert mine == MODE.seen and "relu" in mine


def enters_a_default_device(x):
    y = x * 2
    with torch.device("meta"):
        made = torch.zeros(2) + 1
    return y, made, torch.ones(2)


def test_a_default_device_entered_at_a_graph_break_is_compiled_for():
    compiled = tc.compile(enters_a_default_device)
    x = torch.randn(3)
    with no_fallback():
        for _ in range(2):
            _same(compiled(x), enters_a_default_device(x))
    report = tc.explain(enters_a_default_device, x)
    assert "default device is meta" in report.guards and "no default device is set" in report.guards


def mm_and_factories(x, w):
    return x @ w, torch.ones(2) + x.sum(), torch.arange(3) * 0.5, torch.tensor([1.5]) * w[0, 0]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_default_device_with_autocast_and_a_default_dtype(backend):
    compiled = tc.compile(mm_and_factories, backend=backend, options={"fallback": False})
    torch.set_default_device("cpu")
    with no_fallback():
        for dtype, cast in [(torch.float32, False), (torch.float64, False), (torch.float32, True),
                            (torch.float64, True), (torch.float32, False)]:
            torch.set_default_dtype(dtype)
            x, w = torch.randn(4, 4), torch.randn(4, 4)
            with torch.autocast("cpu", torch.bfloat16) if cast else contextlib.nullcontext():
                _same(compiled(x, w), mm_and_factories(x, w), atol=1e-2, rtol=1e-2)


class PositionsAndMasks(nn.Module):
    """The tensors an LLM's forward makes for itself: position ids, a causal mask, a scale."""

    def __init__(self, vocab: int = 50, d: int = 16, context: int = 32):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, vocab)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tokens(ids) + self.positions(torch.arange(t))
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        bias = torch.zeros(t, t).masked_fill(~causal, float("-inf"))
        scores = q @ k.transpose(-1, -2) / torch.tensor(float(q.shape[-1])).sqrt() + bias
        return self.out(torch.softmax(scores, dim=-1) @ v)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("how", HOW)
def test_training_under_a_default_device(how, backend):
    torch.manual_seed(0)
    with under(how, "cpu"), no_fallback():
        model = PositionsAndMasks()
        ref = copy.deepcopy(model)
        compiled = tc.compile(model, backend=backend, options={"fallback": False})
        for _ in range(2):
            ids = torch.randint(0, 50, (2, 7))
            got, want = compiled(ids), ref(ids)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            got.square().mean().backward()
            want.square().mean().backward()
        assert tc.explain(model, ids).graph_count == 1
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_backward_runs_under_a_meta_default_device(backend):
    """The backward runs where the user calls it, under the mode: tc's code there must not make
    its tensors on the default device."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    ref = copy.deepcopy(model)
    compiled = tc.compile(model, backend=backend, options={"fallback": False})
    x = torch.randn(3, 4)
    with torch.device("meta"), no_fallback():
        got, want = compiled(x), ref(x)
        got.sum().backward()
        want.sum().backward()
        assert tc.explain(model, x).graph_count == 1
    torch.testing.assert_close(got, want)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


# ---- the same on a GPU (the Hopper test host) --------------------------------------------------------
def cpu_inputs(x):
    positions = torch.arange(x.shape[0])
    return x * 2, x.sum() + positions, torch.zeros(x.shape) + 1, positions.cpu() + x


@pytest.mark.cuda
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("how", HOW)
def test_cuda_default_device_model_makes_its_own_tensors(how, mode):
    torch.manual_seed(0)
    with under(how, "cuda"), torch.no_grad(), no_fallback():
        model = PositionsAndMasks().eval()
        assert model.out.weight.is_cuda
        compiled = tc.compile(copy.deepcopy(model), mode=mode, options={"fallback": False})
        for _ in range(3):
            ids = torch.randint(0, 50, (2, 7))
            got, want = compiled(ids), model(ids)
            assert got.is_cuda
            torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)


@pytest.mark.cuda
@pytest.mark.parametrize("how", HOW)
def test_cuda_default_device_with_cpu_inputs(how):
    compiled = tc.compile(cpu_inputs, options={"fallback": False})
    with under(how, "cuda"), no_fallback():
        for _ in range(2):
            x = torch.randn(5, device="cpu")
            got, want = compiled(x), cpu_inputs(x)
            assert [t.device.type for t in got] == ["cpu", "cuda", "cuda", "cpu"]
            _same(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.cuda
def test_cuda_default_device_changes_between_calls():
    seen = Counting()
    compiled = tc.compile(factories, backend=seen)
    with no_fallback():
        for device in ("cuda", None, "cuda", "cpu", "meta", "cuda"):
            with under("set_default_device", device):
                x = torch.randn(4)
                _same(compiled(x), factories(x))
    assert len(seen.graphs) == 4
    assert set(seen.own_devices) == {"cpu"}


@pytest.mark.cuda
@pytest.mark.parametrize("how", HOW)
def test_cuda_training_under_a_default_device(how):
    torch.manual_seed(0)
    with under(how, "cuda"), no_fallback():
        model = PositionsAndMasks()
        ref = copy.deepcopy(model)
        compiled = tc.compile(model, options={"fallback": False})
        for _ in range(2):
            ids = torch.randint(0, 50, (2, 7))
            got, want = compiled(ids), ref(ids)
            torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)
            got.square().mean().backward()
            want.square().mean().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.grad.is_cuda
        torch.testing.assert_close(p.grad, q.grad, atol=2e-3, rtol=2e-3)


@pytest.mark.cuda
def test_cuda_default_device_with_bf16_autocast():
    compiled = tc.compile(mm_and_factories, options={"fallback": False})
    torch.set_default_device("cuda")
    with no_fallback():
        for cast in (False, True, False):
            x, w = torch.randn(8, 8), torch.randn(8, 8)
            with torch.autocast("cuda", torch.bfloat16) if cast else contextlib.nullcontext():
                got, want = compiled(x, w), mm_and_factories(x, w)
            assert all(t.is_cuda for t in got)
            _same(got, want, atol=1e-1, rtol=2e-2)  # bfloat16 keeps 8 bits: dtypes and devices are exact
