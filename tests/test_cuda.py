"""The full pipeline on a CUDA GPU: Triton kernels, CUDA graphs, bf16 autocast (Hopper test host)."""

from __future__ import annotations

import copy

import pytest
import torch
from tc_models import CNN, MLP, TinyTransformer, inputs_for

import tc

pytestmark = pytest.mark.cuda
MODELS = [MLP, CNN, TinyTransformer]


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("make", MODELS, ids=lambda m: m.__name__)
def test_inference_on_gpu(make, mode):
    torch.manual_seed(0)
    model = make().cuda().eval()
    compiled = tc.compile(copy.deepcopy(model), mode=mode, options={"fallback": False})
    for _ in range(3):
        x = inputs_for(model, device="cuda")
        with torch.no_grad():
            torch.testing.assert_close(compiled(*x), model(*x), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("make", MODELS, ids=lambda m: m.__name__)
def test_bf16_autocast_inference_on_gpu(make):
    torch.manual_seed(0)
    model = make().cuda().eval()
    compiled = tc.compile(copy.deepcopy(model), options={"fallback": False})
    x = inputs_for(model, device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        got, want = compiled(*x).float(), model(*x).float()
    assert ((got - want).norm() / want.norm()).item() < 2e-2


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("make", MODELS, ids=lambda m: m.__name__)
def test_training_on_gpu(make, mode):
    torch.manual_seed(0)
    model = make().cuda().train()
    twin = copy.deepcopy(model)
    compiled = tc.compile(twin, mode=mode, options={"fallback": False})
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (model, twin)]
    for _ in range(3):
        x = inputs_for(model, device="cuda")
        for fn, opt in zip((model, compiled), opts):
            fn(*x).float().pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q, p, atol=2e-3, rtol=2e-3)
