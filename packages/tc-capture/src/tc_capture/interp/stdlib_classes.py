"""Classes while capturing: ``class`` statements in the function (``LOAD_BUILD_CLASS``), objects of
classes with a custom ``__new__`` or metaclass, enums, dict subclasses, NumPy scalars, and torch's
stateless modules built inside ``forward``.

**``class`` statements.** ``__build_class__(body, name, *bases)`` is run *for real* at capture
time when running it cannot run the user's code: the body only binds names (functions, constants,
annotations, decorators from a fixed list: ``property``, ``staticmethod``, ``classmethod``,
``functools.cached_property``, ``dataclasses.field``, ``enum.auto``), with no branch or loop; its
closure holds only constants; the metaclass and every base's ``__init_subclass__`` come from the
standard library (``type``, ``ABCMeta``, ``EnumType``...). The class is then a constant of the
compiled entry: eager makes a new class object on every call, so ``type(a) is type(b)`` for
objects of two different calls is the one thing that can tell. Decorators applied to it by the
function (``@dataclass``, ``@dataclass(frozen=True)``, ``@total_ordering``, ``@enum.unique``) are
folded like other pure calls on constants. Anything else is a graph break.
"""

from __future__ import annotations

import abc
import builtins
import collections
import dataclasses
import dis
import enum
import functools
import operator
import os
import sys
import types

import torch

from .base import STDLIB_DIR, TORCH_DIR, Unsupported, call_function, hashable, real_path
from .builtins_ import BUILTINS
from .pyops import realize_const
from .stdlib_misc import numpy_scalar
from .variables import BoundV, CellV, Const, DataDictV, DictV, FuncV, ObjV, V

_CLASS_BODY_CALLS = {property, staticmethod, classmethod, functools.cached_property, dataclasses.field, enum.auto,
                     abc.abstractmethod, functools.total_ordering}
_PROPERTY_METHODS = {"setter", "getter", "deleter"}
# Opcodes a declarative class body runs (3.11 and 3.12 spellings); the ones not handled by name in
# _check_body move values only (their stack effect is all that matters).
_BODY_OPS = {"RESUME", "NOP", "CACHE", "LOAD_CONST", "LOAD_NAME", "STORE_NAME", "LOAD_GLOBAL", "LOAD_ATTR",
             "LOAD_METHOD", "PUSH_NULL", "PRECALL", "CALL", "KW_NAMES", "MAKE_FUNCTION", "LOAD_CLOSURE",
             "BUILD_TUPLE", "BUILD_LIST", "BUILD_MAP", "BUILD_CONST_KEY_MAP", "LIST_EXTEND", "LIST_TO_TUPLE",
             "RETURN_VALUE", "RETURN_CONST", "POP_TOP", "COPY", "SWAP", "SETUP_ANNOTATIONS", "STORE_SUBSCR",
             "BINARY_SUBSCR", "MAKE_CELL", "COPY_FREE_VARS", "STORE_DEREF", "LOAD_DEREF", "LOAD_CLASSDEREF",
             "LOAD_LOCALS", "LOAD_FROM_DICT_OR_DEREF", "LOAD_FROM_DICT_OR_GLOBALS", "STORE_FAST", "LOAD_FAST"}
_NULL, _UNKNOWN, _LOCAL = ("null",), ("unknown",), "local"


def _in_stdlib(obj) -> bool:
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    path = getattr(module, "__file__", None) or ""
    return obj.__module__ == "builtins" or real_path(path).startswith(STDLIB_DIR) and "site-packages" not in path


def _resolve(name: str, stored: set, globals_: dict):
    if name in stored or name == "__annotations__":
        return (_LOCAL, name)
    if name in globals_:
        return ("val", globals_[name])
    b = globals_.get("__builtins__", builtins)
    b = b if isinstance(b, dict) else vars(b)
    return ("val", b[name]) if name in b else _UNKNOWN


def _attr(obj, name: str):
    if obj[0] == _LOCAL:
        return ("prop_method",) if name in _PROPERTY_METHODS else _UNKNOWN
    if obj[0] == "val" and isinstance(obj[1], (types.ModuleType, type)):
        try:
            return ("val", getattr(obj[1], name))
        except AttributeError:
            return _UNKNOWN
    return _UNKNOWN


def _safe_callee(callee) -> bool:
    if callee == ("prop_method",):
        return True
    if callee[0] != "val":
        return False
    value = callee[1]
    return value in _CLASS_BODY_CALLS if hashable(value) else False


