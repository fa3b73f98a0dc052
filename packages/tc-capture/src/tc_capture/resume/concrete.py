"""A plain Python bytecode interpreter over real values.

It runs the one instruction at a graph break (the call to ``print``, the ``if`` on a tensor)
with the live frame state rebuilt after the graph, and it runs the rest of a frame whose
resume point hit the recompile limit. Same normalized opcodes as the symbolic interpreter;
its own closed table, with ordinary Python semantics.
"""

from __future__ import annotations

import builtins
import types

from ..bytecode import decode
from ..bytecode.versions import for_iter_exit
from ..interp.base import NULL, UNBOUND
from ..interp.pyops import BINARY, COMPARE, UNARY

OPS: dict = {}
_RETURN = object()


def op(*names):
    def register(fn):
        for n in names:
            OPS[n] = fn
        return fn

    return register


class CFrame:
    def __init__(self, code, globals_, locals_: list, stack: list, cells: list, ip: int):
        self.code, self.globals = code, globals_
        self.insts, self.index_of = decode(code)
        self.var_index = {n: i for i, n in enumerate(code.co_varnames)}
        self.cell_index = {n: i for i, n in enumerate(code.co_freevars + code.co_cellvars)}
        self.locals, self.stack, self.cells, self.ip = list(locals_), list(stack), list(cells), ip
        self.kw_names: tuple = ()
        self.result = None
        self.callee = None  # at a break inside an inlined call: runs that call as compiled frames

    def pop(self):
        return self.stack.pop()

    def popn(self, n):
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    def step(self) -> bool:
        """Run one instruction; True when the frame returned."""
        inst = self.insts[self.ip]
        self.ip += 1
        handler = OPS.get(inst.opname)
        if handler is None:
            raise RuntimeError(f"tc_capture cannot resume past {inst.opname} at "
                               f"{self.code.co_filename}:{inst.lineno}")
        return handler(self, inst) is _RETURN

    def run(self):
        while not self.step():
            pass
        return self.result

    def state(self) -> tuple[int, list, list]:
        """(offset, F, C) of the next instruction: the resume point's inputs."""
        return self.insts[self.ip].offset, self.locals + self.stack, self.cells


def call(fn, args, kwargs, frame: CFrame):
    if fn is super and not args:
        cls = frame.cells[frame.cell_index["__class__"]].cell_contents
        return super(cls, frame.locals[0])
    if frame.callee is not None:
        return frame.callee(fn, args, kwargs)
    return fn(*args, **kwargs)


@op("NOP", "KW_NAMES_DONE")
def _nop(f, i):
    pass


@op("LOAD_CONST")
def _load_const(f, i):
    f.stack.append(i.argval)


@op("RETURN_VALUE")
def _return(f, i):
    f.result = f.pop()
    return _RETURN


@op("RETURN_CONST")
def _return_const(f, i):
    f.result = i.argval
    return _RETURN


@op("LOAD_FAST")
def _load_fast(f, i):
    v = f.locals[f.var_index[i.argval]]
    if v is UNBOUND:
        raise UnboundLocalError(f"local variable {i.argval!r} referenced before assignment")
    f.stack.append(v)


@op("LOAD_FAST_AND_CLEAR")
def _load_fast_and_clear(f, i):
    k = f.var_index[i.argval]
    v = f.locals[k]
    f.stack.append(NULL if v is UNBOUND else v)
    f.locals[k] = UNBOUND


@op("STORE_FAST")
def _store_fast(f, i):
    v = f.pop()
    f.locals[f.var_index[i.argval]] = UNBOUND if v is NULL else v


@op("DELETE_FAST")
def _delete_fast(f, i):
    f.locals[f.var_index[i.argval]] = UNBOUND


@op("LOAD_GLOBAL")
def _load_global(f, i):
    if i.push_null:
        f.stack.append(NULL)
    name = i.argval
    if name in f.globals:
        f.stack.append(f.globals[name])
        return
    b = f.globals.get("__builtins__", builtins)
    f.stack.append((b if isinstance(b, dict) else vars(b))[name])


@op("STORE_GLOBAL")
def _store_global(f, i):
    f.globals[i.argval] = f.pop()


@op("LOAD_DEREF", "LOAD_CLASSDEREF")
def _load_deref(f, i):
    f.stack.append(f.cells[f.cell_index[i.argval]].cell_contents)


@op("STORE_DEREF")
def _store_deref(f, i):
    f.cells[f.cell_index[i.argval]].cell_contents = f.pop()


@op("MAKE_CELL")
def _make_cell(f, i):
    k = f.var_index.get(i.argval)
    value = f.locals[k] if k is not None else UNBOUND
    f.cells[f.cell_index[i.argval]] = types.CellType() if value is UNBOUND else types.CellType(value)


@op("LOAD_CLOSURE")
def _load_closure(f, i):
    f.stack.append(f.cells[f.cell_index[i.argval]])


