"""Triton kernels on CPU tensors run under the Triton interpreter, which must be on before
triton is first imported; on a CUDA machine Triton compiles for the GPU instead."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # helpers.py and op_corpus.py

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _small_split_reductions(request, monkeypatch):
    """Split reductions at CPU test sizes: the tests' inputs of 32768-262144 elements split as the
    GPU's larger ones do (``SPLIT_MIN_ELEMENTS``; ``test_plan_defaults`` checks the default).
    GPU tests (``cuda`` marker) keep the default."""
    from tc_inductor import split_reduction

    if request.node.get_closest_marker("cuda") is None:
        monkeypatch.setattr(split_reduction, "SPLIT_MIN_ELEMENTS", 32768)
