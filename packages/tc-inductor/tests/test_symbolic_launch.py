"""Triton kernels over symbolic sizes: one launcher (on a GPU, one compile, ahead of time) per
distinct config, not per size bucket or per size; sizes are unspecialised ints, so the kernel
compiled ahead of time launches directly at every size (run by the Triton interpreter here)."""

from __future__ import annotations

import types

import pytest
import torch
from dyn_helpers import SymGraph
from inductor_helpers import assert_same

import tc_inductor
from tc_inductor.codegen import build as build_counters
from tc_inductor.codegen import triton as triton_backend
from tc_inductor.codegen.triton_launch import TritonLauncher

aten = torch.ops.aten
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="GPU hosts run the real thing (-m cuda)")
# rows: 2, 3 (one row after the slice), 16, 17 (sizes Triton would specialise), odd, primes, large
ROWS = (2, 3, 18, 19, 16, 17, 5, 31, 64, 97, 130, 257, 600, 33)


def _graph(reduce_rows: bool = True):
    """[s0, 768] * 2 (a count 768*s0: always a multiple of 16), exp of rows 2.. (s0 - 2 rows),
    exp of z[2:] (zero, one, 16 and 17 elements), the sum of each row (a persistent reduction
    over symbolic rows) and, with ``reduce_rows``, a softmax over rows of symbolic length s1."""
    sg = SymGraph()
    s0, s1 = sg.sym("s0"), sg.sym("s1")
    x, y, z = sg.input("x", (s0, 768)), sg.input("y", (s0, s1)), sg.input("z", (s0,))
    outs = [sg.call(aten.mul.Tensor, x, 2.0), sg.call(aten.exp.default, sg.call(aten.slice.Tensor, x, 0, 2)),
            sg.call(aten.sum.dim_IntList, x, [1]), sg.call(aten.exp.default, sg.call(aten.slice.Tensor, z, 0, 2))]
    if reduce_rows:
        outs.append(sg.call(aten._softmax.default, y, -1, False))
    return sg.output(tuple(outs))


def _eager(x, y, z, reduce_rows=True):
    outs = [x * 2.0, x[2:].exp(), x.sum(1), z[2:].exp()]
    return tuple(outs + [torch.softmax(y, -1)] if reduce_rows else outs)


def _inputs(n: int, m: int):
    return [torch.randn(n, 768), torch.randn(n, m), torch.randn(n)]


def _launchers(compiled) -> list[triton_backend.BucketedLauncher]:
    return [v for v in compiled._fn.__globals__.values() if isinstance(v, triton_backend.BucketedLauncher)]


def test_one_launcher_per_config_over_a_stream_of_sizes():
    shapes = [(n, m) for n in ROWS for m in (2, 7, 16, 17, 100, 1500)[n % 3::3]]
    compiled = tc_inductor.compile(_graph(), _inputs(*shapes[0]), {"backend": "triton", "cache": False})
    before = build_counters.COUNTERS["triton_configs"]
    for n, m in shapes:
        inputs = _inputs(n, m)
        assert_same(compiled(*inputs), _eager(*inputs))
    launchers = _launchers(compiled)
    assert len(launchers) == 4, compiled.source  # x * 2 and the row sums are one kernel
    configs = sum(len(launcher._by_config) for launcher in launchers)
    buckets = sum(len(launcher._launchers) for launcher in launchers)
    assert build_counters.COUNTERS["triton_configs"] - before == configs
    assert buckets > configs  # the stream crossed buckets that share a config: those shared a launcher
    for launcher in launchers:  # each config once, each bucket mapped to the launcher of its config
        keys = [tuple(sorted(launcher.configs(*b).items())) for b in launcher._launchers]
        assert sorted(set(keys)) == sorted(launcher._by_config)
        assert all(launcher._launchers[b] is launcher._by_config[k] for b, k in zip(launcher._launchers, keys))


