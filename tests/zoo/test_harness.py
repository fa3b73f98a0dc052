"""The zoo harness's float64 rerun: a float32 mismatch stands unless tc agrees with eager when the
same case runs in float64, and a model that cannot run in float64 keeps its mismatch."""

from __future__ import annotations

import harness
import pytest
import torch
from harness import ZooResult
from zoo_models import ZooCase

import tc


@pytest.fixture(autouse=True)
def _float32_mode(monkeypatch):
    """The tests below are of the float32 comparison, whatever TC_ZOO_FLOAT64 the run was given."""
    monkeypatch.setattr(harness, "FLOAT64_ONLY", False)


class _Net(torch.nn.Module):
    def __init__(self, fail_in_float64: bool = False):
        super().__init__()
        self.fc, self.fail_in_float64 = torch.nn.Linear(6, 3), fail_in_float64

    def forward(self, x):
        if self.fail_in_float64 and x.dtype == torch.float64:
            raise TypeError("float32 only")
        return torch.tanh(self.fc(x)).sum(-1)


def _case(**kwargs) -> ZooCase:
    return ZooCase("test/net", "test", lambda: _Net(**kwargs), lambda g: {"x": torch.randn(4, 6, generator=g)},
                   lambda out, inputs: out.sum())


def _failed(task: str) -> ZooResult:
    result = ZooResult("test/net", task)
    result.worst = "call1.grad.fc.weight"  # as _compare leaves a float32 mismatch
    return result


def test_a_float32_mismatch_that_float64_agrees_on_matches():
    for task in ("infer", "train"):
        result = _failed(task)
        harness._rerun_in_float64(result, _case(), task)
        assert result.match and not result.worst, result
        assert result.float64_rerun.startswith("matches (float32 failed at call1.grad.fc.weight")


def test_a_wrong_float64_result_keeps_the_mismatch(monkeypatch):
    real = tc.compile

    def off_by_a_little(model, **kwargs):  # a compiled model 1e-5 off: far past 1e-7, in float64
        compiled = real(model, **kwargs)
        return lambda *a, **kw: compiled(*a, **kw) + 1e-5

    monkeypatch.setattr(tc, "compile", off_by_a_little)
    result = _failed("infer")
    harness._rerun_in_float64(result, _case(), "infer")
    assert not result.match
    assert result.float64_rerun.startswith("mismatch too: call1.out off by 1e-05"), result.float64_rerun
    assert "float64: call1.out" in result.worst


def test_a_model_that_does_not_run_in_float64_keeps_the_mismatch():
    result = _failed("train")
    harness._rerun_in_float64(result, _case(fail_in_float64=True), "train")
    assert not result.match and result.worst == "call1.grad.fc.weight"
    assert result.float64_rerun.startswith("not run: TypeError")


def test_a_dtype_difference_is_not_excused_by_the_float64_rerun(monkeypatch):
    """A compiled model returning float64 for float32 differs in dtype, which neither the
    float64 check nor the rerun excuses (its values are as close to float64 as eager's, and in
    float64 its outputs would agree); until §29 the float64 check did excuse it."""
    real = tc.compile

    def widened(model, **kwargs):
        compiled = real(model, **kwargs)
        return lambda *a, **kw: compiled(*a, **kw).double()

    monkeypatch.setattr(tc, "compile", widened)
    result = harness.run_case(_case(), "infer")
    assert not result.match and result.worst.endswith(".out") and not result.float64_rerun, result


def test_float64_only_mode_matches_a_right_model_and_fails_one_a_little_off(monkeypatch):
    """``TC_ZOO_FLOAT64=1``: the case runs in float64 alone; a compiled model 1e-5 off (a
    float32-sized error, which float32's tolerance would pass) fails it."""
    monkeypatch.setattr(harness, "FLOAT64_ONLY", True)
    for task in ("infer", "train"):
        result = harness.run_case(_case(), task)
        assert result.ok and 0 <= result.max_abs_err < 1e-12, result
    real = tc.compile

    def off_by_a_little(model, **kwargs):
        compiled = real(model, **kwargs)
        return lambda *a, **kw: compiled(*a, **kw) + 1e-5

    monkeypatch.setattr(tc, "compile", off_by_a_little)
    result = harness.run_case(_case(), "infer")
    assert not result.match and result.worst == "call1.out", result
    result = harness.run_case(_case(fail_in_float64=True), "infer")
    assert not result.ok and result.error.startswith("TypeError"), result


def test_a_model_with_a_float32_part_is_compared_to_float32s_rounding(monkeypatch):
    """A case in ``FLOAT32_INSIDE`` (T5's float32 variance) agrees in float64 only to float32's
    rounding: 1e-6 off passes there and fails any other case; 1e-4 off fails both."""
    monkeypatch.setattr(harness, "FLOAT64_ONLY", True)
    real = tc.compile
    off = [0.0]

    def off_by(model, **kwargs):
        compiled = real(model, **kwargs)
        return lambda *a, **kw: compiled(*a, **kw) + off[0]

    monkeypatch.setattr(tc, "compile", off_by)
    for delta, inside, ok in ((1e-6, True, True), (1e-6, False, False), (1e-4, True, False)):
        off[0] = delta
        monkeypatch.setattr(harness, "FLOAT32_INSIDE", {"test/net": "a float32 part"} if inside else {})
        assert harness.run_case(_case(), "infer").match is ok, (delta, inside)


def test_eager_hardsigmoid_backward_multiplies_by_a_float32_sixth():
    """Why mobilenetv3 is in ``FLOAT32_INSIDE``: eager's float64 hardsigmoid backward is exactly
    ``grad * float32(1/6)``, 3e-8 from ``grad / 6``, and tc's is ``grad * (1/6)`` in float64. If
    torch's kernel changes, this fails and the entry should go."""
    import numpy as np
    from zoo_models import FLOAT32_INSIDE

    x = torch.linspace(-2.9, 2.9, 1001, dtype=torch.float64)
    g = torch.randn(1001, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    eager = torch.ops.aten.hardsigmoid_backward(g, x)
    assert torch.equal(eager, g * float(np.float32(1 / 6)))
    assert (eager - g / 6).abs().max() > 1e-9
    compiled = tc.compile(lambda g, x: torch.ops.aten.hardsigmoid_backward(g, x))
    torch.testing.assert_close(compiled(g, x), g / 6, rtol=1e-15, atol=0)
    assert "timm/mobilenetv3_small_050" in FLOAT32_INSIDE
