"""Generated runner of one cache entry: read inputs, call the compiled graph, apply side effects,
rebuild the Python values (the return value, or the live frame state at a graph break).

Everything the runner does is one generated Python function whose source is kept on the entry.
"""

from __future__ import annotations

import collections
import types
from typing import Any

from ..cache.sources import REAL_ITERATORS, RUNTIME_NAMES
from ..interp.base import NULL, UNBOUND, Unsupported
from ..interp.session import ModeExit, ResumeIter
from ..interp.symbols import is_symbolic, runtime_expr
from ..interp.variables import (
    BoundV,
    CellV,
    Const,
    DataDictV,
    DictV,
    ExitV,
    FuncV,
    IterV,
    LazyV,
    ListV,
    MethodV,
    NullV,
    ObjV,
    SetV,
    TensorV,
    TupleV,
    V,
    ViewV,
)


def _new_obj(cls):
    return cls.__new__(cls)


def _data_dict(cls, items, attrs):
    """A ``ModelOutput``-style dataclass dict with exactly these items (in order) and attributes,
    made without running its ``__init__``/``__post_init__`` or its own ``__setitem__``."""
    obj = cls.__new__(cls)
    base = collections.OrderedDict if issubclass(cls, collections.OrderedDict) else dict
    base.__init__(obj)
    for key, value in items:
        base.__setitem__(obj, key, value)
    for name, value in attrs:
        object.__setattr__(obj, name, value)
    return obj


def _make_fn(code, globals_, defaults, kwdefaults, closure, qualname):
    fn = types.FunctionType(code, globals_, code.co_name, defaults or None, closure or None)
    fn.__kwdefaults__, fn.__qualname__ = kwdefaults or None, qualname
    return fn


def _advance(it, n: int) -> None:
    """Move an iterator read from the frame on by the ``n`` items the region took from it, in
    place: every other reference to it (an attribute, a list, another local) sees the items gone."""
    if type(it) is ResumeIter:
        it.index += n
    else:
        for _ in range(n):
            next(it, None)


_RUNTIME = {"NULL": NULL, "UNBOUND": UNBOUND, "_ResumeIter": ResumeIter, "_ModeExit": ModeExit, "_advance": _advance,
            "_new_obj": _new_obj, "_make_fn": _make_fn, "_data_dict": _data_dict, "_cell": types.CellType,
            "_MethodType": types.MethodType, "_setattr": object.__setattr__,
            "_set_grad": __import__("torch")._C._set_grad_enabled, **RUNTIME_NAMES}


def _rebuildable(v: IterV) -> bool:
    """A range iterator is rebuilt from its items only when they are the ints of a range."""
    if v.cls is not REAL_ITERATORS[2]:
        return True
    values = [x.value if isinstance(x, Const) else None for x in v.items]
    if not all(type(x) is int for x in values):
        return False
    return len(values) < 2 or list(range(values[0], values[-1] + 1 if values[1] > values[0] else values[-1] - 1,
                                         values[1] - values[0])) == values