def test_sizes_are_not_specialised_in_the_gpu_source(monkeypatch):
    monkeypatch.setattr(triton_backend, "_interpreting", lambda device: False)
    compiled = tc_inductor.compile(_graph(False), _inputs(5, 3), {"backend": "triton", "cache": False})
    sources = {triton_backend.kernel_function_name(s): s for s in compiled.kernels}
    pointwise = sorted((s for n, s in sources.items() if n.startswith("tc_poi")), key=lambda s: "xnumel_16" in s)
    assert len(pointwise) == 2, compiled.source
    z, rows = pointwise  # exp of z[2:] (s0 - 2 elements), exp of x[2:] (768*s0 - 1536: a multiple of 16)
    assert "'xnumel']" in z.split("@triton.jit(do_not_specialize=")[1].splitlines()[0]
    assert "'xnumel_16']" in rows.split("@triton.jit(do_not_specialize=")[1].splitlines()[0]
    assert "xnumel = xnumel_16 * 16" in rows
    assert "tl.load(in_ptr0 + (xindex + 1536)" in rows  # flat offsets over symbolic sizes: no div/mod
    assert "(-1536 + (768 * s0))) // 16" in compiled.source  # the wrapper passes the count // 16
    (sums,) = [s for n, s in sources.items() if n.startswith("tc_red")]
    unspecialised = sums.split("@triton.jit(do_not_specialize=")[1].splitlines()[0]
    assert "'xnumel'" in unspecialised and "rnumel" not in unspecialised  # s0 rows; the static 768 stays
    for n in ROWS[:6]:
        inputs = _inputs(n, 3)
        assert_same(compiled(*inputs), _eager(*inputs, reduce_rows=False))


class _FakeCompiled:
    """Stands for the kernel compiled ahead of time: records its direct launches; the first
    (checked against run) leaves run's output, as the same kernel would."""

    function, packed_metadata = 0, None

    def __init__(self, config):
        self.config, self.launches = config, []

    def run(self, grid0, grid1, grid2, stream, function, packed, launch_metadata, enter, exit_hook, *args):
        self.launches.append(args)


class _NoDriverLauncher(TritonLauncher):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._stream, self._knobs = (lambda device: 0), types.SimpleNamespace(launch_enter_hook=None,
                                                                              launch_exit_hook=None)


def test_each_config_compiles_ahead_once_and_launches_directly_at_every_size(monkeypatch):
    monkeypatch.setattr(triton_backend, "_interpreting", lambda device: False)
    compiles = []

    def warmup(kernel, meta, store=None, key=""):
        compiles.append((kernel, tuple(meta["warmup"]["ints"]), tuple(sorted(meta["config"].items()))))
        return _FakeCompiled(meta["config"])

    monkeypatch.setattr(triton_backend, "_warmup", warmup)
    monkeypatch.setattr(triton_backend, "_warmups", {})  # none left by another test's compile
    monkeypatch.setattr(triton_backend, "_start_compile_workers", lambda device: None)
    monkeypatch.setattr(triton_backend, "TritonLauncher", _NoDriverLauncher)
    compiled = tc_inductor.compile(_graph(False), _inputs(5, 3), {"backend": "triton", "cache": False})
    for future in list(triton_backend._warmups.values()):  # ahead-of-time compiles run in the pool's threads
        future.result()
    started = len(compiles)
    assert started == len(set(compiles)) > 3  # every config of every bucketed kernel, once
    # one int32 stands for every size; none of the traced sizes (s0 = 5) is compiled in
    assert all(65537 in ints and not {5, 3, 3840} & set(ints) for _, ints, _ in compiles), compiles
    for n in (2, 3, 18, 19, 5, 64, 600, 33, 2, 64):
        compiled(*_inputs(n, 3))  # outputs: a GPU's to check; the choice is here
    # a config compiles once; at a launch only those of small buckets (not compiled ahead)
    assert len(compiles) == len(set(compiles))
    assert all(dict(c)["XBLOCK"] < 64 for _, _, c in compiles[started:]), compiles[started:]
    launched = [e[0] for launcher in _launchers(compiled) for e in launcher._by_config.values()]
    assert all(isinstance(t.compiled, _FakeCompiled) for t in launched)
    # launched: directly (a launcher of an empty bucket, s0 - 2 = 0, is made but never launched)
    assert all(t.launch == (t._direct if t.compiled.launches else t._first) for t in launched)
    sizes = {a[-1] for t in launched for a in t.compiled.launches}  # xnumel (or its 16th) of each launch
    assert len(sizes) > 3  # one compiled kernel took many sizes


