"""Python operators on captured values: constant folding, tensor ops as nodes, list/tuple algebra."""

from __future__ import annotations

import collections
import operator
import types
from typing import Any

import torch

from . import tensor_keys
from .base import Unsupported, call_function, iterate, pull
from .record import record
from .truth import call_own, own_method, truth
from .variables import Const, DictV, IterV, ListV, ObjV, SetV, TensorV, TupleV, V, ViewV

BINARY = {
    "+": operator.add, "&": operator.and_, "//": operator.floordiv, "<<": operator.lshift,
    "@": operator.matmul, "*": operator.mul, "%": operator.mod, "|": operator.or_, "**": operator.pow,
    ">>": operator.rshift, "-": operator.sub, "/": operator.truediv, "^": operator.xor,
    "+=": operator.iadd, "&=": operator.iand, "//=": operator.ifloordiv, "<<=": operator.ilshift,
    "@=": operator.imatmul, "*=": operator.imul, "%=": operator.imod, "|=": operator.ior,
    "**=": operator.ipow, ">>=": operator.irshift, "-=": operator.isub, "/=": operator.itruediv,
    "^=": operator.ixor,
}
COMPARE = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
           ">=": operator.ge}
UNARY = {"UNARY_NEGATIVE": operator.neg, "UNARY_POSITIVE": operator.pos, "UNARY_INVERT": operator.invert}
_INPLACE_TO_PLAIN = {BINARY[k]: BINARY[k[:-1]] for k in BINARY if k.endswith("=")}


def fold(fn, *args: V) -> Const:
    """Run ``fn`` on known Python values; an error becomes a break that Python then raises."""
    try:
        return Const(fn(*(a.value for a in args)))
    except Exception as e:
        raise Unsupported(f"{getattr(fn, '__name__', fn)} raised {type(e).__name__}: {e}") from e


def binary(f, fn, a: V, b: V) -> V:
    if hasattr(a, "operate") or hasattr(b, "operate"):  # a NumPy array (numpy_ops.NdarrayV)
        return (a if hasattr(a, "operate") else b).operate(f, fn, a, b)
    own = _own_dunder(a, fn)
    if own is not None:
        out = call_function(f, Const(own), [a, b], {})
        if isinstance(out, Const) and out.value is NotImplemented:
            raise Unsupported(f"{type(a).__name__}'s {getattr(fn, '__name__', fn)} returned NotImplemented")
        return out
    if isinstance(a, TensorV) or isinstance(b, TensorV):
        return record(f.session, fn, (_number(a), _number(b)), {})
    if isinstance(a, Const) and isinstance(b, Const):
        return fold(_INPLACE_TO_PLAIN.get(fn, fn) if _immutable(a.value) else fn, a, b)
    return _sequence_op(f, fn, a, b)


_DUNDERS = {operator.add: "__add__", operator.sub: "__sub__", operator.mul: "__mul__", operator.matmul: "__matmul__",
            operator.truediv: "__truediv__", operator.floordiv: "__floordiv__", operator.mod: "__mod__",
            operator.pow: "__pow__", operator.and_: "__and__", operator.or_: "__or__", operator.xor: "__xor__",
            operator.lshift: "__lshift__", operator.rshift: "__rshift__", operator.iadd: "__iadd__",
            operator.isub: "__isub__", operator.imul: "__imul__", operator.ior: "__ior__", operator.iand: "__iand__"}


def _own_dunder(a: V, fn):
    """A Python-level operator method of a tuple or dict subclass (a ``NamedTuple`` with its own
    ``__add__``, ``Counter``) or of an object built while capturing: called like any method
    instead of the container algebra. The in-place forms fall back to the plain one, as Python
    does."""
    if not (isinstance(a, (TupleV, DictV)) and a.cls not in (tuple, dict) or isinstance(a, ObjV)):
        return None
    for name in (_DUNDERS.get(fn), _DUNDERS.get(_INPLACE_TO_PLAIN.get(fn))):
        method = getattr(a.cls, name, None) if name else None
        if isinstance(method, types.FunctionType):
            return method
    return None


def _number(v: V) -> V:
    """A NumPy scalar next to a tensor acts as the Python number it holds (``t * np.float32(2)``
    keeps ``t``'s dtype, as with ``t * 2.0``): recorded as that number."""
    if isinstance(v, Const) and type(v.value).__module__ == "numpy" and getattr(v.value, "ndim", None) == 0:
        return Const(v.value.item())
    return v


def _immutable(x) -> bool:
    return isinstance(x, (int, float, complex, str, bytes, tuple, frozenset, type(None), torch.Size))


