"""One capture: the graph being built, fake tensors, guards, inputs and recorded side effects."""

from __future__ import annotations

import types
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tc_ir

from ..cache import sources as S
from ..cache.default_device import default_device
from ..cache.guards import GuardSet, is_constant_tuple
from . import optimizers
from .base import NULL, Unsupported
from .symbols import DynamicPolicy, Sizes, symbolic_layout
from .variables import NULL_V, BoundV, Const, DictV, ExitV, IterV, ListV, TensorV, TupleV, V, ViewV

_EQ_TYPES = (int, float, bool, str, bytes, complex, type(None), torch.dtype, torch.device,
             torch.memory_format, torch.layout, type(Ellipsis), torch.Size)
_CONTENT_TYPES = (set, frozenset)
_VIEW_KINDS = {type({}.keys()): "keys", type({}.values()): "values", type({}.items()): "items"}
_ID_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.ModuleType, type,
             types.MethodDescriptorType, types.WrapperDescriptorType, types.BuiltinMethodType,
             types.GetSetDescriptorType, types.MemberDescriptorType, staticmethod, classmethod,
             property, types.CodeType, range)


class ResumeIter:
    """The runtime form of an iterator live at a graph break: the items and where we are."""

    __slots__ = ("seq", "index")

    def __init__(self, seq: list, index: int):
        self.seq, self.index = seq, index

    def __iter__(self):
        return self

    def __next__(self):
        if self.index >= len(self.seq):
            raise StopIteration
        self.index += 1
        return self.seq[self.index - 1]


# Values whose state a region changes through any path that reaches them: one tracked value each.
_ALIASED = frozenset((list, dict, ResumeIter, *S.REAL_ITERATORS))


def _state_object(value: Any) -> bool:
    """An object with attributes of its own that a region may write (a user object, a module),
    not a class, function or module namespace."""
    return isinstance(getattr(value, "__dict__", None), dict) and not isinstance(
        value, (type, types.ModuleType, types.FunctionType, types.MethodType, torch.Tensor))


class ResumedIterV(V):
    """tc's own iterator (``ResumeIter``) read from the frame of a resumed region: a loop whose
    body breaks (``for e in hit_experts: ... torch.where(...)``) resumes with it on the stack.
    Items are read, and guarded, only as the region pulls them, at positions relative to where
    the iterator stands (``it.seq[it.index + j]``), and only how many are left is guarded, as far
    as the region looked: every iteration of such a loop is one entry, whatever its length or
    position, not one entry per (length, position) until the recompile limit."""

    __slots__ = ("session", "value", "index", "ended")

    def __init__(self, session: Session, value: ResumeIter, source: S.Source):
        super().__init__(source)
        self.session, self.value, self.index, self.ended = session, value, 0, False  # index: items pulled
        session.frame_iters[id(self)] = (self, 0)  # advanced in place after the region

    def pull(self, f) -> V | None:
        if self.ended:
            return None
        g, e, j = self.session.guards, self.source.expr, self.index
        left = f"len({e}.seq) - {e}.index"
        if self.value.index + j >= len(self.value.seq):
            g.add(self.source, f"{left} == {j}", f"{g.readable(self.source)} has {j} items left", left)
            self.ended = True
            return None
        g.add(self.source, f"{left} > {j}", f"{g.readable(self.source)} has more than {j} items left", left)
        self.index += 1
        item = S.Source(f"{e}.seq[{e}.index + {j}]", f"{self.source.name}_next{j}")
        return self.session.wrap(self.value.seq[self.value.index + j], item)

    def py_type(self) -> type:
        return ResumeIter

    def truthy(self, f) -> bool:
        return True

    def rebuild(self, rb) -> str:
        return self.source.expr  # the same object, advanced in place (``Rebuild.side_effects``)


class ModeExit:
    """The runtime form of a ``with`` block's ``__exit__`` live at a graph break."""

    __slots__ = ("kind", "state")

    def __init__(self, kind: str, state: Any):
        self.kind, self.state = kind, state

    def __call__(self, *exc):
        if self.kind == "grad":
            torch._C._set_grad_enabled(self.state)
        else:
            torch.amp.autocast_mode._exit_autocast(self.state)
        return False


