"""Dicts keyed by tensors, held by an object: an optimizer's ``self.state[p]``.

The dict is not tracked item by item (its keys are tensors, which guards cannot compare by
value); each lookup is resolved against the real dict at capture time with the key's real
tensor (a graph input, so its source names the same object at call time), and guarded by
membership: ``p in state`` / ``p not in state``. A hit is read like any attribute, from the
source ``state[p]``. A miss on a ``defaultdict`` (the optimizer's first step) creates the
default value, tracked while capturing and stored into the real dict after the graph runs.
"""

from __future__ import annotations

import collections

import torch

from ..cache import sources as S
from .base import Unsupported
from .variables import Const, DictV, ListV, TensorV, V

_MISSING = object()
_FACTORIES = {dict: lambda: DictV({}), list: lambda: ListV([])}


def is_tensor_lookup(container: V, key: V) -> bool:
    return isinstance(key, TensorV) and isinstance(container, Const) and isinstance(container.value, dict)


def _where(f, container: Const, key: TensorV):
    real = f.session.real_input(key)
    if real is None or container.source is None:
        raise Unsupported("a dict keyed by a tensor that is not a graph input")
    # Pure (read once per guard check) when the dict's lookup runs no user code: an exact dict or
    # defaultdict (its membership is guarded before the read) and a key hashed by torch (by id).
    pure = container.source.pure and type(container.value) in (dict, collections.defaultdict) \
        and type(real) in (torch.Tensor, torch.nn.Parameter)
    src = S.Source(f"{container.source.expr}[{key.source.expr}]", f"{container.source.name}_{key.source.name}",
                   base=container.source, pure=pure)
    return real, src


def contains(f, container: Const, key: TensorV) -> bool:
    real, src = _where(f, container, key)
    found = src.expr in f.session.by_source or real in container.value
    _guard_membership(f, container, key, found)
    return found


def getitem(f, container: Const, key: TensorV, default: V | object = _MISSING) -> V:
    """``d[key]`` (``default`` unset) or ``d.get(key, default)``."""
    real, src = _where(f, container, key)
    session = f.session
    known = session.by_source.get(src.expr)
    if known is not None:
        return known
    if real in container.value:
        _guard_membership(f, container, key, True)
        return session.wrap(container.value[real], src)
    _guard_membership(f, container, key, False)
    if default is not _MISSING:
        return default
    factory = getattr(container.value, "default_factory", None) if isinstance(container.value,
                                                                              collections.defaultdict) else None
    if factory not in _FACTORIES:
        raise Unsupported("key (a tensor) is not in the dict")
    created = session.by_source[src.expr] = _FACTORIES[factory]()
    session.side_effects.append(("setitem", container, key, created))
    return created


def _guard_membership(f, container: Const, key: TensorV, found: bool) -> None:
    g = f.session.guards
    op, word = ("in", "is") if found else ("not in", "is not")
    g.add(container.source, f"{key.source.expr} {op} {container.source.expr}",
          f"{g.readable(key.source)} {word} a key of {g.readable(container.source)}")
