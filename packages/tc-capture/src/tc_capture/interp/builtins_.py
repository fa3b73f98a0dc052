"""The closed table of builtins (and list/dict/tuple methods) the interpreter understands."""

from __future__ import annotations

import contextlib
import inspect
import operator
import types

import torch

from .attrs import AttrMissing, get_attr, set_attr, type_of
from .base import Unsupported, call_function
from .iteration import iterate, pull
from .pyops import binary, items_of, realize_const, set_add
from .record import record
from .symbols import concrete
from .truth import call_own, own_method, truth
from .variables import BoundV, Const, DictV, FuncV, IterV, LazyV, ListV, MethodV, ObjV, SetV, SuperV, TensorV, TupleV, V, ViewV

BUILTINS: dict = {}
# Calling an *instance* of one of these types (an ``operator.itemgetter``, an ``lru_cache``
# wrapper): ``handler(f, fn_v, args, kwargs)``. Filled by the ``stdlib_*`` modules.
CALLABLE_TYPES: dict = {}


def builtin(*fns):
    def register(handler):
        for fn in fns:
            BUILTINS[fn] = handler
        return handler

    return register


def _consts(args) -> list:
    # A symbolic size is made plain (specialised) here: str(), hash(), repr() of a SymInt would
    # read its expression, not its value.
    return [concrete(realize_const(a)) for a in args]


@builtin(len)
def length(f, args, kwargs=None) -> V:
    (v,) = args
    if own_method(v, "__len__") is not None:
        return call_own(f, own_method(v, "__len__"), v)
    if isinstance(v, (ListV, TupleV, SetV, DictV)):
        return Const(len(v.items))
    if isinstance(v, ViewV):
        return Const(len(v.dict_v.items))
    if hasattr(v, "items") and hasattr(v, "py_type"):  # a deque (stdlib_values.DequeV)
        return Const(len(v.items))
    if isinstance(v, TensorV):
        return Const(v.fake.shape[0])
    if hasattr(v, "length"):  # a NumPy array (numpy_ops.NdarrayV)
        return v.length(f)
    if isinstance(v, Const):
        if v.source is not None and not isinstance(v.value, (str, bytes, tuple)):
            f.session.guards.length(v.source, v.value)
        return Const(len(v.value))
    if isinstance(v, ObjV) and isinstance(getattr(v.cls, "__len__", None), types.FunctionType):
        return call_function(f, BoundV(Const(v.cls.__len__), v), [], {})
    raise Unsupported(f"len() of {type(v).__name__}")


@builtin(isinstance)
def isinstance_(f, args, kwargs) -> V:
    v, classes = args
    t = type_of(v)
    cls = realize_const(classes)
    if isinstance(v, TensorV) and not isinstance(cls, tuple) and cls is torch.nn.Parameter:
        return Const(t is torch.nn.Parameter)
    return Const(issubclass(t, cls))


@builtin(type)
def type_(f, args, kwargs) -> V:
    if len(args) != 1:
        raise Unsupported("type() with 3 arguments")
    return Const(type_of(args[0]))


def _fold_or_tensor(fn, tensor_fn=None):
    def handler(f, args, kwargs):
        if tensor_fn is not None and any(isinstance(a, TensorV) for a in args):
            return record(f.session, tensor_fn, tuple(args), kwargs)
        if fn in (any, all) and args and not isinstance(args[0], Const):
            return _any_all(f, fn, args[0])
        if fn is sorted:
            return _sorted(f, args, kwargs)
        if fn is callable:
            return Const(_callable(args[0]))
        try:
            return Const(fn(*_consts(args), **{k: realize_const(v) for k, v in kwargs.items()}))
        except Exception as e:
            raise Unsupported(f"{fn.__name__}() raised {type(e).__name__}: {e}") from e

    return handler


for _fn, _tfn in [(issubclass, None), (callable, None), (abs, torch.abs), (round, None), (divmod, None),
                  (pow, operator.pow), (hash, None), (ord, None), (chr, None), (bin, None), (hex, None),
                  (repr, None), (ascii, None), (sorted, None), (any, None), (all, None)]:
    BUILTINS[_fn] = _fold_or_tensor(_fn, _tfn)


