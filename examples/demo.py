"""The tc demo: compile a small real model with ``tc.compile``, check it against eager, time it.

    nox -s demo          # or: python examples/demo.py
"""

from __future__ import annotations

import copy
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import tc


class Block(nn.Module):
    """A pre-norm transformer block: attention, then a GELU MLP, each with a residual."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.view(b, t, self.heads, -1).transpose(1, 2)
        k = k.view(b, t, self.heads, -1).transpose(1, 2)
        v = v.view(b, t, self.heads, -1).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 256, d: int = 128, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def median_ms(fn, *args, repeat: int = 30) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    torch.manual_seed(0)
    model = TinyGPT().eval()
    compiled = tc.compile(copy.deepcopy(model))
    ids = torch.randint(0, 256, (8, 64))
    with torch.no_grad():
        start = time.perf_counter()
        out = compiled(ids)
        compile_s = time.perf_counter() - start
        torch.testing.assert_close(out, model(ids), atol=1e-4, rtol=1e-4)
        fresh = torch.randint(0, 256, (8, 64))
        torch.testing.assert_close(compiled(fresh), model(fresh), atol=1e-4, rtol=1e-4)
        eager_ms, tc_ms = median_ms(model, ids), median_ms(compiled, ids)
    print(tc.explain(model, ids))
    print(f"\nTinyGPT on {torch.get_num_threads()} CPU threads, batch 8 x 64 tokens: matches eager")
    print(f"first call (capture + compile): {compile_s:.2f} s")
    print(f"eager {eager_ms:.2f} ms   tc {tc_ms:.2f} ms   speedup {eager_ms / tc_ms:.2f}x")


if __name__ == "__main__":
    main()
