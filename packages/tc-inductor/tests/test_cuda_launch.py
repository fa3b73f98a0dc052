"""tc's C launcher of compiled Triton kernels (``codegen/cuda_launch.py``): argument kinds from
the compiled kernel's signature, their conversion, and every case that must go to Triton's own
launch instead. The conversion and the fallbacks run without a GPU; the launches themselves
run on the GPU host (``cuda`` marker)."""

from __future__ import annotations

import shutil
import struct
import types

import pytest
import torch
from inductor_helpers import build

import tc_inductor
from tc_inductor.codegen import cuda_launch

aten = torch.ops.aten
needs_compiler = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")), reason="needs a C compiler")


def test_kinds_follow_the_compiled_signature():
    sig = {"in0": "*fp32", "out0": "*kbf16", "s0": "i32", "n": "i64", "one": "constexpr", "seed": "u64",
           "XBLOCK": "constexpr", "RBLOCK": "constexpr"}
    assert cuda_launch.kinds(sig, 6) == b"ppilxL"  # the config's constexprs past the launch's arguments
    assert cuda_launch.kinds({"a": "*fp16", "f": "fp32", "d": "fp64", "b": "i1", "u": "u8"}, 5) == b"pfdbB"


@pytest.mark.parametrize("sig, n", [
    ({"a": "*fp32", "x": "fp16"}, 2),  # a half-precision scalar: Triton packs it
    ({"a": "*fp32", "t": ("i32", "i32")}, 2),  # a tuple parameter
    ({"a": "*fp32", "d": "tensordesc<fp32[16, 16]>"}, 2),
    ({"a": "*fp32", "n": "i32"}, 1),  # a parameter past the launch's arguments that is no constexpr
    ({"a": "*fp32"}, 2),  # more arguments than parameters
])
def test_kernels_it_does_not_launch(sig, n):
    assert cuda_launch.kinds(sig, n) is None


@pytest.fixture(scope="module")
def ext():
    if not (shutil.which("g++") or shutil.which("c++")):
        pytest.skip("needs a C compiler")
    module = cuda_launch.module()
    assert module is not None, "the extension did not build (TC_LOGS=perf_hints says why)"
    return module


def test_arguments_are_packed_as_their_parameters(ext):
    x = torch.empty(16)
    packed = ext.pack(b"pilfdxbBhHIL", x, 5, -7, 1.5, 2.25, "unused", -3, 255, -300, 65535, 2**32 - 1, 2**64 - 1)
    assert packed == (struct.pack("Q", x.data_ptr()), struct.pack("i", 5), struct.pack("q", -7), struct.pack("f", 1.5),
                      struct.pack("d", 2.25), struct.pack("b", -3), struct.pack("B", 255), struct.pack("h", -300),
                      struct.pack("H", 65535), struct.pack("I", 2**32 - 1), struct.pack("Q", 2**64 - 1))
    assert ext.pack(b"pp", 4096, None) == (struct.pack("Q", 4096), struct.pack("Q", 0))  # int addresses, null


@pytest.mark.parametrize("kinds, arg", [
    (b"i", 2**31), (b"i", -(2**31) - 1), (b"b", 128), (b"B", -1), (b"I", 2**32), (b"L", -1), (b"l", 2**63),
    (b"i", True), (b"i", 3.0), (b"f", "1.0"),  # not the parameter's type: Triton decides
    (b"p", 4100),  # not 16-byte aligned, as the kernel was specialised for
])
def test_what_a_launch_hands_to_triton(ext, kinds, arg):
    assert ext.pack(kinds, arg) is None


def test_a_multi_tensor_launch_is_packed(ext):
    """A foreach kernel passes hundreds of pointers (AdamW over GPT-2: four per parameter)."""
    tensors = [torch.empty(4) for _ in range(600)]
    packed = ext.pack(b"p" * 600 + b"i", *tensors, 7)
    assert packed is not None and len(packed) == 601 and ext.MAX_ARGS >= 601
    assert packed[599] == struct.pack("Q", tensors[599].data_ptr()) and packed[600] == struct.pack("i", 7)
    launcher, calls = _launcher(ext, kinds=b"p" * 600)
    launcher(1, *tensors[:599])  # one argument short: Triton's
    assert len(calls) == 1


def test_a_misaligned_tensor_goes_to_triton(ext):
    x = torch.empty(16)
    assert ext.pack(b"p", x[1:]) is None and ext.pack(b"p", x[4:]) is not None


def _launcher(ext, kinds=b"pi", knobs=None):
    calls = []
    fallback = lambda *args: calls.append(args)  # noqa: E731
    knobs = types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None) if knobs is None else knobs
    return ext.Launcher(fallback, 1, 128, 0, kinds, lambda device: 0, 0, knobs), calls


