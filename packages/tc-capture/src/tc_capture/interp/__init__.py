"""The symbolic bytecode interpreter: values, the opcode table, the symbolic frame, call rules.

Importing this package fills the opcode table (``opcodes.py``) into :data:`base.HANDLERS` and
registers the call rules (``calls``) and iteration (``iteration``) as the entry points of ``base``.
"""

from . import calls, iteration, opcodes  # noqa: F401  (register the opcode table and the entry points)
from .base import HANDLERS, NULL, UNBOUND, Unsupported
from .frame import BreakHere, Frame, Stop
from .session import ModeExit, ResumeIter, Session

__all__ = ["HANDLERS", "BreakHere", "Frame", "Stop", "NULL", "UNBOUND", "ModeExit", "ResumeIter", "Session",
           "Unsupported"]
