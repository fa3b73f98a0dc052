"""Iteration: every iterable becomes an :class:`IterV` over known items (loops are unrolled)."""

from __future__ import annotations

import collections.abc
import operator
import types

import torch

from ..cache import module_state
from .attrs import _lookup
from .base import Unsupported, call_function, defines
from .pyops import view_items
from .record import record
from .truth import truth
from .variables import BoundV, Const, DictV, IterV, LazyV, ListV, ObjV, SetV, TensorV, TupleV, V, ViewV

_MODULE_SEQUENCES = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ParameterList)


_ITER_TYPES = {ListV: type(iter([])), TupleV: type(iter(())), DictV: type(iter({})), SetV: type(iter(set()))}
_VIEW_ITER_TYPES = {"keys": type(iter({})), "values": type(iter({}.values())), "items": type(iter({}.items()))}


@defines
def iterate(f, v: V) -> IterV | LazyV:
    if isinstance(v, (IterV, LazyV)) or hasattr(v, "pull"):  # HostIterV: an iterator of its own
        return v
    if hasattr(v, "items") and hasattr(v, "py_type"):  # DequeV
        return IterV(v.items, cls=type(iter(v.py_type()())))
    if isinstance(v, TupleV) and v.cls is not tuple and isinstance(getattr(v.cls, "__iter__", None), types.FunctionType):
        return _object_items(f, v, v.cls)  # a tuple subclass's own __iter__
    if isinstance(v, (ListV, TupleV)):
        return IterV(v.items, cls=_ITER_TYPES[type(v)])
    if isinstance(v, SetV):
        return IterV(set_order(v), cls=_ITER_TYPES[SetV])
    if isinstance(v, DictV):
        return IterV([Const(k) for k in v.items], cls=_ITER_TYPES[DictV])
    if isinstance(v, ViewV):
        return IterV(view_items(v), cls=_VIEW_ITER_TYPES[v.kind])
    if isinstance(v, TensorV):
        return _tensor_rows(f, v)
    if hasattr(v, "rows"):  # a NumPy array (numpy_ops.NdarrayV)
        return v.rows(f)
    if isinstance(v, Const):
        return _const_items(f, v)
    if isinstance(v, ObjV):
        return _object_items(f, v, v.cls)
    raise Unsupported(f"iteration over {type(v).__name__}")


def set_order(v: SetV) -> list[V]:
    """A set's items in the order CPython iterates them (hash order, not insertion order)."""
    if not all(isinstance(x, Const) for x in v.items):
        raise Unsupported("iteration over a set holding tensors or objects (order depends on ids)")
    by_value = {x.value: x for x in v.items}
    return [by_value[k] for k in set(by_value)]


@defines
def pull(f, it: V) -> V | None:
    """The next item of an iterator, ``None`` once it is exhausted."""
    if isinstance(it, IterV):
        if it.index >= len(it.items):
            return None
        it.index += 1
        return it.items[it.index - 1]
    if isinstance(it, LazyV):
        return _pull_lazy(f, it)
    if hasattr(it, "pull"):  # HostIterV
        return it.pull(f)
    raise Unsupported(f"next() on {type(it).__name__}")


def _pull_lazy(f, it: LazyV) -> V | None:
    if it.cls is filter:
        while (x := pull(f, it.iters[0])) is not None:
            keep = x if isinstance(it.fn, Const) and it.fn.value is None else call_function(f, it.fn, [x], {})
            if truth(f, keep):
                return x
        return None
    group = []
    for sub in it.iters:  # zip and map stop at the first exhausted iterator, as CPython's do
        x = pull(f, sub)
        if x is None:
            if it.strict:
                _check_strict(f, it, group)
            return None
        group.append(x)
    if it.cls is enumerate:
        it.count += 1
        return TupleV([Const(it.count - 1), group[0]])
    return TupleV(group) if it.cls is zip else call_function(f, it.fn, group, {})


def _check_strict(f, it: LazyV, group: list) -> None:
    """``zip(strict=True)`` ends cleanly only when every iterator ends together; otherwise Python
    raises ValueError, which the break lets Python raise."""
    if group or any(pull(f, sub) is not None for sub in it.iters[1:]):
        raise Unsupported("zip(strict=True) over iterables of different lengths (ValueError)")