def _check_body(code, globals_: dict) -> str | None:
    """Why running this class body for real could run the user's code (None: it cannot)."""
    stack: list = []
    stored: set = set()
    for inst in dis.get_instructions(code):
        op = inst.opname
        if op not in _BODY_OPS:
            return f"the class body runs {op}"
        if op in ("LOAD_NAME", "LOAD_GLOBAL", "LOAD_FROM_DICT_OR_GLOBALS"):
            if op == "LOAD_GLOBAL" and inst.arg & 1:
                stack.append(_NULL)
            stack.append(_resolve(inst.argval, stored, globals_))
        elif op == "STORE_NAME":
            stack.pop()
            stored.add(inst.argval)
        elif op in ("LOAD_ATTR", "LOAD_METHOD"):
            obj = stack.pop()
            method = op == "LOAD_METHOD" or sys.version_info >= (3, 12) and inst.arg & 1
            stack += [_attr(obj, inst.argval), _NULL] if method else [_attr(obj, inst.argval)]
        elif op == "PUSH_NULL":
            stack.append(_NULL)
        elif op == "CALL":
            argc = inst.arg
            args = stack[len(stack) - argc:]
            first, second = stack[len(stack) - argc - 2], stack[len(stack) - argc - 1]
            del stack[len(stack) - argc - 2:]
            callee = second if first == _NULL else first
            if callee == _NULL:
                callee = second
            if not _safe_callee(callee):
                return "the class body calls a function that is not a known declaration helper"
            del args
            stack.append(_UNKNOWN)
        elif op in ("BINARY_SUBSCR", "STORE_SUBSCR"):
            n = 2 if op == "BINARY_SUBSCR" else 3
            container = stack[-2] if op == "BINARY_SUBSCR" else stack[-2]
            if op == "STORE_SUBSCR" and container != (_LOCAL, "__annotations__"):
                return "the class body stores an item"
            if op == "BINARY_SUBSCR" and not (container[0] == "val" and _typing_like(container[1])):
                return "the class body subscripts a value that is not a type"
            del stack[-n:]
            if op == "BINARY_SUBSCR":
                stack.append(_UNKNOWN)
        else:
            effect = dis.stack_effect(inst.opcode, inst.arg if inst.opcode >= dis.HAVE_ARGUMENT else None, jump=False)
            if effect < 0:
                del stack[len(stack) + effect:]
            else:
                stack += [_UNKNOWN] * effect
    return None


def _typing_like(value) -> bool:
    return isinstance(value, type) or type(value).__module__ in ("typing", "types", "typing_extensions")


def _metaclass(bases: tuple, kwargs: dict):
    meta = kwargs.get("metaclass", type)
    for b in bases:
        if isinstance(type(b), type) and issubclass(type(b), meta):
            meta = type(b)
    return meta


def _real_cell(cell: CellV):
    if cell.contents is None:
        return types.CellType()
    if not isinstance(cell.contents, Const):
        raise Unsupported("a class body that closes over a value not known at capture time")
    return types.CellType(cell.contents.value)


def build_class(f, args, kwargs) -> V:
    body, name_v, *bases_v = args
    if not isinstance(body, FuncV) or not isinstance(name_v, Const):
        raise Unsupported("__build_class__ of a body not made while capturing")
    bases = tuple(realize_const(b) for b in bases_v)
    kw = {k: realize_const(v) for k, v in kwargs.items()}
    reason = _check_body(body.code, body.globals)
    if reason is None:
        resolved = types.resolve_bases(bases)
        meta = _metaclass(resolved, kw)
        if not _in_stdlib(meta):
            reason = f"its metaclass {meta.__qualname__} is not the standard library's"
        for klass in (k for b in resolved for k in b.__mro__):
            hook = vars(klass).get("__init_subclass__")
            if hook is not None and not _in_stdlib(klass):
                reason = f"its base {klass.__qualname__} defines __init_subclass__"
    if reason is not None:
        raise Unsupported(f"class {name_v.value}: {reason}")
    cells = tuple(_real_cell(c) for c in body.closure)
    fn = types.FunctionType(body.code, body.globals, body.code.co_name, None, cells or None)
    try:
        return Const(builtins.__build_class__(fn, name_v.value, *bases, **kw))
    except Exception as e:
        raise Unsupported(f"class {name_v.value}: building it raised {type(e).__name__}: {e}") from e


BUILTINS[builtins.__build_class__] = build_class


