"""Guards: the assumptions a captured graph rests on, compiled to one Python function.

Each guard is a short Python condition over the frame state ``F`` (arguments, then the live
stack at a resume point) and the cells ``C``. The guards of one cache entry become one
straight-line generated function (source kept on the entry for ``TC_LOGS=guards``). Guards
on module state (parameters, buffers, submodules, flags such as ``self.training``) run on every
call like the others; their sources read the module's dictionaries directly (``module_state``),
and the module-owned tensors they check are handed to the runner, which does not read them again.
"""

from __future__ import annotations

import threading

import torch

from .sources import RUNTIME_NAMES, Source

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
        self.bound: dict[str, str] = {}  # source expression -> local name a tensor guard bound it to

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
        # The value is read once (a walrus-bound local), not once per property.
        e = self.bound.setdefault(source.expr, f"_t{len(self.bound)}")
        cond = (f"type({e} := {source.expr}) is {self.ref(type(t))} and {e}.dtype is {self.ref(t.dtype)} and "
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

    ``param_exprs`` read the module-owned tensor inputs: a passing guard leaves them, as its
    tensor guards read them, in ``MS.params`` (per thread) for the entry's runner, which takes
    them from there and clears the slot.
    """
    ms = threading.local()
    scope = {name: obj for name, obj in gs.objects.values()}
    scope.update(MS=ms, G=globals_, **RUNTIME_NAMES)
    root_key = _root_key(gs)
    src = ["def guard(F, C):", "  try:"]
    src += ["  " + line for line in _body(gs.fast + gs.gated, "False")]
    if param_exprs:
        src.append(f"      MS.params = [{', '.join(gs.bound.get(e, e) for e in param_exprs)}]")
    src += ["      return True", "  except Exception:", "      return False", ""]
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
