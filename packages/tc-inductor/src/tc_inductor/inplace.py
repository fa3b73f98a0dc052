"""Outputs written into input buffers ("reinplacing"), when the caller allows and it is safe.

A functional graph of an in-place program (an optimizer step, batch-norm's running stats) returns
the new value of each mutated input, and its caller copies that value back into the input: one
extra copy (a kernel launch on the GPU, and twice the memory traffic) per mutated tensor. The
caller names the pairs (``Options.inplace_outputs``: output position -> input position); this
module picks those it can write directly into the input's memory, so the returned tensor IS the
input and the caller's copy is skipped:

* a kernel output (a computed buffer tc allocates) takes the input's buffer instead;
* a functional ``_foreach_*`` extern whose ``self`` list is inputs paired with its results runs
  as the ``_foreach_*_`` overload (each element is read before it is written, at its own index).

A pair is taken only when no wrong answer can come of it: the output and the input have the
same layout (shape, strides, dtype, device), the output is a whole buffer (no view, no offset)
returned once, the input's old value is not read by the writing step (the kernel itself, or
another argument of the extern) nor by any later step, nor returned, and no extern that may
return a view of the input ever reads it (the view would be read later under another name).
Everything else is allocated as before. Inputs that share memory are the caller's to refuse
(tc_autograd never calls a graph writing to inputs that alias others).
"""

from __future__ import annotations

from typing import Any

import attrs
import sympy
import torch

import tc_ir

from . import kir, scheduler
from .graph_lowering import LoweredGraph
from .ir import BufferValue, ComputedBuffer, ExternCall, strided_index
from .kir import Ops


@attrs.define
class InplacePlan:
    """``buffers``: kernel output buffer name -> input name whose memory it takes.
    ``externs``: extern step name -> (its in-place overload, {result name: input name})."""

    buffers: dict = attrs.Factory(dict)
    externs: dict = attrs.Factory(dict)

    def __bool__(self) -> bool:
        return bool(self.buffers or self.externs)


def plan(lowered: LoweredGraph, steps: list, layouts: dict, pairs: dict, reads_of: Any) -> InplacePlan:
    """The pairs of ``pairs`` (flattened output position -> input position) that are safe to
    write in place; ``steps`` are the scheduled steps (groups of computed buffers, externs),
    ``reads_of(member)`` the buffer names a computed buffer or extern reads."""
    result = InplacePlan()
    if not pairs:
        return result
    reads_of = _memo(reads_of)  # asked per member and pair: a multi-tensor kernel has hundreds
    leaves = list(tc_ir.leaves(lowered.outputs))
    returned: dict[str, int] = {}
    for leaf in leaves:
        if isinstance(leaf, BufferValue):
            returned[leaf.name] = returned.get(leaf.name, 0) + 1
    names = [inp.name for inp in lowered.inputs]
    wanted: dict[str, str] = {}  # output buffer name -> input name
    for position, index in pairs.items():
        if not (0 <= position < len(leaves) and 0 <= index < len(names)):
            continue
        leaf, source = leaves[position], names[index]
        if _whole(leaf, layouts) and returned[leaf.name] == 1 and source not in returned \
                and _same_layout(layouts.get(leaf.name), layouts.get(source)):
            wanted[leaf.name] = source
    if not wanted:
        return result
    reads = [_step_reads(step, reads_of) for step in steps]
    viewed = {name for step in steps if isinstance(step, ExternCall) and _may_alias(step.target)
              for name in reads_of(step)}
    taken: set[str] = set()

    def free_after(source: str, position: int) -> bool:
        """The input's old value is read by no step from ``position`` on, nor through a view."""
        return source not in viewed and source not in taken and all(source not in r for r in reads[position:])

    recomputed: dict = {}  # group -> scheduler.recomputed(group)

    def free_in_kernel(member: ComputedBuffer, source: str, position: int, group: Any) -> bool:
        """Free after this kernel, and read in it only by ``member``, each element at the index
        it writes (loaded before it is stored, in the same iteration), and ``member`` is not
        recomputed at other elements (scheduler.recomputed: that would read ``source`` there)."""
        if not free_after(source, position + 1) or source in viewed or source in taken:
            return False
        if group not in recomputed:
            recomputed[group] = scheduler.recomputed(group)
        if member.name in recomputed[group]:
            return False
        others = [m for m in group.members if m is not member]
        return all(source not in reads_of(m) for m in others) and _reads_own_elements(member, source)

    for position, step in enumerate(steps):
        if isinstance(step, ExternCall):
            _plan_extern(step, position, wanted, free_after, result, taken)
            continue
        if getattr(step, "extern", None) is not None:  # a matmul template writes its own outputs
            continue
        for member in step.members:
            source = wanted.get(member.name)
            if source is not None and isinstance(member, ComputedBuffer) and member.view is None \
                    and free_in_kernel(member, source, position, step):
                result.buffers[member.name] = source
                taken.add(source)
    return result


