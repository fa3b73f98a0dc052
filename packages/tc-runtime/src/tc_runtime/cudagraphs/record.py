"""The CUDA side of the runtime: static buffers, warm-up, capture into a pool, replay.

Everything that needs a GPU lives here, behind two methods (:meth:`CudaRecorder.accepts` and
:meth:`CudaRecorder.record`), so that the runtime's decisions run on the CPU against a fake.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .outputs import tensors_in

_shared_pool_lock = threading.Lock()
_shared_pool: Any = None


def shared_pool() -> Any:
    """The memory pool every graph of this process records into unless told otherwise, so that
    e.g. the forward and backward graphs of a training step reuse each other's temporaries."""
    global _shared_pool
    with _shared_pool_lock:
        if _shared_pool is None:
            _shared_pool = torch.cuda.graph_pool_handle()
        return _shared_pool


def is_shared_pool(pool: Any) -> bool:
    """Whether ``pool`` is the one :func:`shared_pool` returns (without making it)."""
    return pool is not None and pool == _shared_pool


class RecordedGraph:
    """One captured graph with the buffers it reads and the outputs it writes."""

    def __init__(self, graph: torch.cuda.CUDAGraph, inputs: list[Any], outputs: Any,
                 copied: Sequence[int], label: str):
        self.graph = graph
        self.inputs = inputs  # static buffers at copied positions, the caller's tensors elsewhere
        self.outputs = outputs
        self.copied = tuple(copied)
        self.label = label
        self.order = -1  # capture order in its pool, set by the output scheme
        self.in_place: dict[int, int] = {}  # positions read in place (not static) -> data_ptr recorded
        self.owners: list[Any] = []  # graphs whose output memory this one reads in place

    def replay(self, args: Sequence[Any]) -> Any:
        with torch.no_grad():
            for i in self.copied:
                if args[i].data_ptr() != self.inputs[i].data_ptr():  # skip a self-copy
                    self.inputs[i].copy_(args[i])
        self.graph.replay()
        return self.outputs


class CudaRecorder:
    """Records ``fn`` as a CUDA graph into ``pool``, on a side stream of its own."""

    def __init__(self, pool: Any = None):
        self.pool = pool
        self._streams: dict[torch.device, torch.cuda.Stream] = {}

    def accepts(self, t: torch.Tensor) -> bool:
        return t.is_cuda

    def warm_call(self, call: Callable[[], Any], args: Sequence[Any]) -> Any:
        """Run a plain call on the capture stream, so that per-stream lazy state (cuBLAS
        workspaces) exists before capture, where creating it could fail."""
        device = _device_of(args)
        with torch.cuda.device(device):
            stream, caller = self._stream(device), torch.cuda.current_stream()
            stream.wait_stream(caller)
            with torch.cuda.stream(stream):
                result = call()
            caller.wait_stream(stream)
            for t in tensors_in(result):
                if t.is_cuda:
                    # Allocated on the side stream, used on the caller's: keep the allocator from
                    # handing the memory to the side stream again while the caller may use it.
                    t.record_stream(caller)
        return result

    def sync_watch(self) -> SyncWatch:
        return SyncWatch()

    def record(self, fn: Callable[..., Any], args: Sequence[Any], static: frozenset[int],
               label: str) -> RecordedGraph:
        """Capture ``fn(*args)`` (nothing executes); raises whatever the capture raises."""
        device = _device_of(args)
        with torch.cuda.device(device), torch.no_grad():
            copied = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in static]
            inputs = [_static_copy(a) if i in copied else a for i, a in enumerate(args)]
            graph = torch.cuda.CUDAGraph()
            pool = self.pool if self.pool is not None else shared_pool()
            caller_stream = torch.cuda.current_stream()
            try:
                # thread_local: a CPU sync in *this* thread invalidates the capture (and we fall
                # back); other threads (data loaders) may keep using CUDA meanwhile.
                with torch.cuda.graph(graph, pool=pool, stream=self._stream(device),
                                      capture_error_mode="thread_local"):
                    outputs = fn(*inputs)
            finally:
                # torch.cuda.graph skips restoring the stream when capture_end raises.
                if torch.cuda.current_stream() != caller_stream:
                    torch.cuda.set_stream(caller_stream)
        return RecordedGraph(graph, inputs, outputs, copied, label)

    def _stream(self, device: torch.device) -> torch.cuda.Stream:
        if device not in self._streams:
            self._streams[device] = torch.cuda.Stream(device)
        return self._streams[device]


class SyncWatch:
    """Notes whether the code inside synchronises the device with the CPU (``.item()``...)."""

    def __enter__(self) -> SyncWatch:
        self.synced = ""
        self._mode = torch.cuda.get_sync_debug_mode()
        self._warnings = warnings.catch_warnings(record=True)
        self._caught = self._warnings.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: Any) -> None:
        torch.cuda.set_sync_debug_mode(self._mode)
        self._warnings.__exit__(*exc)
        # torch warns "called a synchronizing CUDA operation" at each sync; enabling the mode
        # itself warns that it is a prototype, which is not a sync and not the user's business.
        syncs = [str(w.message) for w in self._caught if "called a synchronizing" in str(w.message)]
        self.synced = syncs[0].splitlines()[0] if syncs else ""
        for w in self._caught:  # hand the user's other warnings on
            if "synchroniz" not in str(w.message).lower():
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _device_of(args: Sequence[Any]) -> torch.device:
    return next(a.device for a in args if isinstance(a, torch.Tensor))


def _static_copy(t: torch.Tensor) -> torch.Tensor:
    """A buffer with the same shape, strides and dtype, outside the graph pool, holding ``t``."""
    buf = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    return buf.copy_(t)