# ---- class decorators and factories folded on constants --------------------------------------------
def _fold(fn):
    def handler(f, args, kwargs):
        if not all(isinstance(a, Const) for a in [*args, *kwargs.values()]):
            raise Unsupported(f"{fn.__qualname__}() of a value not known at capture time")
        try:
            out = fn(*[a.value for a in args], **{k: v.value for k, v in kwargs.items()})
        except Exception as e:
            raise Unsupported(f"{fn.__qualname__}() raised {type(e).__name__}: {e}") from e
        return Const(out)

    return handler


for _fn in (dataclasses.dataclass, functools.total_ordering, enum.unique, dataclasses.make_dataclass):
    BUILTINS[_fn] = _fold(_fn)


# Immutable objects of the standard library made from constants (the callables `operator` makes).
_FOLDED_CLASSES = {operator.itemgetter, operator.attrgetter, operator.methodcaller}


def _of_class(fn):
    """``dataclasses.is_dataclass(obj)`` / ``fields(obj)`` answer the same for an object and its
    class: asked of the class of an object built while capturing."""
    def handler(f, args, kwargs):
        obj = args[0]
        target = Const(obj.cls) if isinstance(obj, ObjV) else obj
        return _fold(fn)(f, [target, *args[1:]], kwargs)

    return handler


BUILTINS[dataclasses.is_dataclass] = _of_class(dataclasses.is_dataclass)
BUILTINS[dataclasses.fields] = _of_class(dataclasses.fields)


def _vars(f, args, kwargs) -> V:
    """``vars(obj)`` of an object built while capturing: its attributes, live (the same dict)."""
    if len(args) != 1 or not isinstance(args[0], ObjV):
        raise Unsupported("vars() of a value that is not an object built while capturing")
    d = DictV({})
    d.items = args[0].attrs
    return d


BUILTINS[vars] = _vars


def call_stdlib_const(f, fn: Const, args, kwargs) -> V | None:
    """The function ``@dataclass(frozen=True)`` returns (``dataclass.<locals>.wrap``), applied to a
    class: folded like ``dataclass`` itself."""
    value = fn.value
    if isinstance(value, types.FunctionType) and value.__module__ == "dataclasses" \
            and value.__qualname__.startswith("dataclass.<locals>"):
        return _fold(value)(f, args, kwargs)
    return None


# ---- objects of classes with their own __new__ or metaclass, enums, dict subclasses ----------------
def _new_object(f, args, kwargs) -> V:
    """``object.__new__(cls)`` (``super().__new__(cls)`` in a ``__new__``): a new plain object."""
    cls = realize_const(args[0])
    if not isinstance(cls, type) or _c_layout(cls):
        raise Unsupported("object.__new__ of a class with a C layout")
    return ObjV(cls)


def _c_layout(cls: type) -> bool:
    """A base other than ``object`` is a C type (not a heap type): its instances are not plain."""
    return any(not k.__flags__ & (1 << 9) for k in cls.__mro__ if k is not object)


def _object_setattr(f, args, kwargs) -> V:
    obj, name, value = args
    if isinstance(obj, DataDictV):  # a ModelOutput's attribute (its fields; its items are the dict)
        obj.fields[realize_const(name)] = value
        f.session.note_mutation(obj)
        return Const(None)
    if not isinstance(obj, ObjV):
        raise Unsupported("object.__setattr__ on an object not made while capturing")
    obj.attrs[realize_const(name)] = value
    return Const(None)


def _dict_setitem(f, args, kwargs) -> V:
    """``dict.__setitem__(d, k, v)`` (``super().__setitem__`` in a dict subclass's own, as
    ``ModelOutput``'s): the item alone, whatever the subclass's ``__setitem__`` does."""
    obj, key, value = args
    if not isinstance(obj, DictV) or kwargs:
        raise Unsupported("dict.__setitem__ on a value that is no dict made or read while capturing")
    obj.items[realize_const(key)] = value
    f.session.note_mutation(obj)
    return Const(None)


def default_construct(f, cls: type, args, kwargs) -> V:
    """``type.__call__(cls, ...)``: ``__new__`` (a Python one inlined), then ``__init__`` when
    ``__new__`` returned an instance of ``cls``."""
    new = cls.__new__
    if new is object.__new__:
        obj = ObjV(cls)
    elif isinstance(new, types.FunctionType):
        obj = call_function(f, Const(new), [Const(cls), *args], kwargs)
    else:
        raise Unsupported(f"class {cls.__qualname__} has a __new__ that is not Python code")
    if isinstance(obj, ObjV) and issubclass(obj.cls, cls):
        init = obj.cls.__init__
        if init is not object.__init__:
            call_function(f, BoundV(Const(init), obj), args, kwargs)
        elif new is object.__new__ and (args or kwargs):
            raise Unsupported(f"{cls.__qualname__}() takes no arguments (TypeError)")
    return obj


