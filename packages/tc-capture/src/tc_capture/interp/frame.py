"""The symbolic executor of the opcode table: one frame being captured.

The opcode table (``opcodes.py``) moves values; this frame supplies what operations do to
captured values (``V``), forwarding each value operation to the module that owns that part of
Python's semantics (``calls``, ``attrs``, ``pyops``, ``iteration``, ``contexts``, ``data``,
``truth``). An opcode with no handler, or an operation that raises :class:`Unsupported`, ends
capture at that instruction of the *outermost* frame (a graph break); the driver then captures
again, stopping just before it, so that nothing an abandoned inlined call did leaks into the graph.
"""

from __future__ import annotations

from types import CodeType

from . import data
from .attrs import get_attr, set_attr
from .base import DONE, EXHAUSTED, HANDLERS, StackFrame, Unsupported
from .builtins_ import length
from .calls import call_function
from .contexts import enter
from .iteration import iterate, pull
from .pyops import BINARY, UNARY, binary, compare, contains, identity, items_of, realize_const, set_add, unary
from .session import Session
from .truth import truth
from .variables import NULL_V, Const, DictV, IterV, LazyV, ListV, NullV, SuperV, TupleV, V

MAX_DEPTH = 40
MAX_STEPS = 300_000


class BreakHere(Exception):
    """Raised out of the outermost frame: capture must stop before the instruction at ``offset``."""

    def __init__(self, offset: int, cause: Unsupported):
        super().__init__(cause.reason)
        self.offset, self.cause = offset, cause


class Stop:
    """The outermost frame stopped before instruction ``ip`` (a graph break)."""

    def __init__(self, frame: Frame, ip: int):
        self.frame, self.ip = frame, ip


