"""The decisions of the CUDA-graph runtime, free of CUDA calls so they are tested on the CPU.

A *signature* identifies the calls one graph can serve: per argument, a tensor's shape, strides,
dtype, device and requires_grad, or a scalar's type and value (a graph bakes scalars in). The
:class:`Planner` keeps one :class:`ShapeState` per signature and answers, for each call, one of
:class:`Warmup` (first call of a signature: a plain call that also checks the function),
:class:`Record` (second call: capture, then replay), :class:`Replay`, or :class:`Eager` (a plain
call, with the reason). Recording on the second call means the function runs exactly once per
call (capture executes nothing), one-off shapes never pay for a capture, and lazy set-up (Triton
compilation, cuBLAS handles) happens before capture.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
from torch._C._dynamo.guards import TensorGuards

from .outputs import all_tensors

_SCALARS = (bool, int, float, str, type(None))


class Signature(tuple):
    """A signature's parts; hashed once, though the runtime looks it up more than once a call
    (a training step's optimizer graph has ~650 tensor arguments: a hash walks all of them)."""

    def __hash__(self) -> int:
        cached = self.__dict__.get("hash")
        if cached is None:
            cached = self.__dict__["hash"] = tuple.__hash__(self)
        return cached


def signature(args: Sequence[Any]) -> Signature | str:
    """The signature of ``args``, or a string saying why they have none (an unsupported argument)."""
    if all_tensors(args):  # the common case, without a branch per argument
        return Signature((torch.is_grad_enabled(),
                          *[(a.shape, a.stride(), a.dtype, a.device, a.requires_grad) for a in args]))
    parts: list[Any] = [torch.is_grad_enabled()]
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            parts.append((a.shape, a.stride(), a.dtype, a.device, a.requires_grad))
        elif isinstance(a, _SCALARS):
            parts.append((type(a), a))
        else:
            return f"input {i} is a {type(a).__name__}; graphs take tensors and scalars"
    return Signature(parts)


class LastSignature:
    """The signature of the last call whose arguments were all tensors, and a check that new
    arguments certainly have it: torch's C++ ``TensorGuards`` (dtype, device, shape, strides,
    ``requires_grad`` and dispatch keys of every tensor in one call, as tc_capture's guards use
    it). Building a signature makes a tuple per tensor, ~0.3 ms for an optimizer graph's ~650;
    the check is stricter than the signature (dispatch keys), so where it fails the signature is
    built as before, and a call it passes has exactly the remembered signature."""

    def __init__(self) -> None:
        # (signature, its check, its argument count), replaced whole: a thread never pairs one
        # signature with another's check
        self._known: tuple[Signature, Any, int] | None = None

    @property
    def sig(self) -> Signature | None:
        return self._known[0] if self._known is not None else None

    def get(self, args: Sequence[Any]) -> Signature | None:
        known = self._known
        if known is None or len(args) != known[2] or torch.is_grad_enabled() != known[0][0]:
            return None
        try:
            return known[0] if known[1](*args) else None
        except TypeError:  # an argument that is no tensor
            return None

    def note(self, sig: Signature, args: Sequence[Any]) -> None:
        """Remember ``sig`` of ``args`` (unless it is the one remembered: arguments the check
        refuses, such as one tensor passed twice, would otherwise build it again every call)."""
        if sig == self.sig or not all_tensors(args):
            return
        guards = TensorGuards(*args, dynamic_dims_sizes=[list(a.shape) for a in args],
                              dynamic_dims_strides=[list(a.stride()) for a in args])
        self._known = (sig, guards.check, len(args))


def describe(sig: Signature) -> str:
    """Short text of a signature for log lines: the shapes and dtypes of its tensors."""
    def one(part: Any) -> str:
        if len(part) == 5:
            shape, _, dtype, device, _ = part
            return f"{str(dtype).removeprefix('torch.')}{list(shape)}@{device}"
        return repr(part[1])
    return "(" + ", ".join(one(p) for p in sig[1:]) + ")"


def input_problem(args: Sequence[Any], static: frozenset[int],
                  accepts: Callable[[torch.Tensor], bool]) -> str | None:
    """Why these inputs cannot go into a graph (None when they can)."""
    devices = set()
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            continue
        if a.layout != torch.strided:
            return f"input {i} has layout {a.layout}; graphs need strided tensors"
        if not accepts(a):
            return f"input {i} is a {a.device.type.upper()} tensor; graphs need CUDA tensors"
        if i not in static and any(st == 0 and n > 1 for st, n in zip(a.stride(), a.shape)):
            # A buffer with these strides could not hold a copy of it (elements overlap).
            return f"input {i} is expanded (stride 0); copy it with .contiguous() or mark it static"
        devices.add(a.device)
    if len(devices) > 1:
        return f"inputs on several devices {sorted(map(str, devices))}"
    return None


def static_pointers(args: Sequence[Any], static: Sequence[int]) -> tuple[int, ...]:
    """Addresses of the static inputs: a graph reads them in place, so they must not move."""
    chosen = [args[i] for i in static]
    if all_tensors(chosen):
        return tuple(map(_data_ptr, chosen))
    return tuple(a.data_ptr() if isinstance(a, torch.Tensor) else 0 for a in chosen)


_data_ptr = torch.Tensor.data_ptr


@attrs.frozen
class Replay:
    graph: Any


@attrs.frozen
class Warmup:
    pass


@attrs.frozen
class Record:
    why: str


@attrs.frozen
class Eager:
    reason: str
    first: bool  # first time for this signature: the runtime logs it once
    dropped: Any = None  # a graph this decision retired, for the runtime to release


Decision = Warmup | Replay | Record | Eager


@attrs.define
class ShapeState:
    """What the runtime knows about one signature."""

    graph: Any = None
    warmed: bool = False  # a checked plain call succeeded: the function may be recorded
    pointers: tuple[int, ...] = ()
    fallback: str | None = None
    records: int = 0
    replays: int = 0
    eager_calls: int = 0
    blocked: int = 0  # replays run plainly because an output they would overwrite was still held
    sync_warmups: int = 0  # warm-ups that synchronised with the CPU (lazy set-up syncs once)
    moves: int = 0  # consecutive calls where an input read in place came at another address
    copy_always: frozenset[int] = frozenset()  # inputs once read in place that moved: copied now


@attrs.define
class Planner:
    """Per-signature bookkeeping: graph limits, moved static inputs, remembered fallbacks."""

    max_graphs: int = 8
    max_rerecords: int = 2
    max_sync_warmups: int = 2
    states: dict[Signature, ShapeState] = attrs.field(factory=dict)

    @property
    def graph_count(self) -> int:
        return sum(s.graph is not None for s in self.states.values())

    def fallbacks(self) -> dict[Signature, str]:
        return {sig: s.fallback for sig, s in self.states.items() if s.fallback}

    def decide(self, sig: Signature, pointers: tuple[int, ...]) -> Decision:
        state = self.states.get(sig)
        if state is None:
            return self._new_shape(sig)
        if state.fallback is not None:
            state.eager_calls += 1
            return Eager(state.fallback, first=False)
        if state.graph is None and not state.warmed:
            return Warmup()  # the last warm-up raised: check again
        if state.graph is None:
            if self.graph_count >= self.max_graphs:
                return self._limit(sig)
            return Record("second call with these shapes")
        if state.pointers != pointers:
            return self._moved(sig, state, pointers)
        state.replays += 1
        return Replay(state.graph)

    def warmed(self, sig: Signature) -> None:
        self.states[sig].warmed = True

    def synced(self, sig: Signature) -> bool:
        """Note a warm-up that synchronised with the CPU; True once that is no longer taken for
        lazy set-up (a kernel's first-launch self-check, a library handle) but for the function."""
        state = self.states[sig]
        state.sync_warmups += 1
        return state.sync_warmups >= self.max_sync_warmups

    def recorded(self, sig: Signature, graph: Any, pointers: tuple[int, ...]) -> Any:
        """Note a new graph for ``sig``; returns the graph it replaces (None if none)."""
        state = self.states.setdefault(sig, ShapeState())
        old, state.graph, state.pointers = state.graph, graph, pointers
        state.records += 1
        return old

    def give_up(self, sig: Signature, reason: str) -> Any:
        """Plain calls from now on for ``sig``; returns the graph it drops (None if none)."""
        state = self.states.setdefault(sig, ShapeState())
        old, state.graph, state.fallback = state.graph, None, reason
        state.eager_calls += 1
        return old

    def _new_shape(self, sig: Signature) -> Decision:
        if self.graph_count >= self.max_graphs:
            return self._limit(sig)
        self.states[sig] = ShapeState()
        return Warmup()

    def _limit(self, sig: Signature) -> Eager:
        reason = (f"shape limit: {self.max_graphs} graphs recorded already (max_graphs); "
                  "these shapes run without a graph")
        self.give_up(sig, reason)
        return Eager(reason, first=True)

    def _moved(self, sig: Signature, state: ShapeState, pointers: tuple[int, ...]) -> Decision:
        moved = [i for i, (a, b) in enumerate(zip(state.pointers, pointers)) if a != b]
        if state.records > self.max_rerecords:
            reason = (f"static inputs (positions {moved} of the static ones) moved after "
                      f"{state.records} recordings; a graph reads them in place")
            return Eager(reason, first=True, dropped=self.give_up(sig, reason))
        return Record(f"static inputs {moved} moved (new data_ptr); recording again")
