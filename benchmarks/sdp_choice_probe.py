"""Which fused SDPA op F.scaled_dot_product_attention dispatches, for real and fake CUDA
tensors, as tc_autograd's tracer sees it (a TorchDispatchMode above FakeTensorMode). A diagnostic."""

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

B, S, H, D = 8, 512, 12, 64


class Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "attention" in str(func) or "bmm" in str(func) or "softmax" in str(func):
            self.seen.append(str(func).replace("aten.", "").replace(".default", ""))
        return func(*args, **(kwargs or {}))


def qkv(x, transposed):
    if transposed:
        return [x.view(B, S, H, D).transpose(1, 2) for _ in range(3)]
    return [x.view(B, H, S, D) for _ in range(3)]


def masks(device):
    yield "none", None
    yield "bool_dense", torch.rand(B, 1, S, S, device=device) > 0.1
    yield "bool_rows_expanded", (torch.rand(B, 1, 1, S, device=device) > 0.1).expand(B, 1, S, S)
    yield "bool_cols_expanded(hf)", torch.ones(1, 1, S, 1, dtype=torch.bool, device=device).expand(B, -1, S, S)
    yield "float_dense", torch.randn(B, 1, S, S, device=device, dtype=torch.bfloat16)


for name, mask in masks("cuda"):
    x = torch.randn(B, S, H * D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fx = mode.from_tensor(x)
    fmask = None if mask is None else mode.from_tensor(mask)
    with Ops() as real:
        F.scaled_dot_product_attention(*qkv(x, True), attn_mask=mask, scale=0.125)
    with mode, Ops() as fake:
        F.scaled_dot_product_attention(*qkv(fx, True), attn_mask=fmask, scale=0.125)
    print(f"mask={name}: real={real.seen} fake={fake.seen}")
