"""Compiled Triton kernels load without Triton's cache key (``codegen/triton_load.py``).

Without a GPU the workers compile for a stand-in target, sm_90 (Triton's wheel brings ptxas), and
this process loads for the same target; Triton's cache key (``get_cache_key``: ``triton_key()``
and ``ptxas --version``) is made to raise, so a test passes only where nothing computed it. What
is loaded is compared with what ``JITFunction.warmup`` binds: its ``_do_compile`` is intercepted.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import sympy
import torch
import triton.experimental.gluon  # noqa: F401  (imported as the conftest says, before a test unsets TRITON_INTERPRET)
from test_kernel_artifacts import SCRIPT, DictStore
from test_triton_compile_pool import TARGET, _stand_in_driver
from test_triton_warmup import kernel_of

from tc_inductor import kir
from tc_inductor.codegen import triton as triton_backend
from tc_inductor.codegen import triton_compile, triton_load, triton_worker
from tc_inductor.config import Options

OPS = kir.Ops
_REAL_GET_CACHE_KEY = __import__("triton.runtime.cache").runtime.cache.get_cache_key


@pytest.fixture(scope="module")
def pool():
    p = triton_compile.CompilePool(1)
    assert [f.result(timeout=120) for f in p.start(TARGET)] == p.pids()
    yield p
    p.shutdown()


@pytest.fixture
def cuda_like(tmp_path, monkeypatch, pool):
    """A real JITFunction here (no interpreter), the stand-in target, our pool, and Triton's
    cache key made to raise."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(triton_compile, "_pool", pool)
    monkeypatch.setattr(triton_compile, "_targets", {0: TARGET})
    with _stand_in_driver():
        yield _no_cache_key(monkeypatch)


def _no_cache_key(monkeypatch) -> list[str]:
    import triton.compiler.compiler as compiler
    import triton.runtime.cache as cache

    calls: list[str] = []

    def refuse(*args, **kwargs):
        calls.append("get_cache_key")
        raise AssertionError("Triton's cache key computed")

    monkeypatch.setattr(compiler, "get_cache_key", refuse)
    monkeypatch.setattr(cache, "get_cache_key", refuse)
    return calls


def _reduction(sizes=()):
    r = kir.rvars(1)[0]
    x = kir.xvars(1)[0]
    value = kir.cast(kir.load("a", x * 96 + r, torch.bfloat16), torch.float32)
    red = kir.Reduce("acc", "sum", value, torch.float32)
    stage = kir.Stage((red,), (kir.Store("b", x, kir.UOp(OPS.REDUCED, torch.float32, (), "acc"), torch.float32),))
    return kir.Kernel((64,), (96,), (stage,), (("a", torch.bfloat16),), (("b", torch.float32),), sizes)


KERNELS = {
    "pointwise": lambda: kernel_of((64, 128)),
    "int_size": lambda: kernel_of((4, sympy.Symbol("s0", integer=True, positive=True)), sizes=("s0",)),
    "size_one": lambda: kernel_of((1,)),  # xnumel == 1: Triton specialises it as a constexpr
    "odd_size": lambda: kernel_of((3, 7)),  # no divisibility attribute
}


def _module_kernel(directory: Path, kernel: kir.Kernel):
    backend = triton_backend.TritonBackend()
    source = backend.generate(kernel, "kernel", Options(), "cuda")
    path = directory / f"tc_load_{abs(hash(source))}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    meta = backend.metadata(kernel, Options(), "cuda")
    return getattr(module, triton_backend.kernel_function_name(source)), meta


def _warmup_args(meta: dict) -> tuple[list, dict]:
    sig = meta["warmup"]
    return [getattr(torch, n) for n in sig["pointers"]] + list(sig["ints"]), dict(meta["config"]) | meta["options"]


