"""Functions of the module ``torch.functional`` (einsum, split, norm, meshgrid, ...) are plain
tensor functions: capture inlines them like any torch code. They used to break the graph as
"torch.func transform einsum is not captured" (the module name starts with ``torch.func``), so
every einsum of a model (XLNet, Funnel, Longformer) split its graph. Each case: compiled twice
with different inputs, outputs and gradients against eager, and the graph count."""

from __future__ import annotations

import warnings

import pytest
import torch

import tc

CASES = {
    "einsum": (lambda a, b: torch.einsum("bid,bjd->bij", a, b), [(2, 3, 4), (2, 5, 4)]),
    "einsum_list": (lambda a, b: torch.einsum("ij,jk", [a[0], b[0].t()]), [(2, 3, 4), (2, 5, 4)]),
    "split": (lambda a: [t * i for i, t in enumerate(torch.split(a, 2, dim=-1))], [(3, 5)]),
    "split_sizes": (lambda a: torch.split(a, [1, 4], dim=1)[1].exp(), [(3, 5)]),
    "norm": (lambda a: torch.norm(a) + torch.norm(a, dim=1, p=1).sum(), [(3, 5)]),
    "norm_fro": (lambda a: torch.norm(a, p="fro", dim=(0, 1)), [(3, 5)]),
    "tensordot": (lambda a, b: torch.tensordot(a, b, dims=([1], [1])), [(3, 4), (5, 4)]),
    "cdist": (lambda a, b: torch.cdist(a, b), [(3, 4), (5, 4)]),
    "meshgrid": (lambda a, b: sum(g.sum() for g in torch.meshgrid(a, b, indexing="ij")), [(3,), (4,)]),
    "broadcast_tensors": (lambda a, b: torch.mul(*torch.broadcast_tensors(a, b)), [(3, 1), (1, 4)]),
    "block_diag": (lambda a, b: torch.block_diag(a, b) * 2, [(2, 3), (1, 2)]),
    "cartesian_prod": (lambda a, b: torch.cartesian_prod(a, b).sum(1), [(3,), (2,)]),
    "atleast": (lambda a: torch.atleast_3d(a) + torch.atleast_2d(a).sum(), [(3,)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_torch_functional_is_captured(name):
    fn, shapes = CASES[name]
    compiled = tc.compile(fn)
    gen = torch.Generator().manual_seed(0)
    for _ in range(2):
        inputs = [torch.randn(s, generator=gen, dtype=torch.float64, requires_grad=True) for s in shapes]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no eager fallback
            got = compiled(*inputs)
        want = fn(*inputs)
        torch.testing.assert_close(got, want)
        flat_got = got if isinstance(got, (list, tuple)) else [got]
        flat_want = want if isinstance(want, (list, tuple)) else [want]
        loss_got = sum((g * (i + 1)).sum() for i, g in enumerate(flat_got))
        loss_want = sum((w * (i + 1)).sum() for i, w in enumerate(flat_want))
        torch.testing.assert_close(torch.autograd.grad(loss_got, inputs), torch.autograd.grad(loss_want, inputs))
    report = tc.explain(fn, *inputs)
    assert report.graph_break_count == 0, report.break_reasons


def test_unique_still_gives_eagers_answer():
    """``torch.unique``'s output size depends on the values: a graph break (with its reason), and
    eager's answer."""
    f = tc.compile(lambda a: torch.unique(a * 2, return_counts=True))
    for values in ([1, 2, 2, 5], [3, 3, 3, 0, 1]):
        a = torch.tensor(values)
        for g, w in zip(f(a), torch.unique(a * 2, return_counts=True)):
            torch.testing.assert_close(g, w)