def _memo(reads_of: Any) -> Any:
    known: dict[str, set] = {}

    def reads(step: Any) -> set:
        if step.name not in known:
            known[step.name] = reads_of(step)
        return known[step.name]

    return reads


def _plan_extern(step: ExternCall, position: int, wanted: dict, free_after: Any, result: InplacePlan,
                 taken: set) -> None:
    overload = inplace_overload(step.target)
    if overload is None or not step.args:
        return
    outputs, selves = step.outputs, step.args[0]
    if not isinstance(outputs, (tuple, list)) or not isinstance(selves, (tuple, list)) or len(outputs) != len(selves):
        return
    mapping: dict[str, str] = {}
    for out, self_value in zip(outputs, selves):
        source = wanted.get(getattr(out, "name", None))
        if source is None or not isinstance(self_value, BufferValue) or self_value.name != source \
                or self_value.offset != 0 or source in mapping.values():
            return
        mapping[out.name] = source
    others = {v.name for v in tc_ir.leaves((step.args[1:], step.kwargs)) if isinstance(v, BufferValue)}
    if others & set(mapping.values()) or not all(free_after(s, position + 1) for s in mapping.values()):
        return
    result.externs[step.name] = (overload, mapping)
    taken.update(mapping.values())


def inplace_overload(target: Any) -> Any:
    """The ``_foreach_<op>_`` overload matching a functional ``_foreach_<op>`` overload (same
    arguments, ``self`` written), or None."""
    schema = getattr(target, "_schema", None)
    packet = getattr(target, "overloadpacket", None)
    if schema is None or packet is None or tc_ir.is_mutating(target):
        return None
    name = packet.__name__
    if not name.startswith("_foreach_") or name.endswith("_"):
        return None
    other = getattr(getattr(torch.ops.aten, name + "_", None), target._overloadname, None)
    other_schema = getattr(other, "_schema", None)
    if other_schema is None or [a.name for a in other_schema.arguments] != [a.name for a in schema.arguments]:
        return None
    first = other_schema.arguments[0].alias_info
    return other if first is not None and first.is_write else None


def _reads_own_elements(member: ComputedBuffer, source: str) -> bool:
    """Every load of ``source`` in the pointwise ``member`` is of the element it stores (direct,
    at the same index: the layouts are equal), or there is none."""
    if member.is_reduction:
        return source not in {u.arg[0] for u in _uops(member) if u.op is Ops.LOAD}
    index = kir.xvars(len(member.shape))
    store = strided_index(index, member.stride)
    ones = {x: 0 for x, n in zip(index, member.shape) if n == 1}  # a size-1 dim's only index (read as 0)
    loads = [u for u in _uops(member) if u.op is Ops.LOAD and u.arg[0] == source]
    return all(not u.src and sympy.expand((sympy.sympify(u.arg[1]) - store).subs(ones)) == 0 for u in loads)


def _uops(member: ComputedBuffer) -> list:
    return member.body(kir.xvars(len(member.shape)), kir.rvars(len(member.rranges))).toposort()


def _step_reads(step: Any, reads_of: Any) -> set[str]:
    members = [step] if isinstance(step, ExternCall) else list(step.members)
    template = getattr(step, "extern", None)  # a matmul template: its product's operands too
    return set().union(*(reads_of(m) for m in members + ([template] if template is not None else [])))


def _whole(leaf: Any, layouts: dict) -> bool:
    """A whole buffer in its own layout (no view of it, no offset)."""
    if not isinstance(leaf, BufferValue) or leaf.offset != 0 or leaf.name not in layouts:
        return False
    shape, stride, _, _ = layouts[leaf.name]
    return tuple(shape) == leaf.shape and tuple(stride) == leaf.stride


def _same_layout(a: tuple | None, b: tuple | None) -> bool:
    if a is None or b is None:
        return False
    return (tuple(a[0]), tuple(a[1]), a[2], torch.device(a[3])) == (tuple(b[0]), tuple(b[1]), b[2], torch.device(b[3]))


def _may_alias(target: Any) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)
