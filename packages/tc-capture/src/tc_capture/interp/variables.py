"""What the symbolic interpreter holds on its stack: one small class per kind of value.

Every value may carry a :class:`~tc_capture.sources.Source` (where to read it again at call
time). Python values the interpreter fully knows are :class:`Const`; tensors are graph values
(:class:`TensorV`); containers and functions created while capturing are tracked structurally
so they can be mutated, inlined and rebuilt after the graph runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any


class V:
    __slots__ = ("source",)

    def __init__(self, source=None):
        self.source = source


class Const(V):
    """A Python value known at capture time (numbers, strings, functions, modules, objects)."""

    __slots__ = ("value",)

    def __init__(self, value: Any, source=None):
        super().__init__(source)
        self.value = value

    def __repr__(self) -> str:
        return f"Const({self.value!r})"


class TensorV(V):
    """A tensor in the graph: its node and a fake tensor standing for it during capture."""

    __slots__ = ("node", "fake")

    def __init__(self, node, fake, source=None):
        super().__init__(source)
        self.node, self.fake = node, fake

    def __repr__(self) -> str:
        return f"TensorV(%{self.node.name})"


class ListV(V):
    __slots__ = ("items",)

    def __init__(self, items: list, source=None):
        super().__init__(source)
        self.items = list(items)


class TupleV(V):
    """A tuple, namedtuple or torch structseq; ``cls`` rebuilds it."""

    __slots__ = ("items", "cls")

    def __init__(self, items, source=None, cls: type = tuple):
        super().__init__(source)
        self.items, self.cls = tuple(items), cls


class DictV(V):
    __slots__ = ("items", "cls")

    def __init__(self, items: dict, source=None, cls: type = dict):
        super().__init__(source)
        self.items, self.cls = dict(items), cls


class DataDictV(DictV):
    """A dataclass that is also a dict (Hugging Face ``ModelOutput``): ``fields`` holds every field
    (``None`` included) for attribute reads; ``items`` holds the fields that are set."""

    __slots__ = ("fields",)

    def __init__(self, fields: dict, cls: type):
        super().__init__({k: v for k, v in fields.items() if not (type(v) is Const and v.value is None)}, None, cls)
        self.fields = dict(fields)

    def made_by_init(self) -> bool:
        """Whether ``cls(**fields)`` rebuilds it: the items are the fields that are not ``None``,
        in field order, and every attribute is a field (not so after ``out["h"] = v`` of a new
        key, ``out.a = None``, or items set in another order)."""
        names = {fd.name for fd in dataclasses.fields(self.cls) if fd.init}
        expected = [(k, v) for k, v in self.fields.items() if not (type(v) is Const and v.value is None)]
        return set(self.fields) <= names and [(k, id(v)) for k, v in expected] == \
            [(k, id(v)) for k, v in self.items.items()]


class SetV(V):
    __slots__ = ("items",)

    def __init__(self, items, source=None):
        super().__init__(source)
        self.items = list(items)


class CellV(V):
    __slots__ = ("contents",)

    def __init__(self, contents: V | None = None, source=None):
        super().__init__(source)
        self.contents = contents


class FuncV(V):
    """A function made by MAKE_FUNCTION while capturing (nested def, lambda, 3.11 comprehension)."""

    __slots__ = ("code", "globals", "defaults", "kwdefaults", "closure", "qualname", "attrs")

    def __init__(self, code, globals_, defaults, kwdefaults, closure, source=None):
        super().__init__(source)
        self.code, self.globals, self.defaults = code, globals_, tuple(defaults)
        self.kwdefaults, self.closure, self.qualname = dict(kwdefaults), tuple(closure), code.co_qualname
        self.attrs: dict = {}  # attributes set on it (``functools.wraps``, ``fn.flag = 1``)


class BoundV(V):
    """``func`` bound to ``self`` (a method of a user object or module)."""

    __slots__ = ("func", "self_v")

    def __init__(self, func: V, self_v: V, source=None):
        super().__init__(source)
        self.func, self.self_v = func, self_v


class MethodV(V):
    """A method of a graph tensor, ``x.view``: recorded as a node named by the method."""

    __slots__ = ("name", "self_v")

    def __init__(self, name: str, self_v: V):
        super().__init__(None)
        self.name, self.self_v = name, self_v


class IterV(V):
    """An iterator over known items; rebuilt as a resumable iterator at a graph break. ``cls`` is
    the type ``type()`` answers (``list_iterator``...), ``None`` where it is not known."""

    __slots__ = ("items", "index", "cls")

    def __init__(self, items, index: int = 0, source=None, cls: type | None = None):
        super().__init__(source)
        self.items, self.index, self.cls = list(items), index, cls


class ViewV(V):
    """``d.keys()`` / ``d.values()`` / ``d.items()`` of a tracked dict: a live view, read from the
    dict each time it is used (a key added later is seen, as in Python)."""

    __slots__ = ("dict_v", "kind")

    def __init__(self, dict_v: V, kind: str):
        super().__init__(None)
        self.dict_v, self.kind = dict_v, kind


class LazyV(V):
    """A ``map``/``filter``/``zip``/``enumerate`` object: items are pulled from ``iters`` (and
    ``fn`` called) only when it is consumed, so side effects happen in eager's order."""

    __slots__ = ("cls", "fn", "iters", "count", "strict")

    def __init__(self, cls: type, fn: V | None, iters: list, count: int = 0, strict: bool = False):
        super().__init__(None)
        self.cls, self.fn, self.iters, self.count, self.strict = cls, fn, list(iters), count, strict


class ObjV(V):
    """An object created while capturing (``Point(x, y)``, a dataclass): class + attributes."""

    __slots__ = ("cls", "attrs")

    def __init__(self, cls: type, attrs: dict | None = None):
        super().__init__(None)
        self.cls, self.attrs = cls, dict(attrs or {})


class SuperV(V):
    __slots__ = ("cls", "obj")

    def __init__(self, cls: type, obj: V):
        super().__init__(None)
        self.cls, self.obj = cls, obj


class GradModeV(V):
    """``torch.no_grad()``/``enable_grad()``/``set_grad_enabled(b)``: a grad-mode context."""

    __slots__ = ("enabled", "applied")

    def __init__(self, enabled: bool, applied: bool | None = None):
        super().__init__(None)
        self.enabled, self.applied = enabled, applied


class ExitV(V):
    """The ``__exit__`` a ``with`` block left on the stack: restores grad mode / autocast."""

    __slots__ = ("kind", "state")

    def __init__(self, kind: str, state: Any, source=None):
        super().__init__(source)
        self.kind, self.state = kind, state


class AutocastV(V):
    __slots__ = ("args", "kwargs")

    def __init__(self, args: tuple, kwargs: dict):
        super().__init__(None)
        self.args, self.kwargs = args, kwargs


class NullV(V):
    """The NULL CPython pushes below a callable."""

    __slots__ = ()


NULL_V = NullV()


def is_const(v: V) -> bool:
    return type(v) is Const
