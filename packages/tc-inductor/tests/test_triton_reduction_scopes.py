"""A Triton reduction kernel keeps the row tile's values apart from the per-row values after it."""

from __future__ import annotations

import pytest
import torch
from inductor_helpers import check

aten = torch.ops.aten


def _variance(g, x, n):
    # sum((x - sum(x) / n) ** 2) / (n - 1): ``n`` is read inside the row reduction and after it
    total = g.call(aten.sum.dim_IntList, x, [1], True)
    diff = g.call(aten.sub.Tensor, x, g.call(aten.div.Tensor, total, n))
    sq = g.call(aten.sum.dim_IntList, g.call(aten.mul.Tensor, diff, diff), [1], True)
    return g.call(aten.div.Tensor, sq, g.call(aten.sub.Tensor, n, 1))


@pytest.mark.parametrize("rows,cols", [(1, 125), (7, 33), (3, 3000)])  # persistent and looped rows
@pytest.mark.parametrize("per_row", [False, True])
def test_a_value_read_in_the_row_and_after_the_reduction(rows, cols, per_row):
    def inputs():
        n = torch.randint(2, 9, (rows, 1) if per_row else ()).float()
        return [torch.randn(rows, cols), n]

    check(_variance, inputs(), {"backend": "triton", "cache": False}, fresh=inputs())


def test_an_integer_count_cast_in_the_row_and_after_the_reduction():
    # masked.std's shape: the count is an int64 scalar tensor, cast to float on both sides
    def var(g, x, n):
        return _variance(g, x, g.call(aten._to_copy.default, n, kwargs={"dtype": torch.float32}))

    def inputs():
        return [torch.randn(5, 25), torch.tensor(torch.randint(2, 30, ()).item())]

    check(var, inputs(), {"backend": "triton", "cache": False}, fresh=inputs())
