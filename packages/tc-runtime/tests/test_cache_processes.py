"""The artifact cache shared by several processes: hits across processes, concurrent writers."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import time

from tc_runtime import ArtifactCache

PRELUDE = """
import hashlib, os, sys, time
import tc_runtime
tc_runtime.config.fingerprint_sources = False  # as in the parent (see conftest)
cache = tc_runtime.ArtifactCache()
def payload(key):
    return hashlib.sha256(key.encode()).digest() * 4096
"""


def _payload(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest() * 4096


def _python(code: str, root, *args: str) -> subprocess.Popen:
    env = {**os.environ, "TC_CACHE_DIR": str(root), "TC_LOGS": ""}
    return subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(code), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, timeout: float = 120) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return out


def test_hits_across_processes(tmp_path):
    parent = ArtifactCache(tmp_path)
    key = parent.key("graph text", (8, 256))
    parent.put("triton", key, b"from the parent")
    out = _finish(_python("""
        key = cache.key("graph text", (8, 256))
        assert key == sys.argv[1], "same content, same environment: same key"
        assert cache.get("triton", key) == b"from the parent"
        cache.put("wrapper", key, b"from the child")
        print(cache.counters.hits)
    """, tmp_path, key))
    assert out.strip() == "1"
    assert parent.get("wrapper", key) == b"from the child"


WRITER = """
index, go = int(sys.argv[1]), sys.argv[2]
open(f"{go}.ready{index}", "w").close()
while not os.path.exists(go):
    time.sleep(0.005)
shared = [f"shared{i}" for i in range(5)]
wrong = 0
deadline = time.time() + 1.5
n = 0
while time.time() < deadline:
    key = shared[n % 5]
    cache.put("triton", key, payload(key))
    own = f"p{index}x{n}"
    cache.put("triton", own, payload(own))
    for other in shared:
        got = cache.get("triton", other)
        wrong += got is not None and got != payload(other)
    n += 1
print(n, wrong, cache.counters.corrupt)
"""


def test_concurrent_writers_same_and_different_keys(tmp_path):
    go = tmp_path / "go"
    procs = [_python(WRITER, tmp_path / "cache", str(i), str(go)) for i in range(4)]
    deadline = time.time() + 120
    while not all((tmp_path / f"go.ready{i}").exists() for i in range(4)):
        assert time.time() < deadline and all(p.poll() is None for p in procs), "writers did not start"
        time.sleep(0.02)
    go.touch()
    results = [tuple(map(int, _finish(p).split())) for p in procs]
    assert all(n > 0 and wrong == 0 and corrupt == 0 for n, wrong, corrupt in results), results
    cache = ArtifactCache(tmp_path / "cache")
    keys = {e.key for e in cache.entries()}
    assert {f"shared{i}" for i in range(5)} <= keys
    assert sum(n for n, _, _ in results) + 5 == len(keys)
    assert all(cache.get("triton", k) == _payload(k) for k in keys)
    assert cache.counters.corrupt == 0
    assert not list(cache.base.glob("*/*/.tmp-*")), "no temp file left behind"
