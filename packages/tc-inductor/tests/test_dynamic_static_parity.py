"""A symbolic graph compiles to the same kernels, extern calls and copies as the static graph
of the same model (issue 14: a dynamic GPT-2 step ran 17 launches where the static one ran 9,
because views over symbolic sizes were never strided windows, so layer norms split in two and
reshapes around matmuls and attention became copy kernels)."""

import re

import pytest
import sympy
import torch
from dyn_helpers import kernel_builds
from test_dynamic_transformer import Block, C, block_graph

import tc_inductor
import tc_ir
from tc_inductor.lowering.views import _match_groups, _view_strides

s0, s1 = tc_ir.sym("s0"), tc_ir.sym("s1")


def _shape_of(compiled) -> dict:
    """What the generated code does per call: kernels, launches, extern calls, copy kernels."""
    launches = re.findall(r"^    (k\d+)(?:\.launch)?\(", compiled.source, re.M)
    return {"kernels": compiled.stats["kernels"], "launches": len(launches),
            "externs": compiled.stats["extern_calls"], "fused": compiled.stats["fused_nodes"],
            # views handed to extern calls (a reused dead buffer is an as_strided too: not counted)
            "windows": sum(line.count(".as_strided(") for line in compiled.source.splitlines()
                           if not line.endswith("# reuse"))}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_symbolic_block_generates_what_the_static_block_does(backend):
    torch.manual_seed(0)
    model = Block()
    params = [t.detach() for t in model.params()]
    x = torch.randn(2, 5, C)
    options = {"backend": backend, "cache": False}
    static = tc_inductor.compile(block_graph(sizes=(2, 5)), [x, *params], options)
    symbolic = tc_inductor.compile(block_graph(), [x, *params], options)
    assert _shape_of(symbolic) == _shape_of(static)
    # index math: no more divisions than the static kernels (which divide by the constants)
    for op in ("//", "%"):
        assert "".join(symbolic.kernels).count(op) <= "".join(static.kernels).count(op)
    builds = kernel_builds()
    with torch.no_grad():
        for batch, length in [(2, 5), (3, 7), (4, 16)]:
            x = torch.randn(batch, length, C)
            torch.testing.assert_close(symbolic(x, *params), model(x), atol=1e-4, rtol=1e-4)
    if backend == "cpp":
        assert kernel_builds() == builds


def test_view_strides_over_symbols():
    # contiguous (s0, s1, 8) merged and split again: windows, no copy
    assert _view_strides((s0, s1, 8), (8 * s1, 8, 1), (s0 * s1, 8)) == (8, 1)
    assert _view_strides((s0 * s1, 24), (24, 1), (s0, s1, 3, 8)) == (24 * s1, 24, 8, 1)
    # attention's output (b, h, t, d) with strides of (b, t, h, d), viewed as (b * t, h * d)
    assert _view_strides((s0, s1, 4, 8), (32 * s1, 32, 8, 1), (s0 * s1, 32)) == (32, 1)
    # a transposed buffer cannot merge its dims: None, the view is index math
    assert _view_strides((s0, s1), (1, s0), (s0 * s1,)) is None
    # sizes whose order is unknown for some values of the symbols are not guessed
    assert _view_strides((s0, s1), (2 * s1, 1), (s1, s0)) is None
    assert _view_strides((s0, s1), (s1, 1), (s1, s0)) == (s0, 1)  # contiguous: any shape of its numel
    assert _view_strides((s0 - 1, 4), (4, 1), (4 * s0 - 4,)) is None
    # static sizes: torch's rule as before
    assert _view_strides((2, 3, 4), (12, 4, 1), (6, 4)) == (4, 1)
    assert _view_strides((2, 3), (1, 2), (6,)) is None


