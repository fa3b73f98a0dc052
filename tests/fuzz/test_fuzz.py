"""The fast slice of the differential fuzzer (the long run is ``nox -s fuzz``, see README.md).

Hypothesis draws the programs (so a failure shrinks to a small program, printed as source);
each is compiled with ``tc.compile`` and compared with eager on two sets of fresh inputs.
"""

from __future__ import annotations

import os

import pytest
import torch
from fuzz_check import check
from fuzz_program import Builder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("TC_FUZZ_EXAMPLES", 20))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def programs(grad: bool) -> st.SearchStrategy:
    @st.composite
    def draw_program(draw):
        return Builder(lambda options: draw(st.sampled_from(list(options))), grad).build()
    return draw_program()


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("grad", [False, True], ids=["forward", "gradient"])
def test_generated_programs_match_eager(grad):
    @SETTINGS
    @given(programs(grad))
    def one(program):
        outcome = check(program, seed=1)
        assert outcome.ok, f"{outcome.kind}: {outcome.detail}\n{program.source()}"

    one()


def _with_compiler(monkeypatch, wrong):
    import fuzz_check
    monkeypatch.setattr(fuzz_check.tc, "compile", lambda fn, options=None: wrong(fn))


def test_the_checker_sees_wrong_values_mutations_and_grads(monkeypatch):
    from fuzz_program import InputSpec, Program

    program = Program([InputSpec((3, 4), torch.float32, "step")], ["v0 = x0.mul_(2)", "v1 = v0.sin()"], ["v1"], True)
    assert check(program).kind == "pass"
    _with_compiler(monkeypatch, lambda fn: lambda x: (fn(x)[0] + 1e-2,))
    assert check(program).kind == "value"
    _with_compiler(monkeypatch, lambda fn: lambda x: (fn(x.clone())[0],))
    assert check(program).kind == "mutation"
    _with_compiler(monkeypatch, lambda fn: lambda x: (fn(x)[0].detach() + 0 * x.sum(),))
    assert check(program).kind == "grad"
    view = Program([InputSpec((3, 4), torch.float32, "step")], ["v0 = x0.t()"], ["v0"], False)
    _with_compiler(monkeypatch, lambda fn: lambda x: (fn(x)[0].contiguous(),))
    assert check(view).kind == "alias"
