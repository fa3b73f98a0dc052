"""The corpus on a CUDA GPU (skipped without one)."""

from __future__ import annotations

import pytest
import torch
from autograd_harness import check
from test_corpus import CORPUS

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _on_cuda(make, inputs):
    def make_cuda():
        made = make()
        return made.cuda() if isinstance(made, torch.nn.Module) else made

    return make_cuda, lambda: [t.cuda() for t in inputs()]


@pytest.mark.parametrize("name", ["linear", "conv2d", "batchnorm_train", "sdpa_attention", "transformer_block", "small_cnn"])
def test_training_matches_eager_on_cuda(name):
    check(*_on_cuda(*CORPUS[name]), mode="f32")
