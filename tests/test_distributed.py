"""tc.compile with DDP and FSDP: 2-process gloo runs on the CPU, compiled twins against eager ones.

Each case (``distributed_workers.CASES``) trains an eager and a compiled twin of one wrapped
model on both ranks, comparing loss, gradients and parameters after every step; it also records
what tc did. A test here passes when the twins matched, tc compiled at least one graph, and no
``tc`` warning said that a region runs eagerly. The graph counts, ops and graph-break reasons of
each case are printed (``pytest -s`` or ``-rA`` shows them).

All cases of one tier run in one pair of processes (importing torch and tc twice costs more
than the cases); the process group is a ``FileStore`` in a temporary folder (no port to race
for), collectives time out after a minute and both ranks are killed at the tier's deadline, so
a hang fails the tests instead of blocking CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo back end is not available", allow_module_level=True)

WORKER = Path(__file__).with_name("distributed_workers.py")
WORLD = 2
DEADLINE_S = {"fast": 240, "slow": 600}

FAST = {
    "ddp_mlp": [],
    "ddp_cnn": [],
    "ddp_submodule": [],
    "ddp_of_compiled": [],
    "fsdp_mlp": [],
    "fully_shard_mlp": [],
}
SLOW = {
    "ddp_transformer": [],
    "fsdp_cnn": [],
    "fsdp_transformer": [],
    "fully_shard_transformer": [],
}


def _run_ranks(cases: list[str], tmp: Path, deadline: float) -> list[dict]:
    """Run ``cases`` on WORLD ranks; each rank's results, as its worker wrote them."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs, logs = [], []
    for rank in range(WORLD):
        log = open(tmp / f"rank{rank}.log", "w+")
        cmd = [sys.executable, str(WORKER), str(rank), str(WORLD), str(tmp / "store"), str(tmp / f"rank{rank}.json"),
               *cases]
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
        logs.append(log)
    try:
        for p in procs:
            p.wait(timeout=deadline)
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for rank, (p, log) in enumerate(zip(procs, logs)):
        log.seek(0)
        out = tmp / f"rank{rank}.json"
        found = json.loads(out.read_text()) if out.exists() else {}
        found["_exit"] = {"returncode": p.returncode, "log_tail": log.read()[-4000:]}
        log.close()
        results.append(found)
    return results


def _tier(name: str, cases: dict, tmp_path_factory) -> list[dict]:
    return _run_ranks(list(cases), tmp_path_factory.mktemp(f"dist_{name}"), DEADLINE_S[name])


@pytest.fixture(scope="module")
def fast_results(tmp_path_factory):
    return _tier("fast", FAST, tmp_path_factory)


@pytest.fixture(scope="module")
def slow_results(tmp_path_factory):
    return _tier("slow", SLOW, tmp_path_factory)


def _missing_layers(r: dict) -> list[str]:
    """Layers (by op) that some step's forward ran outside compiled graphs."""
    missing = []
    for step, ran in enumerate(r["compiled_ops_per_step"]):
        short = {op: n - ran.get(op, 0) for op, n in r["layer_ops"].items() if ran.get(op, 0) < n}
        if short:
            missing.append(f"step {step}: {short} (compiled graphs ran {ran})")
    return missing


def _describe(rank: int, r: dict) -> str:
    counts = [len(ops) for ops in r["graphs"]]
    lines = [f"rank {rank}: {len(counts)} graph(s) compiled (ops per graph {counts}), "
             f"{len(r['breaks'])} graph break(s), {r['seconds']} s; layers {r['layer_ops']}"]
    lines += [f"  graph: {', '.join(ops)}" for ops in dict.fromkeys(map(tuple, r["graphs"]))]
    lines += [f"  break: {b}" for b in dict.fromkeys(r["breaks"])]
    lines += [f"  warning: {w[:400]}" for w in r["tc_warnings"]]
    return "\n".join(lines)


def check(case: str, results: list[dict]) -> None:
    """The case ran on every rank and matched eager; every layer of the wrapped model ran in
    compiled graphs at every step; no tc warning said a region runs eagerly."""
    for rank, found in enumerate(results):
        r = found.get(case)
        if r is None:
            exit_ = found["_exit"]
            pytest.fail(f"rank {rank} has no result for {case} (exit code {exit_['returncode']}, "
                        f"killed at the deadline if None/-9); its log ends:\n{exit_['log_tail']}")
        print(f"[{case}] " + _describe(rank, r))
        if r["error"]:
            pytest.fail(f"rank {rank}: {case} failed:\n{r['error']}")
        assert r["graphs"], f"rank {rank}: tc compiled no graph for {case}\n{_describe(rank, r)}"
        missing = _missing_layers(r)
        assert not missing, f"rank {rank}: layers ran outside compiled graphs: {missing}\n{_describe(rank, r)}"
        assert not r["eager_warnings"], f"rank {rank}: tc ran regions eagerly\n{_describe(rank, r)}"
    assert results[0][case]["graphs"] == results[1][case]["graphs"], "the ranks compiled different graphs"


def _params(cases: dict) -> list:
    return [pytest.param(name, marks=marks, id=name) for name, marks in cases.items()]


@pytest.mark.parametrize("case", _params(FAST))
def test_wrapped_training_matches_eager(case, fast_results):
    check(case, fast_results)


@pytest.mark.slow
@pytest.mark.parametrize("case", _params(SLOW))
def test_wrapped_training_matches_eager_slow(case, slow_results):
    check(case, slow_results)


def test_cases_are_all_listed():
    from distributed_workers import CASES  # the worker imports tc and torch.distributed only

    assert sorted(CASES) == sorted({**FAST, **SLOW}), "a worker case is not run by any test"
    assert torch.distributed.is_gloo_available()