def test_sizes_past_int32_go_through_run():
    calls = []
    fake = TritonLauncher(None, {"XBLOCK": 16}, 1, range(0, 1), _FakeCompiled({}), varying_ints=True)
    fake._stream, fake._knobs = (lambda device: 0), types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    fake._via_run = lambda grid0, *args: calls.append(args)
    out = torch.zeros(16)
    fake._direct(1, out, 2**31 - 1)
    fake._direct(1, out, 2**31)  # Triton passes it as int64: the int32 kernel would truncate it
    assert len(fake.compiled.launches) == 1 and calls == [(out, 2**31)]


def test_triton_knobs_without_hooks_launch_directly():
    """triton 3.6's launch hooks are ``HookChain`` objects, never None: with none attached the
    launch is direct (it went through ``run`` every time when "no hook" meant None); with a hook
    attached (a profiler) it goes through ``run``, which builds the metadata hooks receive."""
    from triton import knobs

    calls = []
    fake = TritonLauncher(None, {"XBLOCK": 16}, 1, range(0, 1), _FakeCompiled({}))
    fake._stream, fake._knobs = (lambda device: 0), knobs.runtime
    fake._via_run = lambda grid0, *args: calls.append(args)
    out = torch.zeros(16)
    fake._direct(1, out, 16)
    assert len(fake.compiled.launches) == 1 and calls == []
    hook = lambda *a: None  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        fake._direct(1, out, 16)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert len(fake.compiled.launches) == 1 and calls == [(out, 16)]
    unaligned = torch.zeros(17)[1:]  # 4 bytes past an aligned block: the kernel assumed 16
    fake._direct(1, unaligned, 16)
    assert len(fake.compiled.launches) == 1 and calls[-1] == (unaligned, 16)


class _FakeBackendLauncher:
    """triton 3.x's launcher object: ``__call__`` allocates scratch and calls its C ``launch``."""

    launch_cooperative_grid, launch_pdl, global_scratch_size, profile_scratch_size = False, True, 0, 0

    def __init__(self):
        self.c_calls, self.calls = [], []
        self.launch = lambda *a: self.c_calls.append(a)

    def __call__(self, *args):
        self.calls.append(args)


def test_a_launch_without_scratch_calls_the_c_launcher_itself():
    """No Python ``__call__`` between the wrapper and the C launch when the kernel needs no
    scratch memory; with scratch, the launcher object (which allocates it)."""
    compiled = types.SimpleNamespace(function=7, packed_metadata="meta", run=_FakeBackendLauncher())
    fake = TritonLauncher(None, {"XBLOCK": 16}, 1, range(0, 1), compiled)
    fake._stream, fake._knobs = (lambda device: 3), types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    out = torch.zeros(16)
    fake._direct(2, out, 16)
    assert compiled.run.calls == []
    assert compiled.run.c_calls == [(2, 1, 1, 3, 7, False, True, None, None, "meta", None, None, None,
                                     out.data_ptr(), 16, 16)]
    compiled.run = _FakeBackendLauncher()
    compiled.run.global_scratch_size = 128
    fake = TritonLauncher(None, {"XBLOCK": 16}, 1, range(0, 1), compiled)
    fake._stream, fake._knobs = (lambda device: 3), types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    fake._direct(2, out, 16)
    assert compiled.run.c_calls == [] and compiled.run.calls == [(2, 1, 1, 3, 7, "meta", None, None, None,
                                                                   out.data_ptr(), 16, 16)]