def _what_warmup_binds(fn, args, consts, monkeypatch) -> dict:
    """``describe`` of the src ``fn.warmup`` hands to Triton's compiler (intercepted: no compile)."""
    from triton.compiler import ASTSource

    seen = {}

    def do_compile(self, key, signature, device, constexprs, options, attrs, warmup):
        seen["src"] = triton_load.describe(ASTSource(self, signature, constexprs, attrs))

    monkeypatch.setattr(type(fn), "_do_compile", do_compile)
    fn.device_caches.clear()
    fn.warmup(*args, grid=(1,), **consts)
    monkeypatch.undo()
    fn.device_caches.clear()
    return seen["src"]


@pytest.mark.parametrize("case", ["pointwise", "int_size", "size_one", "odd_size", "reduction", "debug"])
def test_worker_compiled_kernel_loads_as_warmup_binds_it(case, cuda_like, tmp_path, monkeypatch):
    kernel = _reduction() if case == "reduction" else KERNELS.get(case, lambda: kernel_of((32, 8)))()
    if case == "debug":  # index checks: debug=True and sanitize_overflow=False (launch_options)
        kernel = _with_index_check(kernel)
    fn, meta = _module_kernel(tmp_path, kernel)
    args, consts = _warmup_args(meta)
    reply = triton_backend._compile_in_worker(fn, meta["warmup"], consts)
    assert set(reply) == {"hash", "src", "launcher"} and reply["src"]["signature"]
    loaded = triton_load.load(fn, args, consts, reply["hash"], reply["src"])
    assert loaded.hash == reply["hash"] and cuda_like == []  # no cache key computed
    assert triton_load.describe(loaded.src) == reply["src"]
    # what Triton's own warmup would bind (with its cache key: allowed from here on)
    monkeypatch.setattr(triton_compile, "_pool", None)
    warm = _what_warmup_binds(fn, args, consts, monkeypatch)
    assert warm == reply["src"]
    if case == "size_one":
        xnumel = fn.arg_names.index("xnumel")
        assert reply["src"]["signature"]["xnumel"] == "constexpr" and [[xnumel], 1] in reply["src"]["constants"]
    if case == "debug":
        assert loaded.metadata.debug and not loaded.metadata.sanitize_overflow


def _with_index_check(_: kir.Kernel) -> kir.Kernel:
    """A store of ``i[x]`` checked as an index into a dim of 64 (a device assert)."""
    x = kir.xvars(1)[0]
    checked = kir.checked_index(kir.load("i", x, torch.int64), 64, False)
    store = kir.Store("b", x, kir.cast(checked, torch.float32), torch.float32)
    kernel = kir.Kernel((256,), (), (kir.Stage((store,), ()),), (("i", torch.int64),), (("b", torch.float32),))
    assert kir.has_index_checks(kernel)
    return kernel


def test_loaded_kernel_is_entered_under_runs_key(cuda_like, tmp_path):
    fn, meta = _module_kernel(tmp_path, kernel_of((16, 16)))
    args, consts = _warmup_args(meta)
    reply = triton_backend._compile_in_worker(fn, meta["warmup"], consts)
    loaded = triton_load.load(fn, args, consts, reply["hash"], reply["src"])
    bound = triton_load.bind(fn, args, consts)
    assert bound.kernel_cache[bound.key] is loaded


@pytest.mark.parametrize("damage", ["no_hash", "other_hash", "other_signature", "no_src", "metadata"])
def test_an_incomplete_description_is_a_load_error(damage, cuda_like, tmp_path):
    fn, meta = _module_kernel(tmp_path, kernel_of((8, 24)))
    args, consts = _warmup_args(meta)
    reply = triton_backend._compile_in_worker(fn, meta["warmup"], consts)
    digest, src = reply["hash"], json.loads(json.dumps(reply["src"]))
    if damage == "no_hash":
        digest = None
    elif damage == "other_hash":
        digest = "0" * 64
    elif damage == "other_signature":
        src["signature"]["a"] = "*fp16"
    elif damage == "no_src":
        src = None
    else:  # the binary was compiled with other options than these
        consts = {**consts, "num_warps": 2 if consts.get("num_warps") != 2 else 4}
    with pytest.raises(triton_load.LoadError):
        triton_load.load(fn, args, consts, digest, src)


