"""Triton compiles in worker processes (``codegen/triton_compile.py``).

Without a GPU the workers compile for a stand-in target, sm_90 (Triton's wheel brings ptxas, so
the whole pipeline down to a cubin runs here); this process then compiles for the same target
through the same ``warmup`` path and must find the worker's entry in Triton's cache.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import triton.experimental.gluon  # noqa: F401  (imported as the conftest says, before a test unsets TRITON_INTERPRET)
from inductor_helpers import build
from test_triton_warmup import kernel_of

import tc_inductor
from tc_inductor import kir
from tc_inductor.codegen import triton as triton_backend
from tc_inductor.codegen import triton_compile, triton_load, triton_worker
from tc_inductor.config import Options

aten = torch.ops.aten
TARGET = ("cuda", 90, 32)


@pytest.fixture(scope="module")
def pool():
    p = triton_compile.CompilePool(1)
    assert [f.result(timeout=120) for f in p.start(TARGET)] == p.pids()  # started, warmed up for TARGET
    yield p
    p.shutdown()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    return tmp_path / "triton"


def cuda_kernel_file(directory: Path, xranges=(64, 128)) -> tuple[Path, str, dict]:
    """A generated kernel for a CUDA device, written as the backend writes it, and its metadata."""
    kernel = kernel_of(xranges)
    backend = triton_backend.TritonBackend()
    source = backend.generate(kernel, "kernel", Options(), "cuda")
    path = directory / f"tc_test_{abs(hash(source))}.py"
    path.write_text(source)
    return path, triton_backend.kernel_function_name(source), backend.metadata(kernel, Options(), "cuda")


def job(path: Path, name: str, meta: dict) -> dict:
    sig = meta["warmup"]
    return triton_compile.compile_job(path, name, ["*bf16", "*fp32"], sig["ints"], meta["config"], TARGET)


def test_a_worker_compiles_into_tritons_cache_without_torch(pool, cache, tmp_path):
    path, name, meta = cuda_kernel_file(tmp_path)
    digest = pool.submit(job(path, name, meta)).result(timeout=120)
    entry = cache / triton_load.triton_cache_entry(cache, digest)
    assert sorted(p.suffix for p in entry.iterdir() if not p.name.startswith("__grp__")) == \
        [".cubin", ".json", ".llir", ".ptx", ".source", ".ttgir", ".ttir"]
    (pid,) = pool.pids()
    assert "libtorch" not in Path(f"/proc/{pid}/maps").read_text()


def test_this_process_then_loads_the_workers_kernel_without_compiling(pool, cache, tmp_path, monkeypatch):
    path, name, meta = cuda_kernel_file(tmp_path, (32, 96))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # a real JITFunction here, compiled for the stand-in target
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(triton_compile, "_pool", pool)
    monkeypatch.setattr(triton_compile, "_targets", {})
    hashes = []
    monkeypatch.setattr(triton_compile, "check_hash", lambda fn, expected, compiled: hashes.append(
        (expected, compiled.hash)))
    compiled_here = _compiles_here(monkeypatch)
    with _stand_in_driver():
        compiled = triton_backend._warmup(getattr(module, name), meta)
    assert compiled is not None and hashes == []  # loaded as the worker described it (triton_load.py)
    assert compiled_here == []  # not even a lookup through Triton's compile path here
    assert [p.name for p in cache.iterdir()] == [triton_load.triton_cache_entry(cache, compiled.hash)]


def test_one_compiled_kernel_serves_every_seed_slot(pool, cache, tmp_path):
    # a dropout-like kernel: the slot is a launch argument, never specialised (a slot of 1 would
    # be compiled in as a constant, and the direct launcher reuses one compile for every slot)
    x = kir.xvars(1)[0]
    keep = kir.binary(kir.Ops.LT, kir.random(kir.Ops.RAND, kir.seed("seeds", 3), x), kir.const(0.5, torch.float32))
    value = kir.binary(kir.Ops.MUL, kir.cast(kir.load("a", x, torch.bfloat16), torch.float32), kir.cast(keep, torch.float32))
    kernel = kir.Kernel((1024,), (), (kir.Stage((kir.Store("b", x, value, torch.float32),), ()),),
                        (("a", torch.bfloat16), ("seeds", torch.int64)), (("b", torch.float32),))
    backend = triton_backend.TritonBackend()
    source = backend.generate(kernel, "kernel", Options(), "cuda")
    path = tmp_path / f"tc_test_{abs(hash(source))}.py"
    path.write_text(source)
    meta = backend.metadata(kernel, Options(), "cuda")
    assert meta["warmup"]["ints"] == [1024, 0] and "+ seed0)" in source
    pointers = ["*bf16", "*i64", "*fp32"]
    digests = {pool.submit(triton_compile.compile_job(path, triton_backend.kernel_function_name(source), pointers,
                                                      [1024, slot], meta["config"], TARGET)).result(timeout=120)
               for slot in (0, 1, 16, 26)}
    assert len(digests) == 1


def test_a_broken_kernel_fails_its_future_with_the_error(pool, cache, tmp_path):
    path, name, meta = cuda_kernel_file(tmp_path, (16, 16))
    path.write_text(path.read_text().replace(".to(tl.float32)", ".to(tl.no_such_type)"))
    crashes = pool.crashes
    error = pool.submit(job(path, name, meta)).exception(timeout=120)
    assert isinstance(error, triton_compile.CompileError) and "no_such_type" in str(error)
    assert pool.crashes == crashes and len(pool.pids()) == 1  # the worker goes on


def test_a_killed_worker_means_an_in_process_compile(pool, cache, tmp_path, monkeypatch):
    marker = tmp_path / "worker.pid"
    hang = tmp_path / "tc_hang.py"
    hang.write_text("import os, time\nif os.environ.get('TC_TEST_HANG'):\n"
                    "    open(os.environ['TC_TEST_HANG'], 'w').write(str(os.getpid()))\n    time.sleep(120)\n")
    monkeypatch.setenv("TC_TEST_HANG", str(marker))
    monkeypatch.setattr(triton_compile, "_pool", pool)
    threading.Thread(target=_kill_when_written, args=(marker,), daemon=True).start()
    fn = _Fn(str(hang), "kernel")
    assert triton_compile.precompile(fn, ["*fp32"], [16], {"XBLOCK": 16}, TARGET) is None
    assert pool.crashes == 1
    monkeypatch.delenv("TC_TEST_HANG")
    path, name, meta = cuda_kernel_file(tmp_path, (8, 8))
    assert pool.submit(job(path, name, meta)).result(timeout=120)  # a new worker took its place


def test_zero_workers_compile_in_process(monkeypatch):
    monkeypatch.setenv("TC_COMPILE_WORKERS", "0")
    monkeypatch.setattr(triton_compile, "_pool", None)
    assert triton_compile.worker_count() == 0 and triton_compile.pool() is None
    assert triton_compile.precompile(_Fn("unused.py", "kernel"), ["*fp32"], [16], {}, TARGET) is None
    monkeypatch.setenv("TC_COMPILE_WORKERS", "3")
    assert triton_compile.worker_count() == 3
    monkeypatch.delenv("TC_COMPILE_WORKERS")
    assert 1 <= triton_compile.worker_count() <= triton_compile.MAX_WORKERS


def test_nothing_starts_for_interpreted_kernels(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("compile pool used for an interpreted kernel")

    monkeypatch.setattr(triton_compile, "pool", refuse)
    monkeypatch.setattr(triton_compile, "precompile", refuse)
    x = torch.randn(6, 10)
    k = tc_inductor.compile(build(lambda g, x: g.call(aten.cos.default, g.call(aten.add.Tensor, x, 3.25)), [x]),
                            [x], {"backend": "triton", "cache": False})
    torch.testing.assert_close(k(x), (x + 3.25).cos())


class _Fn:
    """Stands for a JITFunction: where its source is, what it is called."""

    debug = None

    def __init__(self, path: str, name: str):
        self.fn = type("F", (), {"__name__": name, "__code__": type("C", (), {"co_filename": path})})


def _kill_when_written(marker: Path) -> None:
    for _ in range(1200):
        if marker.exists() and marker.read_text():
            os.kill(int(marker.read_text()), signal.SIGKILL)
            return
        time.sleep(0.05)


def _compiles_here(monkeypatch) -> list[bool]:
    """Whether each of this process's Triton compiles was a cache hit... inverted: True = compiled."""
    from triton import knobs

    events: list[bool] = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda **kw: events.append(not kw["cache_hit"]))
    return events


