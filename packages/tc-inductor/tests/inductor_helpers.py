"""Shared test helpers: build a graph, compile it, compare with the reference interpreter."""

from __future__ import annotations

import torch

import tc_inductor
import tc_ir

TOL = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-7, 1e-7), torch.float16: (1e-2, 1e-2),
       torch.bfloat16: (3e-2, 3e-2)}


def build(fn, inputs) -> tc_ir.Graph:
    g = tc_ir.Graph()
    nodes = [g.input(f"in{i}", tc_ir.TensorSpec.from_tensor(t) if isinstance(t, torch.Tensor) else None)
             for i, t in enumerate(inputs)]
    g.output(fn(g, *nodes))
    return g


def assert_same(got, expected) -> None:
    got_leaves, exp_leaves = list(tc_ir.leaves(got)), list(tc_ir.leaves(expected))
    assert len(got_leaves) == len(exp_leaves)
    for r, e in zip(got_leaves, exp_leaves):
        if isinstance(e, torch.Tensor):
            assert isinstance(r, torch.Tensor), type(r)
            atol, rtol = TOL.get(e.dtype, (0, 0))
            torch.testing.assert_close(r, e, atol=atol, rtol=rtol, equal_nan=True, check_stride=False)
        else:
            assert r == e


def check(fn, inputs, options=None, fresh=None):
    """Compile ``fn``'s graph, run it on ``fresh`` inputs (default: ``inputs``), compare with eager."""
    g = build(fn, inputs)
    compiled = tc_inductor.compile(g, inputs, options)
    run_on = fresh if fresh is not None else inputs
    assert_same(compiled(*run_on), tc_ir.interpret(g, run_on))
    return compiled
