"""Every difference between CPython 3.11 and 3.12 bytecode that the interpreter sees.

The interpreter works on one normalized vocabulary: jump flavours collapse into ``JUMP`` and
``POP_JUMP_IF_*``, ``LOAD_METHOD`` (3.11) becomes ``LOAD_ATTR`` with ``method=True`` (the 3.12
spelling), ``PRECALL`` becomes ``NOP``, and each instruction carries its decoded operand
(``argval``), its flags, its jump target and its source line. Written from the ``dis``
documentation of both versions; nothing else in the package looks at ``sys.version_info``.
"""

from __future__ import annotations

import dis
import functools
import sys
from types import CodeType
from typing import Any, NamedTuple

PY312 = sys.version_info >= (3, 12)
SUPPORTED = ((3, 11), (3, 12))

# 3.11 spellings of conditional jumps that 3.12 names without a direction.
_RENAMES = {
    "POP_JUMP_FORWARD_IF_TRUE": "POP_JUMP_IF_TRUE",
    "POP_JUMP_BACKWARD_IF_TRUE": "POP_JUMP_IF_TRUE",
    "POP_JUMP_FORWARD_IF_FALSE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_FALSE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_FORWARD_IF_NONE": "POP_JUMP_IF_NONE",
    "POP_JUMP_BACKWARD_IF_NONE": "POP_JUMP_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
    "POP_JUMP_BACKWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
    "JUMP_FORWARD": "JUMP",
    "JUMP_BACKWARD": "JUMP",
    "JUMP_BACKWARD_NO_INTERRUPT": "JUMP",
    "LOAD_FAST_CHECK": "LOAD_FAST",  # 3.12: same as LOAD_FAST once we check unbound locals
    "PRECALL": "NOP",  # 3.11 only: a specialization hook, no stack effect
    "RESUME": "NOP",
    "CACHE": "NOP",
    "EXTENDED_ARG": "NOP",  # dis already folded it into the next instruction's arg
    "COPY_FREE_VARS": "NOP",  # closure cells are bound when the frame is set up
    "LIST_TO_TUPLE": "LIST_TO_TUPLE",
}

# 3.12 CALL_INTRINSIC_1 operands we meet in ordinary code.
INTRINSIC_UNARY_POSITIVE = 5
INTRINSIC_LIST_TO_TUPLE = 6


class Inst(NamedTuple):
    """One normalized instruction (immutable; a named tuple: a frozen dataclass's ``__init__``,
    one ``object.__setattr__`` per field, was a fifth of decoding a transformers forward)."""

    opname: str
    arg: int | None
    argval: Any
    offset: int
    lineno: int
    target: int | None  # jump target offset, where there is one
    method: bool = False  # LOAD_ATTR: push (method, self) or (NULL, attr)
    push_null: bool = False  # LOAD_GLOBAL: push NULL before the global


_JUMPS = frozenset(dis.hasjabs) | frozenset(dis.hasjrel)  # dis's are lists


def _normalize(ins: dis.Instruction, lineno: int, code: CodeType) -> Inst:
    name = _RENAMES.get(ins.opname, ins.opname)
    arg, argval, method, push_null = ins.arg, ins.argval, False, False
    target = ins.argval if ins.opcode in _JUMPS else None
    if ins.opname == "LOAD_METHOD":
        name, method = "LOAD_ATTR", True
    elif ins.opname == "LOAD_ATTR" and PY312:
        method = bool(arg & 1)
    elif ins.opname == "LOAD_GLOBAL":
        push_null = bool(arg & 1)
    elif ins.opname == "COMPARE_OP":
        argval = dis.cmp_op[arg >> 4] if PY312 else dis.cmp_op[arg]
    elif ins.opname == "BINARY_OP":
        argval = dis._nb_ops[arg][1]
    elif ins.opname == "CALL_INTRINSIC_1":
        name = {INTRINSIC_LIST_TO_TUPLE: "LIST_TO_TUPLE", INTRINSIC_UNARY_POSITIVE: "UNARY_POSITIVE"}.get(
            arg, "CALL_INTRINSIC_1")
    elif ins.opname == "KW_NAMES":  # some 3.11 releases leave argval unresolved
        argval = code.co_consts[arg]
    elif ins.opname == "LOAD_SUPER_ATTR":
        method = bool(arg & 1)
    return Inst(name, arg, argval, ins.offset, lineno, target, method, push_null)


@functools.lru_cache(maxsize=4096)
def decode(code: CodeType) -> tuple[tuple[Inst, ...], dict[int, int]]:
    """The normalized instructions of ``code`` and a map from offset to instruction index."""
    if sys.version_info[:2] not in SUPPORTED:
        raise RuntimeError(f"tc_capture supports CPython 3.11 and 3.12, not {sys.version.split()[0]}")
    out, lineno = [], code.co_firstlineno
    for ins in dis.get_instructions(code):
        pos = getattr(ins, "positions", None)
        if pos is not None and pos.lineno is not None:
            lineno = pos.lineno
        elif ins.starts_line:
            lineno = ins.starts_line
        out.append(_normalize(ins, lineno, code))
    return tuple(out), {ins.offset: i for i, ins in enumerate(out)}


def for_iter_exit(insts: tuple[Inst, ...], index_of: dict[int, int], inst: Inst) -> int:
    """Where an exhausted FOR_ITER continues, as an instruction index.

    3.11 pops the iterator and jumps to the target. 3.12 jumps to an END_FOR that pops two
    values, but the interpreter loop really skips it after popping the iterator itself
    (ceval: ``JUMPBY(oparg + 1)``); we do the same.
    """
    i = index_of[inst.target]
    return i + 1 if insts[i].opname == "END_FOR" else i


# SEND on an exhausted sub-iterator: 3.11 pops the receiver and pushes the return value; 3.12
# leaves the receiver below the return value for the END_SEND at the jump target to remove.
SEND_KEEPS_RECEIVER = PY312


def call_stack_layout(nargs: int) -> int:
    """How many stack slots a CALL consumes: the two callable/self-or-NULL slots plus args."""
    return nargs + 2