def _scalar(kind):
    def handler(f, args, kwargs):
        if any(isinstance(a, TensorV) for a in args):
            raise Unsupported(f"{kind.__name__}() of a tensor reads its data")
        if kind is bool and args and not isinstance(args[0], Const):
            return Const(truth(f, args[0]))
        try:
            return Const(kind(*_consts(args), **{k: realize_const(v) for k, v in kwargs.items()}))
        except Exception as e:
            raise Unsupported(f"{kind.__name__}() raised {type(e).__name__}: {e}") from e

    return handler


for _kind in (int, float, bool, str, complex):
    BUILTINS[_kind] = _scalar(_kind)


def _minmax(fn):
    def handler(f, args, kwargs):
        items = items_of(f, args[0]) if len(args) == 1 else list(args)
        if any(isinstance(a, TensorV) for a in items):
            raise Unsupported(f"{fn.__name__}() over tensors compares their values")
        rest = {k: realize_const(v) for k, v in kwargs.items() if k != "key"}
        if "default" in rest and not items:
            return kwargs["default"]
        keys = _keys(f, items, kwargs.get("key"))
        try:
            return items[fn(range(len(items)), key=keys.__getitem__)]
        except Exception as e:
            raise Unsupported(f"{fn.__name__}() raised {type(e).__name__}: {e}") from e

    return handler


def _keys(f, items: list, key: V | None) -> list:
    """Sort keys of ``items``: a key function is called like any other (a Python one inlined, in
    order), never run for real while capturing."""
    if key is None or isinstance(key, Const) and key.value is None:
        return [realize_const(x) for x in items]
    return [realize_const(call_function(f, key, [x], {})) for x in items]


def _sorted(f, args, kwargs) -> V:
    items = items_of(f, args[0])
    if any(isinstance(a, TensorV) for a in items):
        raise Unsupported("sorted() over tensors compares their values")
    keys = _keys(f, items, kwargs.get("key"))
    reverse = bool(realize_const(kwargs.get("reverse", Const(False))))
    try:
        order = sorted(range(len(items)), key=keys.__getitem__, reverse=reverse)
    except Exception as e:
        raise Unsupported(f"sorted() raised {type(e).__name__}: {e}") from e
    return ListV([items[i] for i in order])


def _any_all(f, fn, iterable: V) -> V:
    """Short-circuits like Python: a lazy iterable is consumed only up to the deciding item."""
    it = iterate(f, iterable)
    while (x := pull(f, it)) is not None:
        if truth(f, x) is (fn is any):
            return Const(fn is any)
    return Const(fn is all)


def _callable(v: V) -> bool:
    if isinstance(v, (FuncV, BoundV, MethodV)):
        return True
    if isinstance(v, Const):
        return callable(v.value)
    if isinstance(v, ObjV):
        return any("__call__" in vars(k) for k in v.cls.__mro__)
    return False


BUILTINS[min], BUILTINS[max] = _minmax(min), _minmax(max)


@builtin(sum)
def sum_(f, args, kwargs) -> V:
    items = items_of(f, args[0])
    total = args[1] if len(args) > 1 else kwargs.get("start", Const(0))
    for item in items:
        total = binary(f, operator.add, total, item)
    return total


@builtin(range)
def range_(f, args, kwargs) -> V:
    return Const(range(*_consts(args)))


@builtin(list)
def list_(f, args, kwargs) -> V:
    return ListV(items_of(f, args[0]) if args else [])


@builtin(tuple)
def tuple_(f, args, kwargs) -> V:
    return TupleV(items_of(f, args[0]) if args else [])


@builtin(set)
def set_(f, args, kwargs) -> V:
    s = SetV([])
    for item in items_of(f, args[0]) if args else []:
        set_add(s.items, item, f.session)
    return s


@builtin(frozenset)
def frozenset_(f, args, kwargs) -> V:
    return Const(frozenset(_consts(items_of(f, args[0])) if args else ()))


@builtin(dict)
def dict_(f, args, kwargs) -> V:
    items = {}
    if args:
        src = args[0]
        if isinstance(src, DictV):
            items.update(src.items)
        else:
            for pair in items_of(f, src):
                k, v = items_of(f, pair)
                items[realize_const(k)] = v
    items.update(kwargs)
    return DictV(items)


@builtin(iter)
def iter_(f, args, kwargs) -> V:
    return iterate(f, args[0])


