"""Dynamic shapes: pointwise ops, broadcasting, reductions and row normalisations over size
symbols. Each graph is compiled once and run at many sizes on both back ends."""

import pytest
import torch
from dyn_helpers import SIZES, SymGraph, aten, kernel_builds, run_sizes

import tc_inductor
import tc_ir

BACKENDS = ["cpp", "triton"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pointwise_broadcast(backend):
    b = SymGraph()
    s0, s1 = b.sym("s0"), b.sym("s1", 7)
    x, y = b.input("x", (s0, s1)), b.input("y", (s1,))
    z = b.input("z", (s0, 1))
    out = b.call(aten.mul.Tensor, b.call(aten.relu.default, b.call(aten.add.Tensor, x, y)), z)
    g = b.output((out, b.call(aten.sigmoid.default, b.call(aten.sub.Tensor, y, 1.5))))
    run_sizes(g, lambda n: [torch.randn(n, 2 * n + 1), torch.randn(2 * n + 1), torch.randn(n, 1)], backend=backend,
              eager=lambda x, y, z: (torch.relu(x + y) * z, torch.sigmoid(y - 1.5)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_flat_size_not_a_multiple_of_the_block(backend):
    b = SymGraph()
    s0 = b.sym("s0")
    x = b.input("x", (s0,))
    g = b.output(b.call(aten.tanh.default, b.call(aten.mul.Tensor, x, 3.0)))
    run_sizes(g, lambda n: [torch.randn(n)], sizes=(2, 1000, 4097, 70001) if backend == "cpp" else (2, 1000, 4097),
              backend=backend, eager=lambda x: (torch.tanh(x * 3.0),))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_over_static_and_symbolic_dims(backend):
    b = SymGraph()
    s0, s1 = b.sym("s0"), b.sym("s1", 6)
    x = b.input("x", (s0, s1, 4))
    outs = (b.call(aten.sum.dim_IntList, x, [1]), b.call(aten.amax.default, x, [2], True),
            b.call(aten.mean.dim, x, [0, 1]), b.call(aten.sum.default, x), b.call(aten.argmax.default, x, 1))
    g = b.output(outs)
    run_sizes(g, lambda n: [torch.randn(n, n + 2, 4)], backend=backend,
              eager=lambda x: (x.sum(1), x.amax(2, True), x.mean((0, 1)), x.sum(), x.argmax(1)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_softmax_rows_of_symbolic_length(backend):
    b = SymGraph()
    s0, s1 = b.sym("s0"), b.sym("s1", 9)
    x = b.input("x", (s0, s1))
    g = b.output((b.call(aten._softmax.default, x, -1, False), b.call(aten._log_softmax.default, x, 0, False)))
    sizes = SIZES + (1030,) if backend == "cpp" else SIZES
    run_sizes(g, lambda n: [torch.randn(3, n) * 4], sizes=sizes, backend=backend,
              eager=lambda x: (torch.softmax(x, -1), torch.log_softmax(x, 0)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_norm_rows_of_symbolic_length(backend):
    b = SymGraph()
    s0, s1 = b.sym("s0"), b.sym("s1", 9)
    x, w, bias = b.input("x", (s0, s1)), b.input("w", (s1,)), b.input("b", (s1,))
    out, mean, rstd = b.call(aten.native_layer_norm.default, x, [s1], w, bias, 1e-5)
    g = b.output((out, mean, rstd))
    run_sizes(g, lambda n: [torch.randn(n + 1, n) * 3 + 1, torch.randn(n), torch.randn(n)], backend=backend,
              eager=lambda x, w, b: torch.native_layer_norm(x, [x.shape[1]], w, b, 1e-5))


def test_one_kernel_per_source_reused_and_cache_hit():
    def graph():
        b = SymGraph()
        s0 = b.sym("s0")
        x = b.input("x", (s0, 8))
        return b.output(b.call(aten.exp.default, b.call(aten.neg.default, x)))

    first = tc_inductor.compile(graph(), [torch.randn(3, 8)])
    builds = kernel_builds()
    second = tc_inductor.compile(graph(), [torch.randn(11, 8)])  # other example sizes: the same graph
    assert kernel_builds() == builds and second.source == first.source
    x = torch.randn(40, 8)
    torch.testing.assert_close(second(x), torch.exp(-x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrong_sizes_raise_value_error(backend):
    b = SymGraph()
    s0 = b.sym("s0")
    x, y = b.input("x", (s0, 4)), b.input("y", (s0, 4))
    g = b.output(b.call(aten.add.Tensor, x, y))
    k = tc_inductor.compile(g, [torch.randn(3, 4), torch.randn(3, 4)], {"backend": backend, "cache": False})
    with pytest.raises(ValueError, match=r"compiled for shape \[s0, 4\], got \[5, 4\]"):
        k(torch.randn(3, 4), torch.randn(5, 4))
    with pytest.raises(ValueError, match="sizes >= 2"):
        k(torch.randn(1, 4), torch.randn(1, 4))
    # another layout of the right sizes is copied into the compiled one
    x, y = torch.randn(4, 5).t(), torch.randn(5, 4)
    torch.testing.assert_close(k(x, y), x + y)


def test_size_symbol_not_bound_by_any_input_raises_at_compile_time():
    g = tc_ir.Graph()
    s0 = tc_ir.sym("s0")
    x = g.input("x", tc_ir.TensorSpec((2 * s0,), torch.float32))
    g.output(g.call(aten.neg.default, x, spec=tc_ir.TensorSpec((2 * s0,), torch.float32)))
    with pytest.raises(ValueError, match="not a plain size of any input"):
        tc_inductor.compile(g, [torch.randn(4)], {"cache": False})


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_input_binds_a_size(backend):
    b = SymGraph()
    s0 = b.sym("s0")
    x = b.input("x", (s0 * 2,))
    n = b.int_input("n", s0)
    g = b.output(b.call(aten.view.default, b.call(aten.relu.default, x), [n, 2]))
    run_sizes(g, lambda k: [torch.randn(2 * k), k], backend=backend, eager=lambda x, n: (torch.relu(x).view(n, 2),))
