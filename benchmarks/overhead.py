"""Per-call overhead on cache hits: eager vs tc_capture vs torch.compile(backend="eager").

Run: python3 benchmarks/overhead.py   (CPU is fine; tiny tensors so the work itself is negligible)
     python3 benchmarks/overhead.py --guards   (the generated guard function alone, per model)

tc_capture's back end here turns the graph into straight Python (the same role as
torch.compile's "eager" back end running an FX GraphModule), so the difference between the
columns is guard checking + argument plumbing, not kernel speed.
"""

from __future__ import annotations

import sys
import time

import torch
from torch import nn

import tc_capture
from tc_ir import Node


def python_backend(graph, example_inputs):
    """Generate one Python function from the graph: the cheapest faithful way to run it."""
    scope, names = {}, {}

    def arg(value):
        if isinstance(value, Node):
            return names[value]
        if isinstance(value, (list, tuple)):
            inner = ", ".join(arg(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner},)"
        key = f"K{len(scope)}"
        scope[key] = value
        return key

    for i, node in enumerate(graph.nodes):
        names[node] = f"v{i}"
    lines = [f"def run({', '.join(names[n] for n in graph.inputs)}):"]
    for node in graph.calls:
        args = [arg(a) for a in node.args] + [f"{k}={arg(v)}" for k, v in node.kwargs.items()]
        if isinstance(node.target, str):
            lines.append(f"    {names[node]} = {args[0]}.{node.target}({', '.join(args[1:])})")
        else:
            target = f"T{len(scope)}"
            scope[target] = node.target
            lines.append(f"    {names[node]} = {target}({', '.join(args)})")
    lines.append(f"    return {arg(graph.outputs)}")
    exec("\n".join(lines), scope)
    return scope["run"]


def timed(fn, *args, n=3000):
    for _ in range(50):
        fn(*args)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn(*args)
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def chain(n):
    return nn.Sequential(*[nn.Linear(2, 2, bias=False) for _ in range(n)])


class ConvNet(nn.Module):
    """ResNet-ish: ``blocks`` residual blocks of conv + batch norm (8 parameters/buffers each)."""

    def __init__(self, blocks=8, c=4):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
                                                  nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c))
                                    for _ in range(blocks))

    def forward(self, x):
        for block in self.blocks:
            x = torch.relu(block(x) + x)
        return x


def guard_of(fn, x):
    """The cache-hit guard of ``fn``'s entry and the frame state it is called with."""
    from tc_capture.cache.frame_cache import FrameCache

    seen = []
    compiled = tc_capture.optimize(python_backend)(fn)
    compiled(x)
    plain = FrameCache.lookup
    FrameCache.lookup = lambda cache, off, F, C: seen.append((cache, F, C)) or plain(cache, off, F, C)
    try:
        compiled(x)
    finally:
        FrameCache.lookup = plain
    cache, F, C = seen[0]
    (entry,) = [e for e in cache.entries[0] if e.guard(F, C)][:1]
    return entry.guard, (F, C)


def guards_main():
    """Guard-only timings: the generated guard function alone, on the call it was compiled from."""
    torch.set_grad_enabled(True)
    cases = [("5 params", chain(5), torch.randn(1, 2)), ("50 params", chain(50), torch.randn(1, 2)),
             ("500 params", chain(500), torch.randn(1, 2)),
             ("8 conv blocks (64 tensors)", ConvNet(8).eval(), torch.randn(1, 4, 8, 8))]
    print(f"{'guard of':28} {'us per check':>12}")
    for name, fn, x in cases:
        guard, (F, C) = guard_of(fn, x)
        assert guard(F, C)
        print(f"{name:28} {timed(guard, F, C, n=max(20, 20000 // len(list(fn.parameters())))):12.2f}")


def main():
    if "--guards" in sys.argv:
        return guards_main()
    torch.set_grad_enabled(False)
    cases = [
        ("tiny function (x + 1)", lambda x: x + 1, torch.randn(2)),
        ("module, 5 params", chain(5), torch.randn(1, 2)),
        ("module, 500 params", chain(500), torch.randn(1, 2)),
    ]
    print(f"{'case':28} {'eager us':>10} {'tc us':>10} {'torch.compile(eager) us':>24} "
          f"{'tc - eager':>11} {'tc / compile':>13}")
    for name, fn, x in cases:
        tc_fn = tc_capture.optimize(python_backend)(fn)
        tc_compiled = torch.compile(fn, backend="eager")
        eager_us, tc_us, tcomp_us = timed(fn, x), timed(tc_fn, x), timed(tc_compiled, x)
        print(f"{name:28} {eager_us:10.2f} {tc_us:10.2f} {tcomp_us:24.2f} {tc_us - eager_us:11.2f} "
              f"{tc_us / tcomp_us:13.2f}")


if __name__ == "__main__":
    main()
