"""Compiled kernels travel in the artifact store: a warm store spares another machine g++ and
Triton's compiler; damaged entries are rebuilt, never a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from inductor_helpers import build as build_graph

import tc_inductor
from tc_inductor.codegen import artifacts, build
from tc_inductor.codegen import triton as triton_backend

aten = torch.ops.aten


class DictStore:
    def __init__(self):
        self.data = {}

    def get(self, kind, key):
        return self.data.get((kind, key))

    def put(self, kind, key, data):
        self.data[(kind, key)] = bytes(data)


# ---- the archive ---------------------------------------------------------------------------------

def test_archive_round_trip():
    files = {"abc/k.cubin": b"\x00\x01binary", "abc/k.json": b"{}", "def/empty": b""}
    assert artifacts.unpack(artifacts.pack(files)) == files


@pytest.mark.parametrize("damage", [lambda d: d[:-3], lambda d: d[:9], lambda d: b"junk" + d, lambda d: d + b"\x05"])
def test_damaged_archive_is_detected(damage):
    data = artifacts.pack({"abc/k.cubin": b"0123456789", "abc/k.json": b"{}"})
    with pytest.raises(ValueError):
        artifacts.unpack(damage(data))


@pytest.mark.parametrize("name", ["../x", "a/../../x", "abc", "a/b/c", "/abs/x", "a/.."])
def test_archive_names_stay_inside_the_cache(name):
    with pytest.raises(ValueError, match="bad file name"):
        artifacts.unpack(artifacts.pack({name: b"x"}))


# ---- Triton's cache directory, faked (the interpreter compiles nothing) ----------------------------

def fake_triton_kernel(root: Path, digest: str) -> None:
    d = root / digest
    d.mkdir(parents=True)
    children = {"k.cubin": d / "k.cubin", "k.ptx": d / "k.ptx", "k.json": d / "k.json"}
    (d / "k.cubin").write_bytes(b"\x7fcubin")
    (d / "k.ptx").write_text("// ptx")
    (d / "k.json").write_text('{"name": "k"}')
    (d / "__grp__k.json").write_text(json.dumps({"child_paths": {c: str(p) for c, p in children.items()}}))
    (d / "lock").write_text("")


class FakeCompiled:
    def __init__(self, digest):
        self.hash = digest


def test_triton_directory_moves_between_cache_dirs(tmp_path):
    a, b, store = tmp_path / "a", tmp_path / "b", DictStore()
    fake_triton_kernel(a, "f00d")
    triton_backend._save_compiled(store, "key", FakeCompiled("f00d"), a, restored=[])
    assert list(store.data) == [("triton_kernel", "key")]

    assert triton_backend._restore_compiled(store, "key", b) == ["f00d"]
    for name in ["k.cubin", "k.ptx", "k.json"]:
        assert (b / "f00d" / name).read_bytes() == (a / "f00d" / name).read_bytes()
    group = json.loads((b / "f00d" / "__grp__k.json").read_text())["child_paths"]
    assert group == {c: str(b / "f00d" / c) for c in ["k.cubin", "k.ptx", "k.json"]}  # points at b
    assert not (b / "f00d" / "lock").exists()


def test_restored_triton_kernel_is_not_stored_again(tmp_path):
    store = DictStore()
    fake_triton_kernel(tmp_path, "f00d")
    triton_backend._save_compiled(store, "key", FakeCompiled("f00d"), tmp_path, restored=["f00d"])
    triton_backend._save_compiled(store, "key", None, tmp_path, restored=[])  # autotuned: no hash
    assert store.data == {}


@pytest.mark.parametrize("data", [b"garbage", artifacts.pack({"f00d/__grp__k.json": b"not json"})])
def test_unusable_triton_entry_means_compile(tmp_path, data):
    store = DictStore()
    store.data[("triton_kernel", "key")] = data
    assert triton_backend._restore_compiled(store, "key", tmp_path) == []
    assert not (tmp_path / "f00d").exists()


def test_interpreted_triton_kernels_touch_no_store():
    store = DictStore()
    x = torch.randn(6, 5)
    k = tc_inductor.compile(build_graph(lambda g, x: g.call(aten.exp.default, x), [x]), [x],
                            {"backend": "triton", "cache": False, "artifact_store": store})
    torch.testing.assert_close(k(x), x.exp())
    assert not any(kind == "triton_kernel" for kind, _ in store.data)


# ---- C++ shared objects -------------------------------------------------------------------------

SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    import torch, tc_ir, tc_inductor

    class DirStore:
        def __init__(self, root):
            self.root = Path(root)
        def get(self, kind, key):
            path = self.root / kind / key
            return path.read_bytes() if path.exists() else None
        def put(self, kind, key, data):
            (self.root / kind).mkdir(parents=True, exist_ok=True)
            (self.root / kind / key).write_bytes(data)

    aten = torch.ops.aten
    g = tc_ir.Graph()
    x = g.input("x", tc_ir.TensorSpec((7, 13), torch.float32))
    g.output(g.call(aten.mul.Tensor, g.call(aten.sin.default, x), 1.2345))
    k = tc_inductor.compile(g, [torch.randn(7, 13)], {"artifact_store": DirStore(sys.argv[1])})
    x = torch.randn(7, 13)
    torch.testing.assert_close(k(x), x.sin() * 1.2345)
    print("ok")
""")


