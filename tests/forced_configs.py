"""Every pointwise Triton kernel at one block size and warp count, for the sweeps and fuzzers.

tc picks a block per kernel (``tc_inductor.codegen.triton.heuristic_config``); small test
inputs get small blocks, so the code Triton generates at the sizes of real models is not what
the sweeps meet. ``TC_TEST_POINTWISE_CONFIG=XBLOCK,num_warps`` (or ``--pointwise-config``) forces
one, e.g. ``2048,4``: 16 elements a thread, where Triton 3.6 miscompiled a gather
(benchmarks/NOTES.md §28).
"""

from __future__ import annotations

import os

ENV = "TC_TEST_POINTWISE_CONFIG"


def force_pointwise_config(spec: str | None = None) -> None:
    """``spec`` ("XBLOCK,num_warps"; default: the environment's, if set) for every pointwise kernel."""
    spec = spec or os.environ.get(ENV, "")
    if not spec:
        return
    xblock, warps = map(int, spec.split(","))
    from tc_inductor.codegen import triton as triton_codegen

    chosen = triton_codegen.heuristic_config

    def forced(kernel, interpret, xnumel=None, rnumel=None):
        config = chosen(kernel, interpret, xnumel, rnumel)
        return config if kernel.is_reduction else {"XBLOCK": xblock, "num_warps": warps}

    triton_codegen.heuristic_config = forced
