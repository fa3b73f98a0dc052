"""Decoding CPython bytecode into one normalized instruction list (see ``versions``)."""

from .versions import Inst, decode, PY312

__all__ = ["Inst", "decode", "PY312"]
