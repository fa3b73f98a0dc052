"""The tc demo: build a graph by hand, print it, verify it, run it on the reference interpreter.

It grows with the project: once the full pipeline lands it compiles a real model with
``tc.compile`` and times it against eager.
"""

from __future__ import annotations

import time

import torch

import tc_ir

aten = torch.ops.aten


def build_gelu_mlp(batch: int, width: int) -> tc_ir.Graph:
    g = tc_ir.Graph("gelu_mlp")
    x = g.input("x", tc_ir.TensorSpec((batch, width), torch.float32))
    w = g.param("fc.weight", torch.nn.Parameter(torch.randn(width, width) / width**0.5))
    h = g.call(aten.mm.default, x, g.call(aten.t.default, w))
    g.output(g.call(aten.gelu.default, h, kwargs={"approximate": "tanh"}))
    return g


def main() -> None:
    g = build_gelu_mlp(8, 64)
    print(g.format(data=False))
    g.verify()
    assert tc_ir.parse(str(g)) == g, "text form did not round-trip"
    x = torch.randn(8, 64)
    start = time.perf_counter()
    got = tc_ir.interpret(g, [x])
    elapsed = time.perf_counter() - start
    expect = torch.nn.functional.gelu(x @ g.tensors["fc.weight"].t(), approximate="tanh")
    torch.testing.assert_close(got, expect)
    print(f"verified, round-tripped, and interpreted in {elapsed * 1e3:.2f} ms: matches eager")


if __name__ == "__main__":
    main()
