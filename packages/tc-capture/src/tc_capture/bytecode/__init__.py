"""Decoding CPython bytecode into one normalized instruction list (see ``versions``)."""

from .versions import PY312, Inst, decode

__all__ = ["Inst", "decode", "PY312"]
