"""Native resume: continue a frame at a bytecode offset as ordinary CPython code.

When a resume point cannot be compiled (past the recompile limit, typically a graph break in a
loop body that changes with each iteration), the rest of the frame runs at full interpreter
speed instead of on the real-value frame (``real_frame.py``): we build, once per (code, offset, stack shape), a copy of
the frame's code object with a short prologue in front of the original bytecode:

    RESUME 0; COPY_FREE_VARS n; DELETE_FAST <each unbound local>;
    LOAD_FAST __tc_stack<i> / PUSH_NULL  (rebuilding the value stack); EXTENDED_ARG...; JUMP_FORWARD offset

The locals and the saved stack values are its positional parameters, closures are passed as
they are. Everything after the prologue is the original bytecode, so the exception table is
shifted by the prologue's length and cell/free-variable opargs (offsets into "fast locals plus
cells") by the number of stack parameters added. Frames with cell variables of their own
(``MAKE_CELL``) are not rebuilt this way; they run on the real-value frame.
"""

from __future__ import annotations

import dis
import functools
import types

from ..interp.base import NULL, UNBOUND

_OP = dis.opmap
_FREE_OPS = set(dis.hasfree)
_NO_LOCATION = 0x80 | (15 << 3)  # a location-table entry "no location" covering (n & 7) + 1 units


def resume_natively(code, globals_, closure, offset: int, F: list) -> tuple[bool, object]:
    """Run ``code`` from ``offset`` with state ``F`` (locals then stack); (False, None) if we can't."""
    nlocals = len(code.co_varnames)
    stack = F[nlocals:]
    shape = tuple(0 if v is NULL else 1 for v in stack)
    unbound = tuple(i for i in range(nlocals) if F[i] is UNBOUND)
    fn = _resume_function(code, offset, shape, unbound)
    if fn is None:
        return False, None
    args = [None if v is UNBOUND else v for v in F[:nlocals]] + [v for v in stack if v is not NULL]
    func = types.FunctionType(fn, globals_, code.co_name, None, tuple(closure) or None)
    return True, func(*args)


@functools.lru_cache(maxsize=512)
def _resume_function(code, offset: int, shape: tuple, unbound: tuple):
    if code.co_cellvars or code.co_flags & (0x20 | 0x80 | 0x200):  # cells, generators, coroutines
        return None
    nstack = sum(shape)
    names = tuple(code.co_varnames) + tuple(f"__tc_stack{i}" for i in range(nstack))
    prologue = [("RESUME", 0)]
    if code.co_freevars:
        prologue.append(("COPY_FREE_VARS", len(code.co_freevars)))
    prologue += [("DELETE_FAST", i) for i in unbound]
    k = len(code.co_varnames)
    for present in shape:
        if present:
            prologue.append(("LOAD_FAST", k))
            k += 1
        else:
            prologue.append(("PUSH_NULL", 0))
    if any(arg > 255 for _, arg in prologue):
        return None
    size = 2 * (len(prologue) + 4)  # + EXTENDED_ARG x3 + JUMP_FORWARD
    delta = offset // 2  # JUMP_FORWARD counts code units from the instruction after it
    prologue += [("EXTENDED_ARG", (delta >> 24) & 255), ("EXTENDED_ARG", (delta >> 16) & 255),
                 ("EXTENDED_ARG", (delta >> 8) & 255), ("JUMP_FORWARD", delta & 255)]
    body = _shift_free_opargs(code.co_code, nstack)
    if body is None:
        return None
    head = bytes(b for name, arg in prologue for b in (_OP[name], arg))
    return code.replace(
        co_code=head + body, co_argcount=len(names), co_posonlyargcount=0, co_kwonlyargcount=0,
        co_nlocals=len(names), co_varnames=names, co_flags=code.co_flags & ~0x0C,  # no *args/**kwargs
        co_stacksize=code.co_stacksize + nstack + 2,
        co_exceptiontable=_shift_exception_table(code, size),
        co_linetable=_no_location(size // 2) + code.co_linetable)


def _shift_free_opargs(raw: bytes, by: int) -> bytes | None:
    out = bytearray(raw)
    for i in range(0, len(out), 2):
        if out[i] in _FREE_OPS and by:
            if i and out[i - 2] == _OP["EXTENDED_ARG"] or out[i + 1] + by > 255:
                return None
            out[i + 1] += by
    return bytes(out)


def _shift_exception_table(code, by: int) -> bytes:
    out = bytearray()
    for e in dis._parse_exception_table(code):
        first = len(out)
        for value in ((e.start + by) // 2, (e.end - e.start) // 2, (e.target + by) // 2, e.depth << 1 | e.lasti):
            out += _varint(value)
        out[first] |= 0x80
    return bytes(out)


def _varint(value: int) -> bytes:
    chunks = [value & 63]
    value >>= 6
    while value:
        chunks.append(value & 63)
        value >>= 6
    chunks.reverse()
    return bytes(c | 64 for c in chunks[:-1]) + bytes(chunks[-1:])


def _no_location(units: int) -> bytes:
    out = bytearray()
    while units > 0:
        n = min(units, 8)
        out.append(_NO_LOCATION | (n - 1))
        units -= n
    return bytes(out)