class Frame(StackFrame):
    def __init__(self, session: Session, code: CodeType, globals_: dict, locals_: dict[str, V],
                 cells: dict[str, V], parent: Frame | None = None, break_at: frozenset = frozenset(),
                 ip: int = 0, stack: list | None = None):
        super().__init__(code, globals_, ip, stack)
        self.session, self.parent = session, parent
        self.locals, self.cells = locals_, cells
        self.start_ip, self.break_at = ip, break_at
        self.depth = 0 if parent is None else parent.depth + 1
        self.yields: list[V] | None = None  # a generator run to completion collects here
        self.lineno = code.co_firstlineno
        self.steps = 0
        if self.depth > MAX_DEPTH:
            raise Unsupported("inlining went deeper than 40 calls (recursion?)")

    def child(self, code: CodeType, globals_: dict, locals_: dict[str, V], cells: dict[str, V]) -> Frame:
        """The frame of a call inlined from this one."""
        return Frame(self.session, code, globals_, locals_, cells, parent=self)

    # ---- running ----------------------------------------------------------------------------
    def run(self) -> V | Stop:
        while True:
            inst = self.insts[self.ip]
            if self.parent is None and inst.offset in self.break_at:
                return Stop(self, self.ip)
            self.ip += 1
            self.lineno = inst.lineno
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise self._locate(Unsupported("too many instructions (a long Python loop?)"), inst)
            try:
                fn = HANDLERS.get(inst.opname)
                if fn is None:
                    raise Unsupported(f"opcode {inst.opname} is not supported")
                if fn(self, inst) is DONE:
                    return self.result
            except Unsupported as e:
                self._locate(e, inst)
                if self.parent is None:
                    raise BreakHere(inst.offset, e) from e
                e.nested = True  # the outermost frame's instruction called code that broke inside
                raise
            except (BreakHere, RecursionError):
                raise
            except Exception as e:  # an interpreter gap must not crash the user's program
                err = self._locate(Unsupported(f"capture failed on {inst.opname}: {type(e).__name__}: {e}"), inst)
                if self.parent is None:
                    raise BreakHere(inst.offset, err) from e
                err.nested = True
                raise err from e

    def _locate(self, e: Unsupported, inst) -> Unsupported:
        if e.lineno is None:
            e.filename, e.lineno = self.code.co_filename, inst.lineno
        return e

    # ---- value operations (the list is in ``base.StackFrame``) ----------------------------------
    null = NULL_V
    const = staticmethod(Const)

    @staticmethod
    def is_null(v: V) -> bool:
        return isinstance(v, NullV)

    @staticmethod
    def is_none(v: V) -> bool:
        return isinstance(v, Const) and v.value is None

    def truth(self, v: V) -> bool:
        return truth(self, v)

    def unbound_local(self, name: str):
        raise Unsupported(f"local variable {name!r} is read before it is assigned")

    def load_global(self, name: str) -> V:
        return data.load_global(self, name)

    def store_global(self, name: str, v: V) -> None:
        data.store_global(self, name, v)

    def load_deref(self, name: str) -> V:
        return data.load_deref(self, name)

    def store_deref(self, name: str, v: V) -> None:
        data.store_deref(self, name, v)

    def make_cell(self, name: str) -> None:
        data.make_cell(self, name)

    def import_name(self, name: str, fromlist: V, level: V) -> V:
        return Const(__import__(name, self.globals, None, fromlist.value, level.value))

    @staticmethod
    def import_from(module: V, name: str) -> V:
        return Const(getattr(module.value, name))

    # calls and attributes
    def call(self, fn: V, args: list[V], kwargs: dict[str, V]) -> V:
        return call_function(self, fn, args, kwargs)

    def call_ex(self, fn: V, args: V, kwargs: V | None) -> V:
        return data.call_ex(self, fn, args, kwargs)

    def make_function(self, code: V, closure, kwdefaults, defaults) -> V:
        return data.make_function(self, code, closure, kwdefaults, defaults)

    def get_attr(self, obj: V, name: str) -> V:
        return get_attr(self, obj, name)

    def super_attr(self, cls_v: V, self_v: V, name: str) -> V:
        return get_attr(self, SuperV(cls_v.value, self_v), name)

    def set_attr(self, obj: V, name: str, value: V) -> None:
        set_attr(self, obj, name, value)

    def del_attr(self, obj: V, name: str) -> None:
        raise Unsupported(f"opcode DELETE_ATTR is not supported (del of attribute {name!r})")

    # containers
    build_tuple = staticmethod(TupleV)
    build_list = staticmethod(ListV)
    def build_set(self, items: list[V]) -> V:
        return data.build_set(items, self.session)
    build_slice = staticmethod(data.build_slice)

    @staticmethod
    def build_map(keys: list[V], values: list[V]) -> V:
        return DictV({realize_const(k): v for k, v in zip(keys, values)})

    @staticmethod
    def build_const_key_map(keys: V, values: list[V]) -> V:
        return DictV(dict(zip(keys.value, values)))

    @staticmethod
    def build_string(parts: list[V]) -> V:
        return Const("".join(realize_const(p) for p in parts))

    def list_append(self, target: V, v: V) -> None:
        data.building(self, target).items.append(v)

    def set_add(self, target: V, v: V) -> None:
        set_add(data.building(self, target).items, v, self.session)

    def map_add(self, target: V, key: V, value: V) -> None:
        data.building(self, target).items[realize_const(key)] = value

    def list_extend(self, target: V, v: V) -> None:
        data.building(self, target).items.extend(items_of(self, v))

    def set_update(self, target: V, v: V) -> None:
        data.set_update(self, target, v)

    def dict_update(self, target: V, v: V) -> None:
        data.dict_update(self, target, v)

    @staticmethod
    def list_to_tuple(v: V) -> V:
        return TupleV(v.items)

    def unpack(self, v: V, n: int) -> list[V]:
        return data.unpack(self, v, n)

    def unpack_ex(self, v: V, before: int, after: int) -> list[V]:
        return data.unpack_ex(self, v, before, after)

    def length(self, v: V) -> V:
        return length(self, [v])

    # subscripts and operators
    def getitem(self, obj: V, key: V) -> V:
        return data.getitem(self, obj, key)

    def setitem(self, obj: V, key: V, value: V) -> None:
        data.setitem(self, obj, key, value)

    def delitem(self, obj: V, key: V) -> None:
        data.delitem(self, obj, key)

    @staticmethod
    def slice_of(start: V, end: V) -> V:
        return Const(slice(realize_const(start), realize_const(end)))

    def binary(self, op: str, a: V, b: V) -> V:
        return binary(self, BINARY[op], a, b)

    def compare(self, op: str, a: V, b: V) -> V:
        return compare(self, op, a, b)

    def is_same(self, a: V, b: V) -> bool:
        return identity(a, b, self.session)

    def contains(self, item: V, container: V) -> bool:
        return contains(self, item, container)

    def unary(self, opname: str, v: V) -> V:
        return unary(self, UNARY[opname], v)

    format_value = staticmethod(data.format_value)

    # iteration, generators (run to completion where they are consumed), with
    def get_iter(self, v: V) -> V:
        return iterate(self, v)

    def next_item(self, it: V):
        if not isinstance(it, (IterV, LazyV)) and not hasattr(it, "pull"):
            raise Unsupported(f"FOR_ITER on {type(it).__name__}")
        item = pull(self, it)
        return EXHAUSTED if item is None else item

    def _yields(self) -> list:
        if self.yields is None:
            raise Unsupported("yield outside a generator that is consumed where it is made")
        return self.yields

    def start_generator(self) -> None:
        self._yields()

    def yield_value(self, v: V) -> None:
        self._yields().append(v)

    def yield_from(self, receiver: V, sent: V) -> None:
        if not self.is_none(sent):
            raise Unsupported("send() of a value into a sub-generator")
        self._yields().extend(items_of(self, receiver))  # `yield from` an iterator: all its items, in order

    def before_with(self, ctx: V) -> tuple[V, V]:
        return enter(self, ctx)

    # Exceptions. The interpreter never raises: an instruction that raises is a break, and capture
    # resumes in the handler the exception table names (``cache/frame_cache.py``), where these run
    # with a real exception on the stack, its type guarded.
    def raise_(self, args: list[V]):
        raise Unsupported("raise statement reached while capturing")

    @staticmethod
    def exception_matches(exc: V, typ: V) -> bool:
        classes = _classes(typ)
        if classes is None or not isinstance(exc, Const):
            raise Unsupported("except clause on a value unknown at capture time")
        return isinstance(exc.value, classes)

    def reraise(self, exc: V):
        raise Unsupported("exception re-raised (no except clause matched, or the end of a finally)")


def _classes(v: V):
    """The class or tuple of classes an ``except`` clause names, None if not known."""
    if isinstance(v, Const):
        return v.value
    if isinstance(v, TupleV) and all(isinstance(i, Const) for i in v.items):
        return tuple(i.value for i in v.items)
    return None
