"""Small hand-written models in the style of real ones (ResNet, ViT, GPT-2, BERT, LLaMA)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)) \
            if stride != 1 or c_in != c_out else nn.Identity()

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)), inplace=True)
        return F.relu(self.bn2(self.conv2(h)) + self.down(x))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
        self.layers = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        h = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


class ViTBlock(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4, patch: int = 4):
        super().__init__()
        self.heads, self.patch = heads, patch
        self.embed = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 17, d) * 0.02)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, 10)

    def forward(self, img):
        x = self.embed(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        x = x + self.mlp(self.ln2(x))
        return self.head(x[:, 0])


class GPT2Block(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4, vocab: int = 50, t: int = 8):
        super().__init__()
        self.heads = heads
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.ln1, self.ln2, self.lnf = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(0.0)

    def forward(self, idx):
        b, t = idx.shape
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        q, k, v = self.attn(self.ln1(x)).split(x.shape[-1], dim=2)
        hd = x.shape[-1] // self.heads
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=idx.device), diagonal=1)
        att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, -1)
        x = x + self.proj(y)
        x = x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return self.lnf(x) @ self.wte.weight.t()


class BertBlock(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4, vocab: int = 50):
        super().__init__()
        self.heads = heads
        self.emb, self.types = nn.Embedding(vocab, d), nn.Embedding(2, d)
        self.ln0, self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, idx, attention_mask):
        b, t = idx.shape
        x = self.ln0(self.emb(idx) + self.types(torch.zeros_like(idx)))
        hd = x.shape[-1] // self.heads
        q, k, v = (lin(x).view(b, t, self.heads, hd).permute(0, 2, 1, 3) for lin in (self.q, self.k, self.v))
        # torch.finfo(x.dtype).min would be the real thing; tc_capture breaks the graph on finfo.
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        att = F.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + bias, dim=-1)
        y = (att @ v).permute(0, 2, 1, 3).reshape(b, t, -1)
        x = self.ln1(x + self.o(y))
        return self.ln2(x + self.out(F.gelu(self.fc(x))))


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(d))

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4, vocab: int = 50, t: int = 8):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, d)
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.gate, self.up, self.down = nn.Linear(d, 64, bias=False), nn.Linear(d, 64, bias=False), nn.Linear(64, d, bias=False)
        hd = d // heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        freqs = torch.outer(torch.arange(t).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, idx):
        b, t = idx.shape
        x = self.emb(idx)
        h = self.norm1(x)
        hd = x.shape[-1] // self.heads
        q, k, v = (w(h).view(b, t, self.heads, hd).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        cos, sin = self.cos[:t], self.sin[:t]
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, -1))
        h = self.norm2(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        scores = x.float().mean(-1)
        keep = torch.where(scores > 0, scores, torch.zeros_like(scores))
        return x, keep


MODELS = {
    "resnet": (ResNet, lambda: [torch.randn(2, 3, 8, 8)]),
    "vit": (ViTBlock, lambda: [torch.randn(2, 3, 16, 16)]),
    "gpt2": (GPT2Block, lambda: [torch.randint(0, 50, (2, 8))]),
    "bert": (BertBlock, lambda: [torch.randint(0, 50, (2, 8)), torch.tensor([[1] * 8, [1] * 5 + [0] * 3])]),
    "llama": (LlamaBlock, lambda: [torch.randint(0, 50, (2, 8))]),
}
