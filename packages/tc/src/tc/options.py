"""The umbrella's policy knobs: what ``mode=`` and ``options=`` of ``tc.compile`` turn into."""

from __future__ import annotations

from typing import Any

import attrs

MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@attrs.frozen
class Options:
    """Typed form of ``tc.compile(mode=..., options=...)``.

    ``fallback``: a back-end failure runs that graph eagerly with one warning (False: raise).
    ``cudagraphs``: replay CUDA graphs (``mode="reduce-overhead"``/``"max-autotune"``).
    ``max_autotune``: autotune kernel configs and matmul templates.
    ``inductor``: every other key, handed to ``tc_inductor.compile`` as its options.
    """

    fallback: bool = True
    cudagraphs: bool = False
    max_autotune: bool = False
    inductor: dict = attrs.field(factory=dict)

    @classmethod
    def from_user(cls, mode: str | None, options: dict[str, Any] | None) -> Options:
        if mode not in MODES:
            raise ValueError(f"tc.compile: unknown mode {mode!r}; choose one of {MODES}")
        rest = dict(options or {})
        fallback = bool(rest.pop("fallback", True))
        cudagraphs = bool(rest.pop("cudagraphs", mode in ("reduce-overhead", "max-autotune")))
        autotune = bool(rest.pop("max_autotune", mode in ("max-autotune", "max-autotune-no-cudagraphs")))
        if autotune:
            rest["max_autotune"] = True
        return cls(fallback, cudagraphs, autotune, rest)
