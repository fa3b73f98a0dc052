"""``collections`` (deque, defaultdict, OrderedDict, Counter's C helper, the namedtuple factory)
and ``copy`` on values built while capturing.

``deque`` and ``defaultdict`` are C types: they are modelled (``stdlib_values.DequeV`` /
``DefaultDictV``) with one handler per method below. ``OrderedDict`` is a tracked dict whose class
is kept (``DictV.cls``; its order-sensitive ``==`` folds on a real ``OrderedDict``). ``Counter``
and the methods namedtuple classes get from ``collections`` are *Python* code, inlined like user
code (``calls._INLINE_STDLIB_FILES``); only its C helper ``_count_elements`` is modelled here.
"""

from __future__ import annotations

import collections
import copy
import types

import torch

from .base import Unsupported
from .builtins_ import BUILTINS
from .pyops import contains, items_of, realize_const
from .stdlib_values import DefaultDictV, DequeV
from .truth import truth
from .variables import Const, DictV, ListV, ObjV, SetV, TensorV, TupleV, V


def _arg(args, kwargs, i: int, name: str, default=None):
    return args[i] if len(args) > i else kwargs.get(name, default)


def _pairs(f, src: V) -> dict:
    """The items ``dict(src)`` would take: a mapping's, or an iterable of pairs'."""
    if isinstance(src, DictV):
        return dict(src.items)
    if isinstance(src, Const) and isinstance(src.value, dict):
        return {k: Const(v) for k, v in src.value.items()}
    out = {}
    for pair in items_of(f, src):
        k, v = items_of(f, pair)
        out[realize_const(k)] = v
    return out


# ---- deque -----------------------------------------------------------------------------------------
def _deque(f, args, kwargs) -> V:
    iterable, maxlen = _arg(args, kwargs, 0, "iterable"), realize_const(_arg(args, kwargs, 1, "maxlen", Const(None)))
    if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
        raise Unsupported("deque() with a maxlen that is not a non-negative int")
    return DequeV(items_of(f, iterable) if iterable is not None else [], maxlen)


def _on_deque(method):
    def handler(f, args, kwargs):
        if not args or not isinstance(args[0], DequeV):
            raise Unsupported("a deque method on a deque not built while capturing")
        return method(f, *args, **kwargs)

    return handler


def _append(f, d, x):
    d.items.append(x)
    d.trim(left=True)
    return Const(None)


def _appendleft(f, d, x):
    d.items.insert(0, x)
    d.trim(left=False)
    return Const(None)


def _pop_end(left: bool):
    def pop(f, d):
        if not d.items:
            raise Unsupported("pop from an empty deque (IndexError)")
        return d.items.pop(0 if left else -1)

    return pop


def _extend(f, d, it, left=False):
    for x in items_of(f, it):
        (_appendleft if left else _append)(f, d, x)
    return Const(None)


def _rotate(f, d, n=Const(1)):
    k = realize_const(n)
    if d.items:
        k %= len(d.items)
        d.items[:] = d.items[-k:] + d.items[:-k] if k else d.items
    return Const(None)


def _deque_insert(f, d, i, x):
    if d.maxlen is not None and len(d.items) >= d.maxlen:
        raise Unsupported("deque already at its maximum size (IndexError)")
    d.items.insert(realize_const(i), x)
    return Const(None)


def _deque_remove(f, d, x):
    for i, item in enumerate(d.items):
        if contains(f, item, ListV([x])):
            del d.items[i]
            return Const(None)
    raise Unsupported("deque.remove(x): x not in deque (ValueError)")


_DEQUE_METHODS = {
    "append": _append, "appendleft": _appendleft, "pop": _pop_end(False), "popleft": _pop_end(True),
    "extend": _extend, "extendleft": lambda f, d, it: _extend(f, d, it, left=True), "rotate": _rotate,
    "clear": lambda f, d: (d.items.clear(), Const(None))[1], "reverse": lambda f, d: (d.items.reverse(), Const(None))[1],
    "copy": lambda f, d: DequeV(d.items, d.maxlen), "__copy__": lambda f, d: DequeV(d.items, d.maxlen),
    "insert": _deque_insert, "remove": _deque_remove,
    "count": lambda f, d, x: Const(sum(contains(f, item, ListV([x])) for item in d.items)),
    "index": lambda f, d, x: Const(next(i for i, item in enumerate(d.items) if contains(f, item, ListV([x])))),
}
BUILTINS[collections.deque] = _deque
for _name, _method in _DEQUE_METHODS.items():
    BUILTINS[getattr(collections.deque, _name)] = _on_deque(_method)


