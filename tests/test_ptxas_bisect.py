"""benchmarks/ptxas_bisect.py, the GPU diagnostic that found §30's miscompiled kernel: its search
and its bookkeeping, on the CPU (no kernel is built here, so runs are told right or wrong by the
command alone)."""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import ptxas_bisect  # noqa: E402


class FakeRunner:
    """Right exactly when every culprit is among the kernels built at -O0."""

    def __init__(self, culprits: set[str]):
        self.culprits, self.runs = culprits, 0

    def run(self, o0: set[str], label: str, keep: bool = False):
        self.runs += 1
        return self.culprits <= o0, None

    def run_all(self, jobs):
        self.rounds = getattr(self, "rounds", 0) + 1
        return [self.run(*job) for job in jobs]


KERNELS = [f"k{i:02d}" for i in range(40)]


@pytest.mark.parametrize("culprits", [{"k00"}, {"k39"}, {"k17"}, {"k03", "k31"}, {"k01", "k02", "k38"},
                                      {"k10", "k11"}], ids=lambda c: "+".join(sorted(c)))
def test_bisect_finds_exactly_the_culprits(culprits):
    runner = FakeRunner(culprits)
    assert set(ptxas_bisect.bisect(runner, KERNELS, set())) == culprits
    assert runner.runs <= 2 * len(culprits) * 6 + 2  # about 2 log2(40) runs a culprit


@pytest.mark.parametrize("ways", [3, 4, 8])
@pytest.mark.parametrize("culprits", [{"k00"}, {"k39"}, {"k17"}, {"k03", "k31"}, {"k01", "k02", "k38"},
                                      {"k10", "k11"}], ids=lambda c: "+".join(sorted(c)))
def test_a_search_of_parts_side_by_side_finds_exactly_the_culprits(culprits, ways):
    runner = FakeRunner(culprits)
    assert set(ptxas_bisect.search(runner, KERNELS, set(), ways)) == culprits
    if len(culprits) == 1:  # one culprit: a round of side-by-side runs a level
        assert runner.rounds <= math.ceil(math.log(len(KERNELS), ways))


def test_a_kernels_identity_ignores_its_debug_information():
    """The PTX's ``.file`` lines name the run's own cache folder, so a hash of the whole text
    differs between runs (the first version matched no kernel and reported nothing)."""
    ns: dict = {}
    source = ptxas_bisect.SITECUSTOMIZE
    body = source.split("    def _code")[1].split("    def make_cubin")[0]
    exec(textwrap.dedent("import os\ndef _code" + body), ns)
    one = '.version 8.7\n.file 1 "/tmp/run1/k.py"\n  ld.global.f64 %fd1, [%rd1];\n  .loc 1 7 3\n.section\t.debug_abbrev\n{}'
    two = one.replace("/tmp/run1/", "/tmp/run2/").replace(".loc 1 7 3", ".loc 1 9 1")
    assert ns["_code"](one) == ns["_code"](two) == ".version 8.7\n  ld.global.f64 %fd1, [%rd1];"
    assert ns["_code"](one) != ns["_code"](one.replace("f64", "f32"))
    compile(source, "sitecustomize.py", "exec")


def _args(tmp_path, **kw):
    base = dict(keep=None, timeout=60.0, wrong_exit=3, ptxas_options="--opt-level 0")
    return argparse.Namespace(**{**base, **kw})


def test_runs_tell_right_wrong_and_a_crash(tmp_path):
    def runner(code: int):
        return ptxas_bisect.Runner([sys.executable, "-c", f"import sys; sys.exit({code})"], _args(tmp_path))

    assert runner(0).run(set(), "right") == (True, set())
    assert runner(3).run(set(), "wrong") == (False, set())
    with pytest.raises(SystemExit, match="neither right nor wrong"):
        runner(1).run(set(), "a crash")  # a traceback exits 1: never read as "wrong"
    with pytest.raises(SystemExit, match="were not built"):
        runner(3).run({"k0-abc"}, "a kernel that is not built")
