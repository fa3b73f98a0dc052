"""The backend registry: each entry says when it applies and how to build and load a kernel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import attrs

from ..kir import Kernel


class KernelBackend(Protocol):
    """What a backend implements: source for a kernel, starting and finishing its build, and
    the wrapper line that launches it."""

    name: str

    def generate(self, kernel: Kernel, name: str, options: Any, device: Any) -> str: ...

    def metadata(self, kernel: Kernel, options: Any, device: Any) -> dict: ...

    def start(self, record: dict, options: Any) -> None: ...

    def load(self, record: dict, options: Any) -> Callable: ...

    def launch(self, name: str, kernel: Kernel, args: list[str], options: Any, device: Any) -> str: ...


@attrs.define
class BackendEntry:
    name: str
    check: Callable[[Any, dict], bool]  # (device, options) -> applies?
    backend: Any


BACKENDS: list[BackendEntry] = []


def register_backend(name: str, check: Callable[[Any, dict], bool], backend: Any) -> None:
    BACKENDS.append(BackendEntry(name, check, backend))


def choose_backend(device: Any, options: dict) -> Any:
    _load_builtin()
    for entry in BACKENDS:
        if entry.check(device, options):
            return entry.backend
    raise RuntimeError(f"no kernel backend for device {device} with options {options}")


def _load_builtin() -> None:
    # Always both: importing one backend module (a test, a user) must not hide the other.
    from . import cpp, triton  # noqa: F401  (each registers itself, once, on import)
