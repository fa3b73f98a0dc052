"""The corpus: modules and functions compiled by tc_autograd match eager (values, grads, buffers)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from autograd_harness import check

MODES = ["f32", "bf16"]


class MLP(nn.Module):
    def __init__(self, act: nn.Module, dim: int = 16, hidden: int = 64):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), act, nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Residual(nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.norm, self.mlp = nn.LayerNorm(dim), MLP(nn.GELU(), dim)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Attention(nn.Module):
    """Multi-head self-attention; ``sdpa`` picks F.scaled_dot_product_attention or the formula."""

    def __init__(self, dim: int = 16, heads: int = 2, sdpa: bool = True, causal: bool = False):
        super().__init__()
        self.heads, self.sdpa, self.causal = heads, sdpa, causal
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if self.causal:
                mask = torch.ones(t, t, dtype=torch.bool).tril()
                scores = scores.masked_fill(~mask, float("-inf"))
            y = scores.softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int = 16, heads: int = 2, sdpa: bool = True):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(dim), Attention(dim, heads, sdpa, causal=True)
        self.ln2, self.mlp = nn.LayerNorm(dim), MLP(nn.GELU(), dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.conv2(x), inplace=True)
        return self.fc(x.flatten(1))


class InplaceActs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        h = self.fc1(x) * 2.0
        h.add_(1.0)
        h[:, :4].mul_(3.0)
        h = F.relu(h, inplace=True)
        return self.fc2(h).clamp_(min=-1.0)


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.fc = nn.Embedding(20, 16), nn.Linear(16, 4)

    def forward(self, idx):
        return self.fc(self.emb(idx)).mean(dim=1)


def views_and_slices(x):
    a = x.view(4, 2, 8)[:, 1]
    b = x[1:3, ::2].transpose(0, 1).contiguous()
    c, d = x.chunk(2, dim=1)
    return torch.cat([a.sum(-1), b.flatten()]), c * d.flip(0), x.reshape(-1)[3:11].unsqueeze(0)


def x_of(*shape):
    return lambda: [torch.randn(*shape)]


CORPUS = {
    "linear": (lambda: nn.Linear(16, 8), x_of(4, 16)),
    "conv2d": (lambda: nn.Conv2d(3, 6, 3, stride=2, padding=1), x_of(2, 3, 8, 8)),
    "batchnorm_train": (lambda: nn.BatchNorm2d(6), x_of(4, 6, 5, 5)),
    "batchnorm1d_train": (lambda: nn.BatchNorm1d(16), x_of(8, 16)),
    "layernorm": (lambda: nn.LayerNorm(16), x_of(4, 5, 16)),
    "embedding": (Embed, lambda: [torch.randint(0, 20, (3, 7))]),
    "sdpa_attention": (lambda: Attention(sdpa=True), x_of(2, 5, 16)),
    "handwritten_attention": (lambda: Attention(sdpa=False, causal=True), x_of(2, 5, 16)),
    "gelu_mlp": (lambda: MLP(nn.GELU()), x_of(4, 16)),
    "silu_mlp": (lambda: MLP(nn.SiLU()), x_of(4, 16)),
    "residual": (Residual, x_of(3, 16)),
    "inplace_acts": (InplaceActs, x_of(4, 16)),
    "views_slicing": (lambda: views_and_slices, x_of(4, 16)),
    "transformer_block": (TransformerBlock, x_of(2, 6, 16)),
    "transformer_block_hand_attn": (lambda: TransformerBlock(sdpa=False), x_of(2, 6, 16)),
    "small_cnn": (SmallCNN, x_of(2, 3, 8, 8)),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_training_matches_eager(name, mode):
    make, inputs = CORPUS[name]
    check(make, inputs, mode=mode)


@pytest.mark.parametrize("name", ["batchnorm_train", "small_cnn", "residual", "transformer_block"])
def test_eval_and_inference_match_eager(name):
    make, inputs = CORPUS[name]
    check(make, inputs, train=False)
    check(make, inputs, train=False, grad=False)


@pytest.mark.parametrize("name", ["batchnorm_train", "small_cnn"])
def test_no_grad_call_updates_buffers(name):
    make, inputs = CORPUS[name]
    compiled = check(make, inputs, grad=False)
    assert compiled.inference_graph is not None and compiled.forward_graph is None
