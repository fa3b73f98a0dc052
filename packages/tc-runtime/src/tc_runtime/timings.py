"""Where a (warm) first call spends its time: named phases, summed, printed as a table.

Any package can time a phase through duck typing (an object with ``phase(name)`` returning a
context manager); the umbrella owns the :class:`Timings` of a call and prints ``report()``.

>>> t = Timings()
>>> with t.phase("capture"):
...     capture()
>>> with t.phase("cache.get"):
...     cache.get("triton", key)
>>> print(t.report())
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import attrs


@attrs.define
class Phase:
    seconds: float = 0.0
    calls: int = 0


@attrs.define
class Timings:
    """Wall-clock seconds and counts per phase name; nested phases each count their full time."""

    phases: dict[str, Phase] = attrs.field(factory=dict)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        entry = self.phases.setdefault(name, Phase())
        entry.seconds += seconds
        entry.calls += 1

    def total(self) -> float:
        """Sum over top-level phases (names without a dot), which do not overlap by convention."""
        return sum(p.seconds for name, p in self.phases.items() if "." not in name)

    def report(self) -> str:
        """A table, slowest phase first."""
        rows = sorted(self.phases.items(), key=lambda item: -item[1].seconds)
        width = max([len(name) for name, _ in rows] + [5])
        lines = [f"{'phase':<{width}}  {'ms':>9}  {'calls':>5}"]
        lines += [f"{name:<{width}}  {p.seconds * 1e3:9.2f}  {p.calls:5d}" for name, p in rows]
        lines.append(f"{'total':<{width}}  {self.total() * 1e3:9.2f}")
        return "\n".join(lines)

    def reset(self) -> None:
        self.phases.clear()
