"""Opcodes of ``except`` and ``finally`` handlers, entered with a real exception on the stack.

The interpreter never raises: an instruction that raises is a graph break, runs in Python, and
the driver (``runtime``) resumes capture at the handler the exception table names, with the
exception as a frame input (its type guarded). From there these opcodes run the handler like any
other code: the ``except`` clause's type test folds to a constant, the handler's body and the
code after it are captured. Re-raising (no clause matched, the end of a ``finally``) is a break.
"""

from __future__ import annotations

from .base import Unsupported, handler
from .variables import Const, TupleV


@handler("PUSH_EXC_INFO")
def op_push_exc_info(f, inst):
    exc = f.pop()
    f.push(Const(None))  # the exception handled before this one: none inside captured code
    f.push(exc)


@handler("CHECK_EXC_MATCH")
def op_check_exc_match(f, inst):
    typ, exc = _classes(f.pop()), f.stack[-1]
    if typ is None or not isinstance(exc, Const):
        raise Unsupported("except clause on a value unknown at capture time")
    f.push(Const(isinstance(exc.value, typ)))


@handler("POP_EXCEPT")
def op_pop_except(f, inst):
    f.pop()


@handler("RERAISE")
def op_reraise(f, inst):
    raise Unsupported("exception re-raised (no except clause matched, or the end of a finally)")


def _classes(v):
    """The class or tuple of classes an ``except`` clause names, None if not known."""
    if isinstance(v, Const):
        return v.value
    if isinstance(v, TupleV) and all(isinstance(i, Const) for i in v.items):
        return tuple(i.value for i in v.items)
    return None
