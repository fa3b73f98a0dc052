"""A minimum s-t cut on integer vertices, by Dinic's blocking flows.

:func:`~tc_autograd.partition.min_cut` solves one per training graph; networkx's preflow-push,
through its dict-of-dict views, was most of the partition's time in a cold compile. Here the
residual graph is three flat lists (edge ``e`` and its reverse ``e ^ 1``).

The cut returned has as its sink side every vertex that can still reach the sink in the residual
graph of a maximum flow. That set is the same for every maximum flow (the smallest sink side of all
minimum cuts: a minimum cut's source side never reaches its sink side in a maximum flow's residual
graph), so the cut does not depend on the algorithm: networkx's ``minimum_cut`` returns the same.
"""

from __future__ import annotations

import math


class Unbounded(ValueError):
    """A path of infinite capacity joins the source to the sink: no finite cut exists."""


class FlowGraph:
    """A directed graph with capacities on vertices ``0 .. n - 1`` (``math.inf``: uncuttable)."""

    def __init__(self, n: int):
        self.edges: list[list[int]] = [[] for _ in range(n)]  # per vertex, its edges' ids (both ways)
        self.head: list[int] = []                              # per edge, the vertex it enters
        self.cap: list[int | float] = []                       # per edge, its residual capacity

    def add_edge(self, u: int, v: int, capacity: int | float = math.inf) -> None:
        self.edges[u].append(len(self.head))
        self.head.append(v)
        self.cap.append(capacity)
        self.edges[v].append(len(self.head))
        self.head.append(u)
        self.cap.append(0)

    def sink_side(self, source: int, sink: int) -> set[int]:
        """Push a maximum flow from ``source`` to ``sink``; the vertices that can still reach
        ``sink`` (the sink side of the minimum cut described in the module's docstring)."""
        while (level := self._levels(source, sink)) is not None:
            self._blocking_flow(level, source, sink)
        return self._reaching(sink)

    def _levels(self, source: int, sink: int) -> list[int] | None:
        """Breadth-first distances from ``source`` over edges with capacity left; None when
        ``sink`` is out of reach (the flow is maximum)."""
        edges, head, cap = self.edges, self.head, self.cap
        level = [-1] * len(edges)
        level[source] = 0
        queue = [source]
        for u in queue:  # the list grows as it is read: a FIFO without popping
            below = level[u] + 1
            for e in edges[u]:
                if cap[e] > 0 and level[head[e]] < 0:
                    level[head[e]] = below
                    queue.append(head[e])
        return level if level[sink] >= 0 else None

    def _blocking_flow(self, level: list[int], source: int, sink: int) -> None:
        """Saturate every shortest path: depth-first along ``level``, each vertex's next edge to
        try kept in ``arc`` so that no edge is looked at twice in a dead end."""
        edges, head, cap = self.edges, self.head, self.cap
        arc = [0] * len(edges)
        path: list[int] = []  # edge ids from ``source`` to ``u``
        u = source
        while True:
            if u == sink:
                u = self._augment(path)
                continue
            out, i, below = edges[u], arc[u], level[u] + 1
            while i < len(out) and not (cap[out[i]] > 0 and level[head[out[i]]] == below):
                i += 1
            arc[u] = i
            if i < len(out):
                path.append(out[i])
                u = head[out[i]]
            elif u == source:
                return
            else:  # a dead end: never entered again in this phase
                level[u] = -1
                u = head[path.pop() ^ 1]
                arc[u] += 1

    def _augment(self, path: list[int]) -> int:
        """Push the path's bottleneck along it; cut the path back to before its first saturated
        edge and return the vertex it now ends at."""
        cap, head = self.cap, self.head
        pushed = min(cap[e] for e in path)
        if pushed == math.inf:
            raise Unbounded("tc_autograd: the partition's flow graph has a path of infinite capacity "
                            "from the source to the sink (a value that cannot be saved nor recomputed)")
        first = None
        for i, e in enumerate(path):
            cap[e] -= pushed
            cap[e ^ 1] += pushed
            if first is None and cap[e] == 0:
                first = i
        tail = head[path[first] ^ 1]
        del path[first:]
        return tail

    def _reaching(self, sink: int) -> set[int]:
        """The vertices with a path of capacity left to ``sink``: a backward search over the
        reverse of each edge (edge ``e ^ 1`` runs from ``head[e]`` into the searched vertex)."""
        edges, head, cap = self.edges, self.head, self.cap
        found, todo = {sink}, [sink]
        while todo:
            v = todo.pop()
            for e in edges[v]:
                u = head[e]
                if cap[e ^ 1] > 0 and u not in found:
                    found.add(u)
                    todo.append(u)
        return found
