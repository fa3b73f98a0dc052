"""Extern calls whose result shares its argument's memory: the memory plan counts every extern
result as a buffer of its own, so the wrapper gives a shared one memory of its own first.

Found by the symbolic backward of a tiny GPT-2 (tanh's gradient went through ``conj_physical``,
which returns a real tensor itself): a later kernel reused the argument's buffer and overwrote the
result. Compared with ``tc_ir.interpret`` at several sizes after one compile.
"""

from __future__ import annotations

import pytest
import torch

import tc_inductor
import tc_ir

GRAPH = """# tc_ir v1
graph g:
  %x: f32[s0, 64] cpu = input
  %m: f32[s0, 64] cpu = aten.mul.Tensor(%x, %x)
  %s: f32[s0, 64] cpu = aten.sub.Tensor(1, %m)
  %c: f32[s0, 64] cpu = {op}
  %e: f32[s0, 64] cpu = aten.exp.default(%c)
  %f: f32[s0, 1] cpu = aten.sum.dim_IntList(%e, [1], True)
  %h: f32[s0, 64] cpu = aten.mul.Tensor(%x, %f)
  return (%c, %h)
"""
SHARING_OPS = {
    "conj_physical": "aten.conj_physical.default(%s)",  # returns ``self`` for a real tensor
    "resolve_neg": "aten.resolve_neg.default(%s)",
    "alias_copy": "aten.alias.default(%s)",
}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("op", list(SHARING_OPS))
def test_an_extern_result_sharing_its_argument_survives_buffer_reuse(op, backend):
    g = tc_ir.parse(GRAPH.format(op=SHARING_OPS[op]))
    compiled = tc_inductor.compile(g, [torch.randn(5, 64)], {"backend": backend, "cache": False})
    for rows in (5, 2, 9, 33):
        x = torch.randn(rows, 64)
        for got, want in zip(compiled(x), tc_ir.interpret(g, [x])):
            torch.testing.assert_close(got, want)
