"""The symbolic bytecode interpreter: values, frames, opcode tables and call rules.

Importing this package registers every opcode handler (``ops_*.py``, ``iteration.py``,
``contexts.py``, ``handlers.py``) into :data:`base.HANDLERS`,
and the call rules (``calls``) and iteration (``iteration``) into the entry points of ``base``.
"""

from . import calls, contexts, handlers, iteration, ops_basic, ops_call, ops_data  # noqa: F401  (register handlers)
from .base import HANDLERS, NULL, UNBOUND, Unsupported
from .frame import BreakHere, Frame, Stop
from .session import ModeExit, ResumeIter, Session

__all__ = ["HANDLERS", "BreakHere", "Frame", "Stop", "NULL", "UNBOUND", "ModeExit", "ResumeIter", "Session",
           "Unsupported"]
