"""Channels-last layout around convolutions (layout.py), forced on the CPU with
``conv_layout="always"`` so the NHWC path runs on both back ends (C++ and the Triton
interpreter): values and output strides against eager, training through tc_autograd (saved
activations stay NHWC between forward and backward), and the kernels it generates."""

from __future__ import annotations

import importlib
import operator
import re

import pytest
import torch
from inductor_helpers import assert_same

import tc_inductor
import tc_ir
from tc_inductor import layout
from tc_inductor.lowering import LOWERINGS

F = torch.nn.functional
aten = torch.ops.aten
BACKENDS = ["cpp", "triton"]


def _opts(backend, mode="always", **extra):
    return {"cache": False, "conv_layout": mode, "backend": backend, **extra}


def _graph(fn, specs):
    g = tc_ir.Graph()
    nodes = [g.input(name, spec) for name, spec in specs]
    g.output(fn(g, *nodes))
    return g


def _spec(*shape, dtype=torch.float32):
    return tc_ir.TensorSpec(shape, dtype)


def _fresh(g, channels_last=()):
    out = []
    for node in g.inputs:
        t = torch.randn(node.spec.shape, dtype=node.spec.dtype)
        if node.name.endswith("_rv"):
            t = t.abs() + 0.5
        if node.name in channels_last:
            t = t.contiguous(memory_format=torch.channels_last)
        out.append(t)
    return out


def _check_inference(g, backend, channels_last=(), mode="always"):
    """Compile, then run twice on fresh inputs: values and every output's strides as eager's."""
    compiled = tc_inductor.compile(g, _fresh(g, channels_last), _opts(backend, mode))
    for _ in range(2):
        inputs = _fresh(g, channels_last)
        got, want = compiled(*inputs), tc_ir.interpret(g, inputs)
        assert_same(got, want)
        for r, e, node in zip(tc_ir.leaves(got), tc_ir.leaves(want), tc_ir.leaves(g.outputs)):
            assert r.stride() == tuple(node.spec.stride)  # the contract: outputs keep the specs' strides
            if not channels_last:  # (CPU eager returns NHWC for an NHWC input, its meta kernel NCHW)
                assert r.stride() == e.stride(), (r.stride(), e.stride())
    return compiled


