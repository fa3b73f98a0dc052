"""Portable bundles: a warm cache as one bytes object, to start another machine of the same kind warm.

A bundle is a zip file (inspect it with ``unzip -l``)::

    manifest.json          {"format": "tc-artifacts", "version": 1, "entries": [{kind, key, size,
                            sha256, env}, ...]}
    manifest.sig           HMAC-SHA256 of manifest.json under the caller's key (hex), if signed
    entries/<kind>/<key>   the entry's bytes

A bundle is code: it carries shared objects, kernel and wrapper sources that a later compile
loads and runs. So loading one requires a signature made with a key the caller supplies (the
same key given to :func:`save_artifacts`), and refuses unsigned or mis-signed bundles unless the
caller says ``trust=True``. The signature covers the manifest, whose sha256 of each entry covers
the entries. Loading then validates entry by entry (names, size, sha256, environment) and writes
through :meth:`ArtifactCache.write_entry` (which seals it with this user's local key), so a bad
entry is skipped and counted, never written. Entries built under another torch / Python / triton
/ device / tc are skipped.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import zipfile
import zlib
from typing import Any

import attrs

from tc_ir.logs import get_logger

from ..config import config
from .keys import Environment
from .store import ArtifactCache

FORMAT = "tc-artifacts"
VERSION = 1
log = get_logger("cache")


class BundleError(ValueError):
    """The bytes are not a tc artifact bundle (or one of a format this version cannot read)."""


@attrs.define
class LoadStats:
    """What :func:`load_artifacts` did with each entry of a bundle."""

    loaded: int = 0
    already_present: int = 0
    skipped_env: int = 0
    skipped_corrupt: int = 0
    reasons: list[str] = attrs.field(factory=list)  # one line per skipped entry


def _key_bytes(key: bytes | str) -> bytes:
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, (bytes, bytearray)) or not key:
        raise TypeError("a bundle key is non-empty bytes or str")
    return bytes(key)


def sign(manifest: bytes, key: bytes | str) -> str:
    """The signature of a bundle's manifest: HMAC-SHA256 under ``key``, hex."""
    return hmac.new(_key_bytes(key), manifest, hashlib.sha256).hexdigest()


def save_artifacts(cache: ArtifactCache | None = None, key: bytes | str | None = None) -> bytes:
    """Every valid entry of ``cache`` (default: the default cache) as a bundle, signed with
    ``key`` when one is given (:func:`load_artifacts` refuses unsigned bundles unless trusted)."""
    cache = cache or ArtifactCache()
    buffer, manifest = io.BytesIO(), []
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for info in cache.entries():
            found = cache.read_entry(info.kind, info.key)
            if found is None:
                continue  # corrupt: read_entry already deleted and logged it
            meta, data = found
            zf.writestr(f"entries/{info.kind}/{info.key}", data)
            manifest.append({"kind": info.kind, "key": info.key, "size": len(data),
                             "sha256": hashlib.sha256(data).hexdigest(), "env": meta.get("env")})
        manifest_bytes = json.dumps({"format": FORMAT, "version": VERSION, "entries": manifest}).encode()
        zf.writestr("manifest.json", manifest_bytes)
        if key is not None:
            zf.writestr("manifest.sig", sign(manifest_bytes, key))
    return buffer.getvalue()


def load_artifacts(data: bytes, cache: ArtifactCache | None = None, key: bytes | str | None = None,
                   trust: bool = False) -> LoadStats:
    """Copy the usable entries of a bundle into ``cache``; returns what happened to each.

    The bundle must be signed with ``key`` (see :func:`save_artifacts`); an unsigned or
    mis-signed one raises :class:`BundleError` unless ``trust=True`` (you vouch for its origin:
    its kernels and wrappers will run in your processes)."""
    cache = cache or ArtifactCache()
    stats = LoadStats()
    with _open(data) as zf:
        _check_signature(zf, key, trust)
        for item in _manifest(zf):
            _load_one(zf, item, cache, stats)
    log.info("cache: bundle loaded into %s: %s", cache.root, stats)
    return stats


