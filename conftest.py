"""Shared pytest set-up: tests marked ``cuda`` skip on machines without a CUDA GPU."""

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the Hopper GPU test host)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
