"""The tc demo: compile a small real model with ``tc.compile``, check it against eager, time it.

    nox -s demo          # or: python examples/demo.py [--repeat N] [--no-torch-compile]

Eager and compiled calls alternate (eager, tc, eager, tc, ...) and the medians are compared, so
a change in the machine's load during the run falls on both alike. torch.compile, for
comparison, runs the same way in a child process that never imports tc.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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


def setup() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return TinyGPT().eval(), torch.randint(0, 256, (8, 64))


def alternate(eager, compiled, args: tuple, repeat: int) -> tuple[float, float]:
    """Median milliseconds of ``eager`` and ``compiled``, their calls interleaved."""
    times: dict[object, list[float]] = {eager: [], compiled: []}
    for _ in range(repeat):
        for fn in (eager, compiled):
            start = time.perf_counter()
            fn(*args)
            times[fn].append(time.perf_counter() - start)
    return statistics.median(times[eager]) * 1e3, statistics.median(times[compiled]) * 1e3


def compile_and_time(compile_fn, repeat: int) -> dict:
    """First call, a check against eager on fresh inputs, then alternated timings."""
    model, ids = setup()
    compiled = compile_fn(copy.deepcopy(model))
    with torch.no_grad():
        start = time.perf_counter()
        out = compiled(ids)
        first_s = time.perf_counter() - start
        torch.testing.assert_close(out, model(ids), atol=1e-4, rtol=1e-4)
        fresh = torch.randint(0, 256, (8, 64))
        torch.testing.assert_close(compiled(fresh), model(fresh), atol=1e-4, rtol=1e-4)
        eager_ms, compiled_ms = alternate(model, compiled, (ids,), repeat)
    return {"first_s": first_s, "eager_ms": eager_ms, "compiled_ms": compiled_ms}


def torch_compile_child(repeat: int) -> dict | str:
    """torch.compile's figures from a child process (tc is never imported there), or why not."""
    cmd = [sys.executable, __file__, "--torch-compile-child", "--repeat", str(repeat)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return "did not finish in 15 minutes"
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["failed"])[-1]
    return json.loads(done.stdout.strip().splitlines()[-1])


def row(name: str, r: dict) -> str:
    speedup = r["eager_ms"] / r["compiled_ms"]
    return (f"{name:14} first call {r['first_s']:6.2f} s   eager {r['eager_ms']:7.2f} ms   "
            f"compiled {r['compiled_ms']:7.2f} ms   speedup {speedup:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30, help="timed calls of each (default 30)")
    parser.add_argument("--no-torch-compile", action="store_true", help="skip the torch.compile comparison")
    parser.add_argument("--torch-compile-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_compile_child:
        print(json.dumps(compile_and_time(torch.compile, args.repeat)))
        return
    import tc  # only here: the torch.compile child must not import it

    model, ids = setup()
    print(tc.explain(model, ids))
    print(f"\nTinyGPT on {torch.get_num_threads()} CPU threads, batch 8 x 64 tokens, inference;"
          f" medians of {args.repeat} alternated calls; results match eager")
    print(row("tc", compile_and_time(tc.compile, args.repeat)))
    if not args.no_torch_compile:
        other = torch_compile_child(args.repeat)
        print(row("torch.compile", other) if isinstance(other, dict) else f"torch.compile  not run: {other}")


if __name__ == "__main__":
    main()
