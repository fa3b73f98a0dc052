"""One frame of the symbolic interpreter: locals, cells, the value stack and the step loop.

Opcode handlers live in ``ops_*.py``, each file a closed table registered with
:func:`handler`. An opcode with no handler, or a handler that raises :class:`Unsupported`,
ends capture at that instruction of the *outermost* frame (a graph break); the driver then
captures again, stopping just before it, so that nothing an abandoned inlined call did leaks
into the graph.
"""

from __future__ import annotations

from types import CodeType

from ..bytecode import decode
from .base import DONE, HANDLERS, Unsupported
from .session import Session
from .variables import V

MAX_DEPTH = 40
MAX_STEPS = 300_000



class BreakHere(Exception):
    """Raised out of the outermost frame: capture must stop before the instruction at ``offset``."""

    def __init__(self, offset: int, cause: Unsupported):
        super().__init__(cause.reason)
        self.offset, self.cause = offset, cause


class Stop:
    """The outermost frame stopped before instruction ``ip`` (a graph break)."""

    def __init__(self, frame: Frame, ip: int):
        self.frame, self.ip = frame, ip


class Frame:
    def __init__(self, session: Session, code: CodeType, globals_: dict, locals_: dict[str, V],
                 cells: dict[str, V], parent: Frame | None = None, break_at: frozenset = frozenset(),
                 ip: int = 0, stack: list | None = None):
        self.session, self.code, self.globals, self.parent = session, code, globals_, parent
        self.insts, self.index_of = decode(code)
        self.locals, self.cells = locals_, cells
        self.stack: list[V] = list(stack or [])
        self.ip, self.start_ip, self.break_at = ip, ip, break_at
        self.kw_names: tuple = ()
        self.depth = 0 if parent is None else parent.depth + 1
        self.result: V | None = None
        self.yields: list[V] | None = None  # a generator run to completion collects here
        self.lineno = code.co_firstlineno
        self.steps = 0
        if self.depth > MAX_DEPTH:
            raise Unsupported("inlining went deeper than 40 calls (recursion?)")

    # ---- stack ------------------------------------------------------------------------------
    def push(self, v: V) -> None:
        self.stack.append(v)

    def pop(self) -> V:
        return self.stack.pop()

    def popn(self, n: int) -> list[V]:
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    def jump(self, offset: int) -> None:
        self.ip = self.index_of[offset]

    # ---- running ----------------------------------------------------------------------------
    def run(self) -> V | Stop:
        while True:
            inst = self.insts[self.ip]
            if self.parent is None and inst.offset in self.break_at:
                return Stop(self, self.ip)
            self.ip += 1
            self.lineno = inst.lineno
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise self._locate(Unsupported("too many instructions (a long Python loop?)"), inst)
            try:
                fn = HANDLERS.get(inst.opname)
                if fn is None:
                    raise Unsupported(f"opcode {inst.opname} is not supported")
                if fn(self, inst) is DONE:
                    return self.result
            except Unsupported as e:
                self._locate(e, inst)
                if self.parent is None:
                    raise BreakHere(inst.offset, e) from e
                e.nested = True  # the outermost frame's instruction called code that broke inside
                raise
            except (BreakHere, RecursionError):
                raise
            except Exception as e:  # an interpreter gap must not crash the user's program
                err = self._locate(Unsupported(f"capture failed on {inst.opname}: {type(e).__name__}: {e}"), inst)
                if self.parent is None:
                    raise BreakHere(inst.offset, err) from e
                err.nested = True
                raise err from e

    def _locate(self, e: Unsupported, inst) -> Unsupported:
        if e.lineno is None:
            e.filename, e.lineno = self.code.co_filename, inst.lineno
        return e