def run_script(store: Path, cache: Path, **env) -> subprocess.CompletedProcess:
    env = {**os.environ, "TC_CACHE_DIR": str(cache), **env}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    return subprocess.run([sys.executable, "-c", SCRIPT, str(store)], env=env, capture_output=True, text=True,
                          timeout=300)


def test_cpp_kernel_loads_from_the_store_without_a_compiler(tmp_path):
    store = tmp_path / "store"
    first = run_script(store, tmp_path / "A")
    assert first.returncode == 0, first.stderr
    assert list((store / "cpp_so").iterdir())

    second = run_script(store, tmp_path / "B", CXX="/nonexistent")  # any g++ run would fail
    assert second.returncode == 0, second.stderr
    assert list((tmp_path / "B" / "inductor" / "cpp").glob("*.so"))


def test_without_the_store_a_missing_compiler_still_fails(tmp_path):
    result = run_script(tmp_path / "store", tmp_path / "C", CXX="/nonexistent")
    assert result.returncode != 0 and "CompilerNotFound" in result.stderr


def compile_unique(store, scale: float):
    x = torch.randn(5, 9)
    g = build_graph(lambda g, x: g.call(aten.mul.Tensor, g.call(aten.cos.default, x), scale), [x])
    k = tc_inductor.compile(g, [x], {"artifact_store": store, "cache": False})
    torch.testing.assert_close(k(x), x.cos() * scale)


@pytest.mark.parametrize("damage", [lambda d: d[:200], lambda d: b"junk", lambda d: b""])
def test_damaged_shared_object_is_rebuilt(tmp_path, monkeypatch, damage):
    store = DictStore()
    monkeypatch.setenv("TC_CACHE_DIR", str(tmp_path / "A"))
    monkeypatch.setattr(build, "_loaded", {})
    compile_unique(store, 0.987)
    [(kind, key)] = [k for k in store.data if k[0] == "cpp_so"]
    store.data[(kind, key)] = damage(store.data[(kind, key)])

    monkeypatch.setenv("TC_CACHE_DIR", str(tmp_path / "B"))
    monkeypatch.setattr(build, "_loaded", {})
    compile_unique(store, 0.987)  # built again, and the good object stored back
    assert store.data[(kind, key)][:4] == b"\x7fELF" and len(store.data[(kind, key)]) > 200


