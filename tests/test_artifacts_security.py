"""Crafted artifacts are refused, and the model is still right (rebuilt from scratch).

Each case compiles a small model in a fresh process with its own ``TC_CACHE_DIR``, tampers with
what that process left behind, and runs the model again in another fresh process: the crafted
code must not run (a marker file it would create stays absent) and the outputs must equal eager.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import tc

SCRIPT = textwrap.dedent("""
    import sys, torch, tc
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()
    compiled = tc.compile(model, options={"fallback": False})
    for _ in range(2):
        x = torch.randn(8, 16)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    print("OK")
""")


def run(cache: Path, timeout: float = 240) -> str:
    env = dict(os.environ, TC_CACHE_DIR=str(cache))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def evil_so(tmp_path: Path, marker: Path) -> bytes:
    src = tmp_path / "evil.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void pwn(void) {'
                   f' FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
    out = tmp_path / "evil.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(out)], check=True)
    return out.read_bytes()


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("warm") / "cache"
    run(cache)
    assert list(cache.glob("inductor/cpp/*.so")), "the model compiled no C++ kernel"
    return cache


def fresh_copy(warm: Path, tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    shutil.copytree(warm, cache, symlinks=True)
    os.chmod(cache, 0o700)
    return cache


def test_planted_shared_object_is_never_loaded(warm, tmp_path):
    cache, marker = fresh_copy(warm, tmp_path), tmp_path / "planted-ran"
    blob = evil_so(tmp_path, marker)
    for so in cache.glob("inductor/cpp/*.so"):  # named by the hash of the C++ source, as a crafter would
        so.write_bytes(blob)
    for entry in cache.glob("v2/cpp_so/*/*.bin"):
        entry.unlink()  # and no stored copy to fall back on: the kernel must be rebuilt
    run(cache)
    assert not marker.exists()


def test_damaged_shared_object_is_rebuilt(warm, tmp_path):
    cache = fresh_copy(warm, tmp_path)
    for so in cache.glob("inductor/cpp/*.so"):
        so.write_bytes(so.read_bytes()[:200])
    run(cache)
    for so in cache.glob("inductor/cpp/*.so"):
        assert len(so.read_bytes()) > 200  # rebuilt or restored, and recorded again


def test_fifo_in_the_cache_does_not_hang(warm, tmp_path):
    cache = fresh_copy(warm, tmp_path)
    for path in [*cache.glob("inductor/cpp/*.so"), *cache.glob("v2/*/*/*.bin")][:6]:
        path.unlink()
        os.mkfifo(path)
    run(cache, timeout=240)


def _reseal_with_sha256(path: Path, edit) -> None:
    """Rewrite a cache entry's payload and recompute a plain sha256 in its header, as a crafter
    who can write the file (but does not hold this user's key) would."""
    blob = path.read_bytes()
    header = struct.Struct(">4sBIQ32s")
    magic, version, meta_len, data_len, _ = header.unpack_from(blob)
    meta = blob[header.size:header.size + meta_len]
    data = edit(blob[header.size + meta_len:])
    path.write_bytes(header.pack(magic, version, meta_len, len(data), hashlib.sha256(meta + data).digest()) + meta + data)


@pytest.mark.parametrize("kind", ["inductor_graph", "aot_trace"])
def test_edited_entry_with_recomputed_sha256_is_refused(warm, tmp_path, kind):
    cache, marker = fresh_copy(warm, tmp_path), tmp_path / f"{kind}-ran"
    payload = f"__import__('os').system('touch {marker}')"
    entries = list(cache.glob(f"v2/{kind}/*/*.bin"))
    assert entries
    for entry in entries:
        if kind == "inductor_graph":
            _reseal_with_sha256(entry, lambda d: d.replace(b'"source": "', f'"source": "{payload}\\n'.encode(), 1))
        else:
            _reseal_with_sha256(entry, lambda d: d.replace(b"aten.", b"os.system.", 1))
    run(cache)
    assert not marker.exists()


def test_untrusted_root_is_not_used(warm, tmp_path):
    cache = fresh_copy(warm, tmp_path)
    os.chmod(cache, 0o777)
    out = run(cache)
    assert "not using the cache directory" in out


def _exported(tmp_path: Path) -> tuple[torch.nn.Module, Path]:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()).eval()
    path = tmp_path / "m.tc"
    tc.export(model, torch.randn(2, 4)).save(path)
    return model, path


def _rewrite_graph(path: Path, edit) -> None:
    import safetensors
    import safetensors.torch

    with safetensors.safe_open(str(path), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    meta["graph"] = edit(meta["graph"])
    safetensors.torch.save_file(tensors, str(path), metadata=meta)


@pytest.mark.parametrize("target", ["os.system", "this.s", "builtins.exec"])
def test_export_naming_code_is_refused_at_load(tmp_path, target):
    model, path = _exported(tmp_path)
    _rewrite_graph(path, lambda g: g.replace("aten.relu.default(", f"{target}(", 1))
    already = "this" in sys.modules
    with pytest.raises(tc.LoadError, match=rf"line \d+ \(%\w+\): target '{target}' cannot be loaded"):
        tc.load(path)
    assert already or "this" not in sys.modules
    (tmp_path / "again").mkdir()
    model, good = _exported(tmp_path / "again")  # an untouched export loads and runs right
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(tc.load(good)(x), model(x))


@pytest.mark.parametrize("damage", [
    lambda b: b[: len(b) // 2],                    # truncated
    lambda b: b"\xff" * 64,                         # not a safetensors file
    lambda b: struct.pack("<Q", 1 << 60) + b[8:],   # absurd header size
])
def test_malformed_export_files_give_a_clear_error(tmp_path, damage):
    _, path = _exported(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(tc.LoadError):
        tc.load(path)


def test_export_with_wrong_specs_or_bad_utf8_is_refused(tmp_path):
    _, path = _exported(tmp_path)
    _rewrite_graph(path, lambda g: g.replace("f32[2, 8]", "f32[2, 9]", 1))
    with pytest.raises(tc.LoadError):
        tc.load(path)


def test_compiled_module_pickles_as_the_original_recompiled(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh()).eval()
    compiled = tc.compile(model)
    compiled(torch.randn(2, 4))
    buffer = io.BytesIO()
    torch.save(compiled, buffer)
    buffer.seek(0)
    again = torch.load(buffer, weights_only=False)
    copy = pickle.loads(pickle.dumps(compiled))
    x = torch.randn(5, 4)
    with torch.no_grad():
        torch.testing.assert_close(again(x), model(x))
        torch.testing.assert_close(copy(x), model(x))
    assert list(again.state_dict()) == list(model.state_dict())
