"""Functionalization while tracing: in-place ops and views become out-of-place graph nodes.

The tracer runs every op for real on fake tensors (so autograd and metadata behave exactly as in
eager), but what it *records* is functional. Each fake tensor is an :class:`Alias` of a
:class:`Storage`. A storage holds the node computing its whole current value; an alias holds the
chain of view ops that carve it out of its storage. An in-place op records its out-of-place
variant, then scatters the new value back through the alias's view chain into the storage
(``slice_scatter``, ``select_scatter``, ...). Every other alias of that storage goes stale and is
re-derived by replaying its view chain on the next read. Storages of graph inputs that were
written are returned by the graph as extra outputs, which the runtime copies back.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

import tc_ir

aten = torch.ops.aten


@attrs.define(eq=False)
class Storage:
    """One block of memory: the node holding its current whole value, and how often it was written."""

    value: tc_ir.Node
    input_index: int | None = None
    version: int = 0
    root: Any = None  # the fake tensor that owns the whole block (its layout is the value's)
    layout: tuple | None = None  # the root's (shape, stride, storage offset) when the block was made
    leaf: bool = False  # an input that is an autograd leaf requiring grad: eager writes it only under no_grad

    def root_unchanged(self) -> bool:
        """Does the root still have the layout the block was made with (no ``t_``/``as_strided_``)?"""
        r = self.root
        return isinstance(r, torch.Tensor) and self.layout == (tuple(r.shape), r.stride(), r.storage_offset())


@attrs.frozen
class View:
    """One step of a view chain: ``op(base, *args, **kwargs)``, then ``[index]`` for multi-output views."""

    op: Any
    args: tuple
    kwargs: dict
    index: int | None
    spec: Any


@attrs.define(eq=False)
class Alias:
    """What a fake tensor is: a storage seen through a chain of views, cached as ``node``."""

    storage: Storage
    chain: tuple
    node: tc_ir.Node
    version: int


# Both read the op's schema, per traced call (~10,000 in a GPT-2 training trace): memoised per op.
@functools.cache
def is_view_op(op: Any) -> bool:
    returns = op._schema.returns
    return bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write


def mutated_args(op: Any) -> list[int]:
    """Positions of the arguments an op writes to (``self`` of ``add_``; running stats...)."""
    return list(_mutated_args(op))


@functools.cache
def _mutated_args(op: Any) -> tuple[int, ...]:
    return tuple(i for i, a in enumerate(op._schema.arguments) if a.alias_info is not None and a.alias_info.is_write)


# In-place ops whose out-of-place twin cannot be found by name and argument types.
FUNCTIONAL_OVERRIDES = {
    aten.copy_.default: aten.copy.default,
    aten.normal_.default: aten.normal_functional.default,
}
# In-place ops that change metadata, not values, in ways the alias model cannot express.
METADATA_MUTATIONS = {"resize_", "resize_as_", "set_"}
# In-place ops that change only metadata: the tensor becomes a view of its old self (see
# ``metadata_view``). ``swapdims_``/``swapaxes_`` are composite (they dispatch ``transpose_``).
METADATA_VIEWS = {"as_strided_", "t_", "transpose_", "squeeze_", "unsqueeze_", "swapdims_",
                  "swapaxes_", "detach_"}


@functools.cache
def functional_variant(op: Any) -> Any:
    """The out-of-place overload computing what in-place ``op`` writes (``add_.Tensor`` -> ``add.Tensor``)."""
    if op in FUNCTIONAL_OVERRIDES:
        return FUNCTIONAL_OVERRIDES[op]
    name = op._schema.name.split("::")[1]
    if name in METADATA_MUTATIONS:
        raise NotImplementedError(f"tc_autograd: in-place metadata op aten.{name} is not supported")
    return _twin(op, name)


@functools.cache
def metadata_view(op: Any) -> Any | None:
    """The view op a metadata-only in-place op amounts to (``t_ -> t``, ``squeeze_.dim ->
    squeeze.dim``, ``as_strided_ -> as_strided``), or None for any other op."""
    name = op._schema.name.split("::")[1]
    if name not in METADATA_VIEWS:
        return None
    if name in ("swapdims_", "swapaxes_"):
        return aten.transpose.int
    return _twin(op, name)


@functools.cache
def functional_with_writes(op: Any) -> tuple[Any, list[tuple[int, int]]]:
    """For an op writing arguments besides (or other than) ``self``: its ``<name>_functional``
    twin (torch's convention: the same arguments, unwritten; the op's returns, then the new value
    of each written argument the op does not return) and, for each written argument, its
    position and the index of the twin's result holding its new value."""
    name = op._schema.name.split("::")[1]
    packet = getattr(aten, name.rstrip("_") + "_functional", None)
    want = _arg_types(op)
    twin = next((getattr(packet, o) for o in (packet.overloads() if packet else [])
                 if _arg_types(getattr(packet, o)) == want and not mutated_args(getattr(packet, o))), None)
    if twin is None:
        raise NotImplementedError(f"tc_autograd: {op} writes to arguments other than self and has no functional twin")
    args = op._schema.arguments
    returned = {}
    for i, r in enumerate(op._schema.returns):
        if r.alias_info is not None and r.alias_info.is_write:
            k = next(k for k in mutated_args(op) if args[k].alias_info.before_set == r.alias_info.before_set)
            returned[k] = i
    extra = [k for k in mutated_args(op) if k not in returned]
    places = sorted([(k, returned[k]) for k in returned]
                    + [(k, len(op._schema.returns) + j) for j, k in enumerate(extra)])
    if len(twin._schema.returns) != len(op._schema.returns) + len(extra):
        raise NotImplementedError(f"tc_autograd: {twin} does not return the new values of what {op} writes")
    return twin, places