def test_match_groups_over_symbols():
    assert _match_groups((s0, s1, 8), (s0 * s1, 8)) == [([0, 1], [0]), ([2], [1])]
    assert _match_groups((s0 * s1, 2, 4), (s0, s1, 8)) == [([0], [0, 1]), ([1, 2], [2])]
    assert _match_groups((s0, s1), (s1, s0)) is None
    assert _match_groups((sympy.Integer(3) * s0,), (3, s0)) == [([0], [0, 1])]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_symbolic_views_of_a_non_contiguous_input(backend):
    """A view whose input arrives transposed is copied into the spec's layout first: values hold."""
    b_graph = tc_ir.Graph()
    spec = tc_ir.TensorSpec((s0, s1, 4), torch.float32, "cpu")
    x = b_graph.input("x", spec)
    flat = b_graph.call(torch.ops.aten.view.default, x, [s0 * s1, 4],
                        spec=tc_ir.TensorSpec((s0 * s1, 4), torch.float32, "cpu"))
    weight = b_graph.input("w", tc_ir.TensorSpec((4, 3), torch.float32, "cpu"))
    y = b_graph.call(torch.ops.aten.mm.default, flat, weight, spec=tc_ir.TensorSpec((s0 * s1, 3), torch.float32, "cpu"))
    b_graph.output(y)
    w = torch.randn(4, 3)
    compiled = tc_inductor.compile(b_graph, [torch.randn(2, 3, 4), w], {"backend": backend, "cache": False})
    for n0, n1 in [(2, 3), (5, 7)]:
        xs = torch.randn(n1, n0, 4).transpose(0, 1)
        torch.testing.assert_close(compiled(xs, w), xs.reshape(n0 * n1, 4) @ w)


def _decomposition_graph(target, specs, *extra):
    graph = tc_ir.Graph()
    inputs = [graph.input(f"x{i}", spec) for i, spec in enumerate(specs)]
    out_spec = tc_ir.TensorSpec((s0, s1, 4), specs[0].dtype, "cpu")
    graph.output(graph.call(target, *inputs, *extra, spec=out_spec))
    return graph


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("case", ["and", "slice_scatter", "slice_scatter_part"])
def test_ops_through_decompositions_over_symbols(backend, case):
    """Ops without a lowering decompose over size symbols as they do over static sizes (a
    ShapeEnv behind the meta tensors), instead of running as extern calls; a decomposition that
    branches on a size (a partial slice_scatter: its end against the size) stays an extern."""
    aten = torch.ops.aten
    f32, b8 = (tc_ir.TensorSpec((s0, s1, 4), dt, "cpu") for dt in (torch.float32, torch.bool))
    if case == "and":
        graph, make, eager = _decomposition_graph(aten.__and__.Tensor, [b8, b8]), \
            (lambda n, m: [torch.rand(n, m, 4) > 0.5, torch.rand(n, m, 4) > 0.5]), torch.bitwise_and
    elif case == "slice_scatter":
        graph = _decomposition_graph(aten.slice_scatter.default, [f32, f32], 1, 0, 2**63 - 1)
        make, eager = (lambda n, m: [torch.randn(n, m, 4), torch.randn(n, m, 4)]), \
            (lambda a, b: torch.slice_scatter(a, b, 1, 0, 2**63 - 1))
    else:
        part = tc_ir.TensorSpec((s0, 2, 4), torch.float32, "cpu")
        graph = _decomposition_graph(aten.slice_scatter.default, [f32, part], 1, 0, 2)
        make, eager = (lambda n, m: [torch.randn(n, m, 4), torch.randn(n, 2, 4)]), \
            (lambda a, b: torch.slice_scatter(a, b, 1, 0, 2))
    compiled = tc_inductor.compile(graph, make(2, 3), {"backend": backend, "cache": False})
    assert compiled.stats["extern_calls"] == (1 if case == "slice_scatter_part" else 0)
    for n, m in [(2, 3), (5, 7)]:
        inputs = make(n, m)
        torch.testing.assert_close(compiled(*inputs), eager(*inputs))