def _sequence_op(f, fn, a: V, b: V) -> V:
    if fn is operator.iadd and isinstance(a, ListV):
        a.items.extend(items_of(f, b))
        f.session.note_mutation(a)
        return a
    if fn in (operator.add, operator.iadd) and isinstance(a, (ListV, TupleV)) and isinstance(b, (ListV, TupleV, Const)):
        items = a.items + tuple(items_of(f, b)) if isinstance(a, TupleV) else a.items + list(items_of(f, b))
        return ListV(items) if isinstance(a, ListV) else TupleV(items)
    if fn in (operator.add, operator.iadd) and isinstance(a, Const) and isinstance(a.value, (tuple, list)) \
            and isinstance(b, (ListV, TupleV)):
        items = [Const(x) for x in a.value] + list(b.items)
        return ListV(items) if isinstance(a.value, list) else TupleV(items)
    if fn in (operator.mul, operator.imul) and isinstance(a, (ListV, TupleV)) and isinstance(b, Const):
        return type(a)(list(a.items) * b.value)
    if fn is operator.ior and isinstance(a, DictV) and isinstance(b, DictV):  # in place: views see it
        a.items.update(b.items)
        f.session.note_mutation(a)
        return a
    if fn is operator.or_ and isinstance(a, DictV) and isinstance(b, DictV) and type(a) is DictV \
            and a.cls in (dict, collections.OrderedDict):
        return DictV({**a.items, **b.items}, cls=a.cls)
    if fn in _SET_OPS and isinstance(a, ViewV) and a.kind != "values":  # d.keys() & {...}: a new set
        return _set_op(f, _INPLACE_TO_PLAIN.get(fn, fn), SetV(view_items(a)), b)
    if fn in _SET_OPS and (isinstance(a, SetV) or isinstance(b, SetV) or isinstance(b, ViewV) and b.kind != "values"):
        return _set_op(f, fn, a, SetV(view_items(b)) if isinstance(b, ViewV) else b)
    raise Unsupported(f"operator {getattr(fn, '__name__', fn)} on {type(a).__name__} and {type(b).__name__}")


_SET_OPS = {operator.or_, operator.and_, operator.sub, operator.xor, operator.ior, operator.iand, operator.isub,
            operator.ixor}


def _set_op(f, fn, a: V, b: V) -> V:
    """``|``, ``&``, ``-``, ``^`` with a set built while capturing: computed on the constants (the
    result's type follows the left operand, as Python's); the in-place forms update the set."""
    result = _INPLACE_TO_PLAIN.get(fn, fn)(realize_const(a), realize_const(b))
    if isinstance(result, frozenset):
        return Const(result)
    items = [Const(x) for x in result]
    if fn in _INPLACE_TO_PLAIN and isinstance(a, SetV):
        a.items[:] = items
        return a
    return SetV(items)


_COMPARE_DUNDERS = {"<": "__lt__", "<=": "__le__", "==": "__eq__", "!=": "__ne__", ">": "__gt__", ">=": "__ge__"}


def compare(f, op: str, a: V, b: V) -> V:
    fn = COMPARE[op]
    if hasattr(a, "operate") or hasattr(b, "operate"):  # a NumPy array (numpy_ops.NdarrayV)
        return (a if hasattr(a, "operate") else b).operate(f, fn, a, b)
    own = own_method(a, _COMPARE_DUNDERS[op])
    if own is not None:
        return call_own(f, own, a, b)
    if own_method(b, _COMPARE_DUNDERS[op]) is not None or op == "!=" and own_method(a, "__eq__") is not None:
        raise Unsupported(f"`{op}` with a tuple subclass that defines its own comparison")
    if isinstance(a, TensorV) or isinstance(b, TensorV):
        return record(f.session, fn, (a, b), {})
    if isinstance(a, Const) and isinstance(b, Const):
        return fold(fn, a, b)
    if op in ("==", "!=") and _never_equal(a, b):
        return Const(op == "!=")
    return fold(fn, Const(realize_const(a)), Const(realize_const(b)))


def _never_equal(a: V, b: V) -> bool:
    """A comparison answered without the values: a container against ``None``, or an object of a
    class without ``__eq__`` (identity) against another value. A list built while capturing and
    an equal constant list are equal, so other mixes compare values."""
    def is_none(v):
        return isinstance(v, Const) and v.value is None

    def plain_obj(v):
        return isinstance(v, ObjV) and v.cls.__eq__ is object.__eq__

    if is_none(a) or is_none(b):
        return isinstance(a, (ListV, TupleV, DictV, SetV, IterV)) or isinstance(b, (ListV, TupleV, DictV, SetV, IterV)) \
            or plain_obj(a) or plain_obj(b)
    return (plain_obj(a) or plain_obj(b)) and a is not b


def identity(a: V, b: V, session: Any = None) -> bool:
    """``a is b``. Two tensors read from two sources (inputs, parameters) are one object exactly
    when capture gave them one fake; that holds for this call only, so with ``session`` the
    answer is guarded (``f(t, t)`` then ``f(t, u)`` took ``x is y``'s branch twice)."""
    if isinstance(a, Const) and isinstance(b, Const):
        return a.value is b.value
    if isinstance(a, Const) or isinstance(b, Const):
        return False  # a tracked value is never a known constant object
    if isinstance(a, TensorV) and isinstance(b, TensorV):
        same = a.fake is b.fake
        if session is not None and a.node is not b.node and a.node.op == b.node.op == "input" \
                and a.source is not None and b.source is not None:
            session.guards.same_object(a.source, b.source, same)
        return same
    return a is b


