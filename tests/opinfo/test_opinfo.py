"""The OpInfo sweep's slices as tests: a fixed ~50-op slice (C++ kernels), a Triton slice under
the interpreter, and (on the GPU host) every op. An op passes when no sample gives a wrong answer
or a crash; a clean fallback (right answer, tc warned) is allowed and listed by the full sweep."""

from __future__ import annotations

import pytest

# torch's OpInfo database imports expecttest (nox installs it; the GPU host lacks it)
pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest")

import engine  # noqa: E402
import torch  # noqa: E402
from slices import FAST, TRITON  # noqa: E402

TABLE = engine.op_table()


def _failures(results: list) -> list[str]:
    return [f"{r.path} {r.phase} {r.dtype} sample {r.index}: {r.outcome}: {r.detail}"
            for r in results if r.outcome in ("mismatch", "crash")]


@pytest.mark.parametrize("name", FAST)
def test_fast_slice(name):
    results = engine.sweep_op(TABLE[name], samples=1)
    assert any(r.outcome != "skip" for r in results), "no sample ran"
    assert not _failures(results), "\n".join(_failures(results))


@pytest.mark.parametrize("name", TRITON)
def test_triton_slice_interpreted(name):
    """Triton kernels (under TRITON_INTERPRET=1 on a CPU machine) through the hand-built path."""
    results = engine.sweep_op(TABLE[name], samples=1, paths=("inductor",), options={"backend": "triton"},
                              second=False)
    assert not _failures(results), "\n".join(_failures(results))


@pytest.mark.cuda
@pytest.mark.slow
def test_every_op_on_the_gpu(tmp_path):
    """The full sweep on CUDA (``python tests/opinfo/run.py --device cuda`` prints its table)."""
    import subprocess
    import sys
    from pathlib import Path

    assert torch.cuda.is_available()
    out = tmp_path / "sweep.jsonl"
    run = subprocess.run([sys.executable, str(Path(__file__).parent / "run.py"), "--device", "cuda",
                          "--workers", "1", "--out", str(out)], capture_output=True, text=True)
    print(run.stdout)
    bad = [line for line in out.read_text().splitlines() if '"mismatch"' in line or '"crash"' in line]
    assert not bad, "\n".join(bad[:50])


def test_the_harness_sees_wrong_answers_crashes_and_fallbacks(monkeypatch):
    """The sweep can fail: a path that answers wrong, raises, or warns is counted as such."""
    import warnings

    def wrong(call, options):
        return lambda *ts: call.fn(*ts) + 1

    def raising(call, options):
        raise RuntimeError("boom")

    def warning(call, options):
        warnings.warn("tc: running this graph eagerly")
        return call.fn

    monkeypatch.setitem(engine.PATHS, "wrong", wrong)
    monkeypatch.setitem(engine.PATHS, "raising", raising)
    monkeypatch.setitem(engine.PATHS, "warning", warning)
    results = engine.sweep_op(TABLE["add"], samples=1, paths=("wrong", "raising", "warning"), second=False)
    assert {r.path: r.outcome for r in results if r.phase == "fwd"} == {
        "wrong": "mismatch", "raising": "crash", "warning": "fallback"}


def test_per_output_rules_leave_only_the_named_outputs_unchecked():
    out, seed = torch.randn(3), torch.tensor(7)
    rule = engine.NONDETERMINISTIC_OUTPUTS["torch.ops.aten._efficient_attention_forward"]
    assert engine.compare((out, out, seed, seed), (out, out, torch.tensor(9), torch.tensor(1)), rule) == ""
    assert engine.compare((out + 1, out, seed, seed), (out, out, seed, seed), rule).startswith("output 0")
    assert engine.compare((out, out, torch.zeros(2), seed), (out, out, seed, seed), rule).startswith("output 2")
    assert engine.compare((out, 5), (out, 6), frozenset({1})) == ""
    assert engine.compare((out, 5), (out, 6), False).startswith("output 1")
    assert engine.compare((out + 1,), (out,), True) == ""


def test_which_ops_are_compared_by_shape_only():
    from torch.testing._internal.common_methods_invocations import op_db

    ops = {engine.op_key(op): op for op in op_db}
    assert engine.shape_only(ops["pca_lowrank"]) is True
    assert engine.shape_only(ops["sin"]) is False
    sdpa = ops["nn.functional.scaled_dot_product_attention"]
    samples = list(sdpa.sample_inputs("cpu", torch.float32))
    assert {engine.shape_only(sdpa, s) for s in samples if s.kwargs.get("dropout_p")} == {True}
    assert {engine.shape_only(sdpa, s) for s in samples if not s.kwargs.get("dropout_p")} == {False}
    if "torch.ops.aten._efficient_attention_forward" in ops:
        assert engine.shape_only(ops["torch.ops.aten._efficient_attention_forward"]) == frozenset({2, 3})
