"""The zoo's summary table, as Markdown (readable in a terminal and in the README)."""

from __future__ import annotations

import re

from harness import ZooResult

_HEADER = ("model", "task", "match?", "max abs err", "graphs", "breaks", "fallback warnings", "compile s", "status")


def status(r: ZooResult) -> str:
    """ok / mismatch (worst tensor) / crash (error) / fallback, plus a known finding if listed."""
    if r.error:
        text = f"crash: {r.error}"
    elif not r.match:
        text = f"mismatch at {r.worst}"
    elif r.fallbacks:
        text = f"eager fallback: {r.fallback_messages[0]}"
    else:
        text = "ok"
    if r.float64_rerun:
        text += f" (float64 rerun {r.float64_rerun})"
    text = re.sub(r"\S*/site-packages/", "", text)  # transformers/..., not the venv's path
    return f"xfail ({r.known.split(':')[0]}) {text}" if r.known and not r.ok else text


def row(r: ZooResult) -> tuple[str, ...]:
    return (r.model, r.task, "yes" if r.match else "NO", f"{r.max_abs_err:.2e}", str(r.graphs), str(r.breaks),
            str(r.fallbacks), f"{r.compile_s:.1f}", status(r).replace("|", "/").replace("\n", " ")[:200])


def markdown_table(results: list[ZooResult], header: bool = True) -> str:
    """The table; ``header=False`` gives the rows alone (to append to an earlier table)."""
    lines = ["| " + " | ".join(_HEADER) + " |", "|" + "---|" * len(_HEADER)] if header else []
    lines += ["| " + " | ".join(row(r)) + " |" for r in results]
    if not header:
        return "\n".join(lines)
    ok = sum(r.ok for r in results)
    lines.append(f"\n{ok} of {len(results)} cases match eager with no eager fallback.")
    return "\n".join(lines)