def _twin(op: Any, name: str) -> Any:
    """The overload of ``name`` without its trailing ``_`` taking the same argument types and
    writing nothing."""
    packet = getattr(aten, name.rstrip("_"), None)
    want = _arg_types(op)
    candidates = [op._overloadname] + [o for o in (packet.overloads() if packet else []) if o != op._overloadname]
    for overload in candidates:
        candidate = getattr(packet, overload, None) if packet else None
        if candidate is not None and _arg_types(candidate) == want and not mutated_args(candidate):
            return candidate
    raise NotImplementedError(f"tc_autograd: no out-of-place variant of in-place op {op}")


def _arg_types(op: Any) -> tuple[str, ...]:
    return tuple(str(a.type) for a in op._schema.arguments if not a.is_out)


# ---- scattering a written view back into its base: one rule per view op --------------------
Emit = Callable[..., tc_ir.Node]


def _view_args(view: View, names: tuple[str, ...], defaults: tuple) -> list:
    """The view's arguments after ``self``, by position or keyword, with schema defaults filled in."""
    given = list(view.args[1:])
    return [given[i] if i < len(given) else view.kwargs.get(n, d) for i, (n, d) in enumerate(zip(names, defaults))]


def _slice(emit: Emit, view: View, base: tc_ir.Node, src: tc_ir.Node) -> tc_ir.Node:
    dim, start, end, step = _view_args(view, ("dim", "start", "end", "step"), (0, None, None, 1))
    return emit(aten.slice_scatter.default, base, src, dim, start, end, step)


def _select(emit: Emit, view: View, base: tc_ir.Node, src: tc_ir.Node) -> tc_ir.Node:
    dim, index = _view_args(view, ("dim", "index"), (0, 0))
    return emit(aten.select_scatter.default, base, src, dim, index)


def _diagonal(emit: Emit, view: View, base: tc_ir.Node, src: tc_ir.Node) -> tc_ir.Node:
    offset, dim1, dim2 = _view_args(view, ("offset", "dim1", "dim2"), (0, 0, 1))
    return emit(aten.diagonal_scatter.default, base, src, offset, dim1, dim2)


def _as_strided(emit: Emit, view: View, base: tc_ir.Node, src: tc_ir.Node) -> tc_ir.Node:
    size, stride, offset = _view_args(view, ("size", "stride", "storage_offset"), (None, None, None))
    return emit(aten.as_strided_scatter.default, base, src, size, stride, offset)


def _reshape(emit: Emit, view: View, base: tc_ir.Node, src: tc_ir.Node) -> tc_ir.Node:
    return emit(aten.view.default, src, list(base.spec.shape))


