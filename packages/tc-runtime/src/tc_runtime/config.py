"""The one configuration object of tc_runtime, typed and patchable in a ``with`` block.

Read from the environment when a value is needed (not at import), so a test or a user can set
``TC_CACHE_DIR`` after ``import tc_runtime`` and still be obeyed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import attrs

from tc_ir import storage

OutputMode = Literal["auto", "clone", "alias"]


@attrs.define
class Config:
    """Knobs of the CUDA-graph runtime and the artifact cache.

    ``cache_dir`` None means ``$TC_CACHE_DIR``, else ``$XDG_CACHE_HOME/tc``, else ``~/.cache/tc``.
    """

    # Artifact cache.
    cache_dir: str | None = None
    max_entry_bytes: int = 1 << 30  # refuse bundle entries bigger than this (zip-bomb guard)
    fsync: bool = False  # the integrity check already catches torn writes; fsync only adds durability
    fingerprint_sources: bool = True  # hash our packages' .py files into keys (editable installs change)

    # CUDA graphs.
    max_graphs: int = 8
    output_mode: OutputMode = "auto"  # aliases checked for liveness before each replay (cudagraphs/liveness.py)
    check_mutation_by_value: bool = True  # version counters miss writes made by raw Triton/C++ kernels
    max_rerecords: int = 2  # per shape, when a static input moved; then plain calls
    max_sync_warmups: int = 2  # warm-ups that synchronise before a shape runs plainly for good

    def resolved_cache_dir(self) -> Path:
        """The cache root this config points at, after the environment fallbacks."""
        return storage.cache_root(self.cache_dir)  # the one resolution, shared with tc_inductor

    @contextlib.contextmanager
    def patch(self, **changes: object) -> Iterator[Config]:
        """Change some fields for the duration of a ``with`` block, then restore them."""
        saved = {name: getattr(self, name) for name in changes}
        for name, value in changes.items():
            if name not in attrs.fields_dict(Config):
                raise AttributeError(f"tc_runtime.config has no field {name!r}")
            setattr(self, name, value)
        try:
            yield self
        finally:
            for name, value in saved.items():
                setattr(self, name, value)


config = Config()