def test_warmup_falls_back_to_tritons_path_when_the_reply_does_not_load(cuda_like, tmp_path, monkeypatch):
    fn, meta = _module_kernel(tmp_path, kernel_of((8, 40)))
    real = triton_backend._compile_in_worker
    compiled = triton_backend._warmup(fn, meta)  # compiled in the worker, loaded here
    assert compiled is not None and cuda_like == []
    fn.device_caches.clear()
    _allow_cache_key(monkeypatch)  # Triton's own path needs its key
    monkeypatch.setattr(triton_backend, "_compile_in_worker", lambda *a: {**real(*a), "hash": "0" * 64})
    again = triton_backend._warmup(fn, meta)  # a reply naming no entry: warmup finds the worker's
    assert again is not None and again.hash == compiled.hash and again is not compiled


def _allow_cache_key(monkeypatch) -> None:
    import triton.compiler.compiler as compiler
    import triton.runtime.cache as cache

    monkeypatch.setattr(compiler, "get_cache_key", _REAL_GET_CACHE_KEY)
    monkeypatch.setattr(cache, "get_cache_key", _REAL_GET_CACHE_KEY)


def test_store_entry_round_trip_loads_without_the_key(cuda_like, tmp_path, monkeypatch):
    fn, meta = _module_kernel(tmp_path, kernel_of((24, 24)))
    record = {"source": f"store round trip {tmp_path}", "meta": meta}
    store = DictStore()
    key = triton_backend._warmup_key(record)
    first = triton_backend._warmup(fn, meta, store, key)
    assert first is not None and cuda_like == []
    ((kind, entry),) = store.data
    files = triton_compile_archive(store.data[(kind, entry)])
    (described,) = [json.loads(v) for n, v in files.items() if n.endswith(triton_backend.DESCRIPTION)]
    assert described == {"hash": first.hash, "src": triton_load.describe(first.src)}
    # a fresh Triton cache (another machine): restored from the store, loaded, no worker asked
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "other"))
    monkeypatch.setattr(triton_backend, "_compile_in_worker", _refuse)
    fn.device_caches.clear()
    again = triton_backend._warmup(fn, meta, store, key)
    assert again is not None and again is not first and again.hash == first.hash and cuda_like == []
    assert Path(again.metadata_group[f"{fn.fn.__name__}.json"]).is_relative_to(tmp_path / "other")
    assert again.asm["cubin"] == first.asm["cubin"]


def test_an_entry_without_description_is_loaded_by_warmup_and_stored_again(cuda_like, tmp_path, monkeypatch):
    fn, meta = _module_kernel(tmp_path, kernel_of((40, 8)))
    store = DictStore()
    key = triton_backend._warmup_key({"source": f"old entry {tmp_path}", "meta": meta})
    first = triton_backend._warmup(fn, meta, store, key)
    ((kind, entry),) = store.data
    files = triton_compile_archive(store.data[(kind, entry)])
    old = {n: v for n, v in files.items() if not n.endswith(triton_backend.DESCRIPTION)}
    store.data[(kind, entry)] = triton_backend.artifacts.pack(old)  # as an older tc stored it
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "other"))
    monkeypatch.setattr(triton_backend, "_compile_in_worker", _refuse)
    fn.device_caches.clear()
    _allow_cache_key(monkeypatch)  # warmup's lookup computes Triton's key
    again = triton_backend._warmup(fn, meta, store, key)
    assert again is not None and again.hash == first.hash
    files = triton_compile_archive(store.data[(kind, entry)])
    assert any(n.endswith(triton_backend.DESCRIPTION) for n in files)  # stored again, with it


def test_the_workers_description_is_triton_loads():
    src = type("Src", (), {"signature": {"a": "*fp32", "n": "constexpr", "m": "i32"},
                           "constants": {(1,): 1, (3,): 128}, "attrs": {(0,): [["tt.divisibility", 16]]}})()
    assert triton_worker.describe(src) == triton_load.describe(src)


