"""Triton kernels at the configs of real models and GPUs, for the sweeps and fuzzers.

tc picks a block per kernel (``tc_inductor.codegen.triton.heuristic_config``); small test
inputs get small blocks, so the code Triton generates at the sizes of real models is not what
the sweeps meet. Two knobs, read by :func:`force_configs`:

* ``TC_TEST_POINTWISE_CONFIG=XBLOCK,num_warps`` (or ``--pointwise-config``) forces every
  pointwise kernel to one config, e.g. ``2048,4``: 16 elements a thread, where Triton 3.6
  miscompiled a gather (benchmarks/NOTES.md §28).
* ``TC_TEST_GPU_CONFIGS=1``, on the CPU under ``TRITON_INTERPRET=1`` with the Triton back end:
  kernels are generated as for a GPU (its configs, persistent-row limits, int32 index math,
  unmasked full blocks) and run by the interpreter, so the GPU's kernel text is checked against
  eager without a GPU (§29). Its artifacts go to a cache root of their own (a fresh temporary
  directory): a later interpreter run of the same graph must not find a GPU's kernel. What the
  interpreter cannot show, none of it a finding:

  - it runs the programs of a grid one after another (no race shows);
  - it ignores ``tl.device_assert``: an out-of-range gather index (an OpInfo error input)
    returns a value where a GPU's launch fails;
  - it has no libdevice: ops whose GPU text calls it (``pow``, gelu's ``erf``, ``tanh``) crash;
  - its ``.to(tl.bfloat16)`` truncates where a GPU rounds to nearest (tc's interpreter text
    rounds with ``_tc_bf16``): bf16 results can be an ulp off;
  - with numpy 2.4 it cannot loop ``range(0, n, ...)`` over an int argument (an
    ``InterpreterError: TypeError('only 0-dimensional arrays can be converted to Python
    scalars')``), which the GPU's looped reductions over a symbolic row length do: such a kernel
    fails here and runs on a GPU (the convnet fuzzer's recompiles over symbolic heights meet it).
"""

from __future__ import annotations

import os
import tempfile

ENV = "TC_TEST_POINTWISE_CONFIG"
GPU_ENV = "TC_TEST_GPU_CONFIGS"


def force_configs(spec: str | None = None) -> None:
    """``spec`` ("XBLOCK,num_warps"; default: the environment's, if set) for every pointwise
    kernel, and the GPU's kernels under the interpreter when ``TC_TEST_GPU_CONFIGS=1``."""
    from tc_inductor.codegen import triton as triton_codegen

    if os.environ.get(GPU_ENV) == "1":
        triton_codegen._interpreting = lambda device: False
        os.environ["TC_CACHE_DIR"] = tempfile.mkdtemp(prefix="tc-gpu-configs-")
    spec = spec or os.environ.get(ENV, "")
    if not spec:
        return
    xblock, warps = map(int, spec.split(","))
    chosen = triton_codegen.heuristic_config

    def forced(kernel, interpret, xnumel=None, rnumel=None):
        config = chosen(kernel, interpret, xnumel, rnumel)
        return config if kernel.is_reduction else {"XBLOCK": xblock, "num_warps": warps}

    triton_codegen.heuristic_config = forced
