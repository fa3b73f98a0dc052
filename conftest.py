"""Shared pytest set-up: tests marked ``cuda`` skip on machines without a CUDA GPU, where
generated Triton kernels run on the CPU under the Triton interpreter instead."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the Hopper GPU test host)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_leaked_grad_mode():
    """Fail the test that leaves grad mode changed, and restore it so later tests stay honest."""
    before = torch.is_grad_enabled()
    yield
    after = torch.is_grad_enabled()
    torch.set_grad_enabled(before)
    assert after == before, f"test left grad mode {'on' if after else 'off'}"