@op("POP_TOP")
def _pop_top(f, i):
    f.pop()


@op("END_FOR")
def _end_for(f, i):
    f.popn(2)


@op("PUSH_NULL")
def _push_null(f, i):
    f.stack.append(NULL)


@op("COPY")
def _copy(f, i):
    f.stack.append(f.stack[-i.arg])


@op("SWAP")
def _swap(f, i):
    f.stack[-1], f.stack[-i.arg] = f.stack[-i.arg], f.stack[-1]


@op("JUMP")
def _jump(f, i):
    f.ip = f.index_of[i.target]


def _cond_jump(test):
    def handler(f, i):
        if test(f.pop()):
            f.ip = f.index_of[i.target]

    return handler


OPS["POP_JUMP_IF_TRUE"] = _cond_jump(lambda v: bool(v))
OPS["POP_JUMP_IF_FALSE"] = _cond_jump(lambda v: not v)
OPS["POP_JUMP_IF_NONE"] = _cond_jump(lambda v: v is None)
OPS["POP_JUMP_IF_NOT_NONE"] = _cond_jump(lambda v: v is not None)


@op("JUMP_IF_TRUE_OR_POP")
def _jump_if_true_or_pop(f, i):
    if f.stack[-1]:
        f.ip = f.index_of[i.target]
    else:
        f.pop()


@op("JUMP_IF_FALSE_OR_POP")
def _jump_if_false_or_pop(f, i):
    if not f.stack[-1]:
        f.ip = f.index_of[i.target]
    else:
        f.pop()


@op("KW_NAMES")
def _kw_names(f, i):
    f.kw_names = i.argval


@op("CALL")
def _call(f, i):
    args = f.popn(i.arg)
    names, f.kw_names = f.kw_names, ()
    kwargs = dict(zip(names, args[len(args) - len(names):])) if names else {}
    args = args[:len(args) - len(names)]
    b, a = f.pop(), f.pop()
    fn, args = (b, args) if a is NULL else (a, [b, *args])
    f.stack.append(call(fn, args, kwargs, f))


@op("CALL_FUNCTION_EX")
def _call_ex(f, i):
    kwargs = f.pop() if i.arg & 1 else {}
    args, fn = f.pop(), f.pop()
    if f.stack and f.stack[-1] is NULL:
        f.pop()
    f.stack.append(call(fn, list(args), dict(kwargs), f))


@op("MAKE_FUNCTION")
def _make_function(f, i):
    code = f.pop()
    closure = f.pop() if i.arg & 0x08 else None
    if i.arg & 0x04:
        f.pop()
    kwdefaults = f.pop() if i.arg & 0x02 else None
    defaults = f.pop() if i.arg & 0x01 else None
    fn = types.FunctionType(code, f.globals, code.co_name, defaults, closure)
    fn.__kwdefaults__, fn.__qualname__ = kwdefaults, code.co_qualname
    f.stack.append(fn)


@op("LOAD_ATTR")
def _load_attr(f, i):
    v = getattr(f.pop(), i.argval)
    if i.method:
        f.stack.append(NULL)
    f.stack.append(v)


@op("LOAD_SUPER_ATTR")
def _load_super_attr(f, i):
    self_v, cls, _ = f.pop(), f.pop(), f.pop()
    if i.method:
        f.stack.append(NULL)
    f.stack.append(getattr(super(cls, self_v), i.argval))


@op("STORE_ATTR")
def _store_attr(f, i):
    obj, value = f.pop(), f.pop()
    setattr(obj, i.argval, value)


@op("DELETE_ATTR")
def _delete_attr(f, i):
    delattr(f.pop(), i.argval)


@op("BUILD_TUPLE")
def _build_tuple(f, i):
    f.stack.append(tuple(f.popn(i.arg)))


@op("BUILD_LIST")
def _build_list(f, i):
    f.stack.append(f.popn(i.arg))


@op("BUILD_SET")
def _build_set(f, i):
    f.stack.append(set(f.popn(i.arg)))


@op("BUILD_MAP")
def _build_map(f, i):
    flat = f.popn(2 * i.arg)
    f.stack.append({flat[k]: flat[k + 1] for k in range(0, len(flat), 2)})


@op("BUILD_CONST_KEY_MAP")
def _build_const_key_map(f, i):
    keys = f.pop()
    f.stack.append(dict(zip(keys, f.popn(i.arg))))


@op("BUILD_SLICE")
def _build_slice(f, i):
    f.stack.append(slice(*f.popn(i.arg)))


@op("BUILD_STRING")
def _build_string(f, i):
    f.stack.append("".join(f.popn(i.arg)))


@op("LIST_APPEND")
def _list_append(f, i):
    v = f.pop()
    f.stack[-i.arg].append(v)


@op("SET_ADD")
def _set_add(f, i):
    v = f.pop()
    f.stack[-i.arg].add(v)


