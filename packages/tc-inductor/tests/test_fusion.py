"""Kernel counts on hand-built graphs, and the compile-level features around them."""

from __future__ import annotations

import operator

import pytest
import torch
from inductor_helpers import assert_same, build, check

import tc_inductor
import tc_ir

aten = torch.ops.aten
BACKENDS = ["cpp", "triton"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_add_relu_mul_is_one_kernel(backend):
    x, y = torch.randn(33, 17), torch.randn(17)
    k = check(lambda g, x, y: g.call(aten.mul.Tensor, g.call(aten.relu.default, g.call(aten.add.Tensor, x, y)), 2.0),
              [x, y], {"backend": backend}, fresh=[torch.randn(33, 17), torch.randn(17)])
    assert k.stats["kernels"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_softmax_at_most_two_kernels(backend):
    x = torch.randn(16, 100)
    k = check(lambda g, x: g.call(aten._softmax.default, x, -1, False), [x], {"backend": backend}, fresh=[torch.randn(16, 100)])
    assert k.stats["kernels"] <= 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_norm_forward_one_kernel(backend):
    x, w, b = torch.randn(4, 6, 32), torch.randn(32), torch.randn(32)
    k = check(lambda g, x, w, b: g.call(aten.native_layer_norm.default, x, [32], w, b, 1e-5), [x, w, b],
              {"backend": backend})
    assert k.stats["kernels"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_statistic_reshaped_from_keepdim_fuses_into_its_reduction(backend):
    """A per-channel statistic kept as [1, C, 1, 1] and read back as [C] (batch norm's running
    statistics update) indexes the same element, not ``c % C``: it joins the reduction's kernel."""
    def fn(g, x, r):
        mean = g.call(aten.div.Tensor, g.call(aten.sum.dim_IntList, x, [0, 2, 3], True), 105.0)
        return g.call(aten.add.Tensor, g.call(aten.mul.Tensor, g.call(aten.view.default, mean, [12]), 0.1), r)

    k = check(fn, [torch.randn(3, 12, 5, 7), torch.randn(12)], {"backend": backend},
              fresh=[torch.randn(3, 12, 5, 7), torch.randn(12)])
    assert k.stats["kernels"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_gelu_mlp_activation_one_kernel(backend):
    x, w1, b1, w2 = torch.randn(8, 16), torch.randn(32, 16), torch.randn(32), torch.randn(16, 32)

    def mlp(g, x, w1, b1, w2):
        h = g.call(aten.addmm.default, b1, x, g.call(aten.t.default, w1))
        return g.call(aten.mm.default, g.call(aten.gelu.default, h), g.call(aten.t.default, w2))

    k = check(mlp, [x, w1, b1, w2], {"backend": backend})
    assert k.stats["kernels"] == 1 and k.stats["extern_calls"] == 2


def test_long_rows_use_looped_reduction_in_triton():
    x = torch.randn(3, 5000)
    k = check(lambda g, x: g.call(aten._softmax.default, x, -1, False), [x], {"backend": "triton"})
    assert "for roffset" in k.kernels[0] and k.stats["kernels"] == 1


def test_rms_norm_one_kernel():
    x, w = torch.randn(5, 64), torch.randn(64)

    def rms(g, x, w):
        ms = g.call(aten.mean.dim, g.call(aten.mul.Tensor, x, x), [-1], True)
        return g.call(aten.mul.Tensor, g.call(aten.mul.Tensor, x, g.call(aten.rsqrt.default, g.call(aten.add.Scalar, ms, 1e-6))), w)  # noqa: E501

    assert check(rms, [x, w]).stats["kernels"] == 1


def test_fusion_decisions_are_logged(caplog):
    import logging

    caplog.set_level(logging.DEBUG, logger="tc.fusion")
    check(lambda g, x: g.call(aten._softmax.default, x, -1, False), [torch.randn(4, 7)], {"cache": False})
    assert any("fusing" in r.message for r in caplog.records)


def test_unknown_op_runs_as_extern_and_is_right():
    x = torch.randn(6, 5)
    k = check(lambda g, x: g.call(aten.relu.default, g.call(aten.cumsum.default, g.call(aten.exp.default, x), 1)), [x])
    assert k.stats["extern_calls"] == 1 and k.stats["kernels"] == 2


def test_buffers_are_reused():
    x = torch.randn(64, 64)

    def chain(g, x):
        # Each running sum is scaled back to about [-2, 2]: sin and cos of unscaled sums (up to
        # ~100) turn a last-bit difference in exp into 1e-4 errors, which is not what this tests.
        a = g.call(aten.div.Scalar, g.call(aten.cumsum.default, g.call(aten.exp.default, x), 0), 64.0)
        b = g.call(aten.div.Scalar, g.call(aten.cumsum.default, g.call(aten.sin.default, a), 0), 64.0)
        return g.call(aten.cumsum.default, g.call(aten.cos.default, b), 0)

    k = check(chain, [x])
    assert "# reuse" in k.source


def test_output_strides_match_eager():
    x = torch.randn(5, 7)
    g = build(lambda g, x: g.call(aten.mul.Tensor, g.call(aten.t.default, x), 2), [x])
    out = tc_inductor.compile(g, [x])(x)
    assert out.stride() == tc_ir.interpret(g, [x]).stride()


def test_graph_cache_skips_lowering(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_CACHE_DIR", str(tmp_path))
    x = torch.randn(9, 3)
    g = build(lambda g, x: g.call(aten.tanh.default, g.call(aten.add.Tensor, x, x)), [x])
    tc_inductor.compile(g, [x])
    import importlib

    compile_module = importlib.import_module("tc_inductor.compile")

    monkeypatch.setattr(compile_module, "GraphLowering", None)  # a warm compile must not lower
    k = tc_inductor.compile(g, [x])
    torch.testing.assert_close(k(x), torch.tanh(x + x))


def test_graph_cache_ignores_the_graph_name(tmp_path, monkeypatch):
    # capture numbers its graphs per process: the same graph compiled later is forward_3, not forward_0
    monkeypatch.setenv("TC_CACHE_DIR", str(tmp_path))
    x = torch.randn(9, 3)
    first = build(lambda g, x: g.call(aten.sin.default, g.call(aten.mul.Tensor, x, x)), [x])
    tc_inductor.compile(first, [x])
    again = tc_ir.parse(first.format().replace(f"graph {first.name}:", "graph forward_3:"))
    assert again.name == "forward_3"
    import importlib

    monkeypatch.setattr(importlib.import_module("tc_inductor.compile"), "GraphLowering", None)
    k = tc_inductor.compile(again, [x])
    torch.testing.assert_close(k(x), torch.sin(x * x))


def test_artifact_store_is_used(tmp_path):
    class Store:
        def __init__(self):
            self.data = {}

        def get(self, kind, key):
            return self.data.get((kind, key))

        def put(self, kind, key, data):
            self.data[(kind, key)] = data

    store = Store()
    x = torch.randn(3, 11)
    check(lambda g, x: g.call(aten.cos.default, g.call(aten.mul.Tensor, x, 3)), [x], {"artifact_store": store})
    assert store.data


def test_identical_kernels_are_deduplicated():
    x, y = torch.randn(10, 10), torch.randn(10, 10)

    def twice(g, x, y):
        a = g.call(aten.cumsum.default, g.call(aten.sin.default, x), 0)
        return g.call(aten.cumsum.default, g.call(aten.sin.default, a), 0)

    k = check(twice, [x, y])
    assert k.stats["kernels"] == 2 and len(k.kernels) == 1


def test_emulate_precision_casts_rounds_like_eager():
    x = torch.randn(256).bfloat16()
    fn = lambda g, x: g.call(aten.mul.Tensor, g.call(aten.add.Tensor, x, 1.001), 3.0)  # noqa: E731
    g = build(fn, [x])
    exact = tc_inductor.compile(g, [x], {"emulate_precision_casts": True})(x)
    torch.testing.assert_close(exact, tc_ir.interpret(g, [x]), atol=0, rtol=0)


def test_missing_compiler_is_a_clear_error(monkeypatch):
    from tc_inductor.codegen import build as build_module

    build_module.compiler.cache_clear()
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CXX", raising=False)
    try:
        with pytest.raises(tc_inductor.CompilerNotFound, match="C\\+\\+ compiler"):
            build_module.compiler()
    finally:
        build_module.compiler.cache_clear()


def test_decompositions_table():
    table = tc_inductor.decompositions()
    assert aten.gelu.default in table and aten.native_layer_norm_backward.default in table


def test_perf_hints_log(caplog):
    import logging

    caplog.set_level(logging.DEBUG, logger="tc.perf_hints")
    check(lambda g, x: g.call(aten.neg.default, x), [torch.randn(5)], {"cache": False})
    assert any("compile" in r.message for r in caplog.records)


@pytest.mark.cuda
def test_cuda_softmax_and_autotune():
    x = torch.randn(64, 3000, device="cuda")
    k = check(lambda g, x: g.call(aten._softmax.default, x, -1, False), [x])
    assert k.stats["kernels"] <= 2
    check(lambda g, x: g.call(aten.relu.default, g.call(aten.add.Tensor, x, 1)), [x], {"max_autotune": True})


def test_vector_norm_over_negative_size_one_dims_drops_them():
    # torch <= 2.12's reference kept a reduced size-1 dim given as -1 ([5, 1] for [5]).
    x = torch.randn(5, 1)
    k = check(lambda g, x: g.call(aten.linalg_vector_norm.default, x, 2, [-1]), [x])
    assert k(x).shape == (5,)
    table = tc_inductor.decompositions()
    assert table[aten.linalg_vector_norm.default](x, 2, [-1]).shape == (5,)


def test_a_decomposition_of_the_wrong_shape_runs_as_an_extern_call(monkeypatch):
    import sys

    decomps = sys.modules["tc_inductor.decompositions"]  # the package exports a function of that name

    def keeps_dims(x, ord=2, dim=None, keepdim=False, *, dtype=None):
        return x.abs().sum(dim, keepdim=True)  # wrong: ignores keepdim

    real = decomps.find_decomposition
    monkeypatch.setattr(decomps, "find_decomposition",
                        lambda t: keeps_dims if t is aten.linalg_vector_norm.default else real(t))
    x = torch.randn(4, 3)
    k = check(lambda g, x: g.call(aten.linalg_vector_norm.default, x, 1, [1]), [x], {"cache": False})
    assert k.stats["extern_calls"] == 1


def test_timings_cover_every_stage(caplog):
    import logging

    caplog.set_level(logging.DEBUG, logger="tc.perf_hints")
    k = check(lambda g, x: g.call(aten.relu.default, x), [torch.randn(8, 3)], {"cache": False})
    assert {"lower", "schedule", "codegen", "compile_kernels", "wrapper"} <= set(k.timings)


def _linear_relu(g, x, w, b):
    return g.call(aten.relu.default, g.call(aten.add.Tensor, g.call(aten.mm.default, x, w), b))


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_mm_bias_activation_is_addmm_then_one_kernel(backend):
    x, w, b = torch.randn(8, 16), torch.randn(16, 32), torch.randn(32)
    k = check(_linear_relu, [x, w, b], {"backend": backend, "cache": False})
    assert k.stats["extern_calls"] == 1 and k.stats["kernels"] == 1
    from tc_inductor.rewrites import rewrite

    g = build(_linear_relu, [x, w, b])
    assert [n.target for n in rewrite(g).calls] == [aten.addmm.default, aten.relu.default]
    assert [n.target for n in g.calls] == [aten.mm.default, aten.add.Tensor, aten.relu.default]  # pure pass


def test_addmm_gelu_epilogue_is_one_kernel():
    x, w, b = torch.randn(8, 16), torch.randn(16, 32), torch.randn(32)
    k = check(lambda g, x, w, b: g.call(aten.gelu.default, g.call(aten.addmm.default, b, x, w)), [x, w, b])
    assert k.stats["extern_calls"] == 1 and k.stats["kernels"] == 1


@pytest.mark.parametrize("case", ["mm_used_twice", "alpha", "bias_2d_rows", "other_dtype", "mm_plus_itself"])
def test_mm_plus_bias_is_left_alone_when_addmm_differs(case):
    """(``mm_plus_itself``: ``x @ w + x @ w`` of one node, from the fuzzer, made an addmm that read
    the mm it replaced, and the compile failed to eager with ``cannot erase %mm``.)"""
    from tc_inductor.rewrites import rewrite

    x, w = torch.randn(8, 16), torch.randn(16, 32)
    b = {"bias_2d_rows": torch.randn(8, 1), "other_dtype": torch.randn(32, dtype=torch.float64)}.get(case, torch.randn(32))

    def fn(g, x, w, b):
        mm = g.call(aten.mm.default, x, w)
        add = g.call(aten.add.Tensor, mm, mm if case == "mm_plus_itself" else b,
                     kwargs={"alpha": 2} if case == "alpha" else None)
        return (add, mm) if case == "mm_used_twice" else add

    g = build(fn, [x, w, b])
    rewritten = rewrite(g)
    folded = aten.addmm.default in [n.target for n in rewritten.calls]
    assert folded == (case == "bias_2d_rows")  # an [M, 1] bias broadcasts in addmm too
    k = tc_inductor.compile(g, [x, w, b], {"cache": False})
    assert_same(k(x, w, b), tc_ir.interpret(g, [x, w, b]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_fuse_horizontally_only_when_they_share_a_read(backend):
    # two layers' bias gradients (independent inputs) stay apart; two reductions of one input fuse
    def grads(g, a, b):
        return (g.call(aten.sum.dim_IntList, g.call(aten.relu.default, a), [0]),
                g.call(aten.sum.dim_IntList, g.call(aten.tanh.default, b), [0]),
                g.call(aten.amax.default, a, [0]))

    inputs = [torch.randn(64, 48), torch.randn(64, 48)]
    k = check(grads, inputs, {"backend": backend}, fresh=[torch.randn(64, 48), torch.randn(64, 48)])
    assert k.stats["kernels"] == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stored_residual_and_its_layer_norm_are_one_kernel(backend):
    """A layer norm's moments are shifted by each row's first value (lowering/reductions.py),
    a second read of its input at another element. Where that input is also stored (a
    transformer's residual stream, read by the next layer), the kernel recomputes the row's
    first value from the residual's own inputs: one kernel, as before the shift (GPT-2's
    training step on the H100 had gained a kernel and a pass over the stream per layer norm)."""
    def residual_norm(g, x, h, w, b):
        stream = g.call(aten.add.Tensor, h, g.call(aten.mul.Tensor, x, 0.5))
        normed = g.call(operator.getitem, g.call(aten.native_layer_norm.default, stream, [32], w, b, 1e-5), 0)
        return stream, normed

    inputs = [torch.randn(4, 6, 32), torch.randn(4, 6, 32), torch.randn(32), torch.randn(32)]
    k = check(residual_norm, inputs, {"backend": backend}, fresh=[torch.randn(4, 6, 32), torch.randn(4, 6, 32),
                                                                   torch.randn(32), torch.randn(32)])
    assert k.stats["kernels"] == 1
    constant = torch.full((4, 6, 32), 0.1)  # rows of one value: no deviation at all, as eager
    stream, normed = k(constant, constant, torch.ones(32), torch.zeros(32))
    assert torch.equal(normed, torch.zeros_like(normed))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rows_first_value_read_in_its_kernel_is_recomputed_there(backend):
    def centred_sum(g, x):
        y = g.call(aten.add.Tensor, g.call(aten.exp.default, x), 1.0)
        first = g.call(aten.slice.Tensor, y, 1, 0, 1)
        return y, g.call(aten.sum.dim_IntList, g.call(aten.sub.Tensor, y, first), [1])

    k = check(centred_sum, [torch.randn(5, 40)], {"backend": backend}, fresh=[torch.randn(5, 40)])
    assert k.stats["kernels"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_recomputed_first_value_draws_the_same_random_number(backend):
    """A dropout mask recomputed at a row's first element draws what the stored mask drew there."""
    def centred_dropout(g, x):
        y = g.call(operator.getitem, g.call(aten.native_dropout.default, x, 0.5, True), 0)
        first = g.call(aten.slice.Tensor, y, 1, 0, 1)
        return y, g.call(aten.sum.dim_IntList, g.call(aten.sub.Tensor, y, first), [1])

    x = torch.rand(64, 40) + 1  # (no zeros but dropped ones)
    g = build(centred_dropout, [x])
    k = tc_inductor.compile(g, [x], {"backend": backend, "cache": False})
    assert k.stats["kernels"] == 1
    for _ in range(3):
        y, total = k(x)
        assert 0 < (y == 0).sum() < y.numel()
        torch.testing.assert_close(total, (y - y[:, :1]).sum(1))
