"""How guards and runners read module state, without patching ``torch.nn.Module``.

tc changes nothing outside its own objects: no method of ``nn.Module`` (or anything else in
torch) is replaced, so other code, ``torch.compile`` included, sees the process exactly as
without tc. Module state (parameters, buffers, submodules, flags such as ``training``) is
therefore checked by the generated guards on *every* call, like any other guarded value;
what keeps that cheap is the way it is read.

``nn.Module.__getattr__`` is a Python function that runs only after normal attribute lookup
has failed (an ``AttributeError`` raised and caught first), and ``Sequential.__getitem__``
walks the container, so ``self.layers[3].weight`` costs microseconds. The expressions
built here read the same objects straight from the dictionaries where ``nn.Module`` keeps
them (``self.__dict__['_modules']['layers']._modules['3']._parameters['weight']`` is spelled
``self._modules['layers']._modules['3']._parameters['weight']``), a few dictionary lookups.
They are exact under the rules ``nn.Module`` keeps itself: a name lives in at most one of
``_parameters``/``_buffers``/``_modules``/the instance ``__dict__`` (``__setattr__`` and the
``register_*`` methods move it), and is not also a class attribute (checked here, at capture;
the class is guarded by identity). Code that breaks those rules by hand
(``object.__setattr__`` on a module, ``mod.__dict__[name] = ...`` for a registered name) is
not followed. A ``Sequential``'s items are positions: read by the name at that position, with
the order of the names guarded.

Everything a state change can touch is then a guarded value: a submodule by type (so one
entry serves every instance of a block), a parameter by its tensor guard (dtype, shape,
stride, device, requires_grad: ``.to()``, ``.half()``, ``requires_grad_()`` and
``p.data = t`` all fail it), a flag by value. Parameters are graph inputs read at call time,
so new values (optimizer steps, ``load_state_dict``) need no recompile.
"""

from __future__ import annotations

import torch

_STORES = ("_parameters", "_buffers", "_modules")


def _plain_module(owner: object) -> bool:
    return isinstance(owner, torch.nn.Module) and type(owner).__getattr__ is torch.nn.Module.__getattr__ \
        and type(owner).__getattribute__ is object.__getattribute__


def _on_type(cls: type, name: str) -> bool:
    return any(name in vars(klass) for klass in cls.__mro__)


def attr_expr(base: str, name: str, owner: object) -> str | None:
    """``base.name`` read from the store ``nn.Module.__getattr__`` would find it in, or None
    when plain attribute lookup finds it (instance ``__dict__``, class) or rules are not met."""
    if not _plain_module(owner) or not name.isidentifier() or name in owner.__dict__ or _on_type(type(owner), name):
        return None
    for store in _STORES:
        d = owner.__dict__.get(store)
        if isinstance(d, dict) and name in d:
            return f"{base}.{store}[{name!r}]"
    return None


def plain_read(name: str, owner: object) -> bool:
    """Whether ``owner.name`` is a plain read of the instance ``__dict__`` (a flag such as
    ``training``, a conv's ``stride``): no ``nn.Module.__getattr__``, no descriptor of the class,
    so reading it runs no user code and a guard may read it once."""
    return _plain_module(owner) and name.isidentifier() and name in owner.__dict__ \
        and not _on_type(type(owner), name)


def item_expr(base: str, key: object, owner: object) -> str | None:
    """``base[key]`` for the containers of ``torch.nn`` (``ModuleList`` by a non-negative int,
    ``Sequential`` by an int, ``ModuleDict`` by str), read from ``_modules``; None for anything
    else. A ``Sequential`` read this way needs its keys guarded (``sequence_keys``)."""
    cls = type(owner)
    modules = getattr(owner, "__dict__", {}).get("_modules")
    if not isinstance(modules, dict) or not _plain_module(owner):
        return None
    if type(key) is int and key >= 0 and cls.__getitem__ is torch.nn.ModuleList.__getitem__:
        return f"{base}._modules[{str(key)!r}]"  # ModuleList indexes its dict by str(index)
    if type(key) is int and -len(modules) <= key < len(modules) and cls.__getitem__ is torch.nn.Sequential.__getitem__:
        # ``Sequential`` indexes by position (walking its dict in Python, a microsecond a read);
        # the key at that position is exact because capture guards the keys (``sequence_keys``)
        return f"{base}._modules[{list(modules)[key]!r}]"
    if type(key) is str and cls.__getitem__ is torch.nn.ModuleDict.__getitem__:
        return f"{base}._modules[{key!r}]"
    return None


def sequence_keys(owner: object) -> bool:
    """Whether reading items of ``owner`` through ``item_expr`` needs a guard on the order of its
    ``_modules`` keys: a ``Sequential``'s items are positions, read by key."""
    return item_expr("", 0, owner) is not None and type(owner).__getitem__ is torch.nn.Sequential.__getitem__


def bump() -> None:
    """Kept for callers of the earlier design; module state is checked on every call, so there
    is nothing to announce."""
