"""Zoo set-up: torchvision made importable before timm, case selection, and the summary table.

``TC_ZOO=full`` (set by ``nox -s zoo``) runs every case; otherwise only the fast slice runs (the
cases marked ``fast``, HF models only, since ``nox -s tests`` does not install timm).
``TC_ZOO_RESULTS=path`` also appends the table, as Markdown, to that file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import tv_cpu  # noqa: E402

tv_cpu.prepare()  # before anything imports torchvision (timm does)

_RESULTS: list = []
_XFAILED: dict = {}


@pytest.fixture
def zoo_results() -> list:
    """Where each zoo test leaves its ZooResult for the table."""
    return _RESULTS


def full_run() -> bool:
    return os.environ.get("TC_ZOO") == "full"


def pytest_collection_modifyitems(config, items):
    if full_run():
        return
    keep, drop = [], []
    for item in items:
        in_zoo = Path(str(item.fspath)).parent == Path(__file__).parent
        (drop if in_zoo and item.get_closest_marker("zoo") and not item.get_closest_marker("zoo_fast") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_configure(config):
    config.addinivalue_line("markers", "zoo: a model-zoo case (tests/zoo)")
    config.addinivalue_line("markers", "zoo_fast: a zoo case in the fast slice that `nox -s tests` runs")


def pytest_terminal_summary(terminalreporter):
    if not _RESULTS:
        return
    from table import markdown_table
    text = markdown_table(_RESULTS)
    terminalreporter.write_sep("=", "tc model zoo")
    terminalreporter.write_line(text)
    out = os.environ.get("TC_ZOO_RESULTS")
    if out:  # rows only when the file has a table already: one table over many runs
        rows_only = os.path.exists(out) and os.path.getsize(out) > 0
        with open(out, "a") as f:
            f.write(markdown_table(_RESULTS, header=not rows_only).split("\n\n")[0] + "\n")
