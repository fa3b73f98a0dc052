"""Dynamic shapes: views, reshapes, permutes, slices, expand, cat, gathers and extern calls
(matmul, conv) over size symbols. Each graph is compiled once and run at many sizes."""

import pytest
import torch
from dyn_helpers import SymGraph, aten, run_sizes

BACKENDS = ["cpp", "triton"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_view_permute_reshape_with_expressions(backend):
    b = SymGraph()
    s0 = b.sym("s0")
    x = b.input("x", (s0, 3, 4))
    v = b.call(aten.view.default, b.call(aten.mul.Tensor, x, 2.0), [s0 * 3, 4])
    p = b.call(aten.permute.default, v, [1, 0])
    r = b.call(aten.add.Tensor, b.call(aten.clone.default, p), 1.0)
    flat = b.call(aten.view.default, b.call(aten.exp.default, x), [s0 * 12])
    g = b.output((r, flat))
    run_sizes(g, lambda n: [torch.randn(n, 3, 4)], backend=backend,
              eager=lambda x: ((x * 2).view(-1, 4).t() + 1, x.exp().view(-1)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_slices_with_symbolic_ends_and_expand(backend):
    b = SymGraph()
    s0, s1 = b.sym("s0"), b.sym("s1", 6)
    x = b.input("x", (s0, s1))
    head = b.call(aten.slice.Tensor, x, 1, 0, 2)          # a static width out of a symbolic row
    tail = b.call(aten.slice.Tensor, x, 0, 1, s0)         # rows 1.. (a symbolic end)
    every = b.call(aten.slice.Tensor, x, 1, 0, s1, 2)     # a step over a symbolic row
    e = b.call(aten.expand.default, b.call(aten.unsqueeze.default, b.call(aten.sum.dim_IntList, x, [1]), 1), [s0, s1])
    g = b.output(tuple(b.call(aten.neg.default, t) for t in (head, tail, every, e)))
    run_sizes(g, lambda n: [torch.randn(n, n + 1)], backend=backend,
              eager=lambda x: (-x[:, :2], -x[1:], -x[:, ::2], -x.sum(1, keepdim=True).expand(x.shape)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_cat_along_symbolic_and_static_dims(backend):
    b = SymGraph()
    s0, s1 = b.sym("s0"), b.sym("s1", 4)
    x, y = b.input("x", (s0, 3)), b.input("y", (s1, 3))
    z = b.input("z", (s0, 2))
    rows = b.call(aten.cat.default, [b.call(aten.relu.default, x), y], 0)
    cols = b.call(aten.cat.default, [x, z], 1)
    g = b.output((b.call(aten.mul.Tensor, rows, 3.0), b.call(aten.sigmoid.default, cols)))
    run_sizes(g, lambda n: [torch.randn(n, 3), torch.randn(2 * n + 1, 3), torch.randn(n, 2)], backend=backend,
              eager=lambda x, y, z: (torch.cat([x.relu(), y]) * 3, torch.cat([x, z], 1).sigmoid()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_and_index_select_of_symbolic_tables(backend):
    b = SymGraph()
    s0, s1 = b.sym("s0"), b.sym("s1", 9)
    table = b.input("table", (s1, 8))
    idx = b.input("idx", (s0,), torch.int64)
    emb = b.call(aten.embedding.default, table, idx)
    sel = b.call(aten.index_select.default, table, 0, idx)
    g = b.output((b.call(aten.mul.Tensor, emb, 2.0), b.call(aten.add.Tensor, sel, 1.0)))

    def inputs(n):
        return [torch.randn(n + 4, 8), torch.randint(0, n + 4, (n,))]

    run_sizes(g, inputs, backend=backend,
              eager=lambda t, i: (torch.embedding(t, i) * 2, t.index_select(0, i) + 1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_range_index_raises_at_symbolic_size(backend):
    b = SymGraph()
    s0, s1 = b.sym("s0"), b.sym("s1", 9)
    table, idx = b.input("table", (s1, 4)), b.input("idx", (s0,), torch.int64)
    g = b.output(b.call(aten.mul.Tensor, b.call(aten.embedding.default, table, idx), 2.0))
    k = run_sizes(g, lambda n: [torch.randn(n, 4), torch.randint(0, n, (n,))], sizes=(3, 7), backend=backend)
    with pytest.raises(IndexError, match="out of bounds for dimension with size 7"):
        k(torch.randn(7, 4), torch.tensor([1, 7, 2]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_bmm_addmm_with_runtime_shapes(backend):
    b = SymGraph()
    s0, s1 = b.sym("s0"), b.sym("s1", 6)
    x, w, bias = b.input("x", (s0, 8)), b.input("w", (8, s1)), b.input("bias", (s1,))
    q = b.input("q", (2, s0, 8))
    mm = b.call(aten.mm.default, x, w)
    am = b.call(aten.addmm.default, bias, b.call(aten.relu.default, x), w)
    bm = b.call(aten.bmm.default, q, b.call(aten.permute.default, q, [0, 2, 1]))
    g = b.output((b.call(aten.gelu.default, mm), am, b.call(aten.mul.Tensor, bm, 0.5)))
    run_sizes(g, lambda n: [torch.randn(n, 8), torch.randn(8, n + 2), torch.randn(n + 2), torch.randn(2, n, 8)],
              backend=backend, externs=3,
              eager=lambda x, w, bias, q: (torch.nn.functional.gelu(x @ w), torch.addmm(bias, x.relu(), w),
                                           (q @ q.transpose(1, 2)) * 0.5))


@pytest.mark.parametrize("backend", BACKENDS)
def test_conv2d_over_batch_and_image_size(backend):
    b = SymGraph()
    s0, s1 = b.sym("s0"), b.sym("s1", 8)
    x, w, bias = b.input("x", (s0, 3, s1, s1)), b.input("w", (4, 3, 3, 3)), b.input("bias", (4,))
    conv = b.call(aten.convolution.default, x, w, bias, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    g = b.output(b.call(aten.relu.default, b.call(aten.mul.Tensor, conv, 2.0)))
    run_sizes(g, lambda n: [torch.randn(n, 3, n + 3, n + 3), torch.randn(4, 3, 3, 3), torch.randn(4)],
              sizes=(2, 3, 5, 13), backend=backend, externs=1,
              eager=lambda x, w, bias: (torch.relu(torch.conv2d(x, w, bias, padding=1) * 2),))


def test_matmul_templates_stay_extern_calls_over_symbolic_shapes():
    b = SymGraph()
    s0 = b.sym("s0")
    x, w = b.input("x", (s0, 8)), b.input("w", (8, 4))
    g = b.output(b.call(aten.relu.default, b.call(aten.mm.default, x, w)))
    run_sizes(g, lambda n: [torch.randn(n, 8), torch.randn(8, 4)], sizes=(2, 9), backend="triton", externs=1,
              options={"mm_template": "always", "pad_mm_operands": "always"},
              eager=lambda x, w: (torch.relu(x @ w),))


@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_keep_the_specs_symbolic_strides(backend):
    b = SymGraph()
    s0, s1 = b.sym("s0"), b.sym("s1", 3)
    x = b.input("x", (s0, s1))
    g = b.output(b.call(aten.permute.default, b.call(aten.mul.Tensor, x, 2.0), [1, 0]))
    k = run_sizes(g, lambda n: [torch.randn(n, n + 1)], backend=backend, eager=lambda x: ((x * 2).t(),))
    x = torch.randn(4, 6)
    assert k(x).stride() == (x * 2).t().stride()
