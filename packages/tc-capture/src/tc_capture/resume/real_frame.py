"""The real-value executor of the opcode table.

It runs the one instruction at a graph break (the call to ``print``, the ``if`` on a tensor) on
the live frame state rebuilt after the graph, and the rest of a frame that cannot resume as
native bytecode (``native_resume``). It has no opcode table of its own: it runs the symbolic
interpreter's (``interp/opcodes.py``), supplying the value operations that table asks of a frame
(``interp.base.StackFrame``) with Python's own semantics on real values.
"""

from __future__ import annotations

import builtins
import types

from ..interp.base import DONE, EXHAUSTED, HANDLERS, NULL, UNBOUND, StackFrame
from ..interp.pyops import BINARY, COMPARE, UNARY

# Opcodes whose meaning the symbolic frame gives them (a generator consumed where it is made);
# at a break CPython runs them.
_SYMBOLIC_ONLY = frozenset({"RETURN_GENERATOR", "YIELD_VALUE", "SEND"})


class RealFrame(StackFrame):
    """A frame's state as real values: locals by name (missing: unbound), cells by name."""

    def __init__(self, code, globals_, locals_: list, stack: list, cells: list, ip: int):
        super().__init__(code, globals_, ip, stack)
        self.locals = {n: v for n, v in zip(code.co_varnames, locals_) if v is not UNBOUND}
        self.cell_names = code.co_freevars + code.co_cellvars
        self.cells = dict(zip(self.cell_names, cells))
        self.callee = None  # at a break inside an inlined call: runs that call as compiled frames

    @staticmethod
    def runs(opname: str) -> bool:
        """Whether this executor runs ``opname`` (else CPython must)."""
        return opname in HANDLERS and opname not in _SYMBOLIC_ONLY

    def step(self) -> bool:
        """Run one instruction; True when the frame returned."""
        inst = self.insts[self.ip]
        self.ip += 1
        if not self.runs(inst.opname):
            raise RuntimeError(f"tc_capture cannot resume past {inst.opname} at "
                               f"{self.code.co_filename}:{inst.lineno}")
        return HANDLERS[inst.opname](self, inst) is DONE

    def run(self):
        while not self.step():
            pass
        return self.result

    def local_list(self) -> list:
        return [self.locals.get(n, UNBOUND) for n in self.code.co_varnames]

    def cell_list(self) -> list:
        return [self.cells.get(n) for n in self.cell_names]

    def state(self) -> tuple[int, list, list]:
        """(offset, F, C) of the next instruction: the resume point's inputs."""
        return self.insts[self.ip].offset, self.local_list() + self.stack, self.cell_list()

    # ---- value operations (the list is in ``interp.base.StackFrame``) ---------------------------
    null = NULL

    @staticmethod
    def const(x):
        return x

    @staticmethod
    def is_null(v) -> bool:
        return v is NULL

    @staticmethod
    def is_none(v) -> bool:
        return v is None

    truth = staticmethod(bool)

    def unbound_local(self, name: str):
        raise UnboundLocalError(f"local variable {name!r} referenced before assignment")

    def load_global(self, name: str):
        if name in self.globals:
            return self.globals[name]
        b = self.globals.get("__builtins__", builtins)
        return (b if isinstance(b, dict) else vars(b))[name]

    def store_global(self, name: str, v) -> None:
        self.globals[name] = v

    def load_deref(self, name: str):
        return self.cells[name].cell_contents

    def store_deref(self, name: str, v) -> None:
        self.cells[name].cell_contents = v

    def make_cell(self, name: str) -> None:
        value = self.locals.get(name, UNBOUND)
        self.cells[name] = types.CellType() if value is UNBOUND else types.CellType(value)

    def import_name(self, name: str, fromlist, level):
        return __import__(name, self.globals, None, fromlist, level)

    import_from = staticmethod(getattr)

    # calls and attributes
    def call(self, fn, args: list, kwargs: dict):
        if fn is super and not args:
            return super(self.cells["__class__"].cell_contents, self.locals[self.code.co_varnames[0]])
        if self.callee is not None:
            return self.callee(fn, args, kwargs)
        return fn(*args, **kwargs)

    def call_ex(self, fn, args, kwargs):
        return self.call(fn, list(args), dict(kwargs or {}))

    def make_function(self, code, closure, kwdefaults, defaults):
        fn = types.FunctionType(code, self.globals, code.co_name, defaults, closure)
        fn.__kwdefaults__, fn.__qualname__ = kwdefaults, code.co_qualname
        return fn

    get_attr = staticmethod(getattr)
    set_attr = staticmethod(setattr)
    del_attr = staticmethod(delattr)

    @staticmethod
    def super_attr(cls, self_v, name: str):
        return getattr(super(cls, self_v), name)

    # containers
    build_tuple = staticmethod(tuple)
    build_list = staticmethod(list)
    build_set = staticmethod(set)
    build_string = staticmethod("".join)

    @staticmethod
    def build_map(keys: list, values: list) -> dict:
        return dict(zip(keys, values))

    @staticmethod
    def build_const_key_map(keys: tuple, values: list) -> dict:
        return dict(zip(keys, values))

    @staticmethod
    def build_slice(parts: list) -> slice:
        return slice(*parts)

    @staticmethod
    def list_append(target, v) -> None:
        target.append(v)

    @staticmethod
    def set_add(target, v) -> None:
        target.add(v)

    @staticmethod
    def map_add(target, key, value) -> None:
        target[key] = value

    @staticmethod
    def list_extend(target, v) -> None:
        target.extend(v)

    @staticmethod
    def set_update(target, v) -> None:
        target.update(v)

    dict_update = set_update
    list_to_tuple = staticmethod(tuple)
    length = staticmethod(len)

    @staticmethod
    def unpack(v, n: int) -> list:
        items = list(v)
        if len(items) != n:
            raise ValueError(f"expected {n} values to unpack, got {len(items)}")
        return items

    @staticmethod
    def unpack_ex(v, before: int, after: int) -> list:
        items = list(v)
        return items[:before] + [items[before:len(items) - after]] + items[len(items) - after:]

    # subscripts and operators
    @staticmethod
    def getitem(obj, key):
        return obj[key]

    @staticmethod
    def setitem(obj, key, value) -> None:
        obj[key] = value

    @staticmethod
    def delitem(obj, key) -> None:
        del obj[key]

    slice_of = staticmethod(slice)

    @staticmethod
    def binary(op: str, a, b):
        return BINARY[op](a, b)

    @staticmethod
    def compare(op: str, a, b):
        return COMPARE[op](a, b)

    @staticmethod
    def is_same(a, b) -> bool:
        return a is b

    @staticmethod
    def contains(item, container) -> bool:
        return item in container

    @staticmethod
    def unary(opname: str, v):
        return UNARY[opname](v)

    @staticmethod
    def format_value(value, conv: int, spec):
        convert = {0: None, 1: str, 2: repr, 3: ascii}[conv]
        return format(convert(value) if convert else value, "" if spec is None else spec)

    # iteration and with
    get_iter = staticmethod(iter)

    @staticmethod
    def next_item(it):
        return next(it, EXHAUSTED)

    @staticmethod
    def before_with(ctx):
        return types.MethodType(type(ctx).__exit__, ctx), type(ctx).__enter__(ctx)

    # exceptions: raised for real; the driver finds the handler in the frame's exception table
    @staticmethod
    def raise_(args: list):
        if not args:
            raise RuntimeError("No active exception to reraise")
        if len(args) == 1:
            raise args[0]  # not ``from None``: that would hide the exception's context
        raise args[0] from args[1]

    exception_matches = staticmethod(isinstance)

    @staticmethod
    def reraise(exc):
        raise exc