# ---- defaultdict, OrderedDict, dict construction and methods ------------------------------------
def _defaultdict(f, args, kwargs) -> V:
    factory = args[0] if args else Const(None)
    if not (isinstance(factory, Const) and (factory.value is None or callable(factory.value))) \
            and not hasattr(factory, "call") and type(factory).__name__ not in ("FuncV", "BoundV"):
        raise Unsupported("defaultdict() with a first argument that is not callable or None")
    items = _pairs(f, args[1]) if len(args) > 1 else {}
    items.update(kwargs)
    return DefaultDictV(factory, items)


def _ordered_dict(f, args, kwargs) -> V:
    items = _pairs(f, args[0]) if args else {}
    items.update(kwargs)
    return DictV(items, cls=collections.OrderedDict)


def _dict_init(f, args, kwargs) -> V:
    """``dict.__init__(self, ...)`` (``super().__init__()`` of a dict subclass): an update."""
    d = args[0]
    if not isinstance(d, DictV):
        raise Unsupported("dict.__init__ on a value that is not a dict built while capturing")
    if len(args) > 1:
        d.items.update(_pairs(f, args[1]))
    d.items.update(kwargs)
    f.session.note_mutation(d)
    return Const(None)


def _fromkeys(cls):
    def handler(f, args, kwargs):
        keys = [realize_const(k) for k in items_of(f, args[0])]
        value = _arg(args, kwargs, 1, "value", Const(None))
        items = {k: value for k in keys}
        if cls is collections.defaultdict:
            return DefaultDictV(Const(None), items)
        return DictV(items, cls=cls)

    return handler


def _move_to_end(f, d, key, last=Const(True)):
    k = realize_const(key)
    if k not in d.items:
        raise Unsupported(f"move_to_end: key {k!r} is not in the OrderedDict (KeyError)")
    value = d.items.pop(k)
    if truth(f, last):
        d.items[k] = value
    else:
        d.items = {k: value, **d.items}
    f.session.note_mutation(d)
    return Const(None)


def _popitem(f, d, last=Const(True)):
    if not d.items:
        raise Unsupported("popitem(): dictionary is empty (KeyError)")
    k = next(reversed(d.items)) if truth(f, last) else next(iter(d.items))
    value = d.items.pop(k)
    f.session.note_mutation(d)
    return TupleV([Const(k), value])


def _on_dict(method):
    def handler(f, args, kwargs):
        if not args or not isinstance(args[0], DictV):
            raise Unsupported("a dict method on a dict not built while capturing")
        return method(f, *args, **kwargs)

    return handler


def _copy_default(f, d):
    return DefaultDictV(d.factory, d.items)


BUILTINS[collections.defaultdict] = _defaultdict
BUILTINS[collections.OrderedDict] = _ordered_dict
BUILTINS[dict.__init__] = _dict_init
for _cls in (dict, collections.OrderedDict, collections.defaultdict):
    BUILTINS[_cls.fromkeys] = _fromkeys(_cls)
BUILTINS[collections.OrderedDict.move_to_end] = _on_dict(_move_to_end)
BUILTINS[collections.OrderedDict.popitem] = _on_dict(_popitem)
def _dict_popitem(f, d, **kw):
    if kw and not issubclass(d.cls, collections.OrderedDict):  # bound as dict.popitem: only OrderedDict's takes last=
        raise Unsupported("dict.popitem() takes no keyword arguments (TypeError)")
    return _popitem(f, d, **kw)


BUILTINS[dict.popitem] = _on_dict(_dict_popitem)
BUILTINS[collections.defaultdict.copy] = _on_dict(_copy_default)
BUILTINS[collections.defaultdict.__copy__] = _on_dict(_copy_default)


