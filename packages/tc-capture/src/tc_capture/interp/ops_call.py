"""Opcodes that call, make functions, and read or write attributes."""

from __future__ import annotations

from .attrs import get_attr, set_attr
from .base import Unsupported, handler
from .calls import call_function
from .pyops import items_of
from .variables import NULL_V, Const, DictV, FuncV, ListV, NullV, SuperV, TupleV


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
    fn, args = (b, args) if isinstance(a, NullV) else (a, [b, *args])
    f.push(call_function(f, fn, args, kwargs))


@handler("CALL_FUNCTION_EX")
def op_call_function_ex(f, inst):
    kwargs = f.pop() if inst.arg & 1 else DictV({})
    args, fn = f.pop(), f.pop()
    if f.stack and isinstance(f.stack[-1], NullV):
        f.pop()
    if isinstance(kwargs, Const):
        kwargs = DictV({k: Const(v) for k, v in kwargs.value.items()})
    if not isinstance(kwargs, DictV):
        raise Unsupported(f"**kwargs from {type(kwargs).__name__}")
    f.push(call_function(f, fn, items_of(f, args), dict(kwargs.items)))


@handler("MAKE_FUNCTION")
def op_make_function(f, inst):
    code = f.pop().value
    closure = f.pop().items if inst.arg & 0x08 else ()
    if inst.arg & 0x04:
        f.pop()  # annotations: not needed to run the function
    kwdefaults = f.pop() if inst.arg & 0x02 else DictV({})
    defaults = f.pop() if inst.arg & 0x01 else TupleV([])
    defaults = defaults.items if isinstance(defaults, (TupleV, ListV)) else [Const(d) for d in defaults.value]
    kw = kwdefaults.items if isinstance(kwdefaults, DictV) else {k: Const(v) for k, v in kwdefaults.value.items()}
    f.push(FuncV(code, f.globals, defaults, kw, closure))


@handler("LOAD_ATTR")
def op_load_attr(f, inst):
    obj = f.pop()
    value = get_attr(f, obj, inst.argval)
    if inst.method:
        f.push(NULL_V)
    f.push(value)


@handler("LOAD_SUPER_ATTR")
def op_load_super_attr(f, inst):
    self_v, cls_v, _super = f.pop(), f.pop(), f.pop()
    value = get_attr(f, SuperV(cls_v.value, self_v), inst.argval)
    if inst.method:
        f.push(NULL_V)
    f.push(value)


@handler("STORE_ATTR")
def op_store_attr(f, inst):
    obj, value = f.pop(), f.pop()
    set_attr(f, obj, inst.argval, value)
