"""What the data opcodes do to captured values: containers built, extended and taken apart,
subscripts, f-string parts, globals and cells, functions made and called with ``*args``.

These are the symbolic frame's value operations (``frame.Frame`` forwards to them); the opcode
table (``opcodes.py``) moves their operands and results.
"""

from __future__ import annotations

import builtins
import operator
import types
from typing import Any

import torch

from ..cache import module_state
from ..cache import sources as S
from . import tensor_keys
from .base import Unsupported
from .calls import call_function
from .pyops import fold, items_of, realize_const, set_add
from .record import record
from .symbols import concrete
from .truth import call_own, own_method
from .variables import CellV, Const, DataDictV, DictV, FuncV, ListV, SetV, TensorV, TupleV, V


# ---- globals and cells ------------------------------------------------------------------------------
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


def store_global(f, name: str, v: V) -> None:
    f.session.global_writes[(id(f.globals), name)] = v
    f.session.side_effects.append(("global", f.globals, name, v))


def load_deref(f, name: str) -> V:
    cell = f.cells.get(name)
    if cell is None or cell.contents is None:
        raise Unsupported(f"free variable {name!r} is read before it is assigned")
    return cell.contents


def store_deref(f, name: str, v: V) -> None:
    cell = f.cells[name]
    cell.contents = v
    f.session.note_mutation(cell)


def make_cell(f, name: str) -> None:
    f.cells[name] = CellV(f.locals.pop(name, None))


# ---- functions and calls ----------------------------------------------------------------------------
def call_ex(f, fn: V, args: V, kwargs: V | None) -> V:
    """``fn(*args, **kwargs)``."""
    kwargs = DictV({}) if kwargs is None else kwargs
    if isinstance(kwargs, Const):
        kwargs = DictV({k: Const(v) for k, v in kwargs.value.items()})
    if not isinstance(kwargs, DictV):
        raise Unsupported(f"**kwargs from {type(kwargs).__name__}")
    return call_function(f, fn, items_of(f, args), dict(kwargs.items))


def make_function(f, code: V, closure: V | None, kwdefaults: V | None, defaults: V | None) -> V:
    kwdefaults = DictV({}) if kwdefaults is None else kwdefaults
    defaults = TupleV([]) if defaults is None else defaults
    defaults = defaults.items if isinstance(defaults, (TupleV, ListV)) else [Const(d) for d in defaults.value]
    kw = kwdefaults.items if isinstance(kwdefaults, DictV) else {k: Const(v) for k, v in kwdefaults.value.items()}
    return FuncV(code.value, f.globals, defaults, kw, closure.items if closure is not None else ())


# ---- containers -----------------------------------------------------------------------------------
def build_set(items: list[V], session: Any = None) -> V:
    s = SetV([])
    for v in items:
        set_add(s.items, v, session)
    return s


def build_slice(parts: list[V]) -> V:
    if not all(isinstance(p, Const) for p in parts):
        raise Unsupported("slice bounds that are tensors")
    return Const(slice(*(p.value for p in parts)))


def building(f, target: V) -> V:
    """The container a comprehension or display is building, noted as mutated when it came from
    the frame state (a comprehension resumed after a graph break in its body: the region's
    appends are replayed onto the real list, as any sourced container's mutations are)."""
    if target.source is not None:
        if not isinstance(target, (ListV, DictV)):
            raise Unsupported(f"adding to a {type(target).__name__} built across a graph break")
        f.session.note_mutation(target)
    return target


def set_update(f, target: V, v: V) -> None:
    target = building(f, target)
    for item in items_of(f, v):
        set_add(target.items, item, f.session)


def dict_update(f, target: V, v: V) -> None:
    target = building(f, target)
    if isinstance(v, DictV):
        target.items.update(v.items)
    elif isinstance(v, Const) and isinstance(v.value, dict):
        target.items.update({k: Const(x) for k, x in v.value.items()})
    else:
        raise Unsupported(f"** of {type(v).__name__}")


def unpack(f, v: V, n: int) -> list[V]:
    items = items_of(f, v)
    if len(items) != n:
        raise Unsupported(f"cannot unpack {len(items)} values into {n}")
    return items


def unpack_ex(f, v: V, before: int, after: int) -> list[V]:
    items = items_of(f, v)
    if len(items) < before + after:
        raise Unsupported("not enough values to unpack")
    return items[:before] + [ListV(items[before:len(items) - after])] + items[len(items) - after:]


