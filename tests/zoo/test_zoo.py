"""Model zoo: each case compiled with ``tc.compile`` (inductor, C++ kernels on the CPU) must match
eager in inference and in a training step, with no eager fallback. Graph breaks are allowed and
counted. The table at the end of the run lists every case (``conftest.py``)."""

from __future__ import annotations

import pytest
from harness import run_case
from zoo_models import CASES

# Known failures, each with the finding that describes it (file in /work/findings and its title).
# xfail(strict=False): a case that starts passing shows as XPASS in the run, to be removed here.
# hf/segformer matches eager, but transformers installs its output hooks by a recursion over the
# submodules that breaks at every register_forward_hook, and that function reaches the recompile
# limit: the rest of those calls run in Python, with a warning the zoo counts as a fallback.
_SEGFORMER_RECOMPILE_LIMIT = ("zoo_s13/segformer_misaligned.py: values match eager; 'recursively_install_hooks hit "
                              "the recompile limit (8)' is counted as an eager fallback")
KNOWN: dict[tuple[str, str], str] = {
    ("hf/segformer", "infer"): _SEGFORMER_RECOMPILE_LIMIT,
    ("hf/segformer", "train"): _SEGFORMER_RECOMPILE_LIMIT,
}


def _params():
    for name, case in CASES.items():
        for task in ("infer", "train"):
            marks = [pytest.mark.zoo, pytest.mark.timeout(1200)]
            if case.fast:
                marks.append(pytest.mark.zoo_fast)
            if (name, task) in KNOWN:
                marks.append(pytest.mark.xfail(reason=KNOWN[name, task], strict=False))
            yield pytest.param(name, task, marks=marks, id=f"{name}-{task}")


@pytest.mark.parametrize("name,task", list(_params()))
def test_zoo(name, task, zoo_results):
    result = run_case(CASES[name], task)
    result.known = KNOWN.get((name, task), "")
    zoo_results.append(result)
    detail = (f"{name} {task}: match={result.match} worst={result.worst} max_abs_err={result.max_abs_err:.3g} "
              f"error={result.error!r} fallbacks={list(result.fallback_messages)} breaks={list(result.break_reasons)}")
    assert result.ok, detail
