"""The timing registry, and the benchmark's entry point (which skips without CUDA)."""

from __future__ import annotations

import time

import pytest
import torch

from tc_runtime import Timings, bench


def test_timings_accumulate_and_report():
    t = Timings()
    for _ in range(2):
        with t.phase("capture"):
            time.sleep(0.002)
    with t.phase("cache.get"):
        pass
    with pytest.raises(ValueError), t.phase("codegen"):
        raise ValueError("timed even when it fails")
    assert t.phases["capture"].calls == 2 and t.phases["capture"].seconds >= 0.004
    assert "codegen" in t.phases
    report = t.report()
    assert report.splitlines()[1].startswith("capture") and "total" in report
    assert t.total() == pytest.approx(t.phases["capture"].seconds + t.phases["codegen"].seconds)
    t.reset()
    assert not t.phases


def test_bench_skips_without_cuda(capsys):
    if torch.cuda.is_available():
        pytest.skip("CUDA present: the lead runs python3 -m tc_runtime.bench")
    bench.main([])
    assert "skipped" in capsys.readouterr().out


@pytest.mark.cuda
def test_bench_runs_small():
    rows = bench.run(width=32, depth=2, batch=2, iters=20)
    assert [name for name, _ in rows][0] == "eager" and all(us > 0 for _, us in rows)