# Readers of argument types a module above registers (``numpy_ops``: ``np.ndarray`` arguments as
# tensors): type -> reader(session, value, source) -> V.
WRAP_TYPES: dict[type, Any] = {}


class Session:
    def __init__(self, name: str, slot_names: list[str], fullgraph: bool, dynamic: DynamicPolicy | None = None):
        self.graph = tc_ir.Graph(name)
        self.dynamic = dynamic  # which input dims are size symbols (``symbols``); None: all static
        self.sizes = Sizes()
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=self.sizes.env)
        # A call that reads tensor memory without dispatching (torch.cuda.jiterator's launcher,
        # dlpack) gets an error from a fake, a graph break, instead of a null pointer it would launch
        # a kernel on (on CUDA a fault that poisons the process)
        self.fake_mode._allow_unsafe_data_ptr_access = False
        self.guards = GuardSet(slot_names)
        self.inputs: list[tuple[Any, S.Source, Any]] = []  # (node, source, example value)
        self.real_inputs: dict[int, torch.Tensor] = {}  # id(input node) -> the tensor it was read from
        self.by_source: dict[str, V] = {}
        self.by_object: dict[int, tuple] = {}  # id -> (container, V): aliases of one list/dict
        # ("setattr", obj V, name, value V) / ("global", ...) / ("call", fn, args, kwargs) / ("setitem", obj, key, value)
        self.side_effects: list[tuple] = []
        self.mutated: dict[int, V] = {}  # sourced containers changed in place
        # id -> (iterator V read from the frame, its index then): moved on in place after the region
        self.frame_iters: dict[int, tuple[V, int]] = {}
        self.fullgraph = fullgraph
        self.grad_enabled = torch.is_grad_enabled()
        self.guards.grad_mode(self.grad_enabled)
        self.guards.ambient()
        # Factories without a ``device=`` get it (``default_device``): read once, as the guard was.
        self.default_device = default_device()
        self.top_globals: dict = {}
        self.global_writes: dict = {}
        self.attr_writes: dict = {}
        self.autocast_stack: list = []
        self.optimizer_sources: set[str] = set()  # sources of optimizers read: their tensors are static

    # ---- reading values from sources ---------------------------------------------------------
    def wrap(self, value: Any, source: S.Source) -> V:
        found = self.by_source.get(source.expr)
        if found is None:
            found = self.by_source[source.expr] = self._wrap_aliased(value, source)
        return found

    def _wrap_aliased(self, value: Any, source: S.Source) -> V:
        """One tracked value per mutable container or iterator, however many paths reach it (a
        list in a local and bound to a method on the stack; ``it = iter(xs)`` that a ``for``
        loop also holds on the stack): a mutation or a ``next()`` through one is seen through all."""
        aliased = type(value) in _ALIASED or _state_object(value)
        if not aliased:
            return self._wrap(value, source)
        seen = self.by_object.get(id(value))
        if seen is None:
            v = self._wrap(value, source)
            self.by_object[id(value)] = (value, v)
            return v
        first = seen[1]
        self.guards.add(source, f"{source.expr} is {first.source.expr}",
                        f"{self.guards.readable(source)} is {self.guards.readable(first.source)}")
        return first

    def _wrap(self, value: Any, source: S.Source) -> V:
        g = self.guards
        if value is NULL:
            g.identity(source, NULL)
            return NULL_V
        if isinstance(value, torch.Tensor):
            return self._tensor_input(value, source)
        t = type(value)
        if t in WRAP_TYPES:
            return WRAP_TYPES[t](self, value, source)
        if t in _EQ_TYPES or isinstance(value, (torch.dtype, torch.device)):
            g.equals(source, value)
            return Const(value, source)
        if t is list:
            return self._sequence(value, source, ListV)
        if source.gated and is_constant_tuple(value):  # module config (a conv's stride): one check
            g.constant(source, value)
            return Const(value, source)
        if isinstance(value, tuple):
            return self._sequence(value, source, TupleV)
        if t is dict or t.__name__ == "OrderedDict":
            g.type_is(source, value)
            g.keys(source, value)
            items = {k: self.wrap(v, source.item(k, value)) for k, v in value.items()}
            return DictV(items, source, t)
        if isinstance(value, ResumeIter):
            g.type_is(source, value)
            return ResumedIterV(self, value, source)
        if t in S.REAL_ITERATORS:
            return self._real_iterator(value, source)
        if isinstance(value, ModeExit):
            g.type_is(source, value)
            g.add(source, f"{source.expr}.state == {g.ref(value.state)}", f"{g.readable(source)} restores {value.state}")
            return ExitV(value.kind, value.state, source)
        if t in _VIEW_KINDS:
            # A view of the dict itself, tracked like any dict argument: a mutation of the dict
            # through another name is seen through the view.
            g.type_is(source, value)
            d = S.dict_of_view(value)
            return ViewV(self.wrap(d, S.Source(f"_dict_of({source.expr})", source.name + "_dict")), _VIEW_KINDS[t])
        if t in _CONTENT_TYPES:
            return self._by_contents(value, source)
        if isinstance(value, types.MethodType):
            g.type_is(source, value)
            func = self.wrap(value.__func__, source.attr("__func__", value))
            return BoundV(func, self.wrap(value.__self__, source.attr("__self__", value)), source)
        if isinstance(value, _ID_TYPES) or callable(value) and not isinstance(value, torch.nn.Module) \
                and not hasattr(value, "__dict__"):
            g.identity(source, value)
            return Const(value, source)
        if isinstance(value, torch.optim.Optimizer):
            optimizers.prepare(value)
            self.optimizer_sources.add(source.expr)
        g.type_is(source, value)  # modules and user objects: attributes are guarded as they are read
        return Const(value, source)

    def _real_iterator(self, value, source: S.Source) -> IterV:
        """A list/tuple/range iterator (an iterator live at a break is rebuilt as one): its
        sequence and position are read through ``__reduce__`` and guarded like a sequence's."""
        g, t = self.guards, type(value)
        seq, index = S.iter_state(value)
        state = S.Source(f"_iter_state({source.expr})", source.name + "_state")
        g.type_is(source, value)
        g.add(source, f"{state.expr}[1] == {index}", f"{g.readable(source)} at item {index}")
        seq_src = S.Source(f"{state.expr}[0]", source.name + "_seq")
        if type(seq) is range:
            g.add(source, f"{seq_src.expr} == {g.ref(seq)}", f"{g.readable(source)} over {seq!r}")
            items = [Const(i) for i in seq]
        else:
            g.add(source, f"len({seq_src.expr}) == {len(seq)}", f"{g.readable(source)} over {len(seq)} items")
            if t in S.REVERSED_ITERATORS:  # the items still to come, in the order they come
                items, index = [self.wrap(seq[j], seq_src.item(j, None)) for j in range(index, -1, -1)], 0
            else:
                items = [self.wrap(v, seq_src.item(i, None)) for i, v in enumerate(seq)]
        it = IterV(items, index, source, t)
        self.frame_iters[id(it)] = (it, index)  # advanced in place after the region
        return it

    def _by_contents(self, value, source: S.Source) -> V:
        """A set, frozenset or dict view argument is folded at capture time (its operations run on
        the real value), so its contents and their order are guarded; one holding other than
        plain constants is a break."""
        items = list(value)
        if not all(type(x) in _EQ_TYPES for x in items):
            raise Unsupported(f"a {type(value).__name__} argument holding other than plain constants")
        g = self.guards
        g.type_is(source, value)
        g.add(source, f"list({source.expr}) == {g.ref(items)}", f"list({g.readable(source)}) == {items!r:.80}")
        return Const(value, source)

    def _sequence(self, value, source: S.Source, kind):
        g, base = self.guards, tuple if kind is TupleV else list
        g.type_is(source, value)
        if all(getattr(type(value), n) is getattr(base, n) for n in ("__getitem__", "__len__", "__iter__")):
            g.length(source, value)
            items = [self.wrap(v, source.item(i, value)) for i, v in enumerate(value)]
        else:  # a subclass with its own protocol (a NamedTuple's __getitem__): read the fields as stored
            n = base.__len__(value)
            g.add(source, f"{base.__name__}.__len__({source.expr}) == {n}", f"{g.readable(source)} holds {n} items")
            items = [self.wrap(base.__getitem__(value, i), S.Source(f"{base.__name__}.__getitem__({source.expr}, {i})",
                                                                    f"{source.name}_{i}")) for i in range(n)]
        if kind is TupleV:
            return TupleV(items, source, type(value))
        return ListV(items, source)

    def _tensor_input(self, value: torch.Tensor, source: S.Source) -> TensorV:
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            # A subclass's operations are its own (``__torch_function__``/``__torch_dispatch__``: types of
            # results, other kernels): graphs of torch ops would drop them.
            raise Unsupported(f"a {type(value).__qualname__} input (a torch.Tensor subclass)")
        dims = self.dynamic.dims(source.expr, value, source.gated) if self.dynamic is not None else {}
        if dims and symbolic_layout(value, dims) is not None:
            fake = self._symbolic_input(value, source, dims)
            spec = tc_ir.TensorSpec.from_tensor(fake)  # over the ShapeEnv's symbols until ``finish``
        else:  # static, or a layout no symbols can describe (symbolic_layout): specialised
            self.guards.tensor(source, value)
            fake = self.fake_mode.from_tensor(value, static_shapes=True)
            spec = tc_ir.TensorSpec.from_tensor(value)
        node = self.graph.input(source.name, spec)
        node.meta["source"] = source.expr
        node.meta["type"] = type(value)
        if optimizers.is_static(source, self.optimizer_sources):
            node.meta["static"] = True  # an optimizer's parameter or state: same memory every step
        self.inputs.append((node, source, value))
        self.real_inputs[id(node)] = value
        return TensorV(node, fake, source)

    def _symbolic_input(self, t: torch.Tensor, source: S.Source, dims: dict) -> torch.Tensor:
        """A fake input whose ``dims`` are size symbols, and its guard: type, dtype, rank, device,
        ``requires_grad``, the static dims' sizes and strides as expressions of the sizes (the
        layout it was captured with); each symbol's own guards are added by ``symbols.finish``."""
        g = self.guards
        e = g.bound.setdefault(source.expr, f"_t{len(g.bound)}")
        fake, strides = self.sizes.fake_input(self.fake_mode, t, dims, source, e, g.readable(source))
        device = f"{e}.is_cpu" if t.device.type == "cpu" else f"{e}.device == {g.ref(t.device)}"
        static = "".join(f"{e}.shape[{d}] == {n} and " for d, n in enumerate(t.shape) if d not in dims)
        cond = (f"type({e} := {source.expr}) is {g.ref(type(t))} and {e}.dtype is {g.ref(t.dtype)} and "
                f"{e}.dim() == {t.dim()} and {static}{e}.stride() == {strides} and "
                f"{e}.requires_grad is {t.requires_grad} and {device}")
        grad = " requires_grad" if t.requires_grad else ""
        spec = self.sizes.readable(tc_ir.TensorSpec.from_tensor(fake))
        g.add(source, cond, f"{g.readable(source)}: {type(t).__name__} {spec}{grad}")
        return fake

    def real_input(self, v: V) -> torch.Tensor | None:
        """The real tensor behind a graph input (what its source reads now), else ``None``."""
        if not isinstance(v, TensorV) or v.source is None or v.node.op != "input":
            return None
        return self.real_inputs.get(id(v.node))

    def guard_distinct_state(self) -> None:
        """A region that changes Python state read from the frame (``a.v = 5``, ``a.append(1)``)
        was captured with each object it reached by its own path: one object per path, except
        where two paths reached one (guarded ``is`` when wrapped). Called again with one object
        behind two of those paths (``f(x, s, s)`` after ``f(x, s, t)``), a write through one is
        read through the other, which the entry had read as the state before its writes: so the
        objects of such a region are guarded distinct. Module state (gated sources) is left out:
        it is reached through guarded module attributes, not passed in."""
        if not (self.mutated or self.attr_writes or any(e[0] in ("setitem", "call") for e in self.side_effects)):
            return
        sources = [v.source for _, v in self.by_object.values() if v.source is not None and not v.source.gated]
        if len(sources) < 2:
            return
        exprs = ", ".join(f"id({s.expr})" for s in sources)
        self.guards.add(None, f"len({{{exprs}}}) == {len(sources)}",
                        "distinct objects: " + ", ".join(self.guards.readable(s) for s in sources),
                        f"[{exprs}]")

    # ---- side effects ---------------------------------------------------------------------------
    def note_mutation(self, container: V) -> None:
        if container.source is not None:
            self.mutated[id(container)] = container
