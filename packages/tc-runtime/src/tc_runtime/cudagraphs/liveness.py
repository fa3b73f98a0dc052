"""Output safety by liveness (``output_mode="auto"``): alias outputs, replay only over dead ones.

A training step replays a forward graph, then a backward graph that reads the forward's saved
activations. Cloning every output costs a device copy of all activations per step (twice, when the
backward copies them into its own buffers again). Instead, outputs are handed out as aliases of
the graph's memory, and before a graph G replays, the runtime checks that nobody still holds an
output that the replay could overwrite: G's own outputs and those of every graph recorded into
the pool after G (they may sit in G's freed temporaries). "Holds" is counted on the *storage*
(``torch._C._storage_Use_Count``), so views the user made, tensors saved for backward and
gradients autograd accumulated all count, not only the alias objects handed out.

When one is alive, that call runs the function plainly (a correct result; the live output keeps
its values), and the outputs found alive are cloned at later hand-outs: a user output kept across
steps (``out = model(x)``) costs one plain call, then one copy per step. Saved activations die
in the backward and stay aliases, so the backward reads them in place (see ``owner_of``).

Outputs that share memory with an input are not pool memory: a static input's (a parameter
returned for the backward) is handed out as an alias and never blocks a replay; a copied input's
buffer is rewritten by every replay's copy-in, so such an output is always cloned.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch

from .outputs import all_tensors, map_tensors, tensors_in

_use_count = torch._C._storage_Use_Count


def _storage(t: torch.Tensor) -> tuple[int, int]:
    """(C handle, data pointer) of ``t``'s storage."""
    s = t.untyped_storage()
    return s._cdata, s.data_ptr()


class Tracked:
    """One graph's outputs in pool memory: per storage, its output indices and the use count
    the graph's own tensors account for (anything above it is a holder outside the graph)."""

    def __init__(self, graph: Any):
        self.graph = graph
        self.clone: set[int] = set()  # output indices always copied out
        self.as_is: set[int] = set()  # outputs on a static input's memory: handed out as a plain call would
        self.static = {_storage(t)[1] for i, t in enumerate(graph.inputs)
                       if isinstance(t, torch.Tensor) and i not in graph.copied}
        self.storages: dict[int, tuple[int, list[int]]] = {}  # data_ptr -> (cdata, indices)
        inputs = {_storage(t)[1]: i in graph.copied for i, t in enumerate(graph.inputs)
                  if isinstance(t, torch.Tensor)}
        for index, t in enumerate(tensors_in(graph.outputs)):
            cdata, ptr = _storage(t)
            if ptr == 0:
                continue  # no memory: nothing can be overwritten
            if ptr in inputs:
                # a copied input's buffer is rewritten at every copy-in
                (self.clone if inputs[ptr] else self.as_is).add(index)
                continue
            self.storages.setdefault(ptr, (cdata, []))[1].append(index)
        self.baseline = {ptr: _use_count(cdata) for ptr, (cdata, _) in self.storages.items()}

    def alive(self) -> Iterator[int]:
        """Indices of outputs whose memory someone outside the graph holds."""
        for ptr, (cdata, indices) in self.storages.items():
            if _use_count(cdata) > self.baseline[ptr]:
                yield from indices


class LiveLedger:
    """The graphs recorded into one pool, in capture order, with their tracked outputs."""

    def __init__(self) -> None:
        self._order = itertools.count()
        self._tracked: dict[int, Tracked] = {}
        self._by_pointer: dict[int, Any] = {}

    def register(self, graph: Any) -> None:
        graph.order = next(self._order)
        tracked = self._tracked[graph.order] = Tracked(graph)
        for ptr in [*tracked.storages, *tracked.static]:
            self._by_pointer[ptr] = graph

    def tracked(self, graph: Any) -> Tracked:
        return self._tracked[graph.order]

    def busy(self, graph: Any) -> list[tuple[Any, int]]:
        """(graph, output index) pairs still held that replaying ``graph`` could overwrite."""
        return [(t.graph, i) for order, t in self._tracked.items() if order >= graph.order for i in t.alive()]

    def owner_of(self, t: torch.Tensor) -> Any:
        """The graph whose output memory or static input ``t`` views (None if none): a later graph
        may read it in place, since output memory only changes when its owner replays (only once
        nothing holds it any more), and the owner keeps its static inputs alive."""
        return self._by_pointer.get(t.untyped_storage().data_ptr())

    def forget(self, graph: Any) -> None:
        tracked = self._tracked.pop(graph.order, None)
        for ptr in [*tracked.storages, *tracked.static] if tracked else ():
            if self._by_pointer.get(ptr) is graph:
                del self._by_pointer[ptr]


class LiveOutputs:
    """Hand out aliases; the runtime asks :meth:`busy` before each replay (see module doc)."""

    mode = "auto"

    def __init__(self, ledger: LiveLedger):
        self.ledger = ledger

    def on_record(self, graph: Any) -> None:
        self.ledger.register(graph)

    def busy(self, graph: Any) -> list[tuple[Any, int]]:
        """Outputs a replay of ``graph`` would overwrite while held; they are cloned from now on."""
        held = self.ledger.busy(graph)
        for owner, index in held:
            self.ledger.tracked(owner).clone.add(index)
        return held

    def invalidate(self, graph: Any) -> None:
        pass

    def hand_out(self, graph: Any, outputs: Any) -> Any:
        tracked = self.ledger.tracked(graph)
        if not (tracked.clone or tracked.as_is):
            return map_tensors(torch.Tensor.detach, outputs)
        if outputs.__class__ in (tuple, list) and all_tensors(outputs):
            # a flat sequence (a backward's gradients, an optimizer step's values): detach all in
            # one C-level pass, then the few kept as they are or cloned (a Python call per output
            # cost ~1 ms a ResNet-50 training step)
            if not tracked.clone and len(tracked.as_is) == len(outputs):
                return outputs.__class__(outputs)  # all on static inputs' memory (an optimizer step's)
            handed = list(map(torch.Tensor.detach, outputs))
            for i in tracked.as_is:
                handed[i] = outputs[i]
            for i in tracked.clone:
                handed[i] = outputs[i].clone()
            return outputs.__class__(handed)
        counter = itertools.count()
        return map_tensors(lambda t: _hand_out_one(tracked, next(counter), t), outputs)

    def owner_of(self, t: torch.Tensor) -> Any:
        return self.ledger.owner_of(t)

    def release(self, graph: Any) -> None:
        self.ledger.forget(graph)


def _hand_out_one(tracked: Tracked, index: int, t: torch.Tensor) -> torch.Tensor:
    if index in tracked.clone:
        return t.clone()
    # a static input (a parameter saved for the backward) comes back as it went in, requires_grad
    # included, so the next graph sees the same signature after a replay as after a plain call
    return t if index in tracked.as_is else t.detach()