def _count_elements(f, args, kwargs) -> V:
    """``collections._count_elements(mapping, iterable)`` (Counter's C helper):
    ``mapping[x] = mapping.get(x, 0) + 1`` for each item."""
    mapping, iterable = args
    if not isinstance(mapping, DictV):
        raise Unsupported("Counter update of a mapping not built while capturing")
    for x in items_of(f, iterable):
        key = realize_const(x)
        old = mapping.items.get(key, Const(0))
        mapping.items[key] = f.binary("+", old, Const(1))
    f.session.note_mutation(mapping)
    return Const(None)


if hasattr(collections, "_count_elements"):
    BUILTINS[collections._count_elements] = _count_elements


def _tuple_new(f, args, kwargs) -> V:
    """``tuple.__new__(cls, iterable)`` (a namedtuple's ``_make``)."""
    cls = realize_const(args[0])
    if not (isinstance(cls, type) and issubclass(cls, tuple)) or kwargs:
        raise Unsupported("tuple.__new__ of a class that is not a tuple subclass")
    return TupleV(items_of(f, args[1]) if len(args) > 1 else [], cls=cls)


BUILTINS[tuple.__new__] = _tuple_new


def _namedtuple(f, args, kwargs) -> V:
    """The ``namedtuple`` factory on constants: the class is made at capture time (one class per
    compiled entry, where eager makes one per call: only ``type(a) is type(b)`` across two calls
    can tell)."""
    try:
        return Const(collections.namedtuple(*[realize_const(a) for a in args],
                                            **{k: realize_const(v) for k, v in kwargs.items()}))
    except Exception as e:
        raise Unsupported(f"namedtuple() raised {type(e).__name__}: {e}") from e


BUILTINS[collections.namedtuple] = _namedtuple


# ---- copy --------------------------------------------------------------------------------------
_ATOMIC = (int, float, bool, complex, str, bytes, type(None), type, types.FunctionType, types.BuiltinFunctionType,
           range, type(Ellipsis), frozenset)


def _copy_v(f, v: V, deep: bool, memo: dict) -> V:
    """``copy.copy``/``copy.deepcopy`` of containers and plain objects built of Python values.

    Tensors are refused (deep copies keep storage sharing between views, which a graph of clones
    would lose), as are objects whose class customises copying."""
    if id(v) in memo:
        return memo[id(v)]

    def sub(x):
        return _copy_v(f, x, deep, memo) if deep else x

    if isinstance(v, TensorV):
        raise Unsupported("copy of a tensor inside a container (copy.copy/deepcopy)")
    if isinstance(v, Const):
        if isinstance(v.value, _ATOMIC) or not deep and isinstance(v.value, tuple):
            return v
        if deep and _copyable_record(f, v):
            return FreshCopy(f, v)
        if deep and v.source is None and type(v.value) in (list, dict) and _plain_data(v.value):
            return _tracked(copy.deepcopy(v.value))  # a new container: tracked, so writes are seen
        try:
            out = Const(copy.deepcopy(v.value) if deep else copy.copy(v.value))
        except Exception as e:
            raise Unsupported(f"copy of a {type(v.value).__name__} raised {type(e).__name__}") from e
        if isinstance(out.value, (list, dict, set)) or out.value is not v.value and type(out.value).__module__ != "builtins":
            raise Unsupported(f"copy of a {type(v.value).__name__} held as a constant")
        return out
    if isinstance(v, ListV):
        out = memo[id(v)] = ListV([])
        out.items = [sub(x) for x in v.items]
    elif isinstance(v, DefaultDictV):
        out = memo[id(v)] = DefaultDictV(v.factory, {})
        out.items = {k: sub(x) for k, x in v.items.items()}
    elif type(v) is DictV:
        out = memo[id(v)] = DictV({}, cls=v.cls)
        out.items = {k: sub(x) for k, x in v.items.items()}
    elif isinstance(v, SetV):
        out = SetV(list(v.items))
    elif isinstance(v, DequeV):
        out = memo[id(v)] = DequeV([], v.maxlen)
        out.items = [sub(x) for x in v.items]
    elif isinstance(v, TupleV):
        items = [sub(x) for x in v.items]
        out = v if not deep and v.cls is tuple else TupleV(items, cls=v.cls)
    elif isinstance(v, ObjV) and _plain_copy(v.cls):
        out = memo[id(v)] = ObjV(v.cls)
        out.attrs = {k: sub(x) for k, x in v.attrs.items()}
    else:
        raise Unsupported(f"copy of a {type(v).__name__}")
    memo[id(v)] = out
    return out