@builtin(next)
def next_(f, args, kwargs) -> V:
    item = pull(f, args[0])
    if item is None:
        if len(args) > 1:
            return args[1]
        raise Unsupported("next() on an exhausted iterator (StopIteration)")
    return item


# enumerate/zip/map/filter are lazy, as in Python: nothing is pulled (no function called) until
# the object is consumed; see iteration.pull.
@builtin(enumerate)
def enumerate_(f, args, kwargs) -> V:
    start = realize_const(args[1]) if len(args) > 1 else realize_const(kwargs.get("start", Const(0)))
    if type(start) is not int:
        raise Unsupported("enumerate() with a start that is not an int")
    return LazyV(enumerate, None, [iterate(f, args[0])], start)


@builtin(zip)
def zip_(f, args, kwargs) -> V:
    strict = kwargs.pop("strict", Const(False)) if "strict" in kwargs else Const(False)
    if kwargs:
        raise Unsupported(f"zip() with keyword arguments {sorted(kwargs)}")
    return LazyV(zip, None, [iterate(f, a) for a in args], strict=bool(realize_const(strict)))


@builtin(reversed)
def reversed_(f, args, kwargs) -> V:
    v = args[0]
    cls = {ListV: type(reversed([])), TupleV: type(reversed(()))}.get(type(v))
    if cls is None and isinstance(v, Const) and isinstance(v.value, (list, tuple, range, str)):
        cls = type(reversed(v.value))
    return IterV(list(reversed(items_of(f, v))), cls=cls)


@builtin(map)
def map_(f, args, kwargs) -> V:
    if len(args) < 2 or kwargs:
        raise Unsupported("map() needs a function and at least one iterable")
    return LazyV(map, args[0], [iterate(f, a) for a in args[1:]])


@builtin(filter)
def filter_(f, args, kwargs) -> V:
    if len(args) != 2 or kwargs:
        raise Unsupported("filter() takes a function and one iterable")
    return LazyV(filter, args[0], [iterate(f, args[1])])


@builtin(getattr)
def getattr_(f, args, kwargs) -> V:
    try:
        return get_attr(f, args[0], realize_const(args[1]))
    except AttrMissing:
        if len(args) > 2:
            return args[2]
        raise


@builtin(hasattr)
def hasattr_(f, args, kwargs) -> V:
    try:
        get_attr(f, args[0], realize_const(args[1]))
        return Const(True)
    except AttrMissing:
        return Const(False)


@builtin(setattr)
def setattr_(f, args, kwargs) -> V:
    set_attr(f, args[0], realize_const(args[1]), args[2])
    return Const(None)


@builtin(super)
def super_(f, args, kwargs) -> V:
    if len(args) == 2:
        return SuperV(realize_const(args[0]), args[1])
    cell = f.cells.get("__class__")
    if cell is None or cell.contents is None or not f.code.co_varnames:
        raise Unsupported("super() without a __class__ cell")
    first = f.code.co_varnames[0]
    obj = f.locals.get(first) or (f.cells.get(first).contents if first in f.cells else None)
    return SuperV(realize_const(cell.contents), obj)


@builtin(print, input, open, id, breakpoint, globals, locals, vars, eval, exec)
def python_only(f, args, kwargs) -> V:
    raise Unsupported("a call to a Python builtin with effects outside the graph (print, open, id, ...)")


# ---- container methods ------------------------------------------------------------------------------
def _mutating(fn):
    def handler(f, args, kwargs):
        out = fn(f, *args, **kwargs)
        f.session.note_mutation(args[0])
        return out

    return handler


BUILTINS[list.append] = _mutating(lambda f, lst, v: (lst.items.append(v), Const(None))[1])
BUILTINS[list.extend] = _mutating(lambda f, lst, v: (lst.items.extend(items_of(f, v)), Const(None))[1])
BUILTINS[list.insert] = _mutating(lambda f, lst, i, v: (lst.items.insert(realize_const(i), v), Const(None))[1])
BUILTINS[list.pop] = _mutating(lambda f, lst, i=Const(-1): lst.items.pop(realize_const(i)))
BUILTINS[list.clear] = _mutating(lambda f, lst: (lst.items.clear(), Const(None))[1])
BUILTINS[list.reverse] = _mutating(lambda f, lst: (lst.items.reverse(), Const(None))[1])
BUILTINS[list.copy] = lambda f, args, kwargs: ListV(args[0].items)
BUILTINS[list.index] = lambda f, args, kwargs: Const(_consts(args[0].items).index(realize_const(args[1])))
BUILTINS[list.count] = lambda f, args, kwargs: Const(_consts(args[0].items).count(realize_const(args[1])))
BUILTINS[tuple.index] = BUILTINS[list.index]
BUILTINS[tuple.count] = BUILTINS[list.count]
BUILTINS[dict.keys] = lambda f, args, kwargs: ViewV(args[0], "keys")
BUILTINS[dict.values] = lambda f, args, kwargs: ViewV(args[0], "values")
BUILTINS[dict.items] = lambda f, args, kwargs: ViewV(args[0], "items")
BUILTINS[dict.get] = lambda f, args, kwargs: args[0].items.get(realize_const(args[1]),
                                                               args[2] if len(args) > 2 else Const(None))
