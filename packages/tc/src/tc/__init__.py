"""tc: a just-in-time compiler for PyTorch.

>>> import tc
>>> model = tc.compile(model)                  # doctest: +SKIP

The umbrella composes the packages (tc_capture → tc_autograd → tc_inductor → tc_runtime) and
owns policy: which decompositions, which compiler for forward and backward, CUDA graphs or not.

``import tc`` loads only what ``tc.compile`` needs before a first call (capture and the IR); the
back ends (tc_autograd, tc_inductor, tc_runtime) load at the first ``tc.compile``, and export,
explain and cache bundles at their first use, so a process that starts from a warm cache pays
for nothing it does not run.
"""

import importlib
from typing import Any

from tc_capture import is_compiling, mark_dynamic
from tc_ir.ops import cond

from .api import compile
from .reset import reset

__version__ = "0.1.0"

# name -> the submodule defining it, imported on first access (PEP 562). No submodule is named like
# a function here: importing ``tc.export`` would bind the module over the function ``tc.export``.
_LAZY = {
    "BackendCompilerFailed": "backends", "list_backends": "backends", "register_backend": "backends",
    "tc_ir_backend": "backends", "load_cache_artifacts": "cache", "save_cache_artifacts": "cache",
    "ExplainReport": "explaining", "explain": "explaining", "ExportedProgram": "exporting", "ExportError": "exporting",
    "LoadError": "exporting", "export": "exporting", "load": "exporting",
}

__all__ = [
    "compile", "explain", "ExplainReport", "export", "load", "ExportedProgram", "ExportError", "LoadError",
    "mark_dynamic", "reset",
    "is_compiling", "cond", "save_cache_artifacts", "load_cache_artifacts", "list_backends", "register_backend",
    "tc_ir_backend", "BackendCompilerFailed",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tc' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later reads are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
