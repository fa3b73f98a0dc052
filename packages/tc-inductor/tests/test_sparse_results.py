"""Extern calls returning tensors without a storage (sparse layouts) run: the wrapper's alias
check tells such a result apart from the inputs by identity."""

from __future__ import annotations

import torch
from inductor_helpers import build

import tc_inductor

aten = torch.ops.aten


def _sparse_then_dense(g, x):
    s = g.call(aten._to_sparse.default, g.call(aten.mul.Tensor, x, 2.0))
    return s, g.call(aten.add.Tensor, g.call(aten._to_dense.default, s), 1.0)


def test_a_sparse_result_and_a_dense_value_made_from_it():
    x = torch.randn(3, 4)
    k = tc_inductor.compile(build(_sparse_then_dense, [x]), [x])
    for x in (torch.randn(3, 4), torch.randn(3, 4)):
        sparse, dense = k(x)
        assert sparse.layout is torch.sparse_coo
        torch.testing.assert_close(sparse.to_dense(), x * 2)
        torch.testing.assert_close(dense, x * 2 + 1)


def test_own_memory_clones_a_storageless_result_that_is_an_input():
    from tc_inductor.compile import _own_memory

    s, dense = torch.randn(2, 3).to_sparse(), torch.randn(2, 3)
    assert _own_memory(s, s) is not s  # an op that returned its sparse argument
    torch.testing.assert_close(_own_memory(s, s).to_dense(), s.to_dense())
    other = torch.randn(2, 3).to_sparse()
    assert _own_memory(other, s, dense) is other
    assert _own_memory(dense, s) is dense
    view = dense[0]
    assert _own_memory(view, dense) is not view  # a view of a strided input: still copied