BUILTINS[dict.copy] = lambda f, args, kwargs: DictV(args[0].items, cls=args[0].cls)
BUILTINS[dict.__contains__] = lambda f, args, kwargs: Const(realize_const(args[1]) in args[0].items)


def _dict_pop(f, d, k, *default):
    key = realize_const(k)
    if key not in d.items and default:
        return default[0]
    return d.items.pop(key)


def _dict_update(f, d, other=None, **kw):
    if other is not None:
        d.items.update(other.items if isinstance(other, DictV) else {realize_const(k): v for k, v in
                                                                      (items_of(f, p) for p in items_of(f, other))})
    d.items.update(kw)
    return Const(None)


def _dict_setdefault(f, d, k, default=Const(None)):
    return d.items.setdefault(realize_const(k), default)


BUILTINS[dict.pop] = _mutating(_dict_pop)
BUILTINS[dict.update] = _mutating(_dict_update)
BUILTINS[dict.setdefault] = _mutating(_dict_setdefault)
BUILTINS[dict.clear] = _mutating(lambda f, d: (d.items.clear(), Const(None))[1])


def bind_namedtuple(cls, args, kwargs) -> TupleV:
    fields = cls._fields
    values = dict(zip(fields, args), **kwargs)
    defaults = getattr(cls, "_field_defaults", {})
    return TupleV([values[n] if n in values else Const(defaults[n]) for n in fields], cls=cls)




# ---- module traversal: parameters(), named_modules(), ... -------------------------------------------
def _module_walk(method: str):
    """``mod.parameters()`` and friends: the real traversal, each item read back from its source.

    The items become sourced values (parameters and buffers are graph inputs like any other
    module state); a gated guard on the count notices a parameter added or removed.
    """
    named = method.startswith("named_")

    def handler(f, args, kwargs):
        mod_v = args[0]
        if not isinstance(mod_v, Const) or mod_v.source is None:
            raise Unsupported(f"Module.{method}() on a module reached without a source")
        mod, src = mod_v.value, mod_v.source
        pairs = list(getattr(mod, method if named else f"named_{method}")(*_consts(args[1:]),
                                                                        **{k: realize_const(v) for k, v in kwargs.items()}))
        count = f"len(list({src.expr}.{method}({', '.join(repr(a) for a in _consts(args[1:]))})))"
        f.session.guards.add(src._step(count, src.name, True), f"{count} == {len(pairs)}",
                             f"{method}() of {f.session.guards.readable(src)} has {len(pairs)} items")
        items = []
        for name, value in pairs:
            v = _walk_source(f, mod_v, name)
            items.append(TupleV([Const(name), v]) if named else v)
        return IterV(items)

    return handler


def _walk_source(f, mod_v: Const, qualname: str) -> V:
    v = mod_v
    for part in qualname.split(".") if qualname else ():
        v = get_attr(f, v, part)
    return v


for _m in ("parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
           "modules", "named_modules"):
    BUILTINS[getattr(torch.nn.Module, _m)] = _module_walk(_m)


@builtin(__import__("inspect").signature)
def signature_(f, args, kwargs) -> V:
    """``inspect.signature(fn)``: a record of a function known at capture time."""
    fn = args[0]
    if isinstance(fn, BoundV) and isinstance(fn.func, Const) and isinstance(fn.self_v, Const):
        real = types.MethodType(fn.func.value, fn.self_v.value)
    elif isinstance(fn, Const):
        real = fn.value
    else:
        raise Unsupported(f"inspect.signature of a {type(fn).__name__}")
    return Const(inspect.signature(real, **{k: realize_const(v) for k, v in kwargs.items()}))


