"""tc_capture: Python bytecode → tc_ir graphs, with guards, graph breaks and a guarded cache.

>>> import torch, tc_capture
>>> r = tc_capture.capture(lambda x: torch.sin(x) * 2, torch.randn(3))
>>> len(r.graphs), r.ops_per_graph
(1, [2])
"""

from .api import CaptureResult, OptimizedModule, capture, explain, interpret_backend, is_compiling, mark_dynamic, optimize, reset
from .cache.frame_cache import warn_fallback
from .cache.module_state import bump as bump_module_state
from .resume.compile_region import Break, CompileError, GraphBreakError
from .resume.export_meta import rebuild_returns

__version__ = "0.1.0"

__all__ = ["capture", "explain", "optimize", "reset", "is_compiling", "mark_dynamic", "GraphBreakError", "CompileError",
           "CaptureResult", "Break", "OptimizedModule", "interpret_backend", "bump_module_state",
           "rebuild_returns", "warn_fallback"]
