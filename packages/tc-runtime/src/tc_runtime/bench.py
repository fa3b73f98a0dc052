"""Launch-overhead benchmark: a small launch-bound MLP, eager vs CUDA graphs.

``python3 -m tc_runtime.bench`` prints µs per call for: eager; ``cudagraphify`` with the default
``clone`` outputs; with ``alias`` outputs; and a bare ``torch.cuda.CUDAGraph.replay`` of the same
model (the floor: what our Python bookkeeping adds is the difference). Skips without CUDA.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch

from .cudagraphs import cudagraphify


def mlp(width: int = 256, depth: int = 6) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).cuda().eval()


def time_per_call(fn: Callable[[], Any], iters: int, warmup: int = 50) -> float:
    """Microseconds per call, synchronising only around the whole loop (as a serving loop runs)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters * 1e6


def bare_graph(model: torch.nn.Module, x: torch.Tensor) -> Callable[[], Any]:
    """The floor: one pre-recorded graph replayed with no input copy and no checks."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        model(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model(x)
    return graph.replay


def run(width: int = 256, depth: int = 6, batch: int = 8, iters: int = 2000) -> list[tuple[str, float]]:
    """[(variant, µs per call)]; checks every graphed variant against eager first."""
    model = mlp(width, depth)
    x = torch.randn(batch, width, device="cuda")
    with torch.no_grad():
        want = model(x)
        variants: dict[str, Callable[[], Any]] = {"eager": lambda: model(x)}
        for mode in ("clone", "alias"):
            g = cudagraphify(model, [x], output_mode=mode)
            g(x), g(x)  # warm-up, record
            torch.testing.assert_close(g(x), want)
            variants[f"cudagraphify ({mode})"] = lambda g=g: g(x)
        variants["bare CUDAGraph.replay"] = bare_graph(model, x)
        return [(name, time_per_call(fn, iters)) for name, fn in variants.items()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--iters", type=int, default=2000)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("tc_runtime.bench: skipped (CUDA is not available)")
        return
    rows = run(args.width, args.depth, args.batch, args.iters)
    eager = rows[0][1]
    print(f"{args.depth}-layer MLP, width {args.width}, batch {args.batch}, "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'variant':<26} {'us/call':>9} {'vs eager':>9}")
    for name, us in rows:
        print(f"{name:<26} {us:9.1f} {eager / us:8.2f}x")


if __name__ == "__main__":
    main()