def test_first_launch_check_binds_real_tensors_as_the_compiled_kernel(cuda_like, tmp_path):
    """The direct launcher's check binds the launch's real arguments with Triton's binder: 16-byte
    aligned tensors bind as the kernel was compiled, a misaligned one does not (run compiles)."""
    fn, meta = _module_kernel(tmp_path, kernel_of((16, 32)))
    args, consts = _warmup_args(meta)
    reply = triton_backend._compile_in_worker(fn, meta["warmup"], consts)
    loaded = triton_load.load(fn, args, consts, reply["hash"], reply["src"])
    a, b = torch.randn(16 * 32).to(torch.bfloat16), torch.empty(16 * 32 + 1)
    aligned = triton_load.bind(fn, [a, b[:-1]] + meta["warmup"]["ints"], consts)
    assert triton_load.bound_description(fn, aligned) == triton_load.describe(loaded.src)
    shifted = triton_load.bind(fn, [a, b[1:]] + meta["warmup"]["ints"], consts)
    assert triton_load.bound_description(fn, shifted) != triton_load.describe(loaded.src)
    assert list(aligned.args) == fn.arg_names  # what run passes the launcher: every parameter in order


def _refuse(*args, **kwargs):
    raise AssertionError("compiled in a worker although the store had it")


def triton_compile_archive(data: bytes) -> dict:
    return triton_backend.artifacts.unpack(data)


# ---- on the GPU ---------------------------------------------------------------------------------

# a softmax and a pointwise kernel on CUDA, compiled with a directory store (the store script of
# test_kernel_artifacts: imports, ``DirStore``), in a GPU test's subprocess
GPU_GRAPH = """aten = torch.ops.aten
g = tc_ir.Graph()
x = g.input("x", tc_ir.TensorSpec((1000, 37), torch.float32, device=torch.device("cuda")))
y = g.input("y", tc_ir.TensorSpec((1,), torch.float32, device=torch.device("cuda")))
g.output((g.call(aten._softmax.default, g.call(aten.mul.Tensor, g.call(aten.sin.default, x), 1.2345), -1, False),
          g.call(aten.add.Tensor, g.call(aten.cos.default, y), 1.0)))
x, y = torch.randn(1000, 37, device="cuda"), torch.randn(1, device="cuda")
k = tc_inductor.compile(g, [x, y], {"artifact_store": DirStore(sys.argv[1]), "cache": False, "fusion": False})
"""
# the store script, then Triton's key counted
GPU_SCRIPT = SCRIPT.split("aten = torch.ops.aten")[0] + """
import triton.compiler.compiler as compiler
import triton.runtime.cache as cache
from tc_inductor.codegen.triton_launch import TritonLauncher

keys = []  # Triton's compiler cache key (triton_key(), ptxas --version), counted
real_key = cache.get_cache_key
def counted(*args, **kwargs):
    keys.append(1)
    return real_key(*args, **kwargs)
compiler.get_cache_key = cache.get_cache_key = counted

""" + GPU_GRAPH + """paths = []
for _ in range(3):
    x, y = torch.randn(1000, 37, device="cuda"), torch.randn(1, device="cuda")
    out = k(x, y)
    torch.testing.assert_close(out[0], torch.softmax(x.sin() * 1.2345, -1))
    torch.testing.assert_close(out[1], y.cos() + 1)
    launchers = [v for v in k._fn.__globals__.values() if isinstance(v, TritonLauncher)]
    paths.append(sorted(getattr(l.launch, "__name__", type(l.launch).__name__) for l in launchers))
print("keys", len(keys), "paths", paths[-1])
"""


