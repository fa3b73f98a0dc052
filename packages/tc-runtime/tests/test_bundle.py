"""Portable bundles: round trip into an empty cache, validation entry by entry, environments."""

from __future__ import annotations

import io
import json
import zipfile

import attrs
import pytest

from tc_runtime import ArtifactCache, BundleError, load_artifacts, save_artifacts

KEY = b"test bundle key"


def _filled(root) -> tuple[ArtifactCache, dict[tuple[str, str], bytes]]:
    cache = ArtifactCache(root)
    items = {("triton", cache.key("k", i)): f"kernel {i}".encode() * 50 for i in range(3)}
    items[("cpp_so", cache.key("so"))] = bytes(range(256)) * 40
    for (kind, key), data in items.items():
        cache.put(kind, key, data)
    return cache, items


def test_round_trip_into_empty_cache_gives_hits(tmp_path):
    source, items = _filled(tmp_path / "a")
    blob = save_artifacts(source, key=KEY)
    target = ArtifactCache(tmp_path / "b")
    stats = load_artifacts(blob, target, key=KEY)
    assert stats.loaded == len(items) and stats.skipped_env == stats.skipped_corrupt == 0
    for (kind, key), data in items.items():
        assert target.get(kind, key) == data
    assert target.counters.hits == len(items)
    again = load_artifacts(blob, target, key=KEY)
    assert again.already_present == len(items) and again.loaded == 0


def test_default_cache_from_environment(tmp_path, monkeypatch):
    _, items = _filled(tmp_path / "a")
    monkeypatch.setenv("TC_CACHE_DIR", str(tmp_path / "a"))
    blob = save_artifacts(key=KEY)
    monkeypatch.setenv("TC_CACHE_DIR", str(tmp_path / "b"))
    assert load_artifacts(blob, key=KEY).loaded == len(items)


def test_entries_of_another_version_are_skipped(tmp_path):
    here, items = _filled(tmp_path / "a")
    old = ArtifactCache(tmp_path / "a", env=attrs.evolve(here.env, torch="2.0.0", python="cpython-3.9"))
    old.put("triton", "oldkey", b"built by an old torch")
    other_gpu = ArtifactCache(tmp_path / "a", env=attrs.evolve(here.env, device="cuda-sm80"))
    other_gpu.put("triton", "a100key", b"built for sm80")
    target = ArtifactCache(tmp_path / "b")
    stats = load_artifacts(save_artifacts(here, key=KEY), target, key=KEY)
    assert stats.loaded == len(items) and stats.skipped_env == 2
    assert any("torch '2.0.0'" in r for r in stats.reasons)
    assert not target.contains("triton", "oldkey") and not target.contains("triton", "a100key")


def _rewrite(blob: bytes, edit) -> bytes:
    """A copy of a bundle with ``edit(manifest, files)`` applied."""
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        files = {name: zf.read(name) for name in zf.namelist()}
    manifest = json.loads(files.pop("manifest.json"))
    edit(manifest, files)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("manifest.json", json.dumps(manifest))
    return out.getvalue()


def test_bad_entries_are_skipped_one_by_one(tmp_path):
    source, items = _filled(tmp_path / "a")
    blob = save_artifacts(source, key=KEY)

    def damage(manifest, files):
        entries = manifest["entries"]
        files[f"entries/{entries[0]['kind']}/{entries[0]['key']}"] = b"tampered"   # size + sha256
        entries[1]["sha256"] = "0" * 64
        entries[2]["key"] = "../../escape"
        del entries[3]["env"]
        manifest["entries"].append({"kind": "triton", "key": "missing", "size": 1, "sha256": "", "env": None})
        manifest["entries"].append("not an object")

    stats = load_artifacts(_rewrite(blob, damage), ArtifactCache(tmp_path / "b"), trust=True)
    assert stats.loaded == 0
    assert stats.skipped_corrupt == 4 and stats.skipped_env == 2, stats.reasons
    assert not (tmp_path / "escape").exists()


@pytest.mark.parametrize("blob", [b"", b"not a zip", b"PK\x03\x04garbage"])
def test_not_a_bundle(tmp_path, blob):
    with pytest.raises(BundleError):
        load_artifacts(blob, ArtifactCache(tmp_path), trust=True)


def test_bundle_format_checked(tmp_path):
    source, _ = _filled(tmp_path / "a")
    newer = _rewrite(save_artifacts(source, key=KEY), lambda m, f: m.update(version=99))
    with pytest.raises(BundleError, match="version 99"):
        load_artifacts(newer, ArtifactCache(tmp_path / "b"), trust=True)
    foreign = _rewrite(save_artifacts(source, key=KEY), lambda m, f: m.update(format="something else"))
    with pytest.raises(BundleError):
        load_artifacts(foreign, ArtifactCache(tmp_path / "b"), trust=True)


def test_corrupt_entry_on_disk_is_left_out_of_the_bundle(tmp_path):
    source, items = _filled(tmp_path / "a")
    (kind, key), _ = next(iter(items.items()))
    source.path(kind, key).write_bytes(b"broken")
    stats = load_artifacts(save_artifacts(source, key=KEY), ArtifactCache(tmp_path / "b"), key=KEY)
    assert stats.loaded == len(items) - 1


def test_unsigned_and_mis_signed_bundles_are_refused_unless_trusted(tmp_path):
    source = ArtifactCache(tmp_path / "a")
    source.put("k", "ab" * 8, b"kernel bytes")
    target = ArtifactCache(tmp_path / "b")
    with pytest.raises(BundleError, match="not signed"):
        load_artifacts(save_artifacts(source), target, key=KEY)
    with pytest.raises(BundleError, match="does not match"):
        load_artifacts(save_artifacts(source, key=b"another key"), target, key=KEY)
    with pytest.raises(BundleError, match="pass the key"):
        load_artifacts(save_artifacts(source, key=KEY), target)
    assert target.get("k", "ab" * 8) is None
    # a signed manifest also covers the entries: an entry swapped after signing is skipped
    swapped = _rewrite(save_artifacts(source, key=KEY), lambda m, f: f.update({"entries/k/" + "ab" * 8: b"evil"}))
    stats = load_artifacts(swapped, target, key=KEY)
    assert stats.loaded == 0 and target.get("k", "ab" * 8) is None
    assert load_artifacts(save_artifacts(source), target, trust=True).loaded == 1