@builtin(__import__("warnings").warn)
def warn_(f, args, kwargs) -> V:
    """``warnings.warn(...)``: replayed after the graph, in order with the region's other side
    effects, so the warning is issued on every call as eager issues it (the filters see the
    runner's location, not the user's line)."""
    if not all(isinstance(a, Const) for a in [*args, *kwargs.values()]):
        raise Unsupported("warnings.warn of a value not known at capture time")
    f.session.side_effects.append(("call", Const(__import__("warnings").warn), list(args), dict(kwargs)))
    return Const(None)


@builtin(torch._assert)
def torch_assert_(f, args, kwargs) -> V:
    """``torch._assert(cond, msg)`` (torchvision's shape checks): on a Python condition it is an
    ``assert`` answered at capture time, so the graph gets no node; on a tensor it is recorded."""
    cond = args[0] if args else kwargs["condition"]
    if isinstance(cond, TensorV):
        return record(f.session, torch._assert, tuple(args), kwargs)
    if not isinstance(cond, Const):
        raise Unsupported(f"torch._assert on a {type(cond).__name__}")
    if not cond.value:
        raise Unsupported("torch._assert fails: run it in Python to raise")
    return Const(None)


# ---- standard-library and torch helpers that optimizer code runs ------------------------------------
@builtin(__import__("typing").cast)
def cast_(f, args, kwargs) -> V:
    """``typing.cast(T, x)`` is ``x`` at run time."""
    return args[1] if len(args) > 1 else kwargs["val"]


@builtin(__import__("itertools").chain)
def chain_(f, args, kwargs) -> V:
    return IterV([item for a in args for item in items_of(f, a)])


@builtin(__import__("itertools").chain.from_iterable)
def chain_from_iterable_(f, args, kwargs) -> V:
    return IterV([item for a in items_of(f, args[0]) for item in items_of(f, a)])


@builtin(torch.autograd.profiler.record_function)
def record_function_(f, args, kwargs) -> V:
    """``with record_function(name):`` (``Optimizer.step``'s profiler label) is a no-op inside a
    captured region: its enter/exit are profiler calls with no effect on values, and a label
    around some ops of a fused graph would not name what the profiler sees anyway. It becomes a
    ``nullcontext`` (what ``as`` binds is ``None``)."""
    return ObjV(contextlib.nullcontext, {"enter_result": Const(None)})


# ---- sets built while capturing (SetV): mutations and queries ------------------------------------
def _set_of(f, v: V) -> list:
    out: list = []
    for x in items_of(f, v):
        set_add(out, x, f.session)
    return out


def _set_update(f, s, *others):
    for other in others:
        for x in _set_of(f, other):
            set_add(s.items, x, f.session)
    return Const(None)


def _set_discard(f, s, v):
    key = realize_const(v)
    s.items[:] = [x for x in s.items if not (isinstance(x, Const) and x.value == key)]
    return Const(None)


def _set_query(method):
    """A read of sets of constants: computed on the real sets (results are fresh values)."""
    def handler(f, args, kwargs):
        values = [set(realize_const(x) for x in _set_of(f, a)) for a in args]
        out = method(*values)
        return SetV([Const(x) for x in out]) if isinstance(out, set) else Const(out)

    return handler


def _on_setv(handler):
    def checked(f, args, kwargs):
        if not args or not isinstance(args[0], SetV):
            raise Unsupported("a set method on a value that is not a set built while capturing")
        return handler(f, args, kwargs)

    return checked


BUILTINS[set.add] = _on_setv(_mutating(lambda f, s, v: _set_update(f, s, ListV([v]))))
BUILTINS[set.update] = _on_setv(_mutating(_set_update))
BUILTINS[set.discard] = _on_setv(_mutating(_set_discard))
BUILTINS[set.clear] = _on_setv(_mutating(lambda f, s: (s.items.clear(), Const(None))[1]))
BUILTINS[set.copy] = _on_setv(lambda f, args, kwargs: SetV(args[0].items))
for _name in ("union", "intersection", "difference", "symmetric_difference", "issubset", "issuperset",
              "isdisjoint"):
    BUILTINS[getattr(set, _name)] = _set_query(getattr(set, _name))
