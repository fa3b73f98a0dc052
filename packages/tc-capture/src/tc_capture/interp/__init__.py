"""The symbolic bytecode interpreter: values, frames, opcode tables and call rules.

Importing this package registers every opcode handler (``ops_*.py``, ``iteration.py``,
``contexts.py``, ``handlers.py``) into :data:`frame.HANDLERS`.
"""

from . import contexts, handlers, iteration, ops_basic, ops_call, ops_data  # noqa: F401  (register handlers)
from .frame import HANDLERS, BreakHere, Frame, Stop
from .session import NULL, UNBOUND, ModeExit, ResumeIter, Session, Unsupported

__all__ = ["HANDLERS", "BreakHere", "Frame", "Stop", "NULL", "UNBOUND", "ModeExit", "ResumeIter", "Session",
           "Unsupported"]
