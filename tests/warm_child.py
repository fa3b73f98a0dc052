"""What the warm-start tests' child processes share (``test_warm_start.py``,
``test_dynamic_warm_cache.py``): counters of the work a warm start must not do, and running a
child script in a fresh process.

A child script starts with ``import warm_child; counts = warm_child.install()`` and prints one JSON
line last; :func:`run_child` runs it with this directory importable and returns that line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

COUNTS = {"traces": 0, "lowerings": 0, "builds": 0}


def _counting(owner, attr: str, name: str) -> None:
    original = getattr(owner, attr)

    def counted(*args, **kwargs):
        COUNTS[name] += 1
        return original(*args, **kwargs)

    setattr(owner, attr, counted)


def install() -> dict:
    """Count, in this process, what a compile does that a warm start must not: tc_autograd traces,
    tc_inductor graph lowerings and C++ compiler runs. Returns the live counts (once per process)."""
    import tc  # noqa: F401  (loads the packages, and their modules by the names patched here)
    import tc_autograd.api
    import tc_inductor.codegen.build

    if not getattr(install, "done", False):
        _counting(tc_autograd.api, "_trace", "traces")
        _counting(sys.modules["tc_inductor.compile"].GraphLowering, "run", "lowerings")
        _counting(tc_inductor.codegen.build, "_build", "builds")  # one C++ compiler run
        install.done = True
    return COUNTS


def run_child(script: str, args: list[str], env: dict, timeout: float) -> dict:
    """Run ``script`` (``python -c``) with ``args`` in a fresh process, ``env`` on top of this one's
    and this directory importable; assert that it succeeds and return its last line's JSON."""
    here = str(Path(__file__).parent)
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", script, *args], env=dict(os.environ, **env, PYTHONPATH=path),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