def _open(data: bytes) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, TypeError) as e:
        raise BundleError(f"not a tc artifact bundle: {e}") from None


def _check_signature(zf: zipfile.ZipFile, key: bytes | str | None, trust: bool) -> None:
    if trust:
        return
    if key is None:
        raise BundleError("a bundle holds code (kernels, shared objects, wrappers): pass the key it was signed "
                          "with (key=...), or trust=True if you vouch for where it came from")
    try:
        manifest, signature = zf.read("manifest.json"), zf.read("manifest.sig")
    except KeyError:
        raise BundleError("bundle is not signed; refusing it (pass trust=True to load it anyway)") from None
    except (zipfile.BadZipFile, zlib.error, OSError, ValueError) as e:
        raise BundleError(f"bundle unreadable: {e}") from None
    if not hmac.compare_digest(signature, sign(manifest, key).encode()):
        raise BundleError("bundle signature does not match the key; refusing it")


def _manifest(zf: zipfile.ZipFile) -> list[Any]:
    try:
        manifest = json.loads(zf.read("manifest.json"))
    except (KeyError, ValueError, zipfile.BadZipFile) as e:
        raise BundleError(f"bundle manifest missing or unreadable: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError("not a tc artifact bundle (manifest format)")
    if manifest.get("version") != VERSION:
        raise BundleError(f"bundle format version {manifest.get('version')}, this tc reads {VERSION}")
    entries = manifest.get("entries")
    if not isinstance(entries, list):
        raise BundleError("bundle manifest has no entry list")
    return entries


def _load_one(zf: zipfile.ZipFile, item: Any, cache: ArtifactCache, stats: LoadStats) -> None:
    try:
        kind, key, env, data = _validated(zf, item, cache)
    except _Skip as skip:
        stats.reasons.append(str(skip))
        if skip.env:
            stats.skipped_env += 1
        else:
            stats.skipped_corrupt += 1
        return
    if cache.get(kind, key) == data:
        stats.already_present += 1
        return
    cache.write_entry(kind, key, data, env.as_dict())
    stats.loaded += 1


class _Skip(Exception):
    def __init__(self, message: str, env: bool = False):
        super().__init__(message)
        self.env = env


def _validated(zf: zipfile.ZipFile, item: Any, cache: ArtifactCache) -> tuple[str, str, Environment, bytes]:
    """(kind, key, env, data) of one manifest entry, or raise _Skip saying why not."""
    if not isinstance(item, dict):
        raise _Skip("manifest entry is not an object")
    kind, key = item.get("kind"), item.get("key")
    try:
        cache.path(kind, key)
    except ValueError as e:
        raise _Skip(f"entry name: {e}") from None
    env = Environment.from_dict(item.get("env"))
    if env is None:
        raise _Skip(f"{kind}/{key}: no environment recorded", env=True)
    if why := cache.env.mismatch(env):
        raise _Skip(f"{kind}/{key}: built under another environment: {why}", env=True)
    return kind, key, env, _entry_bytes(zf, kind, key, item)


def _entry_bytes(zf: zipfile.ZipFile, kind: str, key: str, item: dict[str, Any]) -> bytes:
    name = f"entries/{kind}/{key}"
    try:
        info = zf.getinfo(name)
        if info.file_size > config.max_entry_bytes or info.file_size != item.get("size"):
            raise _Skip(f"{kind}/{key}: size {info.file_size}, manifest says {item.get('size')}")
        data = zf.read(info)
    except (KeyError, zipfile.BadZipFile, zlib.error, OSError, ValueError) as e:
        raise _Skip(f"{kind}/{key}: unreadable ({e})") from None
    if hashlib.sha256(data).hexdigest() != item.get("sha256"):
        raise _Skip(f"{kind}/{key}: sha256 mismatch")
    return data