class Rebuild:
    """Turns captured values into Python expressions over ``F``, ``C``, graph outputs ``O``."""

    def __init__(self, refs):
        self.refs = refs  # GuardSet.ref: names for baked objects
        self.lines: list[str] = []
        self.memo: dict[int, str] = {}
        self.outputs: list[Any] = []  # graph nodes to return, in order
        self._tmp = 0

    def tmp(self) -> str:
        self._tmp += 1
        return f"t{self._tmp}"

    def expr(self, v: V) -> str:
        key = id(v)
        if key not in self.memo:
            self.memo[key] = self._build(v)
        return self.memo[key]

    def _bind(self, v: V, text: str) -> str:
        name = self.tmp()
        self.memo[id(v)] = name
        self.lines.append(f"{name} = {text}")
        return name

    def _build(self, v: V) -> str:
        if hasattr(v, "rebuild"):  # standard-library models (interp/stdlib_values.py)
            return v.rebuild(self)
        if isinstance(v, TensorV):
            return self._tensor(v)
        if isinstance(v, Const):
            if v.source is None and is_symbolic(v.value):  # a size: computed from this call's tensors
                return runtime_expr(v.value, self.refs)
            return v.source.expr if v.source is not None else self._const(v.value)
        if isinstance(v, NullV):
            return "NULL"
        if isinstance(v, (ListV, DictV, SetV)) and v.source is not None:
            return v.source.expr
        if isinstance(v, DataDictV):
            if v.made_by_init():
                body = ", ".join(f"{k}={self.expr(x)}" for k, x in v.fields.items())
                return self._bind(v, f"{self.refs(v.cls)}({body})")
            items = ", ".join(f"({k!r}, {self.expr(x)})" for k, x in v.items.items())
            attrs = ", ".join(f"({k!r}, {self.expr(x)})" for k, x in v.fields.items())
            return self._bind(v, f"_data_dict({self.refs(v.cls)}, [{items}], [{attrs}])")
        if isinstance(v, ListV):
            return self._bind(v, f"[{', '.join(self.expr(x) for x in v.items)}]")
        if isinstance(v, SetV):  # bound once: two names for one set stay one set
            return self._bind(v, f"{{{', '.join(self.expr(x) for x in v.items)}}}" if v.items else "set()")
        if isinstance(v, TupleV):
            return self._tuple(v)
        if isinstance(v, DictV):  # bound once, as sets: a dict and its views stay one dict
            body = ", ".join(f"{self._const(k)}: {self.expr(x)}" for k, x in v.items.items())
            return self._bind(v, f"{{{body}}}" if v.cls is dict else f"{self.refs(v.cls)}({{{body}}})")
        if isinstance(v, ViewV):
            return f"{self.expr(v.dict_v)}.{v.kind}()"
        if isinstance(v, LazyV):
            return self._lazy(v)
        return self._special(v)

    def _lazy(self, v: LazyV) -> str:
        """A real ``map``/``filter``/``zip``/``enumerate`` over the rebuilt iterators."""
        its = [self.expr(x) for x in v.iters]
        if v.cls is enumerate:
            return self._bind(v, f"{self.refs(enumerate)}({its[0]}, {v.count})")
        fn = [] if v.fn is None else [self.expr(v.fn)]
        strict = ["strict=True"] if v.strict else []
        return self._bind(v, f"{self.refs(v.cls)}({', '.join(fn + its + strict)})")

    def _tensor(self, v: TensorV) -> str:
        if v.source is not None and v.node.op == "input":
            return v.source.expr
        if v.node.op != "call":
            raise Unsupported("a tensor that is neither a graph input nor a graph result")
        if v.node not in self.outputs:
            self.outputs.append(v.node)
        return f"O[{self.outputs.index(v.node)}]"

    def _const(self, value) -> str:
        # Exact types: an IntEnum member is an int whose repr is not Python.
        if type(value) in (int, float, str, bool, type(None)) \
                and not (type(value) is float and (value != value or value in (float("inf"), float("-inf")))):
            return repr(value)
        return self.refs(value)

    def _tuple(self, v: TupleV) -> str:
        items = [self.expr(x) for x in v.items]
        if v.cls is tuple:
            return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
        if hasattr(v.cls, "_fields"):
            return f"{self.refs(v.cls)}({', '.join(items)})"
        return f"{self.refs(v.cls)}(({', '.join(items)}{',' if len(items) == 1 else ''}))"

    def _special(self, v: V) -> str:
        if isinstance(v, CellV):
            if v.source is not None:
                return v.source.expr
            name = self._bind(v, "_cell()")
            if v.contents is not None:
                self.lines.append(f"{name}.cell_contents = {self.expr(v.contents)}")
            return name
        if isinstance(v, FuncV):
            defaults = f"({', '.join(self.expr(d) for d in v.defaults)}{',' if len(v.defaults) == 1 else ''})"
            kw = "{" + ", ".join(f"{k!r}: {self.expr(d)}" for k, d in v.kwdefaults.items()) + "}"
            closure = f"({', '.join(self.expr(c) for c in v.closure)}{',' if len(v.closure) == 1 else ''})"
            name = self._bind(v, f"_make_fn({self.refs(v.code)}, {self.refs(v.globals)}, {defaults}, {kw}, "
                                 f"{closure}, {v.qualname!r})")
            for attr, x in v.attrs.items():  # set on it while capturing (functools.wraps)
                self.lines.append(f"{name}.__dict__.update({self.expr(x)})" if attr == "__dict__"
                                  else f"setattr({name}, {attr!r}, {self.expr(x)})")
            return name
        if isinstance(v, BoundV):
            return f"_MethodType({self.expr(v.func)}, {self.expr(v.self_v)})"
        if isinstance(v, MethodV):
            return f"{self.expr(v.self_v)}.{v.name}"
        if isinstance(v, IterV) and v.source is not None:
            return v.source.expr  # the frame's own iterator, advanced in place (``side_effects``)
        if isinstance(v, IterV):
            items = ", ".join(self.expr(x) for x in v.items)
            if v.cls in REAL_ITERATORS and _rebuildable(v):
                return self._bind(v, f"_iter_at({self.refs(v.cls)}, [{items}], {v.index})")
            return self._bind(v, f"_ResumeIter([{items}], {v.index})")
        if isinstance(v, ExitV) and v.kind == "grad":
            return f"_ModeExit('grad', {v.state})"
        if isinstance(v, ObjV):
            name = self._bind(v, f"_new_obj({self.refs(v.cls)})")
            for attr, x in v.attrs.items():
                self.lines.append(f"_setattr({name}, {attr!r}, {self.expr(x)})")
            return name
        raise Unsupported(f"cannot rebuild a {type(v).__name__} after the graph")

    # ---- side effects ------------------------------------------------------------------------------
    def side_effects(self, session) -> None:
        """Apply the region's effects in order. Every value they write is computed first: a value
        read from the frame state (``d['a']``) must be read before an earlier effect (``d.pop('a')``
        replayed) changes it. Targets are read when written (their identity does not change)."""
        writes: list[str] = []
        for effect in session.side_effects:
            if effect[0] == "setattr":
                _, obj, name, value = effect
                writes.append(f"setattr({self.expr(obj)}, {name!r}, {self._now(value)})")
            elif effect[0] == "global":
                _, gdict, name, value = effect
                writes.append(f"{self.refs(gdict)}[{name!r}] = {self._now(value)}")
            elif effect[0] == "setitem":
                _, obj, key, value = effect
                writes.append(f"{self.expr(obj)}[{self._now(key)}] = {self._now(value)}")
            elif effect[0] == "call":
                _, fn, args, kwargs = effect
                call = [self._now(a) for a in args] + [f"{k}={self._now(v)}" for k, v in kwargs.items()]
                writes.append(f"{self.expr(fn)}({', '.join(call)})")
        for v in session.mutated.values():
            writes += self._replay(v)
        for v, start in session.frame_iters.values():
            if v.index > start:
                writes.append(f"_advance({v.source.expr}, {v.index - start})")
        self.lines += writes

    def _now(self, v: V) -> str:
        """``v``'s expression, evaluated now into a temporary unless it is one already."""
        text = self.expr(v)
        if text.isidentifier() or text.startswith("O[") or text.startswith("_SK[") or text[:1].isdigit() \
                or isinstance(v, Const) and v.source is None:
            return text
        name = self.tmp()
        self.lines.append(f"{name} = {text}")
        return name

    def _replay(self, v: V) -> list[str]:
        target = v.source.expr
        if isinstance(v, ListV):
            return [f"{target}[:] = [{', '.join(self._now(x) for x in v.items)}]"]
        if isinstance(v, DictV):
            body = ", ".join(f"{self._const(k)}: {self._now(x)}" for k, x in v.items.items())
            name = self.tmp()
            self.lines.append(f"{name} = {{{body}}}")
            return [f"_d = {target}; _d.clear(); _d.update({name})"]
        if isinstance(v, CellV) and v.contents is not None:
            return [f"{target}.cell_contents = {self._now(v.contents)}"]
        return []


def generate_runner(name: str, call_args: list[str], has_params: bool, root_key: str | None, graph_fn,
                    body: list[str], result: str, scope: dict, prologue: list[str] = ()) -> tuple:
    """Assemble and exec the runner; ``prologue`` runs before the graph, ``body`` after it (and
    reads ``O``, the graph's outputs)."""
    src = ["def run(F, C):"] + ["    " + line for line in prologue]
    if has_params:
        src += ["    P = MS.params", "    MS.params = None"]  # left by the guard; cleared: no lingering refs
    if graph_fn is not None:
        args = ", ".join(call_args + (["*P"] if has_params else []))
        src.append(f"    O = GRAPH({args})")
    src += ["    " + line for line in body]
    src.append(f"    return {result}")
    text = "\n".join(src)
    scope = dict(scope, **_RUNTIME, GRAPH=graph_fn)
    exec(compile(text, f"<tc_capture runner {name}>", "exec"), scope)
    return scope["run"], text


def pretty_state_names(code) -> list[str]:
    return list(code.co_varnames)