def test_failing_store_does_not_break_a_compile(tmp_path, monkeypatch):
    class Broken:
        def get(self, kind, key):
            raise OSError("disk gone")

        def put(self, kind, key, data):
            raise OSError("disk gone")

    monkeypatch.setenv("TC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_loaded", {})
    x = torch.randn(4, 3)
    g = build_graph(lambda g, x: g.call(aten.mul.Tensor, g.call(aten.tan.default, x), 0.5), [x])
    k = tc_inductor.compile(g, [x], {"artifact_store": Broken(), "cache": False})
    torch.testing.assert_close(k(x), x.tan() * 0.5)


# ---- on the GPU ---------------------------------------------------------------------------------

GPU_SCRIPT = SCRIPT.split("aten = torch.ops.aten")[0] + textwrap.dedent("""
    from triton.compiler import compiler

    compiled_sources = []  # what Triton's compiler front end sees (a cache hit skips it)
    make_ir = compiler.ASTSource.make_ir
    def spy(self, *args, **kwargs):
        compiled_sources.append(self.name)
        return make_ir(self, *args, **kwargs)
    compiler.ASTSource.make_ir = spy

    aten = torch.ops.aten
    g = tc_ir.Graph()
    x = g.input("x", tc_ir.TensorSpec((1000, 37), torch.float32, device=torch.device("cuda")))
    g.output(g.call(aten.mul.Tensor, g.call(aten.sin.default, x), 1.2345))
    x = torch.randn(1000, 37, device="cuda")
    k = tc_inductor.compile(g, [x], {"artifact_store": DirStore(sys.argv[1]), "cache": False})
    torch.testing.assert_close(k(x), x.sin() * 1.2345)
    print("compiled", len(compiled_sources))
""")


@pytest.mark.cuda
def test_triton_kernel_loads_from_the_store_without_compiling(tmp_path):
    def run(cache: str):
        env = {**os.environ, "TC_CACHE_DIR": str(tmp_path / cache), "TRITON_CACHE_DIR": str(tmp_path / f"t{cache}"),
               "PYTHONPATH": os.pathsep.join(sys.path),
               "TC_COMPILE_WORKERS": "0"}  # compiles counted in this process (workers: test_triton_compile_pool)
        env.pop("TRITON_INTERPRET", None)
        result = subprocess.run([sys.executable, "-c", GPU_SCRIPT, str(tmp_path / "store")], env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert "compiled 1" in run("A")
    assert "compiled 0" in run("B")  # Triton found the restored directory in an empty cache


# ---- generated wrappers' code objects -----------------------------------------------------------

def test_wrapper_code_is_compiled_once_across_processes(tmp_path, monkeypatch):
    from tc_ir import storage

    monkeypatch.setenv("TC_CACHE_DIR", str(tmp_path))
    source = "def call(x):\n    return x * 3 + 1\n"
    first = storage.compiled_code(source, "<tc test wrapper>")
    monkeypatch.setattr(storage, "compile", _no_compile, raising=False)  # a later process: read back
    again = storage.compiled_code(source, "<tc test wrapper>")
    assert again is not first and again == first and again.co_filename == "<tc test wrapper>"
    env = {}
    exec(again, env)  # noqa: S102
    assert env["call"](2) == 7
    with pytest.raises(AssertionError):  # another source, or another file name, is compiled
        storage.compiled_code(source + "\n# changed\n", "<tc test wrapper>")
    with pytest.raises(AssertionError):
        storage.compiled_code(source, "<tc other>")


def test_damaged_wrapper_code_is_compiled_again(tmp_path, monkeypatch):
    from tc_ir import storage

    monkeypatch.setenv("TC_CACHE_DIR", str(tmp_path))
    source = "def call(x):\n    return x - 5\n"
    storage.compiled_code(source, "<tc test wrapper>")
    (path,) = (tmp_path / "code").glob("*.marshal")
    path.write_bytes(b"\xe3garbage")  # no longer matches its recorded digest
    env = {}
    exec(storage.compiled_code(source, "<tc test wrapper>"), env)  # noqa: S102
    assert env["call"](9) == 4


def _no_compile(*args, **kwargs):
    raise AssertionError("compiled again")