class _stand_in_driver:
    """This process's Triton driver reports the stand-in target (there is no GPU here)."""

    def __enter__(self):
        from triton.backends.compiler import GPUTarget
        from triton.runtime.driver import driver

        self.saved = driver._active
        driver.set_active(triton_worker.TargetOnly(GPUTarget(*TARGET)))

    def __exit__(self, *exc):
        from triton.runtime.driver import driver

        driver._active = self.saved


def test_workers_end_with_the_interpreter():
    script = ("import time\nfrom tc_inductor.codegen import triton_compile\np = triton_compile.pool()\n"
              "while len(p.pids()) < 2:\n    time.sleep(0.05)\nprint(*p.pids())\n")
    env = dict(os.environ, TC_COMPILE_WORKERS="2")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    pids = [int(p) for p in out.stdout.split()]
    assert out.returncode == 0 and len(pids) == 2, out.stderr
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]  # ended and reaped, not orphaned


@pytest.mark.cuda
def test_on_a_gpu_the_workers_compile_and_this_process_only_loads(tmp_path, monkeypatch):
    """With workers, every Triton compile in this process is a cache hit on the workers' entries."""
    if triton_compile.worker_count() == 0:
        pytest.skip("TC_COMPILE_WORKERS=0")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    compiled_here = _compiles_here(monkeypatch)
    x = torch.randn(1000, 37, device="cuda")
    c = 1 + torch.rand(()).item()  # kernels that no earlier test compiled
    g = build(lambda g, x: (g.call(aten._softmax.default, g.call(aten.mul.Tensor, x, c), -1, False),
                            g.call(aten.tanh.default, g.call(aten.add.Tensor, x, c)),
                            g.call(aten.sum.dim_IntList, g.call(aten.sin.default, g.call(aten.sub.Tensor, x, c)), [1])),
              [x])
    k = tc_inductor.compile(g, [x], {"cache": False})
    entries = [d for d in (tmp_path / "triton").iterdir() if any(d.glob("*.cubin"))]
    assert len(entries) == len(k.kernels) >= 1 and len(triton_compile.pool().pids()) >= 1  # (may fuse to one)
    assert not any(compiled_here)  # loaded here (triton_load.py: no lookup through Triton's compile), never compiled
    out = k(x)
    torch.testing.assert_close(out[0], torch.softmax(x * c, -1))
    torch.testing.assert_close(out[1], torch.tanh(x + c))
    torch.testing.assert_close(out[2], (x - c).sin().sum(1))
