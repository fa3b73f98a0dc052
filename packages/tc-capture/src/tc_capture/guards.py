"""Guards: the assumptions a captured graph rests on, compiled to one Python function.

Each guard is a short Python condition over the frame state ``F`` (arguments, then the live
stack at a resume point) and the cells ``C``. The guards of one cache entry become one
straight-line generated function (source kept on the entry for ``TC_LOGS=guards``). Guards
on module state (parameters, buffers, flags such as ``self.training``) are *gated*: they run
only when the module-state epoch changed since this entry last checked this root module, so
the cost of a hit does not grow with the number of parameters.
"""

from __future__ import annotations

import torch

from . import module_state
from .sources import Source

_TYPE_NAMES = {int: "int", float: "float", bool: "bool", str: "str", type(None): "NoneType"}


class Guard:
    __slots__ = ("source", "lines", "text")

    def __init__(self, source: Source | None, lines: list[str], text: str):
        self.source, self.lines, self.text = source, lines, text


class GuardSet:
    """Guards collected while capturing one region."""

    def __init__(self, names: list[str]):
        self.fast: list[Guard] = []
        self.gated: list[Guard] = []
        self.roots: dict[str, Source] = {}
        self.objects: dict[int, tuple[str, object]] = {}
        self._seen: set[str] = set()
        self.names = names  # frame slot names, for readable descriptions

    # ---- building ---------------------------------------------------------------------------
    def ref(self, obj: object) -> str:
        """A name under which generated code sees ``obj``."""
        key = id(obj)
        if key not in self.objects:
            self.objects[key] = (f"_k{len(self.objects)}", obj)
        return self.objects[key][0]

    def add(self, source: Source | None, cond: str, text: str) -> None:
        if cond in self._seen:
            return
        self._seen.add(cond)
        guard = Guard(source, [f"if not ({cond}): return {{fail}}"], text)
        if source is not None and source.gated:
            self.roots.setdefault(source.root.expr, source.root)
            self.gated.append(guard)
        else:
            self.fast.append(guard)

    def readable(self, source: Source) -> str:
        from .sources import pretty

        return pretty(source, self.names)

    def type_is(self, source: Source, value: object) -> None:
        self.add(source, f"type({source.expr}) is {self.ref(type(value))}",
                 f"type({self.readable(source)}) is {type(value).__qualname__}")

    def identity(self, source: Source, value: object) -> None:
        self.add(source, f"{source.expr} is {self.ref(value)}",
                 f"{self.readable(source)} is {_short(value)}")

    def equals(self, source: Source, value: object) -> None:
        t = type(value)
        check = f"type({source.expr}) is {self.ref(t)} and {source.expr} == {self.ref(value)}"
        if t in (int, bool, str) or value is None:
            check = f"type({source.expr}) is {self.ref(t)} and {source.expr} == {value!r}"
        self.add(source, check, f"{self.readable(source)} == {value!r}")

    def length(self, source: Source, value: object) -> None:
        self.add(source, f"len({source.expr}) == {len(value)}", f"len({self.readable(source)}) == {len(value)}")

    def keys(self, source: Source, value: dict) -> None:
        keys = list(value.keys())
        self.add(source, f"list({source.expr}.keys()) == {self.ref(keys)}",
                 f"keys of {self.readable(source)} == {keys!r}")

    def tensor(self, source: Source, t: torch.Tensor) -> None:
        e = source.expr
        cond = (f"type({e}) is {self.ref(type(t))} and {e}.dtype is {self.ref(t.dtype)} and "
                f"{e}.size() == {tuple(t.shape)!r} and {e}.stride() == {tuple(t.stride())!r} and "
                f"{e}.requires_grad is {t.requires_grad} and {e}.device == {self.ref(t.device)}")
        spec = f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)} stride={tuple(t.stride())} {t.device}"
        grad = " requires_grad" if t.requires_grad else ""
        self.add(source, cond, f"{self.readable(source)}: {type(t).__name__} {spec}{grad}")

    def grad_mode(self, enabled: bool) -> None:
        self.add(None, f"{self.ref(torch.is_grad_enabled)}() is {enabled}", f"grad mode is {'on' if enabled else 'off'}")

    def descriptions(self) -> list[str]:
        return [g.text for g in self.fast + self.gated]


def _short(value: object) -> str:
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    return f"<{type(value).__name__} {name}>" if name else f"<{type(value).__name__} at {id(value):#x}>"


# ---- code generation ---------------------------------------------------------------------------
def _body(guards: list[Guard], fail: str) -> list[str]:
    lines = []
    for i, g in enumerate(guards):
        for line in g.lines:
            lines.append("    " + line.replace("{fail}", fail if fail != "TEXT" else f"_texts[{i}]"))
    return lines


def compile_guards(gs: GuardSet, param_exprs: list[str], globals_: dict) -> tuple:
    """Generate ``guard(F, C) -> bool``, a diagnosis ``why(F, C) -> str|None`` and the source.

    ``param_exprs`` read the module-owned tensor inputs; the gated check caches them per root
    module (``MS[key] = (epoch, params)``) so the entry's runner can take them without reading
    each attribute again.
    """
    ms: dict = {}
    scope = {name: obj for name, obj in gs.objects.values()}
    scope.update(MS=ms, EPOCH=module_state.EPOCH, G=globals_)
    root_key = _root_key(gs)
    src = ["def guard(F, C):", "  try:"]
    src += ["  " + line for line in _body(gs.fast, "False")]
    if root_key:
        src += [f"      st = MS.get({root_key})",
                "      if st is not None and st[0] == EPOCH[0]:",
                "          return st[1] is not None",
                f"      return slow(F, C, {root_key})"]
    src += ["      return True", "  except Exception:", "      return False", ""]
    src += ["def slow(F, C, key):", "  epoch = EPOCH[0]", "  try:"]
    src += ["  " + line for line in _body(gs.gated, "_bad(key, epoch)")]
    src += [f"      MS[key] = (epoch, [{', '.join(param_exprs)}])", "      return True",
            "  except Exception:", "      return _bad(key, epoch)", "",
            "def _bad(key, epoch):", "  MS[key] = (epoch, None)", "  return False", ""]
    src += ["def why(F, C):", "  try:"]
    src += ["  " + line for line in _body(gs.fast + gs.gated, "TEXT")]
    src += ["  except Exception as e:", "      return f'guard raised {e!r}'", "  return None"]
    text = "\n".join(src)
    scope["_texts"] = [g.text for g in gs.fast + gs.gated]
    exec(compile(text, "<tc_capture guards>", "exec"), scope)
    return scope["guard"], scope["why"], text, ms, root_key


def _root_key(gs: GuardSet) -> str | None:
    if not gs.roots and not gs.gated:
        return None
    exprs = [f"id({r.expr})" for r in gs.roots.values()]
    return exprs[0] if len(exprs) == 1 else f"({', '.join(exprs)},)" if exprs else "0"
