"""Where a value came from: a Python expression over the frame state, read again at call time.

Guards and generated input-reading code are built from sources. A source is *gated* when it
is reached from a root ``nn.Module`` only through module-owned steps (attributes of modules,
items of module containers): the tensors among them are the entry's module-owned inputs, and
the steps are read straight from the module's dictionaries (see ``module_state``), so checking
them on every call stays cheap.
"""

from __future__ import annotations

import gc
import re

import torch

from . import module_state

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IMMUTABLE = (tuple, str, bytes, frozenset, int, float, bool, torch.Size)


# Roots of the frame state: reading them has no effect and gives the same object within one check.
_ROOT = re.compile(r"F\[\d+\]|C\[\d+\]\.cell_contents")


class Source:
    """``expr`` reads the value; ``base`` is the source it was read from by one step (attribute or
    item), ``pure`` says ``expr`` runs no user code (a frame slot, then ``nn.Module`` dictionary
    reads, see ``module_state``), so a guard may read it once into a local and reuse it."""

    __slots__ = ("expr", "name", "gated", "root", "base", "pure")

    def __init__(self, expr: str, name: str, gated: bool = False, root: Source | None = None,
                 base: Source | None = None, pure: bool | None = None):
        self.expr, self.name, self.gated, self.root, self.base = expr, name, gated, root, base
        self.pure = bool(_ROOT.fullmatch(expr)) if pure is None else pure

    def __repr__(self) -> str:
        return self.expr

    def attr(self, name: str, owner: object) -> Source:
        expr = f"{self.expr}.{name}" if _IDENT.match(name) else f"getattr({self.expr}, {name!r})"
        direct = module_state.attr_expr(self.expr, name, owner)
        pure = direct is not None or module_state.plain_read(name, owner) or _plain_attr(name, owner)
        return self._step(direct or expr, f"{self.name}_{name}", self._owns(owner), pure=pure)

    def item(self, key: object, owner: object) -> Source:
        direct = module_state.item_expr(self.expr, key, owner)
        expr = direct or f"{self.expr}[{key_expr(key)}]"
        # An exact list/tuple/dict indexed by an int or str runs no user code (their hash and
        # equality are the builtins'): an optimizer's ``param_groups[0]['params']`` is read once
        # per guard, not once per parameter.
        pure = direct is not None or type(owner) in _PLAIN_CONTAINERS and type(key) in (int, str)
        return self._step(expr, f"{self.name}_{key}", self._owns(owner), pure=pure)

    def _owns(self, owner: object) -> bool:
        # Module state, and immutable values reached through it (a conv's ``stride`` tuple): both
        # change only through a module's __setattr__.
        return isinstance(owner, torch.nn.Module) or self.gated and isinstance(owner, _IMMUTABLE)

    def _step(self, expr: str, name: str, module_owned: bool, pure: bool = False) -> Source:
        pure = pure and self.pure
        if not module_owned:
            return Source(expr, name, base=self, pure=pure)
        return Source(expr, name, True, self.root if self.gated else self, base=self, pure=pure)


_PLAIN_CONTAINERS = (list, tuple, dict)


def _plain_attr(name: str, owner: object) -> bool:
    """Whether ``owner.name`` is a plain instance ``__dict__`` read of an object without its own
    attribute hooks (an optimizer's ``param_groups``, ``state``): it runs no user code."""
    cls = type(owner)
    return cls.__getattribute__ is object.__getattribute__ and name.isidentifier() \
        and name in getattr(owner, "__dict__", ()) and not any(name in vars(k) for k in cls.__mro__)


_LITERAL = (int, str, bytes, bool, type(None))
# Keys that have no literal spelling (enum members, nan, objects): generated code reads them from
# this table (``_SK`` in the scope of guards and runners), so a key is never spliced as text.
KEYS: dict[tuple, tuple[int, object]] = {}
KEY_TABLE: list = []


def dict_of_view(view) -> dict:
    """The dict behind a dict view (``view.mapping`` is a read-only proxy whose one referent is it)."""
    (found,) = gc.get_referents(view.mapping)
    return found


REVERSED_ITERATORS = (type(reversed([])), type(reversed(())))
REAL_ITERATORS = (type(iter([])), type(iter(())), type(iter(range(0)))) + REVERSED_ITERATORS


def iter_state(it) -> tuple:
    """``(sequence, position)`` of a list, tuple or range iterator (``((), 0)`` once exhausted);
    a reversed iterator's position is the next index it yields, counting down (-1: exhausted).
    From Python 3.12 a range iterator reduces to the range still to come and no position
    (``range(2, 4), None``): position 0 of that range (a ``None`` position crashed the rebuild
    of a range iterator live at a graph break: HF Funnel on Python 3.12)."""
    state = it.__reduce__()
    if len(state) == 3:
        return state[1][0], 0 if state[2] is None else state[2]
    return (), -1 if type(it) in REVERSED_ITERATORS else 0


def iter_at(kind: type, items: list, index: int):
    """A real iterator of type ``kind`` over ``items`` at ``index``: what ``type()`` and the user's
    code see for an iterator live at a graph break. A range iterator needs items in arithmetic
    progression (they are: they came from a range)."""
    if kind in REVERSED_ITERATORS:
        rest = list(items[index:])[::-1]
        return reversed(rest if kind is REVERSED_ITERATORS[0] else tuple(rest))
    if kind is REAL_ITERATORS[2]:
        step = items[1] - items[0] if len(items) > 1 else 1
        seq = range(items[0], items[0] + step * len(items), step) if items else range(0)
    else:
        seq = list(items) if kind is REAL_ITERATORS[0] else tuple(items)
    it = iter(seq)
    it.__setstate__(index)
    return it


# Names generated guards and runners may use beside F, C, G and the bound objects.
RUNTIME_NAMES = {"_SK": KEY_TABLE, "_dict_of": dict_of_view, "_iter_state": iter_state, "_iter_at": iter_at}


def key_expr(key: object) -> str:
    """A Python expression evaluating to ``key`` (same type and value), safe to splice."""
    t = type(key)
    if t in _LITERAL or t is float and key == key and key not in (float("inf"), float("-inf")):
        return repr(key)
    if t is tuple:
        return "(" + "".join(key_expr(k) + ", " for k in key) + ")"
    slot = KEYS.get((t, id(key)))
    if slot is None or slot[1] is not key:
        KEY_TABLE.append(key)
        slot = KEYS[(t, id(key))] = (len(KEY_TABLE) - 1, key)
    return f"_SK[{slot[0]}]"


def local(index: int, name: str) -> Source:
    return Source(f"F[{index}]", name.replace(".", "_") or "arg")


def global_(name: str) -> Source:
    return Source(f"G[{name!r}]", name)


def cell(index: int, name: str) -> Source:
    return Source(f"C[{index}].cell_contents", name)


def pretty(source: Source, names: list[str]) -> str:
    """The source as a user reads it: ``F[0]._modules['fc']._parameters['weight']`` →
    ``self.fc.weight``."""
    text = re.sub(r"F\[(\d+)\]", lambda m: names[int(m.group(1))] if int(m.group(1)) < len(names)
                  else f"stack[{int(m.group(1)) - len(names)}]", source.expr)
    return _STORE_READ.sub(lambda m: f".{m.group(1)}" if m.group(1).isidentifier() else f"[{m.group(1)}]", text)


_STORE_READ = re.compile(r"\._(?:parameters|buffers|modules)\['([^'\\]*)'\]")
