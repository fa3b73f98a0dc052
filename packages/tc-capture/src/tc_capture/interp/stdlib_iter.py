"""``itertools``, ``functools.reduce``, ``heapq.nlargest``/``nsmallest`` and the ``operator``
module's callables on tracked values.

The real C implementations run over host adapters (see ``stdlib_values``): a :class:`HostIter`
pulls one tracked item per ``__next__``, a :class:`HostFn` calls a tracked function through the
interpreter. One table (:data:`_ROLES`) says, per callable and argument, how each argument is
handed over; no per-function model of the algorithm is written here, so what these functions do
(laziness, the order in which they pull and call, ``groupby``'s shared groups, ``tee``'s buffer)
is the real one.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import operator

from . import stdlib_values as SV
from .base import Unsupported, call_function, iterate, pull
from .builtins_ import BUILTINS, CALLABLE_TYPES
from .pyops import BINARY, COMPARE, UNARY, binary, compare, identity, items_of, realize_const, unary
from .stdlib_values import Ctx, HostIterV, to_v
from .truth import truth
from .variables import Const, IterV, ListV, TupleV, V

SV._REALIZE.append(realize_const)


class HostIter:
    """A real iterator over a tracked iterator. ``role`` says how each item is handed over:
    ``v`` the tracked value, ``truth`` its truth, ``iter`` a HostIter over it (``chain.from_iterable``),
    ``star`` a tuple of its items (``starmap``)."""

    __slots__ = ("ctx", "it", "role")

    def __init__(self, ctx: Ctx, it: V, role: str = "v"):
        self.ctx, self.it, self.role = ctx, it, role

    def __iter__(self):
        return self

    def __next__(self):
        f = self.ctx.f
        x = pull(f, self.it)
        if x is None:
            raise StopIteration
        if self.role == "truth":
            return truth(f, x)
        if self.role == "iter":
            return HostIter(self.ctx, iterate(f, x))
        if self.role == "star":
            return tuple(items_of(f, x))
        return x


class HostFn:
    """A real callable standing for a tracked one. ``role``: ``fn`` hands back the tracked result,
    ``pred`` its truth, ``key`` its constant (the real algorithm compares keys)."""

    __slots__ = ("ctx", "fn", "role")

    def __init__(self, ctx: Ctx, fn: V | None, role: str):
        self.ctx, self.fn, self.role = ctx, fn, role

    def __call__(self, *args):
        f = self.ctx.f
        args_v = [to_v(a, self.ctx) for a in args]
        out = args_v[0] if self.fn is None else call_function(f, self.fn, args_v, {})
        if self.role == "pred":
            return truth(f, out)
        if self.role == "key":
            key = realize_const(out)
            if isinstance(key, (list, dict, set)):
                raise Unsupported("a key function returned a mutable container")
            return key
        return out


# How each argument is handed to the real callable: "c" a constant, "v" the tracked value,
# "it"/"it:truth"/"it:iter"/"it:star" an iterable (items by role), "fn"/"pred"/"key" a function
# (None: the identity; for "fn", ``+``). "*" repeats the last role for the remaining arguments.
_ROLES = {
    itertools.accumulate: ("it", "fn"), itertools.chain: ("it", "*"), itertools.chain.from_iterable: ("it:iter",),
    itertools.combinations: ("it", "c"), itertools.combinations_with_replacement: ("it", "c"),
    itertools.compress: ("it", "it:truth"), itertools.count: ("c", "c"), itertools.cycle: ("it",),
    itertools.dropwhile: ("pred", "it"), itertools.filterfalse: ("pred", "it"), itertools.groupby: ("it", "key"),
    itertools.islice: ("it", "c", "c", "c"), itertools.pairwise: ("it",), itertools.permutations: ("it", "c"),
    itertools.product: ("it", "*"), itertools.repeat: ("v", "c"), itertools.starmap: ("fn", "it:star"),
    itertools.takewhile: ("pred", "it"), itertools.tee: ("it", "c"), itertools.zip_longest: ("it", "*"),
    functools.reduce: ("fn", "it", "v"), heapq.nlargest: ("c", "it"), heapq.nsmallest: ("c", "it"),
}
if hasattr(itertools, "batched"):  # 3.12
    _ROLES[itertools.batched] = ("it", "c")
_KW_ROLES = {"initial": "v", "fillvalue": "v", "repeat": "c", "r": "c", "n": "c", "func": "fn", "key": "key",
             "start": "c", "step": "c", "times": "c", "strict": "c"}


_INFINITE = {itertools.count, itertools.cycle}


def _pure_source(v: V, it: V) -> bool:
    """Items known and private to the adapter: a fresh iterator over a known sequence, or a pure
    itertools iterator (draining it at a break runs nothing and moves no iterator of the user's)."""
    return isinstance(it, IterV) and it is not v or isinstance(v, HostIterV) and v.pure


def _hand_over(f, ctx: Ctx, role: str, v: V, pure: list):
    if role == "c":
        return realize_const(v)
    if role == "v":
        return v
    if role.startswith("it"):
        it = iterate(f, v)
        pure[0] = pure[0] and _pure_source(v, it) and role != "it:iter"
        return HostIter(ctx, it, role[3:] or "v")
    pure[0] = False
    if isinstance(v, Const) and v.value is None:
        return None if role == "key" else HostFn(ctx, None, role)
    return HostFn(ctx, v, role)


def _run_real(fn):
    roles = _ROLES[fn]

    def handler(f, args, kwargs):
        ctx, pure = Ctx(f), [fn not in _INFINITE]
        real_args = []
        for i, a in enumerate(args):
            role = roles[i] if i < len(roles) and roles[i] != "*" else roles[-2 if roles[-1] == "*" else -1]
            real_args.append(_hand_over(f, ctx, role, a, pure))
        real_kwargs = {k: _hand_over(f, ctx, _KW_ROLES.get(k, "c"), v, pure) for k, v in kwargs.items()}
        if fn is itertools.repeat and len(args) < 2 and "times" not in kwargs:
            pure[0] = False  # endless
        if fn is itertools.accumulate and (len(real_args) < 2 or real_args[1] is None) and "func" not in real_kwargs:
            real_args[1:2] = [HostFn(ctx, Const(operator.add), "fn")]  # the default `+`, through the interpreter
        if fn in (itertools.filterfalse, itertools.dropwhile, itertools.takewhile) and real_args[0] is None:
            real_args[0] = HostFn(ctx, None, "pred")  # None: the items' own truth
        if fn in (heapq.nlargest, heapq.nsmallest) and real_kwargs.get("key") is None:
            real_kwargs["key"] = HostFn(ctx, None, "key")  # items compared as constants
        if fn is itertools.groupby and real_kwargs.get("key", real_args[1] if len(real_args) > 1 else None) is None:
            real_kwargs.pop("key", None)
            real_args[1:2] = [HostFn(ctx, None, "key")]
        try:
            out = fn(*real_args, **real_kwargs)
        except Unsupported:
            raise
        except Exception as e:  # eager raises the same: the call runs in Python at the break
            raise Unsupported(f"{fn.__qualname__}() raised {type(e).__name__}: {e}") from e
        if type(out) is list:
            return ListV([to_v(x, ctx) for x in out])
        if hasattr(out, "__next__"):
            return HostIterV(out, ctx, pure[0] and fn is not itertools.groupby)
        return to_v(out, ctx)

    return handler


for _fn in _ROLES:
    BUILTINS[_fn] = _run_real(_fn)


# ---- the operator module: each function is the operation it names ----------------------------------
def _binary(fn):
    return lambda f, args, kwargs: binary(f, fn, *args)


def _compare(op):
    return lambda f, args, kwargs: compare(f, op, *args)


def _unary(fn):
    return lambda f, args, kwargs: unary(f, fn, *args)


for _fn in set(BINARY.values()):
    BUILTINS[_fn] = _binary(_fn)
for _op, _fn in COMPARE.items():
    BUILTINS[_fn] = _compare(_op)
for _fn in UNARY.values():
    BUILTINS[_fn] = _unary(_fn)
BUILTINS[operator.getitem] = lambda f, args, kwargs: f.getitem(*args)
BUILTINS[operator.contains] = lambda f, args, kwargs: Const(f.contains(args[1], args[0]))
BUILTINS[operator.not_] = lambda f, args, kwargs: Const(not truth(f, args[0]))
BUILTINS[operator.truth] = lambda f, args, kwargs: Const(truth(f, args[0]))
BUILTINS[operator.is_] = lambda f, args, kwargs: Const(identity(*args, f.session))
BUILTINS[operator.is_not] = lambda f, args, kwargs: Const(not identity(*args, f.session))


def _itemgetter(f, fn: Const, args, kwargs) -> V:
    _, keys = fn.value.__reduce__()
    items = [f.getitem(args[0], Const(k)) for k in keys]
    return items[0] if len(items) == 1 else TupleV(items)


def _attrgetter(f, fn: Const, args, kwargs) -> V:
    _, names = fn.value.__reduce__()
    out = []
    for name in names:
        v = args[0]
        for part in name.split("."):
            v = f.get_attr(v, part)
        out.append(v)
    return out[0] if len(out) == 1 else TupleV(out)


def _methodcaller(f, fn: Const, args, kwargs) -> V:
    maker, margs = fn.value.__reduce__()
    if isinstance(maker, functools.partial):  # with keywords: partial(methodcaller, name, **kw), args
        name, call_args, call_kw = maker.args[1], margs, maker.keywords
    else:
        name, call_args, call_kw = margs[0], margs[1:], {}
    method = f.get_attr(args[0], name)
    return call_function(f, method, [Const(a) for a in call_args], {k: Const(v) for k, v in call_kw.items()})


CALLABLE_TYPES[operator.itemgetter] = _itemgetter
CALLABLE_TYPES[operator.attrgetter] = _attrgetter
CALLABLE_TYPES[operator.methodcaller] = _methodcaller
