"""The byte format of one cache entry: a fixed header, JSON metadata, then the payload.

::

    magic   b"TCAC"          4 bytes
    version 2                1 byte   (bumped when this layout changes)
    meta    length           4 bytes  big-endian
    data    length           8 bytes  big-endian
    digest                  32 bytes  HMAC-SHA256 of meta + data under the cache's local key
    meta    JSON (utf-8)
    data    the caller's bytes

Every field is checked on read; anything off raises :class:`CorruptEntry`, which the cache turns
into "delete and miss". The digest is keyed with a secret only this user can read (see
``tc_ir.storage``), so an entry edited by anyone else, even with a digest recomputed, does not
verify. Only bytes and JSON are ever decoded: nothing here can execute code.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from typing import Any

MAGIC = b"TCAC"
FORMAT_VERSION = 2
_HEADER = struct.Struct(">4sBIQ32s")
HEADER_SIZE = _HEADER.size


class CorruptEntry(ValueError):
    """An entry whose bytes do not match its header (truncated, flipped, foreign, or old format)."""


def _digest(key: bytes, body: bytes | memoryview) -> bytes:
    return hmac.new(key, body, hashlib.sha256).digest()


def encode(meta: dict[str, Any], data: bytes, key: bytes) -> bytes:
    """Header + meta + data, ready to be written atomically; ``key`` is the cache's local key."""
    meta_bytes = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
    digest = _digest(key, meta_bytes + data)
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(meta_bytes), len(data), digest) + meta_bytes + data


def decode(blob: bytes, key: bytes) -> tuple[dict[str, Any], bytes]:
    """(meta, data) of an encoded entry; raises :class:`CorruptEntry` on any mismatch."""
    if len(blob) < HEADER_SIZE:
        raise CorruptEntry(f"truncated header ({len(blob)} bytes)")
    magic, version, meta_len, data_len, digest = _HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise CorruptEntry("bad magic")
    if version != FORMAT_VERSION:
        raise CorruptEntry(f"entry format {version}, expected {FORMAT_VERSION}")
    if len(blob) != HEADER_SIZE + meta_len + data_len:
        raise CorruptEntry(f"length {len(blob)}, header says {HEADER_SIZE + meta_len + data_len}")
    body = memoryview(blob)[HEADER_SIZE:]
    if not hmac.compare_digest(_digest(key, body), digest):
        raise CorruptEntry("digest mismatch (damaged, or not written by this user)")
    return _parse_meta(bytes(body[:meta_len])), bytes(body[meta_len:])


def _parse_meta(meta_bytes: bytes) -> dict[str, Any]:
    try:
        meta = json.loads(meta_bytes)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptEntry(f"metadata is not JSON: {e}") from None
    if not isinstance(meta, dict):
        raise CorruptEntry("metadata is not a JSON object")
    return meta
