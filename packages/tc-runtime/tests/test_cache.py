"""The artifact cache in one process: hits, misses, corruption recovery, names, accounting."""

from __future__ import annotations

import os

import attrs
import pytest
import torch

from tc_runtime import LAYOUT, ArtifactCache, Environment, cache_key, current_environment
from tc_runtime.cache import entry


def test_put_get_round_trip(cache):
    key = cache.key("graph text", ((8, 256), "f32"), {"autotune": False})
    assert cache.get("triton", key) is None
    cache.put("triton", key, b"kernel source")
    assert cache.get("triton", key) == b"kernel source"
    assert (cache.counters.hits, cache.counters.misses, cache.counters.puts) == (1, 1, 1)


def test_layout_is_versioned(cache):
    key = cache.key("x")
    cache.put("wrapper", key, b"...")
    assert cache.path("wrapper", key) == cache.root / LAYOUT / "wrapper" / key[:2] / f"{key}.bin"
    assert cache.path("wrapper", key).is_file()


def test_root_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TC_CACHE_DIR", str(tmp_path / "from-env"))
    assert ArtifactCache().root == tmp_path / "from-env"
    monkeypatch.delenv("TC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ArtifactCache().root == tmp_path / "xdg" / "tc"


def test_overwrite_and_empty_payload(cache):
    cache.put("k", "ab", b"one")
    cache.put("k", "ab", b"")
    assert cache.get("k", "ab") == b""


def test_large_payload(cache):
    blob = os.urandom(3 << 20)
    cache.put("so", "big", blob)
    assert cache.get("so", "big") == blob


def _truncate(path, blob):
    path.write_bytes(blob[: len(blob) // 2])


def _truncate_header(path, blob):
    path.write_bytes(blob[:10])


def _flip_data(path, blob):
    path.write_bytes(blob[:-1] + bytes([blob[-1] ^ 0x01]))


def _flip_meta(path, blob):
    i = entry.HEADER_SIZE + 2
    path.write_bytes(blob[:i] + bytes([blob[i] ^ 0x20]) + blob[i + 1:])


def _flip_digest(path, blob):
    i = entry.HEADER_SIZE - 1
    path.write_bytes(blob[:i] + bytes([blob[i] ^ 0xFF]) + blob[i + 1:])


def _append(path, blob):
    path.write_bytes(blob + b"junk")


def _empty(path, blob):
    path.write_bytes(b"")


def _garbage(path, blob):
    path.write_bytes(os.urandom(len(blob)))


def _old_format(path, blob):
    path.write_bytes(blob[:4] + bytes([99]) + blob[5:])


@pytest.mark.parametrize("damage", [_truncate, _truncate_header, _flip_data, _flip_meta, _flip_digest,
                                    _append, _empty, _garbage, _old_format])
def test_corrupt_entry_is_a_miss_and_deleted_then_rebuilt(cache, damage):
    key = cache.key("graph")
    cache.put("triton", key, b"the right kernel " * 10)
    path = cache.path("triton", key)
    damage(path, path.read_bytes())
    assert cache.get("triton", key) is None
    assert not path.exists()
    assert cache.counters.corrupt == 1
    cache.put("triton", key, b"rebuilt")
    assert cache.get("triton", key) == b"rebuilt"


def test_entry_moved_under_another_key_is_rejected(cache):
    cache.put("triton", "aaaa", b"for aaaa")
    cache.path("triton", "bbbb").parent.mkdir(parents=True)
    cache.path("triton", "aaaa").rename(cache.path("triton", "bbbb"))
    assert cache.get("triton", "bbbb") is None
    assert cache.counters.corrupt == 1


def test_entry_of_another_environment_is_a_miss_but_kept(tmp_path):
    here = ArtifactCache(tmp_path)
    there = ArtifactCache(tmp_path, env=attrs.evolve(here.env, torch="1.0"))
    there.put("triton", "samekey", b"built elsewhere")
    assert here.get("triton", "samekey") is None
    assert here.counters.env_mismatch == 1
    assert there.get("triton", "samekey") == b"built elsewhere"


@pytest.mark.parametrize("kind,key", [("../x", "abcd"), ("k", "../../etc"), ("k", "a"), ("", "abcd"),
                                      ("k", "a/b"), ("k", "x" * 129), ("k", "a.b")])
def test_unsafe_names_rejected(cache, kind, key):
    with pytest.raises(ValueError):
        cache.put(kind, key, b"")
    with pytest.raises(ValueError):
        cache.get(kind, key)


def test_data_must_be_bytes(cache):
    with pytest.raises(TypeError):
        cache.put("k", "ab", "text")


def test_accounting_clear_and_prune(cache):
    for i in range(4):
        cache.put("triton", f"key{i}", b"x" * 100)
    cache.put("cpp", "key9", b"y" * 50)
    stats = cache.stats()
    assert stats["triton"]["entries"] == 4 and stats["cpp"]["entries"] == 1
    assert cache.size() == sum(row["bytes"] for row in stats.values())
    for i, e in enumerate(sorted(cache.entries(), key=lambda e: e.key)):
        os.utime(e.path, (1000 + i, 1000 + i))  # key0 is the least recently used
    assert cache.prune(cache.size() - 1) == 1
    assert not cache.contains("triton", "key0")
    assert cache.clear("cpp") == 1 and "cpp" not in cache.stats()
    assert cache.clear() == 3 and cache.size() == 0


def test_leftover_temp_files_are_not_entries(cache):
    cache.put("triton", "key1", b"x")
    temp = cache.path("triton", "key1").parent / ".tmp-crashed"
    temp.write_bytes(b"half a write")
    assert [e.key for e in cache.entries()] == ["key1"]
    cache.clear()
    assert not temp.exists()


def test_unreadable_root_is_a_miss_not_a_crash(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    cache = ArtifactCache(blocker / "cache")  # a path under a regular file: every I/O fails
    cache.put("triton", "key1", b"x")
    assert cache.get("triton", "key1") is None
    assert cache.counters.io_errors >= 1


def test_key_depends_on_every_part_and_environment():
    env = current_environment()
    base = cache_key("g", (1, 2), {"a": 1})
    assert base == cache_key("g", (1, 2), {"a": 1})
    assert base == cache_key("g", [1, 2], {"a": 1}, env=env)
    variants = [cache_key("g", (1, 3), {"a": 1}), cache_key("g", (1, 2), {"a": 2}), cache_key("g", (1, 2)),
                cache_key("g", (1, 2), {"a": 1.0}), cache_key("g", (1, 2), {"a": True}),
                cache_key("g", (1, 2), {"a": 1}, env=attrs.evolve(env, device="cuda-sm90"))]
    assert base not in variants and len(set(variants)) == len(variants)
    assert cache_key("ab", "c") != cache_key("a", "bc")
    assert cache_key(torch.float32, torch.Size([2])) == cache_key("torch.float32", (2,))
    with pytest.raises(TypeError):
        cache_key(object())


def test_environment_round_trips_through_metadata():
    env = current_environment()
    assert Environment.from_dict(env.as_dict()) == env
    assert Environment.from_dict({"python": 3}) is None
    assert Environment.from_dict(None) is None
    assert env.mismatch(attrs.evolve(env, torch="9.9")) == "torch '9.9' != " + repr(env.torch)


def test_counters_by_kind_say_which_stage_hit_and_which_missed(tmp_path):
    cache = ArtifactCache(tmp_path)
    key = cache.key("graph")
    assert cache.get("aot_trace", key) is None
    cache.put("aot_trace", key, b"traced")
    assert cache.get("aot_trace", key) == b"traced"
    assert cache.get("inductor_graph", key) is None
    assert cache.counters.by_kind == {"aot_trace": {"hits": 1, "misses": 1}, "inductor_graph": {"hits": 0, "misses": 1}}
