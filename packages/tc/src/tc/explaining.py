"""``tc.explain``: what capture made of a function, as a report a person reads gladly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

import tc_capture
import tc_ir


@attrs.frozen
class Break:
    reason: str
    filename: str
    lineno: int

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}: {self.reason}"


@attrs.frozen
class ExplainReport:
    """Graphs, graph breaks (reason and file:line), ops per graph and guards of one call."""

    graphs: list[tc_ir.Graph]
    break_reasons: list[Break]
    ops_per_graph: list[list[str]]
    guards: list[str]
    symbols: dict = attrs.field(factory=dict)  # size symbol -> the input dim it stands for (mark_dynamic)

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def graph_break_count(self) -> int:
        return len(self.break_reasons)

    def __str__(self) -> str:
        lines = [f"{self.graph_count} graph(s), {self.graph_break_count} graph break(s)"]
        for i, ops in enumerate(self.ops_per_graph):
            shown = ", ".join(ops[:12]) + (f", ... ({len(ops) - 12} more)" if len(ops) > 12 else "")
            lines.append(f"  graph {i}: {len(ops)} op(s): {shown}")
        if self.break_reasons:
            lines.append("graph breaks:")
            lines += [f"  {i + 1}. {b}" for i, b in enumerate(self.break_reasons)]
        if self.symbols:
            lines.append("symbolic sizes: " + ", ".join(f"{s} = {where}" for s, where in self.symbols.items()))
        lines.append(f"guards ({len(self.guards)}):")
        lines += [f"  {g}" for g in self.guards[:12]]
        if len(self.guards) > 12:
            lines.append(f"  ... and {len(self.guards) - 12} more (report.guards lists them all)")
        return "\n".join(lines)


def explain(fn: Callable, *args: Any, **kwargs: Any) -> ExplainReport:
    """Capture ``fn(*args, **kwargs)`` (running it once) and report graphs, breaks and guards."""
    result = tc_capture.capture(fn, *args, **kwargs)
    breaks = [Break(str(b.reason), str(b.filename), int(b.lineno)) for b in result.breaks]
    ops = [[tc_ir.target_name(n.target).lstrip(".") for n in g.calls] for g in result.graphs]
    return ExplainReport(list(result.graphs), breaks, ops, [str(g) for g in result.guards], dict(result.symbols))
