"""tc: a just-in-time compiler for PyTorch.

>>> import tc
>>> model = tc.compile(model)                  # doctest: +SKIP

The umbrella composes the packages (tc_capture → tc_autograd → tc_inductor → tc_runtime) and
owns policy: which decompositions, which compiler for forward and backward, CUDA graphs or not.
"""

from tc_capture import is_compiling, mark_dynamic
from tc_ir.ops import cond

from .api import compile
from .backends import BackendCompilerFailed, list_backends, register_backend, tc_ir_backend
from .cache import load_cache_artifacts, save_cache_artifacts
from .explain import ExplainReport, explain
from .export import ExportedProgram, ExportError, LoadError, export, load
from .reset import reset

__version__ = "0.1.0"

__all__ = [
    "compile", "explain", "ExplainReport", "export", "load", "ExportedProgram", "ExportError", "LoadError",
    "mark_dynamic", "reset",
    "is_compiling", "cond", "save_cache_artifacts", "load_cache_artifacts", "list_backends", "register_backend",
    "tc_ir_backend", "BackendCompilerFailed",
]
