"""The partition's max-flow (tc_autograd.mincut) against a brute-force search on small graphs."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from tc_autograd.mincut import FlowGraph, Unbounded


def _random_edges(rng: random.Random, n: int) -> list[tuple[int, int, float]]:
    edges = []
    for _ in range(rng.randrange(n, 4 * n)):
        u, v = rng.sample(range(n), 2)
        edges.append((u, v, math.inf if rng.random() < 0.2 else rng.choice([0, 1, 2, 3, 5, 8, 2**62])))
    return edges


def _brute_force(n: int, edges, source: int, sink: int) -> tuple[float, set[int]]:
    """The minimum cut's capacity and the smallest sink side among the minimum cuts."""
    best, sides = math.inf, []
    others = [v for v in range(n) if v not in (source, sink)]
    for bits in itertools.product((0, 1), repeat=len(others)):
        sink_side = {sink} | {v for v, b in zip(others, bits) if b}
        cut = sum(c for u, v, c in edges if u not in sink_side and v in sink_side)
        if cut < best:
            best, sides = cut, [sink_side]
        elif cut == best:
            sides.append(sink_side)
    return best, set.intersection(*sides)


@pytest.mark.parametrize("seed", range(300))
def test_sink_side_is_the_smallest_of_the_minimum_cuts(seed):
    rng = random.Random(seed)
    n = rng.randrange(2, 9)
    edges = _random_edges(rng, n)
    flow = FlowGraph(n)
    for u, v, c in edges:
        flow.add_edge(u, v, c)
    best, smallest = _brute_force(n, edges, 0, 1)
    if best == math.inf:
        with pytest.raises(Unbounded):
            flow.sink_side(0, 1)
        return
    sink_side = flow.sink_side(0, 1)
    assert sink_side == smallest
    assert sum(c for u, v, c in edges if u not in sink_side and v in sink_side) == best


def test_parallel_and_antiparallel_edges_add_up():
    flow = FlowGraph(4)
    for u, v, c in [(0, 2, 3), (0, 2, 4), (2, 3, 5), (3, 2, 9), (3, 1, 6), (2, 1, 1)]:
        flow.add_edge(u, v, c)
    # 2->3 and 2->1 (6) are the one minimum cut, less than the two parallel edges 0->2 (7); 3->2
    # crosses it backwards and costs nothing
    assert flow.sink_side(0, 1) == {1, 3}