def run_gpu_script(script: str, store: Path, tc_cache: Path, triton_cache: Path, **env: str) -> str:
    """``script``'s stdout, run in a fresh process (no interpreter) with these caches and store."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TC_CACHE_DIR": str(tc_cache), "TRITON_CACHE_DIR": str(triton_cache),
           "PYTHONPATH": os.pathsep.join(sys.path), **env}
    env.pop("TRITON_INTERPRET", None)
    result = subprocess.run([sys.executable, "-c", script, str(store)], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.cuda
def test_a_warm_process_loads_and_launches_without_tritons_cache_key(tmp_path):
    def run(cache: str) -> str:
        return run_gpu_script(GPU_SCRIPT, tmp_path / "store", tmp_path / cache, tmp_path / f"t{cache}")

    cold = run("A")  # compiled in the workers, loaded here
    assert "keys 0 " in cold and "_via_run" not in cold, cold
    warm = run("B")  # another machine: only the store is warm
    # launched directly: by tc's C launcher (cuda_launch.py), else the Python direct path
    assert "keys 0 " in warm and "_via_run" not in warm and ("Launcher" in warm or "_direct" in warm), warm


def test_restoring_into_a_cache_that_holds_the_entry_writes_nothing(tmp_path):
    from test_kernel_artifacts import fake_triton_kernel

    from tc_inductor.codegen import artifacts

    fake_triton_kernel(tmp_path / "a", "f00d")
    data = artifacts.pack_dirs(tmp_path / "a", ["f00d"])
    assert artifacts.restore_dirs(data, tmp_path / "b") == ["f00d"]
    stamps = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "b" / "f00d").iterdir()}
    assert artifacts.restore_dirs(data, tmp_path / "b") == ["f00d"]
    assert stamps == {p.name: p.stat().st_mtime_ns for p in (tmp_path / "b" / "f00d").iterdir()}
    (tmp_path / "b" / "f00d" / "k.ptx").write_text("// damaged")  # a differing file: written again
    artifacts.restore_dirs(data, tmp_path / "b")
    assert (tmp_path / "b" / "f00d" / "k.ptx").read_text() == "// ptx"


class CountingStore(DictStore):
    """A store with ``contains`` (as ``tc_runtime.ArtifactCache``), recording each get and put."""

    def __init__(self):
        super().__init__()
        self.gets, self.puts = [], []

    def get(self, kind, key):
        self.gets.append(kind)
        return super().get(kind, key)

    def put(self, kind, key, data):
        self.puts.append(kind)
        super().put(kind, key, data)

    def contains(self, kind, key):
        return (kind, key) in self.data


def test_a_kernel_in_tritons_cache_loads_from_its_description_alone(cuda_like, tmp_path, monkeypatch):
    fn, meta = _module_kernel(tmp_path, kernel_of((24, 40)))
    store = CountingStore()
    key = triton_backend._warmup_key({"source": f"described {tmp_path}", "meta": meta})
    first = triton_backend._warmup(fn, meta, store, key)
    assert first is not None and sorted(kind for kind, _ in store.data) == ["triton_desc", "triton_kernel"]
    # a warm process: Triton's cache holds it; the store's archive is not read, nothing is written
    monkeypatch.setattr(triton_backend, "_compile_in_worker", _refuse)
    store.gets.clear(), store.puts.clear(), fn.device_caches.clear()
    again = triton_backend._warmup(fn, meta, store, key)
    assert again is not first and again.hash == first.hash and cuda_like == []
    assert store.gets == ["triton_desc"] and store.puts == []
    assert sorted(again.asm) == ["cubin"] and sorted(again.metadata_group) == sorted(
        f"{fn.fn.__name__}.{ext}" for ext in ("cubin", "json"))  # no IR text read
    # another machine's Triton cache (empty): the description names nothing there; the archive loads
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "other"))
    store.gets.clear(), fn.device_caches.clear()
    third = triton_backend._warmup(fn, meta, store, key)
    assert third.hash == first.hash and cuda_like == []
    assert store.gets == ["triton_desc", "triton_kernel"] and store.puts == []


def test_a_description_of_another_kernel_is_not_loaded(cuda_like, tmp_path, monkeypatch):
    fn, meta = _module_kernel(tmp_path, kernel_of((16, 48)))
    other, other_meta = _module_kernel(tmp_path, kernel_of((48, 16)))
    store = CountingStore()
    key = triton_backend._warmup_key({"source": f"swapped {tmp_path}", "meta": meta})
    first = triton_backend._warmup(fn, meta, store, key)
    (mine,) = [k for kind, k in store.data if kind == "triton_desc"]
    key2 = triton_backend._warmup_key({"source": f"swapped other {tmp_path}", "meta": other_meta})
    triton_backend._warmup(other, other_meta, store, key2)
    (theirs,) = [k for kind, k in store.data if kind == "triton_desc" and k != mine]
    store.data[("triton_desc", mine)] = store.data[("triton_desc", theirs)]  # names the other kernel
    monkeypatch.setattr(triton_backend, "_compile_in_worker", _refuse)
    fn.device_caches.clear()
    again = triton_backend._warmup(fn, meta, store, key)  # through the archive instead
    assert again is not None and again.hash == first.hash and cuda_like == []


def test_launch_files_are_the_metadata_and_the_binary(cuda_like):
    group = {f"k.{ext}": f"/c/k.{ext}" for ext in ("cubin", "json", "ptx", "llir", "ttir", "ttgir", "source")}
    assert triton_load.launch_files(group, "k") == {"k.cubin": "/c/k.cubin", "k.json": "/c/k.json"}
    with pytest.raises(triton_load.LoadError):
        triton_load.launch_files({"k.json": "/c/k.json", "k.ptx": "/c/k.ptx"}, "k")


# A kernel launched as verified in an earlier process (``triton._load_verified``): the store (with
# ``contains``, as tc's is) and Triton's cache warm, nothing of the kernel's source is imported.
VERIFIED_SCRIPT = SCRIPT.split("aten = torch.ops.aten")[0] + """
DirStore.contains = lambda self, kind, key: (self.root / kind / key).exists()
from tc_inductor.codegen import build
from tc_inductor.codegen.triton_launch import TritonLauncher, VerifiedLauncher