def _tensor_rows(f, v: TensorV) -> IterV:
    if v.fake.dim() == 0:
        raise Unsupported("iteration over a 0-d tensor")
    return IterV([record(f.session, operator.getitem, (v, Const(i)), {}) for i in range(v.fake.shape[0])])


def _const_items(f, v: Const) -> IterV:
    value, source, session = v.value, v.source, f.session
    if isinstance(value, _MODULE_SEQUENCES) and source is not None:
        session.guards.length(source, value)
        if module_state.sequence_keys(value):
            session.guards.module_keys(source, value)
        return IterV([session.wrap(m, source.item(i, value)) for i, m in enumerate(value)])
    if isinstance(value, torch.nn.ModuleDict):
        if source is not None:
            session.guards.module_keys(source, value)
        return IterV([Const(k) for k in value.keys()])
    if isinstance(value, (range, str, bytes, tuple, list, frozenset, set, dict, torch.Size)):
        if isinstance(value, (list, dict, set)) and source is not None:
            raise Unsupported("iteration over a mutable container read from an object")
        return IterV([Const(x) for x in value], cls=type(iter(value)))
    if type(value).__name__ in ("dict_keys", "dict_values", "dict_items", "odict_keys", "odict_values",
                                "odict_items"):
        return IterV([_const_or_tuple(x) for x in value], cls=type(iter(value)))
    return _object_items(f, v, type(value))


# ---- objects of Python classes ---------------------------------------------------------------------
def _object_items(f, v: V, cls: type) -> IterV:
    """Iterate an instance of a Python class by inlining its own methods.

    A Python ``__iter__`` is inlined (a generator method runs to completion, see
    ``calls._run_generator``; one returning another iterable is iterated in turn). The sequence
    protocol — ``collections.abc.Sequence``'s inherited ``__iter__``, or no ``__iter__`` but
    ``__getitem__`` — reads ``self[i]`` until ``IndexError``; we read ``self[0..len(self))``,
    with ``__len__`` and ``__getitem__`` inlined. The two agree for any class that keeps the
    ``Sequence`` contract (``self[len(self)]`` raises ``IndexError``, smaller indices do not);
    Hugging Face's ``config.per_layer_config`` view is one.
    """
    found, it = _lookup(cls, "__iter__")
    if found and isinstance(it, types.FunctionType) and it is not collections.abc.Sequence.__iter__:
        return _inline_iter(f, v, cls, it)
    if found and it is not collections.abc.Sequence.__iter__:
        raise Unsupported(f"iteration over {cls.__name__} (its __iter__ is not Python code)")
    get, length = _lookup(cls, "__getitem__")[1], _lookup(cls, "__len__")[1]
    if not (isinstance(get, types.FunctionType) and isinstance(length, types.FunctionType)):
        raise Unsupported(f"iteration over {cls.__name__} (no __iter__, and no Python __getitem__ and __len__)")
    return IterV(_sequence_items(f, v, cls, get, length))


def _inline_iter(f, v: V, cls: type, method) -> IterV:
    result = call_function(f, BoundV(Const(method), v), [], {})
    if result is v or isinstance(result, Const) and isinstance(v, Const) and result.value is v.value:
        raise Unsupported(f"iteration over {cls.__name__} (__iter__ returns self: a stateful __next__)")
    return iterate(f, result)


def _sequence_items(f, v: V, cls: type, get, length) -> list[V]:
    n = call_function(f, BoundV(Const(length), v), [], {})
    if not (isinstance(n, Const) and type(n.value) is int):
        raise Unsupported(f"iteration over {cls.__name__} (its __len__ is not a known int)")
    return [call_function(f, BoundV(Const(get), v), [Const(i)], {}) for i in range(n.value)]


def _const_or_tuple(x):
    if isinstance(x, tuple):
        return TupleV([_const_or_tuple(i) for i in x])
    if isinstance(x, torch.Tensor):
        raise Unsupported("iteration over tensors held by an untracked container")
    return Const(x)
