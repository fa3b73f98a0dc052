"""The opcode table: what each normalized CPython instruction does to a frame.

There is one table, :data:`base.HANDLERS`, and two executors run it:

* the symbolic :class:`~tc_capture.interp.frame.Frame`, which captures (its values are ``V``
  objects: tensors become graph nodes, constants fold, what is read is guarded);
* the real-value :class:`~tc_capture.resume.real_frame.RealFrame`, which runs the instruction at a
  graph break (and, rarely, the rest of a frame) on the live Python values.

A handler here says how an instruction moves values between the stack, the locals and the cells
and where control goes next. What an operation does *to values* (add two of them, read an
attribute, call, test truth, build a tuple...) it asks of the frame it runs in: each executor
implements the same value operations (``f.binary``, ``f.get_attr``, ``f.call`` ...), listed in
:class:`~tc_capture.interp.base.StackFrame`. Bytecode differences between CPython versions are
normalized before this (``bytecode/versions.py``).
"""

from __future__ import annotations

from ..bytecode.versions import SEND_KEEPS_RECEIVER, for_iter_exit
from .base import DONE, EXHAUSTED, UNBOUND, handler


# ---- constants, locals, globals, cells ------------------------------------------------------------
@handler("NOP", "KW_NAMES_DONE")
def op_nop(f, inst):
    pass


@handler("LOAD_CONST")
def op_load_const(f, inst):
    f.push(f.const(inst.argval))


@handler("LOAD_ASSERTION_ERROR")
def op_load_assertion_error(f, inst):
    f.push(f.const(AssertionError))


@handler("LOAD_BUILD_CLASS")
def op_load_build_class(f, inst):
    f.push(f.const(__build_class__))  # a `class` statement calls it (interp/stdlib_classes.py)


@handler("RETURN_CONST")
def op_return_const(f, inst):
    f.result = f.const(inst.argval)
    return DONE


@handler("RETURN_VALUE")
def op_return(f, inst):
    f.result = f.pop()
    return DONE


@handler("LOAD_FAST")
def op_load_fast(f, inst):
    v = f.locals.get(inst.argval, UNBOUND)
    if v is UNBOUND:
        f.unbound_local(inst.argval)
    f.push(v)


@handler("LOAD_FAST_AND_CLEAR")
def op_load_fast_and_clear(f, inst):
    f.push(f.locals.pop(inst.argval, f.null))


@handler("STORE_FAST")
def op_store_fast(f, inst):
    v = f.pop()
    if f.is_null(v):  # 3.12 comprehensions restore an unbound name this way
        f.locals.pop(inst.argval, None)
    else:
        f.locals[inst.argval] = v


@handler("DELETE_FAST")
def op_delete_fast(f, inst):
    f.locals.pop(inst.argval, None)


@handler("LOAD_GLOBAL")
def op_load_global(f, inst):
    if inst.push_null:
        f.push(f.null)
    f.push(f.load_global(inst.argval))


@handler("STORE_GLOBAL")
def op_store_global(f, inst):
    f.store_global(inst.argval, f.pop())


@handler("LOAD_DEREF", "LOAD_CLASSDEREF")
def op_load_deref(f, inst):
    f.push(f.load_deref(inst.argval))


@handler("STORE_DEREF")
def op_store_deref(f, inst):
    f.store_deref(inst.argval, f.pop())


@handler("MAKE_CELL")
def op_make_cell(f, inst):
    f.make_cell(inst.argval)


@handler("LOAD_CLOSURE")
def op_load_closure(f, inst):
    f.push(f.cells[inst.argval])


@handler("IMPORT_NAME")
def op_import_name(f, inst):
    fromlist, level = f.pop(), f.pop()
    f.push(f.import_name(inst.argval, fromlist, level))


@handler("IMPORT_FROM")
def op_import_from(f, inst):
    f.push(f.import_from(f.stack[-1], inst.argval))


# ---- stack shuffles and jumps -----------------------------------------------------------------------
@handler("POP_TOP")
def op_pop_top(f, inst):
    f.pop()


@handler("END_FOR")
def op_end_for(f, inst):
    f.popn(2)


@handler("PUSH_NULL")
def op_push_null(f, inst):
    f.push(f.null)


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
    if f.truth(f.pop()):
        f.jump(inst.target)


@handler("POP_JUMP_IF_FALSE")
def op_jump_if_false(f, inst):
    if not f.truth(f.pop()):
        f.jump(inst.target)


@handler("POP_JUMP_IF_NONE")
def op_jump_if_none(f, inst):
    if f.is_none(f.pop()):
        f.jump(inst.target)


@handler("POP_JUMP_IF_NOT_NONE")
def op_jump_if_not_none(f, inst):
    if not f.is_none(f.pop()):
        f.jump(inst.target)


