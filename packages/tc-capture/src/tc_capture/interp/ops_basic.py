"""Opcodes that move values: constants, locals, globals, cells, stack shuffles, jumps, return."""

from __future__ import annotations

import builtins

from ..cache import sources as S
from .base import DONE, Unsupported, handler
from .truth import truth
from .variables import NULL_V, CellV, Const, NullV, TensorV, V


@handler("NOP", "KW_NAMES_DONE")
def op_nop(f, inst):
    pass


@handler("LOAD_CONST")
def op_load_const(f, inst):
    f.push(Const(inst.argval))


@handler("RETURN_CONST")
def op_return_const(f, inst):
    f.result = Const(inst.argval)
    return DONE


@handler("RETURN_VALUE")
def op_return(f, inst):
    f.result = f.pop()
    return DONE


@handler("LOAD_FAST")
def op_load_fast(f, inst):
    v = f.locals.get(inst.argval)
    if v is None:
        raise Unsupported(f"local variable {inst.argval!r} is read before it is assigned")
    f.push(v)


@handler("LOAD_FAST_AND_CLEAR")
def op_load_fast_and_clear(f, inst):
    f.push(f.locals.pop(inst.argval, NULL_V))


@handler("STORE_FAST")
def op_store_fast(f, inst):
    v = f.pop()
    if isinstance(v, NullV):  # 3.12 comprehensions restore an unbound name this way
        f.locals.pop(inst.argval, None)
    else:
        f.locals[inst.argval] = v


@handler("DELETE_FAST")
def op_delete_fast(f, inst):
    f.locals.pop(inst.argval, None)


def load_global(f, name: str) -> V:
    session = f.session
    key = (id(f.globals), name)
    if key in session.global_writes:
        return session.global_writes[key]
    if name in f.globals:
        if f.globals is session.top_globals:
            source = S.global_(name)
        else:
            source = S.Source(f"{session.guards.ref(f.globals)}[{name!r}]", name)
        return session.wrap(f.globals[name], source)
    b = f.globals.get("__builtins__", builtins)
    b = b if isinstance(b, dict) else vars(b)
    if name in b:
        return Const(b[name])
    raise Unsupported(f"name {name!r} is not defined")


@handler("LOAD_GLOBAL")
def op_load_global(f, inst):
    if inst.push_null:
        f.push(NULL_V)
    f.push(load_global(f, inst.argval))


@handler("STORE_GLOBAL")
def op_store_global(f, inst):
    v = f.pop()
    f.session.global_writes[(id(f.globals), inst.argval)] = v
    f.session.side_effects.append(("global", f.globals, inst.argval, v))


@handler("LOAD_DEREF", "LOAD_CLASSDEREF")
def op_load_deref(f, inst):
    cell = f.cells.get(inst.argval)
    if cell is None or cell.contents is None:
        raise Unsupported(f"free variable {inst.argval!r} is read before it is assigned")
    f.push(cell.contents)


@handler("STORE_DEREF")
def op_store_deref(f, inst):
    cell = f.cells[inst.argval]
    cell.contents = f.pop()
    f.session.note_mutation(cell)


@handler("MAKE_CELL")
def op_make_cell(f, inst):
    f.cells[inst.argval] = CellV(f.locals.pop(inst.argval, None))


@handler("LOAD_CLOSURE")
def op_load_closure(f, inst):
    f.push(f.cells[inst.argval])


@handler("POP_TOP")
def op_pop_top(f, inst):
    f.pop()


@handler("END_FOR")
def op_end_for(f, inst):
    f.popn(2)


@handler("PUSH_NULL")
def op_push_null(f, inst):
    f.push(NULL_V)


@handler("COPY")
def op_copy(f, inst):
    f.push(f.stack[-inst.arg])


@handler("SWAP")
def op_swap(f, inst):
    f.stack[-1], f.stack[-inst.arg] = f.stack[-inst.arg], f.stack[-1]


@handler("JUMP")
def op_jump(f, inst):
    f.jump(inst.target)


@handler("POP_JUMP_IF_TRUE")
def op_jump_if_true(f, inst):
    if truth(f, f.pop()):
        f.jump(inst.target)


@handler("POP_JUMP_IF_FALSE")
def op_jump_if_false(f, inst):
    if not truth(f, f.pop()):
        f.jump(inst.target)


def _is_none(v: V) -> bool:
    return isinstance(v, Const) and v.value is None


@handler("POP_JUMP_IF_NONE")
def op_jump_if_none(f, inst):
    if _is_none(f.pop()):
        f.jump(inst.target)


@handler("POP_JUMP_IF_NOT_NONE")
def op_jump_if_not_none(f, inst):
    if not _is_none(f.pop()):
        f.jump(inst.target)


@handler("JUMP_IF_TRUE_OR_POP")
def op_jump_if_true_or_pop(f, inst):
    if truth(f, f.stack[-1]):
        f.jump(inst.target)
    else:
        f.pop()


@handler("JUMP_IF_FALSE_OR_POP")
def op_jump_if_false_or_pop(f, inst):
    if not truth(f, f.stack[-1]):
        f.jump(inst.target)
    else:
        f.pop()


@handler("IMPORT_NAME")
def op_import_name(f, inst):
    fromlist, level = f.pop(), f.pop()
    module = __import__(inst.argval, f.globals, None, fromlist.value, level.value)
    f.push(Const(module))


@handler("IMPORT_FROM")
def op_import_from(f, inst):
    f.push(Const(getattr(f.stack[-1].value, inst.argval)))


@handler("LOAD_ASSERTION_ERROR")
def op_load_assertion_error(f, inst):
    f.push(Const(AssertionError))


@handler("RAISE_VARARGS")
def op_raise(f, inst):
    raise Unsupported("raise statement reached while capturing")


def is_tensor(v: V) -> bool:
    return isinstance(v, TensorV)
