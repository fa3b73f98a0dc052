"""What a replay hands back: the output-safety schemes.

A graph writes its outputs into the same memory on every replay, and graphs sharing a pool reuse
each other's freed temporaries. Two schemes keep a user from silently reading overwritten data:

``"clone"`` (default)
    every output is copied out after the replay. Always safe; one device copy per output.
``"alias"``
    the outputs are handed out as aliases of the graph's own memory (no copy). Replaying graph G
    can overwrite the outputs of G and of every graph recorded into the pool after G (those may
    live in G's freed temporaries), so when G replays, the live aliases handed out by those
    graphs are *poisoned* (at the replay, once the inputs are copied in, so ``h = g(h)`` works):
    reading one raises ``RuntimeError`` saying it was overwritten and how
    to keep it (``.clone()`` it before calling again). Views the user made of an alias are not
    tracked (see README, "limits").
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from itertools import repeat
from typing import Any

import torch

Poison = Callable[[torch.Tensor, str], None]


def map_tensors(fn: Callable[[torch.Tensor], Any], value: Any) -> Any:
    """Apply ``fn`` to every tensor in nested tuples/lists/dicts, keeping the structure."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if value.__class__ in (tuple, list) and all_tensors(value):
        return value.__class__(map(fn, value))  # a flat sequence of tensors (most graphs' outputs)
    if isinstance(value, (list, tuple)):
        items = [map_tensors(fn, v) for v in value]
        if hasattr(value, "_fields"):  # namedtuple
            return type(value)(*items)
        return type(value)(items)
    if isinstance(value, dict):
        return type(value)((k, map_tensors(fn, v)) for k, v in value.items())
    return value


def all_tensors(values: Any) -> bool:
    """Whether every item of ``values`` is a tensor (one C-level pass: the runtime asks it of a
    graph's arguments and outputs at every replay)."""
    return all(map(isinstance, values, repeat(torch.Tensor)))


def tensors_in(value: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    map_tensors(found.append, value)
    return found


def storage_poison() -> Poison | None:
    """torch's way to make a tensor's data raise on access (absent from CPU-only builds)."""
    return getattr(torch._C, "_set_storage_access_error_msg", None)


class CloneOutputs:
    """Copy every output out of the graph's memory after each replay."""

    mode = "clone"

    def on_record(self, graph: Any) -> None:
        pass

    def invalidate(self, graph: Any) -> None:
        pass

    def hand_out(self, graph: Any, outputs: Any) -> Any:
        return map_tensors(torch.Tensor.clone, outputs)

    def release(self, graph: Any) -> None:
        pass


class PoolLedger:
    """The graphs recorded into one memory pool, in capture order, and the aliases they handed out."""

    def __init__(self, poison: Poison):
        self.poison = poison
        self._order = itertools.count()
        self._handed: dict[int, list[tuple[weakref.ref[torch.Tensor], str]]] = {}

    def register(self, graph: Any) -> None:
        graph.order = next(self._order)
        self._handed[graph.order] = []

    def remember(self, graph: Any, aliases: list[torch.Tensor]) -> None:
        label = getattr(graph, "label", f"graph #{graph.order}")
        self._handed[graph.order] += [(weakref.ref(t), _stale_message(label, i)) for i, t in enumerate(aliases)]

    def invalidate_from(self, order: int) -> int:
        """Poison the live aliases of every graph recorded at or after ``order``; returns how many."""
        count = 0
        for key in [k for k in self._handed if k >= order]:
            count += self._poison_all(self._handed[key])
            self._handed[key] = []
        return count

    def forget(self, graph: Any) -> None:
        self._poison_all(self._handed.pop(graph.order, []))

    def _poison_all(self, handed: list[tuple[weakref.ref[torch.Tensor], str]]) -> int:
        live = [(t, msg) for ref, msg in handed if (t := ref()) is not None]
        for t, msg in live:
            self.poison(t, msg)
        return len(live)


def _stale_message(label: str, index: int) -> str:
    return (f"tc cudagraphs: output {index} of {label} was overwritten by a later replay of a CUDA graph "
            "sharing its memory. Keep an output across calls with .clone(), or use output_mode='clone'.")


class AliasOutputs:
    """Hand out aliases of the graph's memory; poison them before anything can overwrite them."""

    mode = "alias"

    def __init__(self, ledger: PoolLedger):
        self.ledger = ledger

    def on_record(self, graph: Any) -> None:
        self.ledger.register(graph)

    def invalidate(self, graph: Any) -> None:
        """Called at each replay of ``graph``, before its outputs are handed out."""
        self.ledger.invalidate_from(graph.order)

    def hand_out(self, graph: Any, outputs: Any) -> Any:
        # detach() makes a new TensorImpl on the same memory: poisoning it leaves the graph's own
        # output tensor intact for the next replay.
        aliased = map_tensors(torch.Tensor.detach, outputs)
        self.ledger.remember(graph, tensors_in(aliased))
        return aliased

    def release(self, graph: Any) -> None:
        self.ledger.forget(graph)