@handler("JUMP_IF_TRUE_OR_POP")
def op_jump_if_true_or_pop(f, inst):
    if f.truth(f.stack[-1]):
        f.jump(inst.target)
    else:
        f.pop()


@handler("JUMP_IF_FALSE_OR_POP")
def op_jump_if_false_or_pop(f, inst):
    if not f.truth(f.stack[-1]):
        f.jump(inst.target)
    else:
        f.pop()


# ---- calls, functions, attributes -----------------------------------------------------------------
@handler("KW_NAMES")
def op_kw_names(f, inst):
    f.kw_names = inst.argval


@handler("CALL")
def op_call(f, inst):
    args = f.popn(inst.arg)
    names, f.kw_names = f.kw_names, ()
    kwargs = dict(zip(names, args[len(args) - len(names):])) if names else {}
    args = args[:len(args) - len(names)]
    b, a = f.pop(), f.pop()
    fn, args = (b, args) if f.is_null(a) else (a, [b, *args])
    f.push(f.call(fn, args, kwargs))


@handler("CALL_FUNCTION_EX")
def op_call_function_ex(f, inst):
    kwargs = f.pop() if inst.arg & 1 else None
    args, fn = f.pop(), f.pop()
    if f.stack and f.is_null(f.stack[-1]):
        f.pop()
    f.push(f.call_ex(fn, args, kwargs))


@handler("MAKE_FUNCTION")
def op_make_function(f, inst):
    code = f.pop()
    closure = f.pop() if inst.arg & 0x08 else None
    if inst.arg & 0x04:
        f.pop()  # annotations: not needed to run the function
    kwdefaults = f.pop() if inst.arg & 0x02 else None
    defaults = f.pop() if inst.arg & 0x01 else None
    f.push(f.make_function(code, closure, kwdefaults, defaults))


@handler("LOAD_ATTR")
def op_load_attr(f, inst):
    value = f.get_attr(f.pop(), inst.argval)
    if inst.method:
        f.push(f.null)
    f.push(value)


@handler("LOAD_SUPER_ATTR")
def op_load_super_attr(f, inst):
    self_v, cls_v, _super = f.pop(), f.pop(), f.pop()
    value = f.super_attr(cls_v, self_v, inst.argval)
    if inst.method:
        f.push(f.null)
    f.push(value)


@handler("STORE_ATTR")
def op_store_attr(f, inst):
    obj, value = f.pop(), f.pop()
    f.set_attr(obj, inst.argval, value)


@handler("DELETE_ATTR")
def op_delete_attr(f, inst):
    f.del_attr(f.pop(), inst.argval)


# ---- containers -------------------------------------------------------------------------------------
@handler("BUILD_TUPLE")
def op_build_tuple(f, inst):
    f.push(f.build_tuple(f.popn(inst.arg)))


@handler("BUILD_LIST")
def op_build_list(f, inst):
    f.push(f.build_list(f.popn(inst.arg)))


@handler("BUILD_SET")
def op_build_set(f, inst):
    f.push(f.build_set(f.popn(inst.arg)))


@handler("BUILD_MAP")
def op_build_map(f, inst):
    flat = f.popn(2 * inst.arg)
    f.push(f.build_map(flat[0::2], flat[1::2]))


@handler("BUILD_CONST_KEY_MAP")
def op_build_const_key_map(f, inst):
    keys = f.pop()
    f.push(f.build_const_key_map(keys, f.popn(inst.arg)))


@handler("BUILD_SLICE")
def op_build_slice(f, inst):
    f.push(f.build_slice(f.popn(inst.arg)))


@handler("BUILD_STRING")
def op_build_string(f, inst):
    f.push(f.build_string(f.popn(inst.arg)))


@handler("LIST_APPEND")
def op_list_append(f, inst):
    v = f.pop()
    f.list_append(f.stack[-inst.arg], v)


@handler("SET_ADD")
def op_set_add(f, inst):
    v = f.pop()
    f.set_add(f.stack[-inst.arg], v)


@handler("MAP_ADD")
def op_map_add(f, inst):
    value, key = f.pop(), f.pop()
    f.map_add(f.stack[-inst.arg], key, value)


@handler("LIST_EXTEND")
def op_list_extend(f, inst):
    v = f.pop()
    f.list_extend(f.stack[-inst.arg], v)


@handler("SET_UPDATE")
def op_set_update(f, inst):
    v = f.pop()
    f.set_update(f.stack[-inst.arg], v)


@handler("DICT_UPDATE", "DICT_MERGE")
def op_dict_update(f, inst):
    v = f.pop()
    f.dict_update(f.stack[-inst.arg], v)


@handler("LIST_TO_TUPLE")
def op_list_to_tuple(f, inst):
    f.push(f.list_to_tuple(f.pop()))


