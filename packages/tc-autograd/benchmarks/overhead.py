"""Per-call overhead of the tc_autograd wrapper alone: µs per call with compilers that do no work.

    python3 packages/tc-autograd/benchmarks/overhead.py

The graph is ``x + p0 + p1 + ...`` over N parameters (N = 5 and 500). Modes: ``no_grad`` (grad
mode off), ``inference`` (grad mode on, nothing requires grad), ``train`` (parameters require grad). The compilers return a
callable handing back outputs computed once, so what is timed is the wrapper: variant lookup,
the autograd.Function, copy-back and output rebuilding (and, for "fw+bw", the backward glue).
"""

from __future__ import annotations

import time

import torch

import tc_autograd
import tc_ir


def graph(n: int) -> tc_ir.Graph:
    g = tc_ir.Graph(f"sum{n}")
    y = g.input("x", tc_ir.TensorSpec((4,)))
    params = [g.input(f"p{i}", tc_ir.TensorSpec((4,))) for i in range(n)]
    for p in params:
        y = g.call(torch.add, y, p)
    g.output(y)
    return g


def canned(g: tc_ir.Graph, example_inputs: list) -> object:
    outputs = tuple(v.detach() if isinstance(v, torch.Tensor) else v for v in tc_ir.interpret(g, example_inputs))
    return lambda *args: outputs


def per_call(fn, args, backward: bool, repeat: int) -> float:
    for _ in range(20):
        out = fn(*args)
        if backward:
            out.backward(torch.ones_like(out))
    start = time.perf_counter()
    for _ in range(repeat):
        out = fn(*args)
        if backward:
            out.backward(torch.ones_like(out))
    return (time.perf_counter() - start) / repeat * 1e6


def main() -> None:
    print(f"{'params':>6}  {'mode':<10}  {'µs/call':>8}")
    for n in (5, 500):
        g = graph(n)
        for mode in ("no_grad", "inference", "train fw", "train fw+bw"):
            training = mode.startswith("train")
            args = [torch.randn(4)] + [torch.randn(4, requires_grad=training) for _ in range(n)]
            fn = tc_autograd.aot(g, args, fw_compiler=canned, bw_compiler=canned)
            repeat = 2000 if n == 5 else 300
            with torch.set_grad_enabled(mode != "no_grad"):
                us = per_call(fn, args, mode.endswith("bw"), repeat)
            print(f"{n:>6}  {mode:<11} {us:8.1f}")


if __name__ == "__main__":
    main()