def contains(f, item: V, container: V) -> bool:
    own = own_method(container, "__contains__")
    if own is not None:
        return truth(f, call_own(f, own, container, item))
    if isinstance(container, DictV):
        return realize_const(item) in container.items
    if isinstance(container, ViewV):
        if container.kind == "keys":
            return realize_const(item) in container.dict_v.items
        return contains(f, item, ListV(view_items(container)))
    if isinstance(container, (ListV, TupleV, SetV)) or hasattr(container, "items") and hasattr(container, "py_type"):
        tensors = isinstance(item, TensorV)
        key = None if tensors else realize_const(item)
        for x in container.items:  # `in` compares by identity, then with ==, item by item
            if identity(item, x, f.session):
                return True
            if tensors or isinstance(x, TensorV):
                # eager takes the truth of `item == x`: a value (or an error, for several elements)
                raise Unsupported("`in` with a tensor that is not the same object as an item before it compares "
                                  "them with `==`, whose truth depends on data")
            if _eq_const(x, key):
                return True
        return False
    if isinstance(container, Const):
        if tensor_keys.is_tensor_lookup(container, item):
            return tensor_keys.contains(f, container, item)
        if isinstance(container.value, torch.nn.Module):
            return realize_const(item) in container.value
        return realize_const(item) in container.value
    raise Unsupported(f"`in` on {type(container).__name__}")


def _eq_const(x: V, key) -> bool:
    try:
        value = realize_const(x)
    except Unsupported:
        raise Unsupported("`in` over items holding tensors (== on a tensor compares data)") from None
    try:
        return bool(value == key)
    except Exception as e:
        raise Unsupported(f"`in`: == raised {type(e).__name__}") from e


def unary(f, fn, a: V) -> V:
    if hasattr(a, "operate"):  # a NumPy array (numpy_ops.NdarrayV)
        return a.operate(f, fn, a)
    if isinstance(a, TensorV):
        return record(f.session, fn, (a,), {})
    if isinstance(a, Const):
        return fold(fn, a)
    raise Unsupported(f"{fn.__name__} on {type(a).__name__}")


_KEEP_DICT_CLASS = (collections.OrderedDict, collections.Counter)


def realize_const(v: V):
    """The Python value of a value made only of constants (raises Unsupported otherwise)."""
    if isinstance(v, Const):
        return v.value
    if isinstance(v, TupleV):
        items = tuple(realize_const(x) for x in v.items)
        return v.cls(*items) if hasattr(v.cls, "_fields") else (items if v.cls is tuple else v.cls(items))
    if isinstance(v, ListV):
        return [realize_const(x) for x in v.items]
    if isinstance(v, DictV):
        items = {k: realize_const(x) for k, x in v.items.items()}
        if hasattr(v, "realize"):  # a defaultdict: its factory too
            return v.realize(items)
        # OrderedDict equality depends on order, Counter's ignores zero counts: keep the class
        return v.cls(items) if v.cls in _KEEP_DICT_CLASS else items
    if isinstance(v, SetV):
        return {realize_const(x) for x in v.items}
    if hasattr(v, "realize"):  # standard-library models (stdlib_values)
        return v.realize()
    raise Unsupported(f"a {type(v).__name__} is used where a Python constant is needed")


def items_of(f, v: V) -> list[V]:
    """The items of an iterable value, in order (lists, tuples, dict keys, ranges, iterators...)."""
    it = iterate(f, v)
    if isinstance(it, IterV):
        items = it.items[it.index:]
        it.index = len(it.items)
        return list(items)
    items = []
    while (x := pull(f, it)) is not None:
        items.append(x)
    return items


def is_obj(v: V) -> bool:
    return isinstance(v, ObjV)


def iter_of(v: V) -> IterV:
    return v if isinstance(v, IterV) else None


def view_items(v: ViewV) -> list[V]:
    """What a dict view holds now."""
    items = v.dict_v.items
    if v.kind == "keys":
        return [Const(k) for k in items]
    if v.kind == "values":
        return list(items.values())
    return [TupleV([Const(k), x]) for k, x in items.items()]


def set_add(items: list, v: V, session: Any = None) -> None:
    """Add to a set's items: constants equal to one already there, or the same value, are dropped
    (a tensor read from two arguments is one value when they pass one object: ``identity``, guarded
    with ``session``)."""
    if isinstance(v, Const):
        if any(isinstance(x, Const) and x.value == v.value for x in items):
            return
    elif any(x is v or isinstance(v, TensorV) and isinstance(x, TensorV) and identity(x, v, session) for x in items):
        return
    items.append(v)