@handler("UNPACK_SEQUENCE")
def op_unpack_sequence(f, inst):
    f.stack.extend(reversed(f.unpack(f.pop(), inst.arg)))


@handler("UNPACK_EX")
def op_unpack_ex(f, inst):
    f.stack.extend(reversed(f.unpack_ex(f.pop(), inst.arg & 0xFF, inst.arg >> 8)))


@handler("GET_LEN")
def op_get_len(f, inst):
    f.push(f.length(f.stack[-1]))


# ---- subscripts and operators ---------------------------------------------------------------------
@handler("BINARY_SUBSCR")
def op_binary_subscr(f, inst):
    key, obj = f.pop(), f.pop()
    f.push(f.getitem(obj, key))


@handler("BINARY_SLICE")
def op_binary_slice(f, inst):
    end, start, obj = f.pop(), f.pop(), f.pop()
    f.push(f.getitem(obj, f.slice_of(start, end)))


@handler("STORE_SUBSCR")
def op_store_subscr(f, inst):
    key, obj, value = f.pop(), f.pop(), f.pop()
    f.setitem(obj, key, value)


@handler("STORE_SLICE")
def op_store_slice(f, inst):
    end, start, obj, value = f.pop(), f.pop(), f.pop(), f.pop()
    f.setitem(obj, f.slice_of(start, end), value)


@handler("DELETE_SUBSCR")
def op_delete_subscr(f, inst):
    key, obj = f.pop(), f.pop()
    f.delitem(obj, key)


@handler("BINARY_OP")
def op_binary(f, inst):
    b, a = f.pop(), f.pop()
    f.push(f.binary(inst.argval, a, b))


@handler("COMPARE_OP")
def op_compare(f, inst):
    b, a = f.pop(), f.pop()
    f.push(f.compare(inst.argval, a, b))


@handler("IS_OP")
def op_is(f, inst):
    b, a = f.pop(), f.pop()
    f.push(f.const(f.is_same(a, b) != bool(inst.arg)))


@handler("CONTAINS_OP")
def op_contains(f, inst):
    container, item = f.pop(), f.pop()
    f.push(f.const(f.contains(item, container) != bool(inst.arg)))


@handler("UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT")
def op_unary(f, inst):
    f.push(f.unary(inst.opname, f.pop()))


@handler("UNARY_NOT")
def op_not(f, inst):
    f.push(f.const(not f.truth(f.pop())))


@handler("FORMAT_VALUE")
def op_format_value(f, inst):
    spec = f.pop() if inst.arg & 4 else None
    f.push(f.format_value(f.pop(), inst.arg & 3, spec))


# ---- iteration, generators, with ------------------------------------------------------------------
@handler("GET_ITER", "GET_YIELD_FROM_ITER")
def op_get_iter(f, inst):
    f.push(f.get_iter(f.pop()))


@handler("FOR_ITER")
def op_for_iter(f, inst):
    item = f.next_item(f.stack[-1])
    if item is EXHAUSTED:
        f.pop()
        f.ip = for_iter_exit(f.insts, f.index_of, inst)
    else:
        f.push(item)


@handler("RETURN_GENERATOR")
def op_return_generator(f, inst):
    f.start_generator()
    f.push(f.const(None))  # the POP_TOP after it drops this


@handler("YIELD_VALUE")
def op_yield_value(f, inst):
    f.yield_value(f.pop())
    f.push(f.const(None))  # what send() delivers to a generator consumed by iteration


@handler("SEND")
def op_send(f, inst):
    sent = f.pop()
    f.yield_from(f.stack[-1], sent)
    if not SEND_KEEPS_RECEIVER:
        f.pop()
    f.push(f.const(None))
    f.jump(inst.target)


@handler("END_SEND")
def op_end_send(f, inst):
    top = f.pop()
    f.pop()
    f.push(top)


@handler("BEFORE_WITH")
def op_before_with(f, inst):
    exit_fn, entered = f.before_with(f.pop())
    f.push(exit_fn)
    f.push(entered)


# ---- raising and handling exceptions --------------------------------------------------------------
@handler("RAISE_VARARGS")
def op_raise(f, inst):
    f.raise_(f.popn(inst.arg))


@handler("PUSH_EXC_INFO")
def op_push_exc_info(f, inst):
    exc = f.pop()
    f.push(f.const(None))  # the exception handled before this one: none inside a frame we run
    f.push(exc)


@handler("CHECK_EXC_MATCH")
def op_check_exc_match(f, inst):
    typ = f.pop()
    f.push(f.const(f.exception_matches(f.stack[-1], typ)))


@handler("POP_EXCEPT")
def op_pop_except(f, inst):
    f.pop()


@handler("RERAISE")
def op_reraise(f, inst):
    f.reraise(f.pop())