def _transpose(emit: Emit, view: View, base: tc_ir.Node, src: tc_ir.Node) -> tc_ir.Node:
    return emit(aten.transpose.int, src, *view.args[1:3])


def _t(emit: Emit, view: View, base: tc_ir.Node, src: tc_ir.Node) -> tc_ir.Node:
    """``t`` of a 0-d or 1-d tensor is the tensor itself; of a matrix, ``transpose(0, 1)``."""
    if len(src.spec.shape) < 2:
        return src
    return emit(aten.transpose.int, src, 0, 1)


def _permute(emit: Emit, view: View, base: tc_ir.Node, src: tc_ir.Node) -> tc_ir.Node:
    dims = [d % len(view.args[1]) for d in view.args[1]]
    return emit(aten.permute.default, src, sorted(range(len(dims)), key=dims.__getitem__))


def _expand(emit: Emit, view: View, base: tc_ir.Node, src: tc_ir.Node) -> tc_ir.Node:
    """Eager writes an expanded view only with ops giving every copy of an element one value
    (``fill_``, ``zero_``; others refuse memory that overlaps itself): the first copy along each
    broadcast dim is the base's new value."""
    shape = base.spec.shape
    for _ in range(len(src.spec.shape) - len(shape)):
        src = emit(aten.select.int, src, 0, 0)
    for dim, size in enumerate(shape):
        if size == 1 and src.spec.shape[dim] != 1:
            src = emit(aten.slice.Tensor, src, dim, 0, 1)
    return emit(aten.clone.default, src)


def _same(emit: Emit, view: View, base: tc_ir.Node, src: tc_ir.Node) -> tc_ir.Node:
    return src


def _unbind(emit: Emit, view: View, base: tc_ir.Node, src: tc_ir.Node) -> tc_ir.Node:
    (dim,) = _view_args(view, ("dim",), (0,))
    return emit(aten.select_scatter.default, base, src, dim, view.index)


def _split(emit: Emit, view: View, base: tc_ir.Node, src: tc_ir.Node) -> tc_ir.Node:
    size, dim = _view_args(view, ("split_size", "dim"), (None, 0))
    start = view.index * size
    return emit(aten.slice_scatter.default, base, src, dim, start, start + src.spec.shape[dim], 1)


def _split_with_sizes(emit: Emit, view: View, base: tc_ir.Node, src: tc_ir.Node) -> tc_ir.Node:
    sizes, dim = _view_args(view, ("split_sizes", "dim"), (None, 0))
    start = sum(sizes[: view.index])
    return emit(aten.slice_scatter.default, base, src, dim, start, start + sizes[view.index], 1)


# Keyed by the view op's overload packet: how to write ``src`` into the view's place in ``base``.
SCATTER_RULES: dict[Any, Callable] = {
    aten.slice: _slice, aten.select: _select, aten.diagonal: _diagonal, aten.as_strided: _as_strided,
    aten.view: _reshape, aten._reshape_alias: _reshape, aten.unsqueeze: _reshape, aten.squeeze: _reshape,
    aten.flatten: _reshape, aten.unflatten: _reshape,
    aten.transpose: _transpose, aten.t: _t, aten.permute: _permute,
    aten.alias: _same, aten.detach: _same, aten.expand: _expand, aten.unbind: _unbind, aten.split: _split,
    aten.split_with_sizes: _split_with_sizes,
}


def scatter(emit: Emit, view: View, base: tc_ir.Node, src: tc_ir.Node) -> tc_ir.Node:
    """``base`` with the region ``view`` selects replaced by ``src``."""
    rule = SCATTER_RULES.get(view.op.overloadpacket)
    if rule is None:
        raise NotImplementedError(f"tc_autograd: cannot functionalize a write through view op {view.op}")
    return rule(emit, view, base, src)


_storage_of, _address_of = torch._C.TensorBase.untyped_storage, torch.UntypedStorage.data_ptr


