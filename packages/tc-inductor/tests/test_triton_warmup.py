"""Triton kernels compile ahead of time, in the pool, once per (source, signature, config)."""

from __future__ import annotations

import threading

import pytest
import torch
from inductor_helpers import build

import tc_inductor
from tc_inductor import kir
from tc_inductor.codegen import triton as triton_backend

aten = torch.ops.aten


def kernel_of(xranges, rranges=(), inputs=(("a", torch.bfloat16),), outputs=(("b", torch.float32),), sizes=()):
    value = kir.load("a", sum(kir.xvars(len(xranges))), inputs[0][1])
    store = kir.Store("b", sum(kir.xvars(len(xranges))), kir.cast(value, torch.float32), torch.float32)
    return kir.Kernel(tuple(xranges), tuple(rranges), (kir.Stage((store,), ()),), inputs, outputs, sizes)


def test_warmup_signature_names_pointer_dtypes_and_static_sizes():
    sig = triton_backend.warmup_signature(kernel_of((4, 8)), "cuda:1")
    assert sig == {"pointers": ["bfloat16", "float32"], "ints": [32], "device": 1}
    # a run-time size: any int32 (the kernel does not specialise on it, test_symbolic_launch.py)
    assert triton_backend.warmup_signature(kernel_of((4, 8), sizes=("s0",)), "cuda")["ints"] == [65537, 32]


class FakeKernel:
    def __init__(self):
        self.calls, self.threads = [], set()

    def warmup(self, *args, grid, **kwargs):
        self.calls.append((args, kwargs))
        self.threads.add(threading.get_ident())


def test_warmup_runs_in_the_pool_once_per_kernel():
    fake = FakeKernel()
    meta = {"config": {"XBLOCK": 1024, "num_warps": 4}, "autotune": False, "interpret": False,
            "warmup": {"pointers": ["float32", "bfloat16"], "ints": [4096], "device": 0}}
    record = {"source": f"unique source {id(fake)}", "meta": meta}
    triton_backend._start_warmup(fake, record)
    triton_backend._start_warmup(fake, record)  # same source, signature and config: no second compile
    triton_backend._warmups[triton_backend._warmup_key(record)].result()
    assert fake.calls == [((torch.float32, torch.bfloat16, 4096), {"XBLOCK": 1024, "num_warps": 4})]
    assert threading.get_ident() not in fake.threads


class FakeCompiled:
    def __init__(self, fail: bool = False):
        self.loaded_in, self.fail = None, fail

    def _init_handles(self):
        if self.fail:
            raise RuntimeError("no driver")
        self.loaded_in = threading.get_ident()


@pytest.mark.parametrize("fail", [False, True])
def test_warmup_loads_the_kernel_and_its_launcher_in_the_pool(fail):
    compiled = FakeCompiled(fail)

    class Kernel(FakeKernel):
        def warmup(self, *args, grid, **kwargs):
            super().warmup(*args, grid=grid, **kwargs)
            return compiled

    meta = {"config": {"XBLOCK": 1024, "num_warps": 4}, "autotune": False, "interpret": False,
            "warmup": {"pointers": ["float32"], "ints": [4096], "device": 0}}
    record = {"source": f"unique source {id(compiled)}", "meta": meta}
    triton_backend._start_warmup(Kernel(), record)
    got = triton_backend._warmups[triton_backend._warmup_key(record)].result()
    assert got is compiled  # a failed load ahead is left to the first launch, not an error
    assert (compiled.loaded_in is None) if fail else compiled.loaded_in not in (None, threading.get_ident())


def test_interpreted_kernels_are_not_warmed_up():
    x = torch.randn(5, 7)
    k = tc_inductor.compile(build(lambda g, x: g.call(aten.exp.default, x), [x]), [x],
                            {"backend": "triton", "cache": False})
    torch.testing.assert_close(k(x), x.exp())


@pytest.mark.cuda
def test_kernels_are_compiled_before_the_first_call():
    import hashlib

    x = torch.randn(1000, 33, device="cuda")
    g = build(lambda g, x: g.call(aten._softmax.default, g.call(aten.sin.default, x), -1, False), [x])
    k = tc_inductor.compile(g, [x], {"cache": False})
    key = hashlib.sha256(k.kernels[0].encode()).hexdigest()[:24]
    (module,) = [m for path, m in triton_backend._modules.items() if key in path]
    assert any(caches[0] for caches in triton_backend.kernel_function(module, k.kernels[0]).device_caches.values())  # compiled, never launched  # noqa: E501
    torch.testing.assert_close(k(x), torch.softmax(x.sin(), -1))