@pytest.mark.parametrize("args", [
    (1, torch.empty(8), 2**40),  # an int past int32
    (1, torch.empty(8)[1:], 3),  # a misaligned pointer
    (1, torch.empty(8)),  # another number of arguments
    (-1, torch.empty(8), 3),  # a negative grid
])
def test_launcher_falls_back_with_the_same_arguments(ext, args):
    launcher, calls = _launcher(ext)
    assert launcher(*args) is None
    assert len(calls) == 1 and len(calls[0]) == len(args) and all(a is b for a, b in zip(calls[0], args))


class _HookChain:  # triton 3.6's knobs hold one, never None
    def __init__(self, calls):
        self.calls = calls


@pytest.mark.parametrize("enter, exit_hook, hooked", [
    (_HookChain([]), _HookChain([]), False), (_HookChain([print]), _HookChain([]), True),
    (None, _HookChain([print]), True), (print, None, True),  # a hook function (older triton)
])
def test_launch_hooks_send_launches_to_triton(ext, enter, exit_hook, hooked):
    launcher, calls = _launcher(ext, knobs=types.SimpleNamespace(launch_enter_hook=enter, launch_exit_hook=exit_hook))
    try:
        launcher(0, torch.empty(8), 3)  # an empty grid: launches nothing, when it gets that far
    except RuntimeError:  # pragma: no cover - only where libcuda cannot be loaded
        pass
    assert bool(calls) == hooked


def test_the_hooks_are_read_at_every_launch(ext):
    knobs = types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    launcher, calls = _launcher(ext, knobs=knobs)
    launcher(0, torch.empty(8), 3)
    knobs.launch_enter_hook = _HookChain([print])  # a profiler attached later
    launcher(0, torch.empty(8), 3)
    assert len(calls) == 1


def test_bad_launchers_are_refused(ext):
    with pytest.raises(ValueError):
        _launcher(ext, kinds=b"pq")
    with pytest.raises(TypeError):
        ext.Launcher(None, 1, 128, 0, b"p", lambda d: 0, 0, None)


@needs_compiler
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without a driver")
def test_a_launch_without_a_driver_says_so(ext):
    import ctypes.util

    if ctypes.util.find_library("cuda"):
        pytest.skip("this machine has libcuda")
    launcher, calls = _launcher(ext)
    with pytest.raises(RuntimeError, match="libcuda"):
        launcher(1, torch.empty(8), 3)
    assert calls == []


# ---- on the GPU host -----------------------------------------------------------------------------

def _launchers(compiled) -> list:
    from tc_inductor.codegen.triton_launch import TritonLauncher

    return [v for k, v in compiled._fn.__globals__.items() if k.startswith("k") and isinstance(v, TritonLauncher)]


@pytest.mark.cuda
def test_kernels_launch_through_tcs_launcher_and_agree_with_eager():
    x = torch.randn(1000, 33, device="cuda")
    y = torch.randn(33, device="cuda", dtype=torch.bfloat16)
    g = build(lambda g, x, y: (g.call(aten._softmax.default, g.call(aten.sin.default, x), -1, False),
                               g.call(aten.mul.Tensor, g.call(aten.cos.default, x), y),
                               g.call(aten.sum.dim_IntList, x, [0])), [x, y])
    k = tc_inductor.compile(g, [x, y], {"cache": False, "fusion": False})
    for _ in range(3):
        out = k(x, y)
    torch.cuda.synchronize()
    launchers = _launchers(k)
    assert launchers and all(type(v.launch).__name__ == "Launcher" for v in launchers), [v.launch for v in launchers]
    torch.testing.assert_close(out[0], torch.softmax(x.sin(), -1))
    torch.testing.assert_close(out[1], x.cos() * y)
    torch.testing.assert_close(out[2], x.sum(0))
    # new values, a misaligned input (Triton's launch), then aligned again
    x2 = torch.randn(1000 * 33 + 1, device="cuda")[1:].view(1000, 33)
    for inp in (torch.randn_like(x), x2, x):
        out = k(inp, y)
        torch.testing.assert_close(out[0], torch.softmax(inp.sin(), -1))
        torch.testing.assert_close(out[2], inp.sum(0))


@pytest.mark.cuda
def test_launches_from_another_thread_and_under_a_hook():
    import threading

    from triton import knobs

    x = torch.randn(4096, device="cuda")
    k = tc_inductor.compile(build(lambda g, x: g.call(aten.exp.default, x), [x]), [x], {"cache": False})
    k(x)
    got = {}
    thread = threading.Thread(target=lambda: got.setdefault("out", k(x)))
    thread.start()
    thread.join()
    torch.testing.assert_close(got["out"], x.exp())
    seen = []
    hook = lambda metadata: seen.append(metadata)  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        torch.testing.assert_close(k(x), x.exp())
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert seen, "a launch hook (a profiler) sees tc's launches: they go through Triton while one is set"
