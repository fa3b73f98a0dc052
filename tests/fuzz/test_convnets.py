"""The conv-net fuzzer's fast slice (``convnets.py``): random small conv nets against eager, one
process, both layouts; the long run is ``nox -s convfuzz``."""

from __future__ import annotations

import os

import pytest
from convnets import run

SEEDS = int(os.environ.get("TC_CONVFUZZ_N", "8"))


@pytest.mark.parametrize("layout", ["always", "never"])
def test_random_conv_nets_match_eager(layout):
    outcomes = {seed: run(seed, layout) for seed in range(SEEDS)}
    failed = {s: o for s, o in outcomes.items() if o.startswith("FAIL")}
    assert not failed, failed
    assert sum(o == "ok" for o in outcomes.values()) >= SEEDS // 2  # most nets run (not eager errors)