class FreshCopy(Const):
    """``copy.deepcopy`` of an object reached from a source whose state is plain data (HF's
    ``config.get_text_config()`` deep-copies the model's config at every mask built in ``forward``,
    then renames some of its attributes).

    The state it was copied from is guarded (the original's ``__dict__``: keys and every value), so
    what is read from the copy is this call's. The copy made here is read and written while
    capturing (``setattr``/``delattr`` of plain data run on it for real: it is private to the
    capture); where it outlives the graph (returned, stored, live at a break) it is copied again
    from the original at run time and the writes replayed: a fresh object per call, as in eager."""

    __slots__ = ("original", "writes")

    def __init__(self, f, original: Const):
        f.session.wrap(vars(original.value), original.source.attr("__dict__", original.value))
        super().__init__(copy.deepcopy(original.value))
        self.original, self.writes = original, []

    def write(self, name: str, value: V | None) -> None:
        """``setattr(copy, name, value)``, or ``delattr`` when ``value`` is None."""
        if value is not None and not (isinstance(value, Const) and _plain_data(value.value)):
            raise Unsupported(f"storing a {type(value).__name__} on a copied {type(self.value).__name__}")
        try:
            if value is None:
                delattr(self.value, name)
            else:
                setattr(self.value, name, value.value)
        except Exception as e:  # eager raises it at run time: run the region natively
            raise Unsupported(f"attribute write on a copied {type(self.value).__name__} raised {type(e).__name__}") from e
        self.writes.append((name, value))

    def rebuild(self, rb) -> str:
        name = rb._bind(self, f"{rb.refs(copy.deepcopy)}({rb.expr(self.original)})")
        for attr, value in self.writes:
            rb.lines.append(f"{rb.refs(delattr)}({name}, {attr!r})" if value is None
                            else f"{rb.refs(setattr)}({name}, {attr!r}, {rb.expr(value)})")
        return name


def _delattr(f, args, kwargs) -> V:
    if len(args) == 2 and isinstance(args[0], FreshCopy) and not kwargs:
        args[0].write(realize_const(args[1]), None)
        return Const(None)
    raise Unsupported("delattr() outside a copied object")


BUILTINS[delattr] = _delattr


_DATA = (int, float, bool, complex, str, bytes, type(None), type(Ellipsis))


def _plain_data(x, depth: int = 0) -> bool:
    """Numbers, strings, dtypes and devices, in lists, tuples and dicts: what a guard on the
    original's state checks by value (objects inside would only be checked by type)."""
    if type(x) in _DATA or isinstance(x, (torch.dtype, torch.device)):
        return True
    if depth > 4:
        return False
    if type(x) in (list, tuple):
        return all(_plain_data(i, depth + 1) for i in x)
    if type(x) is dict:
        return all(type(k) in _DATA and _plain_data(i, depth + 1) for k, i in x.items())
    return False


def _tracked(x) -> V:
    """Plain data made while capturing, as values that take writes (lists and dicts tracked)."""
    if type(x) is list:
        return ListV([_tracked(i) for i in x])
    if type(x) is dict:
        return DictV({k: _tracked(i) for k, i in x.items()})
    return Const(x)


def _copyable_record(f, v: Const) -> bool:
    """An object with a source whose deep copy is its ``__dict__`` of plain data copied (no copy
    hooks, no slots), with no attribute write of this capture pending on it."""
    value = v.value
    return v.source is not None and not isinstance(value, (type, types.ModuleType, torch.nn.Module)) \
        and isinstance(getattr(value, "__dict__", None), dict) and _plain_copy(type(value)) \
        and _plain_data(vars(value)) and not any(k[0] == id(v) for k in f.session.attr_writes)


def _plain_copy(cls: type) -> bool:
    """A class copied field by field: no copy hooks, slots or pickling customisation of its own."""
    return all(not hasattr(cls, n) or getattr(cls, n) is getattr(object, n, None)
               for n in ("__copy__", "__deepcopy__", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__")) \
        and "__slots__" not in vars(cls)


BUILTINS[copy.deepcopy] = lambda f, args, kwargs: _copy_v(f, args[0], True, {})
BUILTINS[copy.copy] = lambda f, args, kwargs: _copy_v(f, args[0], False, {})
