"""Truth of a captured value, for ``if``/``while``/``and``/``or`` (tensors break: data-dependent)."""

from __future__ import annotations

import types

from .base import Unsupported, call_function
from .variables import BoundV, Const, DictV, FuncV, IterV, LazyV, ListV, MethodV, ObjV, SetV, TensorV, TupleV, V, ViewV


def truth(f, v: V) -> bool:
    if isinstance(v, TensorV):
        raise Unsupported("Python control flow on a tensor value (`if tensor:`, `while tensor:`) depends on data")
    if isinstance(v, TupleV) and v.cls is not tuple:
        for name in ("__bool__", "__len__"):
            if own_method(v, name) is not None:
                return truth(f, call_own(f, own_method(v, name), v))
    if isinstance(v, (ListV, TupleV, SetV)):
        return bool(v.items)
    if isinstance(v, DictV):
        return bool(v.items)
    if isinstance(v, (FuncV, BoundV, MethodV, IterV, LazyV)):
        return True
    if isinstance(v, ViewV):
        return bool(v.dict_v.items)
    if isinstance(v, ObjV):
        if any(hasattr(v.cls, n) for n in ("__bool__", "__len__")):
            raise Unsupported(f"truth of a {v.cls.__name__} object")
        return True
    if isinstance(v, Const):
        value = v.value
        if v.source is not None and hasattr(type(value), "__len__") and not isinstance(value, (str, bytes)):
            f.session.guards.length(v.source, value)
        return bool(value)
    if hasattr(v, "truthy"):  # standard-library models (stdlib_values)
        return v.truthy(f)
    raise Unsupported(f"truth of {type(v).__name__}")


def own_method(v: V, name: str):
    """The Python function ``v``'s class defines for dunder ``name`` when ``v`` is a tuple
    subclass (a ``NamedTuple`` with its own ``__len__``, ``__eq__``, ``__iter__``...), else None."""
    if not (isinstance(v, TupleV) and v.cls is not tuple):
        return None
    method = getattr(v.cls, name, None)
    return method if isinstance(method, types.FunctionType) else None


def call_own(f, method, *args: V) -> V:
    return call_function(f, Const(method), list(args), {})
