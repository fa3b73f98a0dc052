"""``cudagraphify``: record a function as CUDA graphs, lazily, one per input signature.

One call, in order: compute the signature of the arguments (or reuse the last one, where torch's
C++ tensor check passes: :class:`~.plan.LastSignature`); ask the :class:`~.plan.Planner`;
then one of: warm up (first call of a signature: a plain call that also checks for input
mutation and autograd), record (second call: capture, then replay), replay (copy inputs into the
graph's buffers, replay, hand out outputs through the output scheme), or a plain call whose
reason was logged once. ``fn`` runs exactly once per call on every path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from tc_ir.logs import get_logger

from ..config import OutputMode, config
from . import mutation
from .liveness import LiveLedger, LiveOutputs
from .outputs import AliasOutputs, CloneOutputs, Poison, PoolLedger, storage_poison, tensors_in
from .plan import (
    Eager,
    LastSignature,
    Planner,
    Record,
    Replay,
    Signature,
    Warmup,
    describe,
    input_problem,
    signature,
    static_pointers,
)
from .record import CudaRecorder, is_shared_pool, shared_pool

log = get_logger("cudagraphs")

_ledgers: dict[Any, PoolLedger] = {}
_live_ledgers: dict[Any, LiveLedger] = {}
_ledgers_lock = threading.Lock()


class Recorder(Protocol):
    def accepts(self, t: torch.Tensor) -> bool: ...
    def warm_call(self, call: Callable[[], Any], args: Sequence[Any]) -> Any: ...
    def sync_watch(self) -> Any: ...
    def record(self, fn: Callable[..., Any], args: Sequence[Any], static: frozenset[int], label: str) -> Any: ...


class CudaGraphed:
    """A callable that replays CUDA graphs of ``fn``; see :func:`cudagraphify`.

    ``planner`` holds the per-signature bookkeeping (``planner.fallbacks()`` lists the signatures
    running without a graph, with the reason).
    """

    def __init__(self, fn: Callable[..., Any], static_input_indices: Sequence[int], *, recorder: Recorder,
                 outputs: CloneOutputs | AliasOutputs | LiveOutputs, max_graphs: int, max_rerecords: int,
                 check_mutation_by_value: bool = True, max_sync_warmups: int = 2):
        self.fn = fn
        self.static = frozenset(static_input_indices)
        self._static_order = sorted(self.static)
        self.recorder = recorder
        self.outputs = outputs
        self.planner = Planner(max_graphs=max_graphs, max_rerecords=max_rerecords,
                               max_sync_warmups=max_sync_warmups)
        self.check_mutation_by_value = check_mutation_by_value
        self.name = getattr(fn, "__qualname__", type(fn).__name__)
        self._warned_unsupported = False
        self._last = LastSignature()  # the last signature, checked in C++ (plan.LastSignature)

    def __call__(self, *args: Any) -> Any:
        sig = self._last.get(args)
        if sig is None:
            sig = signature(args)
            if isinstance(sig, str):
                return self._unsupported(sig, args)
            self._last.note(sig, args)
        decision = self.planner.decide(sig, static_pointers(args, self._static_order))
        if isinstance(decision, Replay):
            return self._guarded_replay(sig, decision.graph, args)
        if isinstance(decision, Warmup):
            return self._warm_up(sig, args)
        if isinstance(decision, Record):
            return self._record(sig, args, decision.why)
        return self._eager(sig, decision, args)

    def clear(self) -> None:
        """Drop every graph (their pool memory becomes free) and forget every signature."""
        for state in self.planner.states.values():
            if state.graph is not None:
                self.outputs.release(state.graph)
        self.planner.states.clear()

    # -- the three paths ------------------------------------------------------------------------

    def _guarded_replay(self, sig: Signature, graph: Any, args: Sequence[Any]) -> Any:
        """Replay, unless an input read in place moved (record again, copying it) or an output the
        replay would overwrite is still held (this call runs plainly)."""
        state = self.planner.states[sig]
        if moved := [i for i, ptr in graph.in_place.items() if args[i].data_ptr() != ptr]:
            # once (the producing graph ran plainly this step): a plain call; twice in a row
            # (its outputs are copied out now): copy these inputs from now on
            state.moves += 1
            if state.moves < 2:
                state.replays -= 1
                return self.fn(*args)
            state.copy_always |= frozenset(moved)
            return self._record(sig, args, f"inputs {moved}, read in place, moved; copying them now")
        state.moves = 0
        busy = getattr(self.outputs, "busy", None)
        if busy is not None and (held := busy(graph)):
            return self._blocked(sig, held, args)
        return self._replay(graph, args)

    def _blocked(self, sig: Signature, held: list, args: Sequence[Any]) -> Any:
        state = self.planner.states[sig]
        state.blocked, state.replays = state.blocked + 1, state.replays - 1
        if state.blocked == 1:
            where = ", ".join(f"output {i} of {getattr(g, 'label', 'a graph')}" for g, i in held[:3])
            log.info("cudagraphs: %s%s runs plainly once: a replay would overwrite %s, still held; "
                     "those outputs are copied out from now on", self.name, describe(sig), where)
        return self.fn(*args)

    def _replay(self, graph: Any, args: Sequence[Any]) -> Any:
        outputs = graph.replay(args)
        # After the inputs were copied in: an input may be an alias this invalidates (h = g(h)).
        self.outputs.invalidate(graph)
        return self.outputs.hand_out(graph, outputs)

    def _warm_up(self, sig: Signature, args: Sequence[Any]) -> Any:
        if problem := input_problem(args, self.static, self.recorder.accepts):
            return self._give_up(sig, problem, lambda: self.fn(*args))
        result, problem, synced = self.recorder.warm_call(lambda: self._checked_call(args), args)
        if synced and not self.planner.synced(sig):
            return result  # lazy set-up syncs once (a kernel's first-launch self-check): warm up again
        if problem:
            return self._give_up(sig, problem, lambda: result)
        self.planner.warmed(sig)
        return result

    def _record(self, sig: Signature, args: Sequence[Any], why: str) -> Any:
        label = f"graph of {self.name}{describe(sig)}"
        in_place = self._in_place(sig, args)
        try:
            graph = self.recorder.record(self.fn, args, self.static | in_place.keys(), label)
        except Exception as e:  # a CPU sync, an unsupported op, ...: capture errors mean no graph
            reason = f"capture failed: {type(e).__name__}: {_first_line(e)}"
            return self._give_up(sig, reason, lambda: self.fn(*args))
        self.outputs.on_record(graph)
        self._read_in_place(graph, in_place, args)
        self._release(self.planner.recorded(sig, graph, static_pointers(args, self._static_order)))
        log.info("cudagraphs: recorded %s (%s)", label, why)
        return self._replay(graph, args)

    def _eager(self, sig: Signature, decision: Eager, args: Sequence[Any]) -> Any:
        if decision.first:
            self._release(decision.dropped)
            log.info("cudagraphs: %s%s runs without a graph: %s", self.name, describe(sig), decision.reason)
        return self.fn(*args)

    # -- helpers --------------------------------------------------------------------------------

    def _in_place(self, sig: Signature, args: Sequence[Any]) -> dict[int, Any]:
        """Non-static inputs that are outputs of graphs in this pool (a backward's saved
        activations), by position, with the graph owning their memory: read in place, not copied."""
        owner_of = getattr(self.outputs, "owner_of", None)
        if owner_of is None:
            return {}
        skip = self.static | self.planner.states[sig].copy_always
        found = {i: owner_of(a) for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in skip}
        return {i: g for i, g in found.items() if g is not None}

    @staticmethod
    def _read_in_place(graph: Any, in_place: dict[int, Any], args: Sequence[Any]) -> None:
        # The graph reads these addresses on every replay: keep their owners (and so the memory)
        # alive, but not the tensors themselves, which would count as holders of the owners'
        # outputs and block the owners' replays.
        graph.in_place = {i: args[i].data_ptr() for i in in_place}
        graph.owners = list(in_place.values())
        for i in in_place:
            graph.inputs[i] = None

    def _checked_call(self, args: Sequence[Any]) -> tuple[Any, str | None, bool]:
        """A plain call (its result is this call's answer) that also tells whether a graph would
        change the meaning: inputs written in place, or outputs that autograd should track."""
        copied = [i for i in range(len(args)) if i not in self.static]
        before = mutation.snapshot(args, copied, self.check_mutation_by_value)
        with self.recorder.sync_watch() as watch:
            result = self.fn(*args)
        if watch.synced:
            # A capture that meets a CPU sync fails and leaves CUDA's RNG in capture state, so
            # such a function is never captured: this plain call tells us in advance.
            return result, f"fn synchronises with the CPU during its call ({watch.synced})", True
        if written := mutation.mutated(args, before):
            return result, (f"fn writes into non-static inputs {written}; a graph would write into "
                            "its copies instead (mark them static if they are parameters or buffers)"), False
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors_in(result)):
            return result, ("outputs require grad; a graph records no autograd history "
                            "(call under torch.no_grad(), or graph forward and backward separately)"), False
        return result, None, False

    def _give_up(self, sig: Signature, reason: str, call: Callable[[], Any]) -> Any:
        self._release(self.planner.give_up(sig, reason))
        log.info("cudagraphs: %s%s runs without a graph: %s", self.name, describe(sig), reason)
        return call()

    def _unsupported(self, reason: str, args: Sequence[Any]) -> Any:
        if not self._warned_unsupported:
            self._warned_unsupported = True
            log.info("cudagraphs: %s runs without a graph: %s", self.name, reason)
        return self.fn(*args)

    def _release(self, graph: Any) -> None:
        if graph is not None:
            self.outputs.release(graph)


def cudagraphify(fn: Callable[..., Any], example_inputs: Sequence[Any], static_input_indices: Sequence[int] = (),
                 *, max_graphs: int | None = None, pool: Any = None, output_mode: OutputMode | None = None,
                 ) -> CudaGraphed:
    """Run ``fn`` through CUDA graphs: one recorded lazily per input signature, then replayed.

    ``fn`` takes tensors and scalars (flat) and returns tensors in any nesting of tuples, lists
    and dicts. Inputs at ``static_input_indices`` (parameters, buffers) are read in place, never
    copied; if one moves (new data_ptr) the graph is recorded again, and after
    ``config.max_rerecords`` moves that signature runs plainly. Other inputs are copied into the
    graph's buffers. All graphs record into ``pool`` (default: one pool for the whole process).

    ``output_mode`` (default ``config.output_mode``, ``"auto"``): see :mod:`.liveness` and :mod:`.outputs`.
    Calls that cannot use a graph run ``fn`` plainly and log why once (``TC_LOGS=cudagraphs``).

    >>> g = cudagraphify(model_fn, [x], static_input_indices=())
    >>> y = g(x)   # first call with these shapes: a plain call (warm-up and checks)
    >>> y = g(x)   # second: record, then replay; later calls replay
    """
    mode = output_mode or config.output_mode
    _check_static_indices(example_inputs, static_input_indices)
    return CudaGraphed(
        fn, static_input_indices,
        recorder=CudaRecorder(pool),
        outputs=_output_scheme(mode, pool),
        max_graphs=config.max_graphs if max_graphs is None else max_graphs,
        max_rerecords=config.max_rerecords,
        check_mutation_by_value=config.check_mutation_by_value,
        max_sync_warmups=config.max_sync_warmups,
    )


def ledger_for(pool: Any, poison: Poison) -> PoolLedger:
    """The ledger of one pool, shared by every graphed callable recording into it."""
    with _ledgers_lock:
        if pool not in _ledgers:
            _ledgers[pool] = PoolLedger(poison)
        return _ledgers[pool]


def live_ledger_for(pool: Any) -> LiveLedger:
    """The liveness ledger of one pool, shared by every graphed callable recording into it."""
    key = "shared" if pool is None or is_shared_pool(pool) else pool
    with _ledgers_lock:
        return _live_ledgers.setdefault(key, LiveLedger())


def _output_scheme(mode: str, pool: Any) -> CloneOutputs | AliasOutputs | LiveOutputs:
    if mode == "clone":
        return CloneOutputs()
    if mode == "auto":
        return LiveOutputs(live_ledger_for(pool))
    if mode != "alias":
        raise ValueError(f"output_mode must be 'auto', 'clone' or 'alias', not {mode!r}")
    poison = storage_poison()
    if poison is None or not torch.cuda.is_available():
        raise RuntimeError("output_mode='alias' needs a CUDA build of torch (torch._C._set_storage_access_error_msg)")
    return AliasOutputs(ledger_for(pool if pool is not None else shared_pool(), poison))


def _check_static_indices(example_inputs: Sequence[Any], static: Sequence[int]) -> None:
    for i in static:
        if not 0 <= i < len(example_inputs):
            raise IndexError(f"static input index {i} out of range for {len(example_inputs)} inputs")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""