def storage_pointers(values: Sequence[Any]) -> list[int]:
    """The address of each tensor's storage (0 for a non-tensor or a storage without memory).

    Runs on every call of a graph that writes its inputs (hundreds of inputs in a training step),
    hence the C-level ``map`` over all-tensor inputs: ~60% of a comprehension's cost."""
    try:
        return list(map(_address_of, map(_storage_of, values)))
    except TypeError:  # a non-tensor (an int input, a None saved value)
        return [t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) else 0 for t in values]


def storage_groups(inputs: Sequence[Any], pointers: list[int] | None = None) -> tuple:
    """Positions of tensor inputs sharing a storage, grouped (``()`` when none share: one set).

    Storages without memory (zero-size, meta: address 0) share nothing. ``pointers``: the
    inputs' :func:`storage_pointers`, when the caller has them already."""
    ptrs = storage_pointers(inputs) if pointers is None else pointers
    zeros = ptrs.count(0)
    if len(set(ptrs)) + max(zeros - 1, 0) == len(ptrs):  # the common case: all addresses distinct
        return ()
    seen: dict[int, list[int]] = {}
    for i, p in enumerate(ptrs):
        if p:
            seen.setdefault(p, []).append(i)
    return tuple(tuple(g) for g in seen.values() if len(g) > 1)



# Views that keep every element of their base: a write through a chain of them writes every copy
# of a broadcast element, as the storage model (one value per element of the input) assumes.
WHOLE_VIEWS = {aten.expand, aten.alias, aten.detach, aten.unsqueeze, aten.permute, aten.transpose, aten.t}


def _check_broadcast_write(alias: Alias) -> None:
    """Refuse a partial write to an input whose memory is broadcast (a stride-0 dim).

    Writing one copy (``x.select(0, 1).add_(1)`` on an expanded ``x``) changes every copy in
    eager, since they share memory; functionally the input is one value per element, so only
    writes covering every copy are modelled (``fill_``/``zero_`` of the whole input, or
    through ``expand``/``t``/``permute``...)."""
    root = alias.storage.root
    if alias.storage.input_index is None or not isinstance(root, torch.Tensor):
        return
    if 0 in root.shape or not any(s == 0 and n > 1 for n, s in zip(root.shape, root.stride())):
        return  # an empty input has no element whose memory another one shares
    partial = [step.op for step in alias.chain if step.op.overloadpacket not in WHOLE_VIEWS]
    if partial:
        raise NotImplementedError(f"tc_autograd: a write through {partial[0]} to part of input "
                                  f"{alias.storage.input_index}, whose memory is broadcast (stride 0)")


# Views that pick part of one dim: over a broadcast dim (stride 0), every part is the same memory.
_PICKS = {aten.select: ("dim", "index"), aten.slice: ("dim", "start"), aten.unbind: ("dim",),
          aten.split: ("split_size", "dim"), aten.split_with_sizes: ("split_sizes", "dim")}


def _first_copies(root_spec: Any, chain: tuple) -> tuple:
    """``chain`` with each pick of part of a broadcast dim (``x.expand(2, n)[1]``) moved to the
    dim's start: the same memory, so the same write; scattered back, the copy written is then the
    one ``expand``'s rule keeps (it takes the first copy of each broadcast element)."""
    out, spec = [], root_spec
    for step in chain:
        packet = step.op.overloadpacket
        if packet in _PICKS and isinstance(spec, tc_ir.TensorSpec):
            dim = _view_args(step, ("dim",), (0,))[0] if packet in (aten.select, aten.slice, aten.unbind) \
                else _view_args(step, _PICKS[packet], (None, 0))[1]
            dim %= max(len(spec.shape), 1)
            if spec.stride[dim] == 0 and spec.shape[dim] != 1:
                base = step.args[0]
                if packet in (aten.select, aten.unbind):
                    step = View(aten.select.int, (base, dim, 0), {}, None, step.spec)
                else:
                    step = View(aten.slice.Tensor, (base, dim, 0, step.spec.shape[dim], 1), {}, None, step.spec)
        out.append(step)
        spec = step.spec
    return tuple(out)