def _conv_bn_relu_residual(g, x, w, rm, rv, bw, bb):
    """conv, batch norm in inference (folded into a per-channel scale and shift), residual, relu."""
    h = g.call(aten.convolution.default, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    scale = g.call(aten.mul.Tensor, g.call(aten.rsqrt.default, g.call(aten.add.Tensor, rv, 1e-5)), bw)
    shift = g.call(aten.sub.Tensor, bb, g.call(aten.mul.Tensor, rm, scale))
    per_channel = [-1, 1, 1]
    h = g.call(aten.add.Tensor, g.call(aten.mul.Tensor, h, g.call(aten.view.default, scale, per_channel)),
               g.call(aten.view.default, shift, per_channel))
    return g.call(aten.relu.default, g.call(aten.add.Tensor, h, x))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("channels_last", [(), ("x",)])
def test_conv_bn_relu_residual_inference(backend, channels_last):
    c = 8
    specs = [("x", _spec(2, c, 6, 6)), ("w", _spec(c, c, 3, 3)), ("bn_rm", _spec(c)), ("bn_rv", _spec(c)),
             ("bn_w", _spec(c)), ("bn_b", _spec(c))]
    if channels_last:
        specs[0] = ("x", _spec(2, c, 6, 6).with_(stride=(6 * 6 * c, 1, 6 * c, c)))
    g = _graph(_conv_bn_relu_residual, specs)
    compiled = _check_inference(g, backend, channels_last)
    assert compiled.stats["extern_calls"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["strided", "dilated", "grouped", "depthwise", "bias"])
def test_conv_variants_then_pointwise(backend, case):
    """conv(x) * 2 + 1, relu, then a second conv: the middle value is channels-last and both
    convolutions read NHWC; the output keeps eager's (NCHW) strides."""
    cin, cout, groups, stride, dil, pad = {"strided": (4, 6, 1, 2, 1, 1), "dilated": (4, 6, 1, 1, 2, 2),
                                           "grouped": (4, 6, 2, 1, 1, 1), "depthwise": (6, 6, 6, 1, 1, 1),
                                           "bias": (4, 6, 1, 1, 1, 1)}[case]
    bias = case == "bias"

    def fn(g, x, w, w2, *b):
        h = g.call(aten.convolution.default, x, w, b[0] if bias else None, [stride, stride], [pad, pad], [dil, dil],
                   False, [0, 0], groups)
        h = g.call(aten.relu.default, g.call(aten.add.Tensor, g.call(aten.mul.Tensor, h, 2.0), 1.0))
        return g.call(aten.convolution.default, h, w2, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)

    specs = [("x", _spec(2, cin, 9, 9)), ("w", _spec(cout, cin // groups, 3, 3)), ("w2", _spec(5, cout, 1, 1))]
    if bias:
        specs.append(("b", _spec(cout)))
    _check_inference(_graph(fn, specs), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_region_values_are_nhwc_and_outputs_are_not(backend):
    """Inside, the relu between two convs is stored channels-last and its kernel iterates in
    storage order (a contiguous store); a graph output that is also in the middle stays NCHW."""
    def fn(g, x, w, w2):
        h = g.call(aten.relu.default, g.call(aten.convolution.default, x, w, None, [1, 1], [1, 1], [1, 1], False,
                                             [0, 0], 1))
        y = g.call(aten.convolution.default, h, w2, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return (g.call(aten.sigmoid.default, y), g.call(aten.neg.default, h))

    g = _graph(fn, [("x", _spec(2, 4, 5, 5)), ("w", _spec(6, 4, 3, 3)), ("w2", _spec(6, 6, 3, 3))])
    on = _check_inference(g, backend)
    off = _check_inference(g, backend, mode="never")
    assert "(150, 1, 30, 6)" in on.source and "(150, 1, 30, 6)" not in off.source
    assert on.stats["kernels"] == off.stats["kernels"] + 1  # + one NHWC copy of the input x


def test_auto_is_off_on_cpu_and_without_convs():
    def fn(g, x, w):
        return g.call(aten.relu.default, g.call(aten.convolution.default, x, w, None, [1, 1], [1, 1], [1, 1], False,
                                                [0, 0], 1))

    g = _graph(fn, [("x", _spec(2, 4, 5, 5)), ("w", _spec(6, 4, 3, 3))])
    auto = tc_inductor.compile(g, _fresh(g), _opts("cpp", "auto"))
    assert "(150, 1, 30, 6)" not in auto.source


@pytest.mark.parametrize("backend", BACKENDS)
def test_as_strided_reader_keeps_eager_layout(backend):
    """A value an as_strided reads has an observable layout: it stays NCHW."""
    def fn(g, x, w):
        h = g.call(aten.relu.default, g.call(aten.convolution.default, x, w, None, [1, 1], [1, 1], [1, 1], False,
                                             [0, 0], 1))
        return g.call(aten.as_strided.default, h, [2, 3], [1, 5])

    g = _graph(fn, [("x", _spec(2, 4, 5, 5)), ("w", _spec(6, 4, 3, 3))])
    _check_inference(g, backend)


# ---- ResNet blocks through tc_autograd (training: forward + backward) ------------------------------

def _basic_block(g, x, p):
    h = _bn(g, g.call(F.conv2d, x, p("w1", 8, 8, 3, 3), None, 1, 1), 8, "bn1", p)
    h = _bn(g, g.call(F.conv2d, g.call(F.relu, h), p("w2", 8, 8, 3, 3), None, 1, 1), 8, "bn2", p)
    return g.call(F.relu, g.call(torch.add, h, x))


def _bottleneck(g, x, p, stride=1):
    h = g.call(F.relu, _bn(g, g.call(F.conv2d, x, p("w1", 4, 16, 1, 1)), 4, "bn1", p))
    h = g.call(F.relu, _bn(g, g.call(F.conv2d, h, p("w2", 4, 4, 3, 3), None, stride, 1), 4, "bn2", p))
    h = _bn(g, g.call(F.conv2d, h, p("w3", 16, 4, 1, 1)), 16, "bn3", p)
    short = x if stride == 1 else _bn(g, g.call(F.conv2d, x, p("wd", 16, 16, 1, 1), None, stride), 16, "bnd", p)
    return g.call(F.relu, g.call(torch.add, h, short))


def _stem(g, x, p, ceil_mode=False):
    """ResNet's stem (7x7 convolution, BN, relu, 3x3 max pooling) before a basic block."""
    h = g.call(F.relu, _bn(g, g.call(F.conv2d, x, p("w0", 8, 3, 7, 7), None, 2, 3), 8, "bn0", p))
    return _basic_block(g, g.call(F.max_pool2d, h, 3, 2, 1, 1, ceil_mode), p)


def _bn(g, h, c, name, p):
    return g.call(F.batch_norm, h, p(name + "_rm", c), p(name + "_rv", c), p(name + "_w", c), p(name + "_b", c),
                  g.meta["train"], 0.1, 1e-5)


def _block_graph(block, cin, train, size=6, **kw):
    g = tc_ir.Graph()
    g.meta["train"] = train
    x = g.input("x", _spec(2, cin, size, size))

    def p(name, *shape):
        return g.input(name, _spec(*shape))

    g.output(block(g, x, p, **kw))
    del g.meta["train"]
    return g


def _aot(g, inputs, backend, mode, compiled):
    tc_autograd = pytest.importorskip("tc_autograd")

    def compiler(graph, examples):
        compiled.append(tc_inductor.compile(graph, examples, _opts(backend, mode)))
        return compiled[-1]

    return tc_autograd.aot(g, inputs, fw_compiler=compiler, bw_compiler=compiler,
                           decompositions=tc_inductor.decompositions())


def _train_inputs(g, channels_last):
    xs = _fresh(g, channels_last)
    for node, t in zip(g.inputs, xs):
        if not node.name.endswith(("_rm", "_rv")):
            t.requires_grad_(True)
    return xs


def _same_layout(a, b) -> bool:
    """Equal strides on every dim of size > 1 (size-1 dims' strides are free, as in torch's own
    contiguity checks: a [4, 16, 1, 1] weight gradient from an NHWC convolution is (16, 1, 16, 16))."""
    return all(x == y for x, y, n in zip(a.stride(), b.stride(), a.shape) if n > 1)


def _run_training(g, backend, channels_last=(), mode="always"):
    # seeded: a batch-norm bias gradient of a few values summed with cancellation was 2e-4 off
    # in float32 for one draw in a few (tc's and eager's summation orders differ), past atol
    torch.manual_seed(0)
    compiled: list = []
    f = _aot(g, _train_inputs(g, channels_last), backend, mode, compiled)
    for _ in range(2):  # fresh inputs each call
        a = _train_inputs(g, channels_last)
        b = [t.detach().clone().requires_grad_(t.requires_grad) for t in a]
        got, want = f(*a), tc_ir.interpret(g, b)
        assert got.stride() == want.stride()
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        grad = torch.randn_like(want)
        got.backward(grad)
        want.backward(grad)
        for node, x, y in zip(g.inputs, a, b):
            if x.grad is not None:
                torch.testing.assert_close(x.grad, y.grad, atol=1e-4, rtol=1e-4)
                assert _same_layout(x.grad, y.grad), node.name
            else:  # running statistics, updated in place
                torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
    return compiled


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("block,cin,kw", [(_basic_block, 8, {}), (_bottleneck, 16, {}),
                                          (_bottleneck, 16, {"stride": 2})], ids=["basic", "bottleneck", "down"])
def test_resnet_block_training(backend, block, cin, kw):
    compiled = _run_training(_block_graph(block, cin, True, **kw), backend)
    forward, backward = compiled
    # the saved conv results come back NHWC and the backward was compiled for them: no copy
    nhwc = [s for s in forward.output_strides if s is not None and len(s) == 4 and s[1] == 1]
    assert nhwc, forward.output_strides
    # (each input's fallback line, ``x = _layout(x, shape, stride)``, names the compiled strides)
    assert all(f", {tuple(st)})" in backward.source for st in nhwc)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("channels_last", [(), ("x",)])
def test_resnet_block_inference(backend, channels_last):
    g = _block_graph(_bottleneck, 16, False)
    if channels_last:
        g.inputs[0].spec = g.inputs[0].spec.with_(stride=(16 * 36, 1, 6 * 16, 16))
    _check_inference(g, backend, channels_last)


def _extern_max_pooling(monkeypatch):
    """Max pooling as an extern call: neither its lowering (lowering/pooling.py, which declines
    large windows) nor torch's decomposition (absent on torch 2.11)."""
    # (``tc_inductor.decompositions`` is also the package's function of that name)
    decompositions = importlib.import_module("tc_inductor.decompositions")
    lowered = decompositions.find_decomposition
    monkeypatch.setattr(decompositions, "find_decomposition", lambda target: None if "max_pool2d" in str(target)
                        else lowered(target))
    for target in (aten.max_pool2d_with_indices.default, aten.max_pool2d_with_indices_backward.default):
        monkeypatch.delitem(LOWERINGS, target)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("pool", ["lowered", "extern"])
def test_max_pooling_stays_in_the_region(backend, ceil_mode, pool, monkeypatch):
    """The stem's pooled values and indices are stored channels-last, the values computed in
    storage order, so nothing between the stem and the block is NCHW (the H100's ResNet-50
    training step spent 0.45 ms in one kernel that read the NCHW pool output beside NHWC
    gradients). As an extern call (torch versions without the decomposition), aten's kernel is
    given an NHWC input and returns NHWC."""
    if pool == "extern":
        _extern_max_pooling(monkeypatch)
    forward, backward = _run_training(_block_graph(_stem, 3, True, size=15, ceil_mode=ceil_mode), backend)
    side = 5 if ceil_mode else 4
    pooled, nchw = (2, 8, side, side), (8 * side * side, side * side, side, 1)
    assert layout.channels_last_strides(pooled) in forward.output_strides  # saved for the backward: NHWC
    assert f"empty_strided({pooled}, {nchw}" not in forward.source  # (the block's output is NCHW: eager's)
    if pool == "extern":  # aten's results are expected NHWC, and its input is given NHWC
        assert f"stride() != {layout.channels_last_strides(pooled)}" in forward.source
        assert "(2, 8, 8, 8), (512, 64, 8, 1)" not in forward.source


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_converting_to_is_no_view(backend, monkeypatch):
    """A ``to`` that converts (autocast's casts around batch norm) makes a new tensor, so what
    follows it stays in the region: the relu before the pool is stored NHWC. Counted as a view,
    it kept ResNet-50's stem relu NCHW (a transposing kernel over [32, 64, 112, 112] each way).
    (The pool is an extern call here: lowered, it computes the relu itself.)"""
    _extern_max_pooling(monkeypatch)
    def fn(g, x, w, w2):
        h = g.call(aten.convolution.default, x, w, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1)
        h = g.call(aten.mul.Tensor, g.call(aten.to.dtype, h, torch.float64), 2.0)
        h = g.call(aten.relu.default, g.call(aten.to.dtype, h, torch.float32))
        pool = g.call(aten.max_pool2d_with_indices.default, h, [3, 3], [2, 2], [1, 1])
        pooled = g.call(operator.getitem, pool, 0, spec=pool.spec[0])
        return g.call(aten.convolution.default, pooled, w2, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)

    g = _graph(fn, [("x", _spec(2, 3, 16, 16)), ("w", _spec(8, 3, 3, 3)), ("w2", _spec(4, 8, 1, 1))])
    compiled = _check_inference(g, backend)
    assert "(2, 8, 8, 8), (512, 64, 8, 1)" not in compiled.source  # the relu: NHWC
    assert "stride() != (128, 1, 32, 8)" in compiled.source  # the pooled values: expected NHWC


def test_training_matches_with_channels_last_input():
    _run_training(_block_graph(_basic_block, 8, True), "cpp", channels_last=("x",))


def test_bottleneck_kernel_counts():
    """The NHWC path adds no kernel but the one input copy: per BN, one statistics kernel and
    one normalise+activation kernel after the convolution, as in NCHW."""
    counts = {}
    for mode in ("never", "always"):
        compiled = _run_training(_block_graph(_bottleneck, 16, True), "cpp", mode=mode)
        counts[mode] = [c.stats["kernels"] for c in compiled]
    assert counts["always"][0] <= counts["never"][0] + 1 and counts["always"][1] <= counts["never"][1], counts


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_norm_statistics_split_over_the_batch(backend):
    """Per-channel sums over N*H*W >= 8192 rows of an NHWC value run as two kernels (partials
    per image, then over the batch): values as eager's, at eager's accuracy."""
    def fn(g, x, w):
        h = g.call(aten.convolution.default, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        mean = g.call(aten.mean.dim, h, [0, 2, 3], True)
        centred = g.call(aten.sub.Tensor, h, mean)
        var = g.call(aten.mean.dim, g.call(aten.mul.Tensor, centred, centred), [0, 2, 3])
        return g.call(aten.amax.default, h, [0, 2, 3]), var, g.call(aten.relu.default, centred)

    g = _graph(fn, [("x", _spec(8, 3, 32, 32)), ("w", _spec(4, 3, 3, 3))])
    compiled = _check_inference(g, backend)
    unsplit = tc_inductor.compile(g, _fresh(g), _opts(backend, "never"))
    assert compiled.stats["kernels"] > unsplit.stats["kernels"]


def _autocast_conv(g, x, w):
    # as under autocast: the weight's half-precision copy is what the convolution reads, so its
    # gradient is cast back to float32 by a kernel (not returned as it is)
    x16, w16 = (g.call(aten._to_copy.default, t, kwargs={"dtype": torch.bfloat16}) for t in (x, w))
    y = g.call(F.conv2d, x16, w16, None, 1, 1)
    return g.call(F.relu, g.call(aten._to_copy.default, y, kwargs={"dtype": torch.float32}))


@pytest.mark.parametrize("backend", BACKENDS)
def test_weight_gradient_is_expected_channels_last(backend):
    """A 3x3 weight's gradient from an NHWC ``convolution_backward`` is compiled for NHWC strides
    (cuDNN returns it so): expected contiguous, it was copied after every backward on the GPU."""
    g = _graph(_autocast_conv, [("x", _spec(2, 8, 6, 6)), ("w", _spec(8, 8, 3, 3))])
    compiled: list = []
    f = _aot(g, _train_inputs(g, ()), backend, "always", compiled)
    for _ in range(2):
        a = _train_inputs(g, ())
        b = [t.detach().clone().requires_grad_() for t in a]
        got, want = f(*a), tc_ir.interpret(g, b)
        grad = torch.randn_like(want)
        got.backward(grad)
        want.backward(grad)
        for x, y in zip(a, b):
            torch.testing.assert_close(x.grad, y.grad, atol=1e-2, rtol=1e-2)
            assert x.grad.stride() == y.grad.stride()
    backward = compiled[1].source
    # convolution_backward's result [1], the weight gradient, checked against channels-last strides
    assert re.search(r"(extern\d+_1) = _layout\(\1, \(8, 8, 3, 3\), \(72, 1, 24, 8\)\)", backward), backward