def _type_call(f, args, kwargs) -> V:
    cls = realize_const(args[0])
    return default_construct(f, cls, list(args[1:]), kwargs)


BUILTINS[object.__new__] = _new_object
BUILTINS[object.__setattr__] = _object_setattr
BUILTINS[dict.__setitem__] = BUILTINS[collections.OrderedDict.__setitem__] = _dict_setitem
BUILTINS[type.__call__] = _type_call


def _enum_call(f, cls, args, kwargs) -> V:
    """``Color(1)`` (a member by value) or ``Enum("Name", "A B")`` (a new enum) on constants: the
    lookup is the standard library's, unless the class has its own ``_missing_``."""
    missing = getattr(cls, "_missing_", None)
    if missing is not None and not _in_stdlib(getattr(missing, "__func__", missing)):
        raise Unsupported(f"{cls.__qualname__} defines _missing_")
    if not all(isinstance(a, Const) for a in [*args, *kwargs.values()]):
        raise Unsupported(f"{cls.__qualname__}() of a value not known at capture time")
    try:
        return Const(cls(*[a.value for a in args], **{k: v.value for k, v in kwargs.items()}))
    except Exception as e:
        raise Unsupported(f"{cls.__qualname__}() raised {type(e).__name__}: {e}") from e


_STATELESS_OK = os.path.join(TORCH_DIR, "nn", "modules", "")


def _torch_module(f, cls, args, kwargs) -> V:
    """A torch module built inside ``forward`` (``nn.CrossEntropyLoss()(x, y)``): built at capture
    time when it holds no state — torch's own class, constant arguments, no parameters and no
    buffers — and then a constant of the entry, called like any module (its ``forward`` inlined).
    Modules with parameters are initialised randomly on every eager call: a graph break."""
    path = real_path(sys.modules[cls.__module__].__file__ or "")
    if not path.startswith(_STATELESS_OK):
        raise Unsupported(f"creating a module ({cls.__name__}) of a class that is not torch's own inside a captured function")
    try:
        real_args = [realize_const(a) for a in args]
        real_kwargs = {k: realize_const(v) for k, v in kwargs.items()}
    except Unsupported:
        raise Unsupported(f"creating a module ({cls.__name__}) from values not known at capture time") from None
    if any(isinstance(a, torch.Tensor) for a in [*real_args, *real_kwargs.values()]):
        raise Unsupported(f"creating a module ({cls.__name__}) that holds a tensor")
    try:
        mod = cls(*real_args, **real_kwargs)
    except Exception as e:
        raise Unsupported(f"creating {cls.__name__} raised {type(e).__name__}: {e}") from e
    if any(True for _ in mod.parameters()) or any(b is not None for _, b in mod.named_buffers()):
        raise Unsupported(f"creating a module ({cls.__name__}) with parameters or buffers inside a captured function")
    return Const(mod)


def construct_special(f, cls: type, args, kwargs) -> V | None:
    """Construction rules before the generic one (``calls.construct``); None when none applies."""
    if cls in _FOLDED_CLASSES:
        return _fold(cls)(f, args, kwargs)
    scalar = numpy_scalar(cls, args, kwargs)
    if scalar is not None:
        return scalar
    if isinstance(cls, enum.EnumMeta):
        return _enum_call(f, cls, args, kwargs)
    if issubclass(cls, torch.nn.Module):
        return _torch_module(f, cls, args, kwargs)
    if issubclass(cls, dict) and type(cls) is type and cls.__new__ is dict.__new__ \
            and (cls.__init__ is dict.__init__ or _in_stdlib(cls)):
        d = DictV({}, cls=cls)  # Counter, a plain dict subclass: rebuilt as cls({...})
        call_function(f, BoundV(Const(cls.__init__), d), args, kwargs)
        return d
    if type(cls).__call__ is not type.__call__:
        meta_call = type(cls).__call__
        if not isinstance(meta_call, types.FunctionType):
            raise Unsupported(f"class {cls.__qualname__}: its metaclass's __call__ is not Python code")
        return call_function(f, Const(meta_call), [Const(cls), *args], kwargs)
    if cls.__new__ is not object.__new__ and isinstance(cls.__new__, types.FunctionType):
        return default_construct(f, cls, args, kwargs)
    return None