@op("MAP_ADD")
def _map_add(f, i):
    value, key = f.pop(), f.pop()
    f.stack[-i.arg][key] = value


@op("LIST_EXTEND")
def _list_extend(f, i):
    v = f.pop()
    f.stack[-i.arg].extend(v)


@op("SET_UPDATE", "DICT_UPDATE", "DICT_MERGE")
def _update(f, i):
    v = f.pop()
    f.stack[-i.arg].update(v)


@op("LIST_TO_TUPLE")
def _list_to_tuple(f, i):
    f.stack.append(tuple(f.pop()))


@op("UNPACK_SEQUENCE")
def _unpack(f, i):
    items = list(f.pop())
    if len(items) != i.arg:
        raise ValueError(f"expected {i.arg} values to unpack, got {len(items)}")
    f.stack.extend(reversed(items))


@op("UNPACK_EX")
def _unpack_ex(f, i):
    before, after = i.arg & 0xFF, i.arg >> 8
    items = list(f.pop())
    middle = items[before:len(items) - after]
    f.stack.extend(reversed(items[:before] + [middle] + items[len(items) - after:]))


@op("BINARY_SUBSCR")
def _subscr(f, i):
    key, obj = f.pop(), f.pop()
    f.stack.append(obj[key])


@op("BINARY_SLICE")
def _binary_slice(f, i):
    end, start, obj = f.pop(), f.pop(), f.pop()
    f.stack.append(obj[start:end])


@op("STORE_SUBSCR")
def _store_subscr(f, i):
    key, obj, value = f.pop(), f.pop(), f.pop()
    obj[key] = value


@op("STORE_SLICE")
def _store_slice(f, i):
    end, start, obj, value = f.pop(), f.pop(), f.pop(), f.pop()
    obj[start:end] = value


@op("DELETE_SUBSCR")
def _delete_subscr(f, i):
    key, obj = f.pop(), f.pop()
    del obj[key]


@op("BINARY_OP")
def _binary(f, i):
    b, a = f.pop(), f.pop()
    f.stack.append(BINARY[i.argval](a, b))


@op("COMPARE_OP")
def _compare(f, i):
    b, a = f.pop(), f.pop()
    f.stack.append(COMPARE[i.argval](a, b))


@op("IS_OP")
def _is(f, i):
    b, a = f.pop(), f.pop()
    f.stack.append((a is b) != bool(i.arg))


@op("CONTAINS_OP")
def _contains(f, i):
    container, item = f.pop(), f.pop()
    f.stack.append((item in container) != bool(i.arg))


@op("UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT")
def _unary(f, i):
    f.stack.append(UNARY[i.opname](f.pop()))


@op("UNARY_NOT")
def _not(f, i):
    f.stack.append(not f.pop())


@op("FORMAT_VALUE")
def _format(f, i):
    spec = f.pop() if i.arg & 4 else ""
    v = f.pop()
    conv = {0: None, 1: str, 2: repr, 3: ascii}[i.arg & 3]
    f.stack.append(format(conv(v) if conv else v, spec))


@op("GET_ITER")
def _get_iter(f, i):
    f.stack.append(iter(f.pop()))


@op("FOR_ITER")
def _for_iter(f, i):
    try:
        f.stack.append(next(f.stack[-1]))
    except StopIteration:
        f.pop()
        f.ip = for_iter_exit(f.insts, f.index_of, i)


@op("BEFORE_WITH")
def _before_with(f, i):
    ctx = f.pop()
    f.stack.append(types.MethodType(type(ctx).__exit__, ctx))
    f.stack.append(type(ctx).__enter__(ctx))


@op("IMPORT_NAME")
def _import_name(f, i):
    fromlist, level = f.pop(), f.pop()
    f.stack.append(__import__(i.argval, f.globals, None, fromlist, level))


@op("IMPORT_FROM")
def _import_from(f, i):
    f.stack.append(getattr(f.stack[-1], i.argval))


@op("LOAD_ASSERTION_ERROR")
def _assertion(f, i):
    f.stack.append(AssertionError)


@op("RAISE_VARARGS")
def _raise(f, i):
    if i.arg == 0:
        raise RuntimeError("No active exception to reraise")
    if i.arg == 1:
        raise f.pop()  # not ``from None``: that would hide the exception's context
    cause = f.pop()
    raise f.pop() from cause


@op("PUSH_EXC_INFO")
def _push_exc_info(f, i):
    f.stack.insert(-1, None)


@op("POP_EXCEPT")
def _pop_except(f, i):
    f.pop()


@op("CHECK_EXC_MATCH")
def _check_exc_match(f, i):
    typ = f.pop()
    f.stack.append(isinstance(f.stack[-1], typ))


@op("RERAISE")
def _reraise(f, i):
    raise f.pop()


@op("GET_LEN")
def _get_len(f, i):
    f.stack.append(len(f.stack[-1]))