""" + GPU_GRAPH + """imported = []  # kernel modules imported in this process, after each call
for misaligned in (False, False, True, False):
    x, y = torch.randn(1000, 37, device="cuda"), torch.randn(1, device="cuda")
    if misaligned:  # 4 bytes past a 16-byte boundary: the kernel was compiled for aligned pointers
        x = torch.randn(1000 * 37 + 1, device="cuda")[1:].view(1000, 37)
    out = k(x, y)
    torch.testing.assert_close(out[0], torch.softmax(x.sin() * 1.2345, -1))
    torch.testing.assert_close(out[1], y.cos() + 1)
    imported.append(build.COUNTERS["triton_kernels"])
kinds = sorted(type(v).__name__ for v in k._fn.__globals__.values() if isinstance(v, (TritonLauncher, VerifiedLauncher)))
print("kinds", kinds, "imported", imported)
"""


@pytest.mark.cuda
def test_a_kernel_verified_in_an_earlier_process_is_launched_without_its_source(tmp_path):
    import ast

    def run(**env) -> tuple[list[str], list[int]]:
        out = run_gpu_script(VERIFIED_SCRIPT, tmp_path / "store", tmp_path / "tc", tmp_path / "triton", **env)
        kinds, imported = out.removeprefix("kinds ").split(" imported ")
        return ast.literal_eval(kinds), ast.literal_eval(imported)

    kinds, _ = run()  # compiled, launched, compared with Triton's launch: recorded
    assert set(kinds) == {"TritonLauncher"} and len(list((tmp_path / "store" / "triton_verified").iterdir())) == len(kinds)
    kinds, imported = run()  # loaded as recorded: no kernel module imported until the misaligned call needs run
    # the misaligned call imports each kernel that reads x (the softmax's recompute it too)
    assert set(kinds) == {"VerifiedLauncher"} and imported[:2] == [0, 0] and imported[2] > 0, (kinds, imported)
    kinds, _ = run(TRITON_DEBUG="1")  # another compile option: loaded as usual, compared again
    assert set(kinds) == {"TritonLauncher"}, kinds
