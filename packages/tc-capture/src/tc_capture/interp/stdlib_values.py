"""Tracked values of standard-library objects built while capturing, and the host adapters that
let real (C-implemented) standard-library callables run over tracked values.

Each class here answers a small protocol the rest of the interpreter asks of it, so that adding a
model touches no shared module: ``py_type()`` (what ``type()`` says), ``truthy(f)`` (``bool()``),
``rebuild(rb)`` (the Python expression that makes the real object after the graph, given the
runner builder ``resume.codegen.Rebuild``), and optionally ``attr(f, name)`` (an attribute read).

``realize()`` gives the real object of a value made only of constants (``pyops.realize_const``).

**Host adapters** (``stdlib_iter``). An ``itertools`` iterator, ``functools.reduce`` or ``heapq.nlargest`` is run
*for real* over :class:`HostIter` (a real Python iterator whose ``__next__`` pulls one tracked item
through the interpreter) and :class:`HostFn` (a real callable that calls a tracked function through
the interpreter: a Python function is inlined). The real algorithm then decides when to pull and
when to call, so laziness and the order of side effects are exactly eager's, and the items it
hands back are the tracked values themselves. A predicate's result is handed over as a ``bool``
(``truth``), a key's as a constant (compared by the real algorithm); anything else as the value.
"""

from __future__ import annotations

import collections
import functools

from .base import Unsupported, call_function
from .variables import BoundV, Const, DictV, TupleV, V


class Ctx:
    """The frame that host adapters call into: the frame that pulled last (set at each pull)."""

    __slots__ = ("f",)

    def __init__(self, f):
        self.f = f


def to_v(x, ctx: Ctx) -> V:
    """What a real standard-library callable handed back, as a tracked value."""
    if isinstance(x, V):
        return x
    if type(x) is tuple:
        return TupleV([to_v(i, ctx) for i in x])
    if hasattr(x, "__next__") and type(x).__module__ == "itertools":
        return HostIterV(x, ctx)  # groupby's groups, tee's copies: they share the adapters' frame
    return Const(x)


# ``pyops.realize_const`` (pyops sits above this module; ``stdlib_iter`` registers it): the
# constants inside a deque or partial made only of constants.
_REALIZE: list = []


class HostIterV(V):
    """An iterator made by a real standard-library callable over host adapters (``itertools``).
    Pulling it runs the real iterator one step, with the adapters calling into the pulling frame.
    Live at a graph break, a *finite* one over fresh sequences of known items and no function of
    the user's (``pure``) is drained and rebuilt as a resumable iterator over what is left (its
    ``type()`` is then tc's iterator); any other cannot be rebuilt."""

    __slots__ = ("it", "ctx", "pure")

    def __init__(self, it, ctx: Ctx, pure: bool = False):
        super().__init__(None)
        self.it, self.ctx, self.pure = it, ctx, pure

    def pull(self, f) -> V | None:
        self.ctx.f = f
        try:
            return to_v(next(self.it), self.ctx)
        except StopIteration:
            return None

    def py_type(self) -> type:
        return type(self.it)

    def truthy(self, f) -> bool:
        return True

    def rebuild(self, rb) -> str:
        if not self.pure:
            raise Unsupported(f"an {type(self.it).__name__} iterator live at a graph break")
        rest = [to_v(x, self.ctx) for x in self.it]  # pure: pulling runs nothing of the user's
        items = ", ".join(rb.expr(x) for x in rest)
        return rb._bind(self, f"_ResumeIter([{items}], 0)")


class PartialV(V):
    """``functools.partial(func, *args, **kwargs)`` made while capturing."""

    __slots__ = ("func", "args", "kwargs")

    def __init__(self, func: V, args: list, kwargs: dict):
        super().__init__(None)
        if isinstance(func, PartialV):  # partial(partial(g, a), b) is partial(g, a, b), as in CPython
            func, args, kwargs = func.func, [*func.args, *args], {**func.kwargs, **kwargs}
        self.func, self.args, self.kwargs = func, list(args), dict(kwargs)

    def call(self, f, args: list, kwargs: dict) -> V:
        return call_function(f, self.func, [*self.args, *args], {**self.kwargs, **kwargs})

    def py_type(self) -> type:
        return functools.partial

    def truthy(self, f) -> bool:
        return True

    def attr(self, f, name: str) -> V:
        if name == "func":
            return self.func
        if name == "args":
            return TupleV(self.args)
        if name == "keywords":
            return DictV(self.kwargs)
        raise Unsupported(f"attribute {name!r} of a functools.partial built while capturing")

    def realize(self):
        return functools.partial(_REALIZE[0](self.func), *[_REALIZE[0](a) for a in self.args],
                                 **{k: _REALIZE[0](v) for k, v in self.kwargs.items()})

    def rebuild(self, rb) -> str:
        parts = [rb.expr(self.func), *(rb.expr(a) for a in self.args),
                 *(f"{k}={rb.expr(v)}" for k, v in self.kwargs.items())]
        return rb._bind(self, f"{rb.refs(functools.partial)}({', '.join(parts)})")


class DequeV(V):
    """``collections.deque(iterable, maxlen)`` made while capturing: items in order, bounded."""

    __slots__ = ("items", "maxlen")

    def __init__(self, items: list, maxlen: int | None):
        super().__init__(None)
        self.items, self.maxlen = list(items), maxlen
        self.trim(left=True)

    def trim(self, left: bool) -> None:
        """Drop items from the other end, as a full deque does on append (left=True drops left)."""
        if self.maxlen is not None:
            while len(self.items) > self.maxlen:
                self.items.pop(0 if left else -1)

    def py_type(self) -> type:
        return collections.deque

    def truthy(self, f) -> bool:
        return bool(self.items)

    def attr(self, f, name: str) -> V | None:
        """None when a deque has no such attribute (the caller raises AttributeError's break)."""
        if name == "maxlen":
            return Const(self.maxlen)
        if not hasattr(collections.deque, name):
            return None
        return BoundV(Const(getattr(collections.deque, name)), self)

    def realize(self):
        return collections.deque([_REALIZE[0](x) for x in self.items], self.maxlen)

    def rebuild(self, rb) -> str:
        items = ", ".join(rb.expr(x) for x in self.items)
        return rb._bind(self, f"{rb.refs(collections.deque)}([{items}], {self.maxlen!r})")


class DefaultDictV(DictV):
    """``collections.defaultdict(factory, ...)`` made while capturing: a missing key calls the
    factory (a Python one inlined) and stores its result, as ``__missing__`` does."""

    __slots__ = ("factory",)

    def __init__(self, factory: V, items: dict):
        super().__init__(items, None, collections.defaultdict)
        self.factory = factory

    def missing(self, f, key) -> V:
        if isinstance(self.factory, Const) and self.factory.value is None:
            raise Unsupported(f"key {key!r} is not in the defaultdict (no default_factory: KeyError)")
        value = call_function(f, self.factory, [], {})
        self.items[key] = value
        return value

    def attr(self, f, name: str) -> V | None:
        if name == "default_factory":
            return self.factory
        if not hasattr(collections.defaultdict, name):
            return None
        return BoundV(Const(getattr(collections.defaultdict, name)), self)

    def realize(self, items: dict):
        return collections.defaultdict(_REALIZE[0](self.factory), items)

    def rebuild(self, rb) -> str:
        body = ", ".join(f"{rb._const(k)}: {rb.expr(x)}" for k, x in self.items.items())
        return rb._bind(self, f"{rb.refs(collections.defaultdict)}({rb.expr(self.factory)}, {{{body}}})")