@pytest.mark.cuda
def test_steady_state_launches_are_direct_on_cuda(monkeypatch):
    """On a GPU with triton's real runtime knobs, after the first call (each launcher's self-check
    against ``run``) no launch goes through ``JITFunction.run``: its 10-40 µs a launch made
    ResNet-50's training step host-bound (triton 3.6's launch hooks are never None). Each
    launcher then launches through tc's C launcher (``cuda_launch.py``), or ``_direct``."""
    from triton.runtime.jit import JITFunction

    from tc_inductor.codegen.triton_launch import TritonLauncher

    x = torch.randn(1000, 33, device="cuda")
    g = build(lambda g, x: (g.call(aten._softmax.default, g.call(aten.sin.default, x), -1, False),
                            g.call(aten.cos.default, x)), [x])
    k = tc_inductor.compile(g, [x], {"cache": False, "fusion": False})
    k(x)
    runs = []
    real_run = JITFunction.run
    monkeypatch.setattr(JITFunction, "run", lambda self, *a, **kw: runs.append(self) or real_run(self, *a, **kw))
    for _ in range(3):
        out = k(x)
    torch.cuda.synchronize()
    launchers = [v for name, v in k._fn.__globals__.items() if name.startswith("k") and isinstance(v, TritonLauncher)]
    paths = {getattr(v.launch, "__name__", type(v.launch).__name__) for v in launchers}
    assert launchers and paths <= {"Launcher", "_direct"} and runs == [], (paths, runs)
    torch.testing.assert_close(out[0], torch.softmax(x.sin(), -1))
    torch.testing.assert_close(out[1], x.cos())


def test_kernels_are_named_by_what_they_compute():
    x = torch.randn(64, 32)
    g = build(lambda g, x: (g.call(aten._softmax.default, x, -1, False),
                            g.call(aten.tanh.default, g.call(aten.add.Tensor, x, x))), [x])
    k = tc_inductor.compile(g, [x], {"backend": "triton", "cache": False, "fusion": False})
    names = [triton_backend.kernel_function_name(src) for src in k.kernels]
    assert len(set(names)) == len(names)
    assert any(n.startswith("tc_red_max") for n in names) and any(n.startswith("tc_poi_add_tanh") for n in names)
    out = k(x)
    torch.testing.assert_close(out[0], torch.softmax(x, -1))


class _FakeCompiled:
    """Stands for a CompiledKernel: its C launcher computes exp ("same": on its first launch,
    checked against run, it leaves run's output as it is), zeroes the output, or raises."""

    function, packed_metadata = 0, None

    def __init__(self, value):
        self.value, self.launches = value, 0

    def run(self, grid0, grid1, grid2, stream, function, packed, launch_metadata, enter, exit_hook, *args):
        self.launches += 1
        if self.value is None:
            raise RuntimeError("no GPU here")
        assert all(type(p) is int for p in args[:2]), "pointers reach the C launcher as ints"
        x, out = _float32s_at(args[0], 32), _float32s_at(args[1], 32)
        if self.value != "same":
            out.zero_()
        elif self.launches > 1:
            out.copy_(x.exp())


def _float32s_at(pointer: int, n: int) -> torch.Tensor:
    import ctypes

    return torch.frombuffer((ctypes.c_float * n).from_address(pointer), dtype=torch.float32)


def _launcher_case(compiled):
    import types

    from tc_inductor.codegen.triton_launch import TritonLauncher

    x = torch.randn(4, 8)
    k = tc_inductor.compile(build(lambda g, x: g.call(aten.exp.default, x), [x]), [x],
                            {"backend": "triton", "cache": False})
    launcher = k._fn.__globals__["k0"]
    assert isinstance(launcher, TritonLauncher)
    fake = TritonLauncher(launcher.fn, launcher.consts, launcher.n_pointers, launcher.outputs, compiled)
    fake._stream = lambda device: 0
    fake._knobs = types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    k._fn.__globals__["k0"] = fake
    for _ in range(2):
        torch.testing.assert_close(k(x), x.exp())
    return fake


def test_direct_launch_that_agrees_with_run_is_used():
    fake = _launcher_case(_FakeCompiled("same"))
    assert fake.launch == fake._direct and fake.compiled.launches == 2


def test_direct_launch_that_disagrees_with_run_falls_back_to_run():
    fake = _launcher_case(_FakeCompiled(0.0))
    assert fake.launch == fake._via_run and fake.compiled.launches == 1


def test_direct_launch_that_raises_falls_back_to_run():
    fake = _launcher_case(_FakeCompiled(None))
    assert fake.launch == fake._via_run
