"""CPU stand-ins for testing code built on the CUDA-graph runtime without a GPU.

:class:`FakeRecorder` has :class:`~tc_runtime.cudagraphs.CudaRecorder`'s contract and a real
graph's memory behaviour: its "graph" owns input buffers and output tensors; a replay copies
inputs in, recomputes, and writes the results into the *same* output tensors.
"""

from __future__ import annotations

import torch

from .cudagraphs import AliasOutputs, CloneOutputs, CudaGraphed, PoolLedger, map_tensors
from .cudagraphs.liveness import LiveLedger, LiveOutputs
from .cudagraphs.outputs import tensors_in


class FakeGraph:
    def __init__(self, fn, args, static, label):
        self.fn, self.label, self.order = fn, label, -1
        self.copied = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in static]
        self.inputs = [a.clone() if i in self.copied else a for i, a in enumerate(args)]
        # Capture executes nothing: get the outputs' memory from a run on throw-away copies.
        scratch = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        self.outputs = map_tensors(lambda t: _on_inputs(t, scratch, self.inputs), fn(*scratch))
        self.replays = 0
        self.in_place, self.owners = {}, []

    def replay(self, args):
        for i in self.copied:
            self.inputs[i].copy_(args[i])
        # a real graph reads the recorded addresses of the other inputs, which the runtime has
        # checked are the caller's
        inputs = [self.inputs[i] if i in self.copied else a for i, a in enumerate(args)]
        for mine, new in zip(tensors_in(self.outputs), tensors_in(self.fn(*inputs))):
            mine.copy_(new)
        self.replays += 1
        return self.outputs


def _on_inputs(t, scratch, inputs):
    """A graph output: the same view of the graph's input where the function returned a view of
    an input (a real capture returns views of the buffers it was given), else new memory."""
    for s, mine in zip(scratch, inputs):
        if isinstance(s, torch.Tensor) and t.untyped_storage().data_ptr() == s.untyped_storage().data_ptr():
            return mine if t is s else mine.as_strided(t.shape, t.stride(), t.storage_offset())
    return t.clone()


class FakeRecorder:
    def __init__(self, fail: Exception | None = None):
        self.fail = fail
        self.graphs: list[FakeGraph] = []

    def accepts(self, t):
        return t.device.type == "cpu"

    def sync_watch(self):
        return _NoSyncs()

    def warm_call(self, call, args):
        return call()

    def record(self, fn, args, static, label):
        if self.fail is not None:
            raise self.fail
        self.graphs.append(FakeGraph(fn, args, static, label))
        return self.graphs[-1]


class PoisonLog:
    """Records poisoned tensors and empties them, so a later use fails loudly (the real poison,
    which makes any access raise, needs a CUDA build)."""

    def __init__(self):
        self.poisoned: list[tuple[torch.Tensor, str]] = []

    def __call__(self, t, message):
        self.poisoned.append((t, message))
        with torch.no_grad():
            t.set_()

    def has(self, t) -> bool:
        return any(p is t for p, _ in self.poisoned)


def graphed(fn, static=(), *, recorder=None, outputs=None, max_graphs=8, max_rerecords=2, by_value=True):
    return CudaGraphed(fn, static, recorder=recorder or FakeRecorder(), outputs=outputs or CloneOutputs(),
                       max_graphs=max_graphs, max_rerecords=max_rerecords, check_mutation_by_value=by_value)


def alias_outputs() -> tuple[AliasOutputs, PoisonLog]:
    log = PoisonLog()
    return AliasOutputs(PoolLedger(log)), log


class _NoSyncs:
    """The CPU stand-in never sees a device synchronisation."""

    synced = ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


class FakeCudagraphs:
    """A stand-in for :func:`tc_runtime.cudagraphify` on the CPU: same signature, a
    :class:`FakeRecorder` per callable and one liveness ledger for all of them (the shared pool of
    ``output_mode="auto"``), so a caller's training path (forward, backward and optimizer graphs)
    runs as it would on a GPU. ``made`` lists the :class:`CudaGraphed` objects, in creation order.

    >>> monkeypatch.setattr(tc_runtime, "cudagraphify", FakeCudagraphs())
    """

    def __init__(self, max_graphs: int = 8, max_rerecords: int = 2):
        self.ledger = LiveLedger()
        self.made: list[CudaGraphed] = []
        self.max_graphs, self.max_rerecords = max_graphs, max_rerecords

    def __call__(self, fn, example_inputs, static_input_indices=(), *, max_graphs=None, pool=None,
                 output_mode=None) -> CudaGraphed:
        if output_mode not in (None, "auto"):
            raise ValueError(f"FakeCudagraphs models output_mode='auto' only, not {output_mode!r}")
        self.made.append(CudaGraphed(fn, static_input_indices, recorder=FakeRecorder(),
                                     outputs=LiveOutputs(self.ledger),
                                     max_graphs=self.max_graphs if max_graphs is None else max_graphs,
                                     max_rerecords=self.max_rerecords))
        return self.made[-1]
