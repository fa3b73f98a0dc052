"""Where a value came from: a Python expression over the frame state, read again at call time.

Guards and generated input-reading code are built from sources. A source is *gated* when it
is reached from a root ``nn.Module`` only through module-owned steps (attributes of modules,
items of module containers): its guards run only after some module changed (see
``module_state``), so a cache hit does not pay for them.
"""

from __future__ import annotations

import re

import torch

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IMMUTABLE = (tuple, str, bytes, frozenset, int, float, bool, torch.Size)


class Source:
    __slots__ = ("expr", "name", "gated", "root")

    def __init__(self, expr: str, name: str, gated: bool = False, root: Source | None = None):
        self.expr, self.name, self.gated, self.root = expr, name, gated, root

    def __repr__(self) -> str:
        return self.expr

    def attr(self, name: str, owner: object) -> Source:
        expr = f"{self.expr}.{name}" if _IDENT.match(name) else f"getattr({self.expr}, {name!r})"
        return self._step(expr, f"{self.name}_{name}", self._owns(owner))

    def item(self, key: object, owner: object) -> Source:
        return self._step(f"{self.expr}[{key!r}]", f"{self.name}_{key}", self._owns(owner))

    def _owns(self, owner: object) -> bool:
        # Module state, and immutable values reached through it (a conv's ``stride`` tuple): both
        # change only through a module's __setattr__, which moves the module-state epoch.
        return isinstance(owner, torch.nn.Module) or self.gated and isinstance(owner, _IMMUTABLE)

    def _step(self, expr: str, name: str, module_owned: bool) -> Source:
        if not module_owned:
            return Source(expr, name)
        return Source(expr, name, True, self.root if self.gated else self)


def local(index: int, name: str) -> Source:
    return Source(f"F[{index}]", name.replace(".", "_") or "arg")


def global_(name: str) -> Source:
    return Source(f"G[{name!r}]", name)


def cell(index: int, name: str) -> Source:
    return Source(f"C[{index}].cell_contents", name)


def pretty(source: Source, names: list[str]) -> str:
    """The source as a user reads it: ``F[0].weight`` → ``self.weight``."""
    return re.sub(r"F\[(\d+)\]", lambda m: names[int(m.group(1))] if int(m.group(1)) < len(names)
                  else f"stack[{int(m.group(1)) - len(names)}]", source.expr)
