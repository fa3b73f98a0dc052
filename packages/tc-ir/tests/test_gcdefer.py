"""deferred_full_gc raises the full-collection threshold inside and puts it back after."""

from __future__ import annotations

import gc

import pytest

import tc_ir


def test_threshold_restored_after_nested_use_and_errors():
    before = gc.get_threshold()
    with tc_ir.deferred_full_gc():
        inside = gc.get_threshold()
        assert inside[:2] == before[:2] and inside[2] >= 1_000_000
        with tc_ir.deferred_full_gc():
            assert gc.get_threshold() == inside
        assert gc.get_threshold() == inside  # the outermost restores
    assert gc.get_threshold() == before
    with pytest.raises(KeyError), tc_ir.deferred_full_gc():
        raise KeyError("the body's own exception propagates")
    assert gc.get_threshold() == before


def test_a_threshold_set_inside_is_kept():
    before = gc.get_threshold()
    try:
        with tc_ir.deferred_full_gc():
            gc.set_threshold(500, 5, 5)
        assert gc.get_threshold() == (500, 5, 5)
    finally:
        gc.set_threshold(*before)


class _Cycle:
    pass


def _grow_heap() -> list:
    """Many generation-1 collections' worth of survivors, and garbage cycles among them."""
    keep = []
    for i in range(400_000):
        c = _Cycle()
        c.me = c  # a garbage cycle: young collections free it
        if i % 2 == 0:
            keep.append([i])
    return keep


def _full_collections_while(body) -> int:
    full = []

    def count(phase, info):
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    gc.collect()
    gc.callbacks.append(count)
    try:
        body()
    finally:
        gc.callbacks.remove(count)
    return len(full)


def test_no_full_collection_inside():
    assert _full_collections_while(_grow_heap) > 0  # the control: the same work collects fully outside

    def deferred():
        with tc_ir.deferred_full_gc():
            _grow_heap()

    assert _full_collections_while(deferred) == 0