class AliasTable:
    """Which node each fake tensor currently is, keeping views and their storages in step."""

    def __init__(self, emit: Emit):
        self.emit = emit
        self.aliases: dict[int, Alias] = {}
        self.keep_alive: list[torch.Tensor] = []  # ids stay unique while the trace lives

    def __contains__(self, t: torch.Tensor) -> bool:
        return id(t) in self.aliases

    def alias(self, t: torch.Tensor) -> Alias:
        return self.aliases[id(t)]

    def fresh(self, t: torch.Tensor, node: tc_ir.Node, input_index: int | None = None, leaf: bool = False) -> None:
        layout = (tuple(t.shape), t.stride(), t.storage_offset())
        self._set(t, Alias(Storage(node, input_index, root=t, layout=layout, leaf=leaf), (), node, 0))

    def rebind(self, t: torch.Tensor, step: View, node: tc_ir.Node) -> None:
        """``t``'s metadata changed in place (``t.t_()``): it is now ``step`` of its old self."""
        a = self.alias(t)
        self.read(t)
        self._set(t, Alias(a.storage, a.chain + (step,), node, a.storage.version))

    def restride(self, t: torch.Tensor, spec: Any) -> None:
        """``t.as_strided_(...)`` ran: ``t`` is now ``as_strided`` of its whole block of memory.

        Its new size, strides and offset (read off the fake, so ``storage_offset=None`` means
        what eager makes of it) count from the start of the block, so the block's current value
        must be laid out as its root was made: a fresh result, never an input (whose real
        layout is the caller's)."""
        s = self.alias(t).storage
        shape, stride, offset = s.layout or ((), (), -1)
        spec_ok = isinstance(s.value.spec, tc_ir.TensorSpec) and (s.value.spec.shape, s.value.spec.stride) == (shape, stride)
        if s.input_index is not None or offset != 0 or not spec_ok:
            raise NotImplementedError("tc_autograd: as_strided_ of an input, or of a block of memory "
                                      "whose current value is laid out differently from its owner")
        args = (s.root, list(t.shape), list(t.stride()), t.storage_offset())
        node = self.emit(aten.as_strided.default, s.value, *args[1:], spec=spec)
        self._set(t, Alias(s, (View(aten.as_strided.default, args, {}, None, spec),), node, s.version))

    def view(self, t: torch.Tensor, base: torch.Tensor, step: View, node: tc_ir.Node) -> None:
        parent = self.alias(base)
        self.read(base)
        self._set(t, Alias(parent.storage, parent.chain + (step,), node, parent.storage.version))

    def _set(self, t: torch.Tensor, alias: Alias) -> None:
        self.keep_alive.append(t)
        self.aliases[id(t)] = alias

    def read(self, t: torch.Tensor) -> tc_ir.Node:
        """The node of ``t``'s current value, replaying its views if its storage was written since."""
        a = self.alias(t)
        if a.version != a.storage.version:
            node = a.storage.value
            for step in a.chain:
                node = self._replay(step, node)
            a.node, a.version = node, a.storage.version
        return a.node

    def write(self, t: torch.Tensor, value: tc_ir.Node) -> None:
        """Record that ``t`` now holds ``value``: the storage gets ``value`` scattered into it."""
        a = self.alias(t)
        _check_broadcast_write(a)
        if a.storage.leaf and torch.is_grad_enabled():
            # the input stands in as a non-leaf twin (``joint._writable_twin``); eager refuses this
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
        chain = _first_copies(a.storage.value.spec, a.chain)
        bases = [a.storage.value]
        for step in chain[:-1]:
            bases.append(self._replay(step, bases[-1]))
        new = value
        for step, base in reversed(list(zip(chain, bases))):
            new = scatter(self.emit, step, base, new)
        a.storage.value = new
        a.storage.version += 1
        a.node, a.version = value, a.storage.version

    def _replay(self, step: View, base: tc_ir.Node) -> tc_ir.Node:
        spec = step.spec if step.index is None else None
        node = self.emit(step.op, base, *step.args[1:], spec=spec, **step.kwargs)
        if step.index is not None:
            node = self.emit(operator.getitem, node, step.index, spec=step.spec)
        return node

    def mutated_inputs(self) -> list[Storage]:
        """Storages of graph inputs that were written, in input order."""
        found = {id(a.storage): a.storage for a in self.aliases.values()
                 if a.storage.input_index is not None and a.storage.version > 0}
        return sorted(found.values(), key=lambda s: s.input_index)