# ---- subscripts ---------------------------------------------------------------------------------
def getitem(f, obj: V, key: V) -> V:
    if isinstance(obj, TensorV):
        if hasattr(key, "operate"):  # a NumPy array as the index
            raise Unsupported("indexing a tensor with a NumPy array")
        return record(f.session, operator.getitem, (obj, key), {})
    if hasattr(obj, "getitem"):  # a NumPy array (numpy_ops.NdarrayV)
        return obj.getitem(f, key)
    if tensor_keys.is_tensor_lookup(obj, key):
        return tensor_keys.getitem(f, obj, key)
    if isinstance(key, TensorV):
        raise Unsupported("indexing a Python container with a tensor")
    own = own_method(obj, "__getitem__")
    if own is not None:
        return call_own(f, own, obj, key)
    k = realize_const(key)
    if hasattr(obj, "items") and hasattr(obj, "py_type") and type(k) is int:  # a deque
        obj = ListV(obj.items)
    if isinstance(obj, (ListV, TupleV)):
        if isinstance(k, slice):
            return type(obj)(obj.items[k]) if isinstance(obj, ListV) else TupleV(obj.items[k])
        try:
            return obj.items[k]
        except (IndexError, TypeError) as e:
            raise Unsupported(f"index {k!r}: {e}") from e
    if isinstance(obj, DataDictV) and not isinstance(k, str):
        return TupleV(list(obj.items.values()))[k] if isinstance(k, slice) else list(obj.items.values())[k]
    if isinstance(obj, DictV):
        if k not in obj.items:
            return _missing(f, obj, key, k)
        return obj.items[k]
    if isinstance(obj, Const):
        return _const_getitem(f, obj, k)
    raise Unsupported(f"subscript of {type(obj).__name__}")


def _missing(f, obj: DictV, key: V, k) -> V:
    """``d[k]`` for a key not in the dict: a defaultdict's factory (``stdlib_values``), or a dict
    subclass's Python ``__missing__`` (``Counter`` answers 0); else ``KeyError`` (a break)."""
    if hasattr(obj, "missing"):
        return obj.missing(f, k)
    method = getattr(obj.cls, "__missing__", None)
    if isinstance(method, types.FunctionType):
        return call_function(f, Const(method), [obj, key], {})
    raise Unsupported(f"key {k!r} is not in the dict")


def _const_getitem(f, obj: Const, k) -> V:
    value = obj.value
    if isinstance(value, torch.nn.Module):
        if obj.source is None:
            raise Unsupported("indexing a module container reached without a source")
        if isinstance(value, torch.nn.ModuleList) and isinstance(k, slice):
            # ``layers[:n]`` builds a new ModuleList on every call (and registering its modules
            # moves the module-state epoch): hold the original's items, by their own sources.
            return ListV([f.session.wrap(value[i], obj.source.item(i, value)) for i in range(len(value))[k]])
        if module_state.sequence_keys(value):
            f.session.guards.module_keys(obj.source, value)
        return f.session.wrap(value[k], obj.source.item(k, value))
    if obj.source is not None and not isinstance(value, (str, bytes, tuple, torch.Size, range)):
        return f.session.wrap(value[k], obj.source.item(k, value))
    result = fold(operator.getitem, obj, Const(k))
    if isinstance(result.value, torch.Tensor):
        raise Unsupported("a tensor held in an untracked container")
    return result


def setitem(f, obj: V, key: V, value: V) -> None:
    if isinstance(obj, TensorV):
        record(f.session, operator.setitem, (obj, key, value), {})
        return
    own = getattr(obj.cls, "__setitem__", None) if isinstance(obj, DataDictV) else None
    if isinstance(own, types.FunctionType):
        # a ``ModelOutput``'s own ``__setitem__``: it also sets the attribute (``out["h"] = v``
        # then ``out.h``), which storing the item alone lost (HF's segformer)
        call_function(f, Const(own), [obj, key, value], {})
        return
    if isinstance(obj, ListV):
        k = realize_const(key)
        if isinstance(k, slice):
            obj.items[k] = items_of(f, value)
        else:
            obj.items[k] = value
    elif isinstance(obj, DictV):
        obj.items[realize_const(key)] = value
    else:
        raise Unsupported(f"item assignment into {type(obj).__name__}")
    f.session.note_mutation(obj)


def delitem(f, obj: V, key: V) -> None:
    if not isinstance(obj, (ListV, DictV)):
        raise Unsupported(f"del on {type(obj).__name__}")
    del obj.items[realize_const(key)]
    f.session.note_mutation(obj)


def format_value(value: V, conv: int, spec: V | None) -> V:
    """An f-string part: ``format(conv(value), spec)``."""
    spec = realize_const(spec) if spec is not None else ""
    if isinstance(value, TensorV):
        raise Unsupported("formatting a tensor into a string reads its data")
    v = concrete(realize_const(value))  # a symbolic size is formatted as its (guarded) value
    convert = {0: None, 1: str, 2: repr, 3: ascii}[conv]
    return Const(format(convert(v) if convert else v, spec))
