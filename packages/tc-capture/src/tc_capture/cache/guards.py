"""Guards: the assumptions a captured graph rests on, compiled to one Python function.

Each guard is a short Python condition over the frame state ``F`` (arguments, then the live
stack at a resume point) and the cells ``C``. The guards of one cache entry become one
straight-line generated function (source kept on the entry for ``TC_LOGS=guards``). Guards
on module state (parameters, buffers, submodules, flags such as ``self.training``) run on every
call like the others; their sources read the module's dictionaries directly (``module_state``),
and the module-owned tensors they check are handed to the runner, which does not read them again.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import threading
import tokenize
import weakref
from collections.abc import Callable, Container
from typing import Any

import torch
from torch._C._dynamo.guards import TensorGuards
from torch.utils.hooks import RemovableHandle

from tc_ir import storage

from .default_device import default_device
from .sources import RUNTIME_NAMES, Source, pretty

_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
_CONTAINER_LENS = (torch.nn.Sequential.__len__, torch.nn.ModuleList.__len__, torch.nn.ModuleDict.__len__)
_TYPE_NAMES = {int: "int", float: "float", bool: "bool", str: "str", type(None): "NoneType"}


class Guard:
    """One condition: its generated line, its text (what it expects, for people) and ``actual``,
    an expression over the frame state whose value the recompile log shows when it fails."""

    __slots__ = ("source", "lines", "text", "actual", "batch")

    def __init__(self, source: Source | None, lines: list[str], text: str, actual: str | None = None):
        self.source, self.lines, self.text, self.actual = source, lines, text, actual
        # A static tensor guard: (its bound local, its type check, the rest of its condition, the
        # tensor seen while capturing; dropped once ``compile_guards`` built the batched check).
        self.batch: tuple | None = None


_SOURCE = object()  # ``add``'s default ``actual``: the value the guard's source reads


class GuardSet:
    """Guards collected while capturing one region."""

    def __init__(self, names: list[str]):
        self.fast: list[Guard] = []
        self.gated: list[Guard] = []
        self.roots: dict[str, Source] = {}
        self.objects: dict[int, tuple[str, object]] = {}
        self._seen: set[str] = set()
        self._not_own: dict[str, tuple] = {}  # source expr -> (its guard, the names it checks)
        self.names = names  # frame slot names, for readable descriptions
        self.bound: dict[str, str] = {}  # source expression -> local name a tensor guard bound it to
        self._readable: dict[str, str] = {}  # source expression -> ``pretty`` of it over ``names``

    # ---- building ---------------------------------------------------------------------------
    def ref(self, obj: object) -> str:
        """A name under which generated code sees ``obj``."""
        key = id(obj)
        if key not in self.objects:
            self.objects[key] = (f"_k{len(self.objects)}", obj)
        return self.objects[key][0]

    def add(self, source: Source | None, cond: str, text: str, actual: str | None | object = _SOURCE,
            batch: tuple | None = None) -> Guard | None:
        """Add a guard (None when an equal condition is there already)."""
        if cond in self._seen:
            return None
        self._seen.add(cond)
        if actual is _SOURCE:
            actual = source.expr if source is not None else None
        guard = Guard(source, [f"if not ({cond}): return {{fail}}"], text, actual)
        guard.batch = batch
        if source is not None and source.gated:
            self.roots.setdefault(source.root.expr, source.root)
            self.gated.append(guard)
        else:
            self.fast.append(guard)
        return guard

    def readable(self, source: Source) -> str:
        # asked several times per source (its type, its hooks, its value), two regex passes each
        found = self._readable.get(source.expr)
        if found is None:
            found = self._readable[source.expr] = pretty(source, self.names)
        return found

    def type_is(self, source: Source, value: object) -> None:
        self.add(source, f"type({source.expr}) is {self.ref(type(value))}",
                 f"type({self.readable(source)}) is {type(value).__qualname__}")

    def identity(self, source: Source, value: object) -> None:
        self.add(source, f"{source.expr} is {self.ref(value)}",
                 f"{self.readable(source)} is {_short(value)}")

    def same_object(self, a: Source, b: Source, same: bool) -> None:
        """Whether the objects two sources read are one (``x is y`` in the captured code, or a
        tensor found ``in`` a list by identity): a branch taken on it holds only while it does."""
        source = a if a.gated else b  # evaluated where both sources are readable
        self.add(source, f"({a.expr} is {b.expr}) is {same}",
                 f"{self.readable(a)} is{'' if same else ' not'} {self.readable(b)}")

    def equals(self, source: Source, value: object) -> None:
        """The value, with its exact type. On a cache hit the value read is most often the very
        object captured (a module's ``eps``, a small int, an interned string, ``True``), so the
        check is ``is`` first, the typed comparison only when that fails."""
        e, t = source.expr, type(value)
        if value is None or t is bool:
            check = f"{e} is {value!r}"
        elif t in (int, str):
            check = f"{e} is {self.ref(value)} or type({e}) is {self.ref(t)} and {e} == {value!r}"
        else:
            check = f"{e} is {self.ref(value)} or type({e}) is {self.ref(t)} and {e} == {self.ref(value)}"
        self.add(source, check, f"{self.readable(source)} == {value!r}")

    def constant(self, source: Source, value: tuple) -> None:
        """An immutable tuple of constants (a conv's ``stride``), in one check: the same object,
        or equal with the same types item by item."""
        e = source.expr
        self.add(source, f"{e} is {self.ref(value)} or _same_constant({e}, {self.ref(value)})",
                 f"{self.readable(source)} == {value!r}")

    def length(self, source: Source, value: object) -> None:
        # torch's module containers count their ``_modules`` (their ``__len__`` is a Python call;
        # the container's class is guarded by identity, so it is still theirs).
        e = f"{source.expr}._modules" if type(value).__len__ in _CONTAINER_LENS else source.expr
        self.add(source, f"len({e}) == {len(value)}", f"len({self.readable(source)}) == {len(value)}",
                 f"len({source.expr})")

    def no_attr(self, source: Source, name: str) -> None:
        """``source`` has no attribute ``name``: a read answered by its absence (``hasattr`` false,
        ``getattr``'s default) holds only until the object gets one (``self._done = True``)."""
        self.add(source, f"not hasattr({source.expr}, {name!r})", f"{self.readable(source)} has no .{name}",
                 f"hasattr({source.expr}, {name!r})")

    def not_own(self, source: Source, name: str) -> None:
        """``name`` is not in the instance ``__dict__`` of ``source``: a read its class answered (a
        method, a class-level default) holds only until the instance gets its own, which hides it.
        Every name of one source is one check (a conv's ``forward`` and ``_conv_forward``)."""
        guard, names = self._not_own.get(source.expr, (None, []))
        if name in names:
            return
        names = [*names, name]
        d = f"{source.expr}.__dict__"
        cond = f"{names[0]!r} not in (_d := {d})" + "".join(f" and {n!r} not in _d" for n in names[1:])
        text = f"{self.readable(source)}.{'/'.join(names)} {'is' if len(names) == 1 else 'are'} its class's"
        actual = f"[n for n in {tuple(names)!r} if n in {d}]"  # the log shows which the instance has
        if guard is None:
            guard = self.add(source, cond, text, actual)
        else:  # the source's check, widened
            guard.lines, guard.text, guard.actual = [f"if not ({cond}): return {{fail}}"], text, actual
        self._not_own[source.expr] = (guard, names)

    def class_member(self, cls: type, name: str, value: object) -> None:
        """``cls.name`` is still ``value``, a method capture inlined or a constant it read from
        the class of an instance whose type is guarded: it holds only while the class keeps it
        (``nn.Linear.forward = patched``, ``Net.use_relu = True``). One check per class and name,
        however many instances read it."""
        e = f"{self.ref(cls)}.{name}" if name.isidentifier() else f"getattr({self.ref(cls)}, {name!r})"
        ref = self.ref(value)
        cond = f"{e} is {ref}" if callable(value) else f"{e} is {ref} or _same_constant({e}, {ref})"
        shown = getattr(value, "__qualname__", None) if callable(value) else repr(value)
        self.add(None, cond, f"{cls.__qualname__}.{name} is {shown or _short(value)}", e)

    def keys(self, source: Source, value: dict) -> None:
        keys = list(value.keys())
        self.add(source, f"list({source.expr}.keys()) == {self.ref(keys)}",
                 f"keys of {self.readable(source)} == {keys!r}", f"list({source.expr}.keys())")

    def module_keys(self, source: Source, module: torch.nn.Module) -> None:
        """The order of ``module``'s submodule names: a ``ModuleDict`` iterates them, and a
        ``Sequential``'s items are read by the name at their position (``module_state.item_expr``)."""
        self.keys(source._step(f"{source.expr}._modules", source.name, True), module._modules)

    def tensor(self, source: Source, t: torch.Tensor) -> None:
        # The value is read once (a walrus-bound local), not once per property. ``shape`` is read
        # rather than ``size()`` (no method call); a CPU tensor's device is ``is_cpu`` (a bool)
        # rather than ``device == ...``, which builds a ``torch.device`` on every call.
        e = self.bound.setdefault(source.expr, f"_t{len(self.bound)}")
        device = f"{e}.is_cpu" if t.device.type == "cpu" else f"{e}.device == {self.ref(t.device)}"
        kind = f"type({e} := {source.expr}) is {self.ref(type(t))}"
        rest = (f"{e}.dtype is {self.ref(t.dtype)} and {e}.shape == {tuple(t.shape)!r} and "
                f"{e}.stride() == {tuple(t.stride())!r} and {e}.requires_grad is {t.requires_grad} and {device}")
        spec = _spec(t)
        grad = " requires_grad" if t.requires_grad else ""
        self.add(source, f"{kind} and {rest}", f"{self.readable(source)}: {type(t).__name__} {spec}{grad}",
                 batch=(e, kind, rest, t))

    def module_hooks(self, source: Source, mod: torch.nn.Module) -> None:
        """The hooks calling ``mod`` runs, in one check: none registered (four dictionaries
        empty), or the same registrations (the handle ids, keys of these dictionaries, are never
        reused: equal keys mean the same hooks with the same ``with_kwargs``/``always_call``
        flags). Global module hooks are guarded absent."""
        dicts = [(name, getattr(mod, name, None) or {}) for name in _HOOK_DICTS]
        step = source._step(f"{source.expr}.{_HOOK_DICTS[0]}", source.name, True)
        if not any(d for _, d in dicts):
            # Fast path: no hook handle was created anywhere in the process since this entry last
            # checked these dictionaries (``_hf``, see ``compile_guards``) and this is the module it
            # checked then (a weak reference: a copied module brings its hooks without new
            # handles), so its dictionaries are still empty.
            same = f"_hf and {self.ref(weakref.ref(mod))}() is {source.expr}"
            self.add(step, f"{same} or not (" + " or ".join(f"{source.expr}.{n}" for n, _ in dicts) + ")",
                     f"{self.readable(source)} has no hooks", f"_hooks_of({source.expr})")
        else:
            self.add(step, " and ".join(f"list({source.expr}.{n}) == {list(d)!r}" for n, d in dicts),
                     f"{self.readable(source)} has hooks " + ", ".join(f"{n}={list(d)}" for n, d in dicts if d),
                     f"_hooks_of({source.expr})")
        g = torch.nn.modules.module
        hooks = [g._global_forward_pre_hooks, g._global_forward_hooks, g._global_backward_pre_hooks,
                 g._global_backward_hooks]
        self.add(None, "not (" + " or ".join(self.ref(d) for d in hooks) + ")", "no global module hooks",
                 "[" + ", ".join(f"len({self.ref(d)})" for d in hooks) + "]")

    def ambient(self) -> None:
        """The process state a trace reads beyond grad mode: autocast (per device: on, and its
        dtype), the default dtype and the default device (factories without one). A graph
        captured without autocast holds no casts, one captured under it holds them: called in the
        other state, it returned the other dtypes (float32 where eager's matmul gives bfloat16,
        and the reverse). A graph's factories hold the default device they were captured under
        (``default_device``): under another one, or none, the call captures again."""
        default = torch.get_default_dtype()
        get = self.ref(torch.get_default_dtype)
        self.add(None, f"{get}() is {self.ref(default)}", f"default dtype is {default}", f"{get}()")
        device, read = default_device(), self.ref(default_device)
        if device is None:
            self.add(None, f"{read}() is None", "no default device is set", f"{read}()")
        else:
            self.add(None, f"{read}() == {self.ref(device)}", f"default device is {device}", f"{read}()")
        any_on = self.ref(torch._C._is_any_autocast_enabled)
        if not torch._C._is_any_autocast_enabled():
            self.add(None, f"not {any_on}()", "autocast is off", f"{any_on}()")
            return
        enabled, dtype = self.ref(torch.is_autocast_enabled), self.ref(torch.get_autocast_dtype)
        for device in ("cpu", "cuda"):
            on = torch.is_autocast_enabled(device)
            cond = f"{enabled}({device!r}) is {on}"
            text = f"autocast on {device} is {'on' if on else 'off'}"
            if on:
                cast = torch.get_autocast_dtype(device)
                cond += f" and {dtype}({device!r}) is {self.ref(cast)}"
                text += f" ({cast})"
            self.add(None, cond, text, f"{enabled}({device!r})")

    def grad_mode(self, enabled: bool) -> None:
        self.add(None, f"{self.ref(torch.is_grad_enabled)}() is {enabled}", f"grad mode is {'on' if enabled else 'off'}",
                 f"{self.ref(torch.is_grad_enabled)}()")

    def descriptions(self) -> list[str]:
        return [g.text for g in self.fast + self.gated]


def _short(value: object) -> str:
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    return f"<{type(value).__name__} {name}>" if name else f"<{type(value).__name__} at {id(value):#x}>"


# ---- code generation ---------------------------------------------------------------------------
# Module state is checked on every call, so the generated code reads each module once: every pure
# source a guard's source was stepped from (``F[0]``, ``F[0]._modules['0']``, ...) is bound to a
# local ``_mN`` just before the first guard that reads it, and later guards use the local. A pure
# read runs no user code and guards change nothing, so reading it once gives what reading it again
# would. In ``guard`` a read that fails (a submodule gone) fails the check, as before; ``why`` runs
# each guard with its reads in its own ``try``, so it names the guard whose read failed.
class _Hoist:
    def __init__(self, guards: list[Guard]):
        found: dict[str, Source] = {}
        for g in guards:
            base = g.source  # its own source too: ``type(x) is int and x == 1`` reads x once
            while base is not None and base.pure:
                found.setdefault(base.expr, base)
                base = base.base
        self.sources = found
        self.local = {expr: f"_m{i}" for i, expr in enumerate(found)}
        # Matched like the regex ``(?<![\w.])(e1|e2|...)(?!\w)`` with the longest paths first, but
        # by set lookups at the characters a path can start with: one alternation over every
        # path, tried at every offset of every line, was ~0.1 s of a GPT-2's capture (246 guards).
        self.lengths = sorted({len(e) for e in found}, reverse=True)
        self.firsts = re.compile("[" + "".join(sorted({re.escape(e[0]) for e in found})) + "]") if found else None
        self.bound: set[str] = set()

    def _matches(self, line: str):
        """``(start, path)`` of each hoisted path in ``line``, left to right, not overlapping: the
        longest one at each offset that no word character or dot precedes and no word character
        follows (as ``re.finditer`` of that regex)."""
        last = 0
        for c in self.firsts.finditer(line) if self.firsts is not None else ():
            p = c.start()
            if p < last or (p and _WORD_OR_DOT.match(line, p - 1)):
                continue
            for k in self.lengths:
                end = p + k
                if end <= len(line) and not _WORD.match(line, end) and line[p:end] in self.sources:
                    yield p, line[p:end]
                    last = end
                    break

    def rewrite(self, line: str) -> tuple[list[str], str]:
        """``line`` reading hoisted paths through their locals, and the bindings to run first."""
        starts = None
        binds: list[str] = []
        out, last = [], 0
        for start, expr in self._matches(line):
            if not _plainly_code(line, start):
                starts = _code_starts(line) if starts is None else starts
                if start not in starts:
                    continue  # inside a string literal
            out.append(line[last:start])
            out.append(self._use(expr, binds))
            last = start + len(expr)
        out.append(line[last:])
        return binds, "".join(out)

    def substitute(self, expr: str) -> str:
        """``expr`` reading the paths bound so far through their locals (binding nothing)."""
        out, last = [], 0
        for start, path in self._matches(expr):
            if path in self.bound:
                out += [expr[last:start], self.local[path]]
                last = start + len(path)
        return "".join(out) + expr[last:]

    def _use(self, expr: str, binds: list[str]) -> str:
        if expr not in self.bound:
            src = self.sources[expr]
            value = expr
            if src.base is not None and src.base.expr in self.local and expr.startswith(src.base.expr):
                # the rest may read bound paths too (a dict keyed by a tensor: ``state[p]``)
                value = self._use(src.base.expr, binds) + self.substitute(expr[len(src.base.expr):])
            binds.append(f"{self.local[expr]} = {value}")
            self.bound.add(expr)
        return self.local[expr]


_WORD = re.compile(r"\w")
_WORD_OR_DOT = re.compile(r"[\w.]")
_IDENTIFIER = re.compile(r"\w*")


def _plainly_code(line: str, start: int) -> bool:
    """Whether a path found at ``start`` (no word character or dot before it) certainly starts a
    name token of ``line``, without tokenizing it: no string or comment opens before it, it starts
    with an identifier character, and its leading name is no string prefix (``rb'``). The lines
    are generated code that compiles, so tokenizing them raises nothing."""
    name_end = _IDENTIFIER.match(line, start).end()
    return (line[start].isidentifier() and line[name_end:name_end + 1] not in ("'", '"')
            and not any(q in line[:start] for q in "'\"#"))


def _code_starts(line: str) -> Container[int]:
    """Offsets in ``line`` where a name token starts (a hoisted path starts with a name), asked
    only of offsets that no word character or dot precedes and that hold an identifier character.

    A line of plain string literals (optionally ``r``/``b``/``u`` prefixed) and names is scanned
    for its literals and comment; anything else (f-strings, triple quotes, a literal that does not
    end) goes to ``tokenize``, ~20x slower on Python 3.11: hundreds of guard lines hold module
    paths (``F[0]._modules['h']``), each a quote before the next path."""
    spans = _literal_spans(line)
    return _tokenized_starts(line) if spans is None else _OutsideSpans(line, spans)


class _OutsideSpans:
    """``offset in starts``: an identifier character outside every literal and the comment."""

    def __init__(self, line: str, spans: list[tuple[int, int]]):
        self.line, self.spans = line, spans

    def __contains__(self, offset: object) -> bool:
        if not isinstance(offset, int) or not 0 <= offset < len(self.line) or not self.line[offset].isidentifier():
            return False
        if offset and _WORD.match(self.line, offset - 1):
            return False
        return not any(a <= offset < b for a, b in self.spans)


_STRING_PREFIXES = frozenset({"", "r", "b", "u", "rb", "br"})


def _literal_spans(line: str) -> list[tuple[int, int]] | None:
    """``[start, end)`` of each string literal (its prefix included) and of the comment, or None
    where the line holds what this scan leaves to ``tokenize``."""
    spans: list[tuple[int, int]] = []
    i = 0
    while (found := _LEXICAL.search(line, i)) is not None:
        i, c = found.start(), found.group()
        if c == "#":
            spans.append((i, len(line)))
            return spans
        if c == "\\":
            return None  # a continuation: not one logical line
        start = i
        while start and _WORD.match(line, start - 1):
            start -= 1
        if line[start:i].lower() not in _STRING_PREFIXES or line.startswith(c * 3, i):
            return None  # an f-string, a triple quote, or letters glued to a quote
        body = _STRING_BODY[c].match(line, i + 1)
        if body is None:
            return None  # the literal does not end on this line
        spans.append((start, body.end()))
        i = body.end()
    return spans


_LEXICAL = re.compile(r"""[#\\'"]""")
# the rest of a one-line literal after its opening quote: a backslash escapes any character
_STRING_BODY = {q: re.compile(rf"[^{q}\\]*(?:\\.[^{q}\\]*)*{q}", re.DOTALL) for q in "'\""}


def _tokenized_starts(line: str) -> set[int]:
    try:
        return {tok.start[1] for tok in tokenize.generate_tokens(io.StringIO(line).readline)
                if tok.type == tokenize.NAME}
    except (tokenize.TokenError, SyntaxError):
        return set()


def _blocks(guards: list[Guard], param_exprs: list[str]) -> tuple[list[tuple[list[str], str, str, str]], str]:
    """Per guard (its bindings, its condition line, its actual-value expression, the line the
    batched ``guard`` runs in its place), and the ``MS.params`` line.

    Read back from ``<cache root>/guards`` when the same guards were rewritten before: the rewrite
    is a function of the guards' lines and their sources' chains alone, and for a large model's
    ~2,000 guards it was 0.3 s of every warm process (ResNet-50 training on the CPU)."""
    material = json.dumps([[g.lines, g.batch[1] if g.batch is not None else None, g.actual, _chain(g.source)]
                           for g in guards] + [param_exprs]).encode()
    root = storage.trusted_subdir(storage.cache_root(), "guards")
    path = root / f"{hashlib.sha256(material).hexdigest()[:32]}.json" if root is not None else None
    data = storage.read_verified(root, path) if path is not None else None
    if data is not None:
        try:
            blocks, params = json.loads(data)
            return [(list(b), line, actual, fast) for b, line, actual, fast in blocks], params
        except (ValueError, TypeError):  # damaged in a way the digest did not see: rebuilt
            pass
    blocks, params = _rewrite_blocks(guards, param_exprs)
    if path is not None:
        storage.write_verified(root, path, json.dumps([blocks, params]).encode())
    return blocks, params


def _chain(source: Source | None) -> list:
    """What ``_Hoist`` reads of a guard's source: each step's expression and purity, to the root."""
    chain = []
    while source is not None:
        chain.append((source.expr, source.pure))
        source = source.base
    return chain


def _rewrite_blocks(guards: list[Guard], param_exprs: list[str]) -> tuple[list[tuple[list[str], str, str, str]], str]:
    hoist = _Hoist(guards)
    blocks = []
    for g in guards:
        (line,) = g.lines
        binds, line = hoist.rewrite(line)
        fast = line
        if g.batch is not None:  # same reads as ``line`` (the type check reads the source)
            fast = hoist.rewrite(f"if not ({g.batch[1]}): return {{fail}}")[1]
        blocks.append((binds, line, hoist.substitute(g.actual) if g.actual else "None", fast))
    binds, params = hoist.rewrite(f"MS.params = [{', '.join(param_exprs)}]") if param_exprs else ([], "")
    return blocks, "; ".join(binds + [params]) if params else ""


def compile_guards(gs: GuardSet, param_exprs: list[str], globals_: dict) -> tuple:
    """Generate ``guard(F, C) -> bool``, a diagnosis ``why(F, C) -> str|None`` and the source.

    ``param_exprs`` read the module-owned tensor inputs: a passing guard leaves them, as its
    tensor guards read them, in ``MS.params`` (per thread) for the entry's runner, which takes
    them from there and clears the slot.
    """
    ms = threading.local()
    scope = {name: obj for name, obj in gs.objects.values()}
    scope.update(MS=ms, G=globals_, _hooks_of=hooks_of, _same_constant=same_constant, _RH=RemovableHandle,
                 _HE=[-1], **RUNTIME_NAMES)
    root_key = _root_key(gs)
    guards = gs.fast + gs.gated
    blocks, params = _blocks(guards, [gs.bound.get(e, e) for e in param_exprs])
    # ``_hf``: no hook handle (``RemovableHandle``: every ``register_*hook`` makes one) was created
    # since the last call that passed this guard, so hook dictionaries found empty then still are.
    src = ["def guard(F, C):", "  _now = _RH.next_id", "  _hf = _now == _HE[0]", "  try:"]
    for binds, _, _, fast in blocks:
        src += ["      " + b for b in binds] + ["      " + fast.replace("{fail}", "False")]
    src += _batched_check([g.batch for g in guards if g.batch is not None], scope)
    for g in guards:
        g.batch = None  # the captured tensors are not kept alive by the entry
    if params:
        src.append("      " + params)
    src += ["      _HE[0] = _now", "      return True", "  except Exception:", "      return False", ""]
    first_why_line = len(src)
    src += ["def why(F, C):", "  _hf = False"]
    for i, (binds, line, actual, _) in enumerate(blocks):
        fail = f"_failed({i}, lambda: {actual})" if actual != "None" else f"_texts[{i}]"
        src += ["  try:"] + ["      " + b for b in binds] + ["      " + line.replace("{fail}", fail)]
        src += ["  except Exception as e:", f"      return f'{{_texts[{i}]}} (reading it raised {{e!r}})'"]
    src += ["  return None"]
    text = "\n".join(src)
    scope["_texts"] = texts = [g.text for g in guards]
    scope["_failed"] = lambda i, read: _failed(texts[i], read)
    # cached across processes: a large model's guard is a third of a second of compile
    exec(storage.compiled_code("\n".join(src[:first_why_line]), "<tc_capture guards>"), scope)  # noqa: S102
    return scope["guard"], _lazy_why("\n" * first_why_line + "\n".join(src[first_why_line:]), scope), text, ms, root_key


def _lazy_why(source: str, scope: dict) -> Callable:
    """``why``, compiled on its first call: it runs only after a guard failed, and it is as long
    as the guard (a ``try`` per check): compiling it with the guard doubled a large model's
    guard build. ``source`` keeps the line numbers of the full text."""
    def why(F: Any, C: Any) -> str | None:
        if "why" not in scope:
            exec(compile(source, "<tc_capture guards>", "exec"), scope)  # noqa: S102  (our own source)
        return scope["why"](F, C)
    return why


def _batched_check(batch: list[tuple], scope: dict) -> list[str]:
    """The lines ``guard`` runs after the other guards for the static tensor guards, whose lines
    checked only the type (so later guards read attributes of tensors, never of other objects):
    dtype, shape, stride, ``requires_grad`` and device of all of them in one call of torch's C++
    ``TensorGuards`` (also its dispatch keys: stricter). It is a sufficient condition only: where
    it fails (another dispatch key, such as a conjugate view, or thread-local dispatch state other
    than when it was built), each tensor's own condition decides, as without the batch. An
    optimizer step's guards read hundreds of tensors; their checks were most of its cache hit.

    ``TensorGuards.check`` fails whenever one tensor object is passed twice, so a tensor read
    through two sources (tied weights: GPT-2's ``lm_head.weight`` is ``wte.weight``) is batched
    under its first source only; each other read passes if it is still that tensor, else by its
    own condition. With the duplicate in the batch, the batch failed on every call and all its
    tensors were checked one by one."""
    first: dict[int, str] = {}  # id of a captured tensor -> the local its first source is bound to
    batched, repeated = [], []
    for item in batch:
        e, t = item[0], item[3]
        if first.setdefault(id(t), e) == e:
            batched.append(item)
        else:
            repeated.append((first[id(t)], item))
    if len(batched) < _BATCH_MIN:
        return [f"      if not ({rest}): return False" for _, _, rest, _ in batch]
    values = [t for *_, t in batched]
    scope["_TG"] = TensorGuards(*values, dynamic_dims_sizes=[list(t.shape) for t in values],
                                dynamic_dims_strides=[list(t.stride()) for t in values])
    names = ", ".join(e for e, *_ in batched)
    return ([f"      if not _TG.check({names}):"] + [f"        if not ({rest}): return False" for _, _, rest, _ in batched]
            + [f"      if not ({e} is {same} or {rest}): return False" for same, (e, _, rest, _) in repeated])


_BATCH_MIN = 4  # below this, the one C++ call saves less than it costs
CONSTANT_TYPES = (int, float, bool, str, bytes, type(None), complex)


def is_constant_tuple(value: object) -> bool:
    """A tuple made only of plain constants (and such tuples): immutable all the way down."""
    return type(value) is tuple and all(type(v) in CONSTANT_TYPES or is_constant_tuple(v) for v in value)


def same_constant(a: object, b: object) -> bool:
    """``a == b`` with the same type at every level (``(1, 1)`` is not ``(True, 1.0)``)."""
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        return len(a) == len(b) and all(same_constant(x, y) for x, y in zip(a, b))
    return a == b


def _failed(text: str, read) -> str:
    """A failed guard for the recompile log: what it expected, and the value it found."""
    try:
        return f"{text} (actual: {describe(read())})"
    except Exception as e:
        return f"{text} (reading the actual value raised {type(e).__name__})"


def describe(value: object) -> str:
    """A short description of a value a guard read: tensors by type and spec, modules by class,
    anything else by a cut repr and its type."""
    if isinstance(value, _Text):
        return value
    if isinstance(value, torch.Tensor):
        grad = " requires_grad" if value.requires_grad else ""
        return f"{type(value).__name__} {_spec(value)}{grad}"
    if isinstance(value, torch.nn.Module):
        return f"a {type(value).__qualname__} module"
    if isinstance(value, type):
        return f"the class {value.__qualname__}"
    text = repr(value)
    text = text if len(text) <= 80 else text[:77] + "..."
    return f"{text} ({type(value).__qualname__})"


def _spec(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)} stride={tuple(t.stride())} {t.device}"


def hooks_of(mod: torch.nn.Module) -> str:
    """The hook registrations of ``mod`` (handle ids per hook dictionary), for the recompile log."""
    found = {name: list(getattr(mod, name, None) or {}) for name in _HOOK_DICTS}
    return _Text(", ".join(f"{n}={ids}" for n, ids in found.items() if ids) or "no hooks")


class _Text(str):
    """A description already written for people (``describe`` shows it as it is)."""


def _root_key(gs: GuardSet) -> str | None:
    if not gs.roots and not gs.gated:
        return None
    exprs = [f"id({r.expr})" for r in gs.roots.values()]
    return exprs[0] if len(exprs) == 1 else f"({', '.join(exprs)},)" if exprs else "0"
