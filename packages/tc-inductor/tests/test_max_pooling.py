"""Max pooling as generated code (lowering/pooling.py), forward and backward, against eager.

ATen-level graphs of ``max_pool{2,3}d_with_indices`` (values, and indices exactly) and of its
backward on the forward's indices; torch-level graphs through tc_autograd (1-d, 2-d and 3-d
pooling, training: gradients against eager autograd). Window parameters, NaN, ties, -inf,
channels-last and non-contiguous inputs, zero-size batches, float32/float64/bfloat16; C++ kernels
everywhere and Triton (interpreted on a CPU) for a few. Every compiled graph runs on fresh inputs
too, and the kernels must be ours: no extern call, no reduction kernel."""

from __future__ import annotations

import itertools
import operator

import numpy as np
import pytest
import torch
from triton.runtime import interpreter

import tc_inductor
import tc_ir

F = torch.nn.functional
aten = torch.ops.aten
NAN, INF = float("nan"), float("inf")
TOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 1e-2}

# (kernel, stride, padding, dilation, ceil_mode): every combination of the asked-for values
# that eager accepts (padding at most half the kernel)
CONFIGS = [c for c in itertools.product((2, 3), (1, 2, 3), (0, 1), (1, 2), (False, True)) if c[2] <= c[0] // 2]


def _id(config) -> str:
    k, s, p, d, c = config
    return f"k{k}s{s}p{p}d{d}{'c' if c else ''}"


@pytest.fixture(autouse=True)
def gpu_maxnum(monkeypatch):
    """The interpreter's float max/min ignore NaN as the GPU's do (see test_triton_nan.py), so a
    NaN that a GPU kernel would drop is dropped here too."""
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_maxnumf",
                        lambda self, a, b: self.binary_op(a, b, np.fmax))
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_minnumf",
                        lambda self, a, b: self.binary_op(a, b, np.fmin))


def _opts(backend: str, **extra) -> dict:
    return {"backend": backend, "cache": False, **extra}


def _pool_args(config) -> tuple:
    k, s, p, d, c = config
    return [k, k], [s, s], [p, p], [d, d], c


def _forward_graph(x: torch.Tensor, op, args: tuple) -> tc_ir.Graph:
    g = tc_ir.Graph()
    node = g.input("x", tc_ir.TensorSpec.from_tensor(x))
    pool = g.call(op, node, *args)
    g.output((g.call(operator.getitem, pool, 0, spec=pool.spec[0]),
              g.call(operator.getitem, pool, 1, spec=pool.spec[1])))
    return g


def _backward_graph(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor, op, args: tuple) -> tc_ir.Graph:
    g = tc_ir.Graph()
    nodes = [g.input(n, tc_ir.TensorSpec.from_tensor(t)) for n, t in (("g", grad), ("x", x), ("i", indices))]
    g.output(g.call(op, nodes[0], nodes[1], *args, nodes[2]))
    return g


def _assert_same(got, want, dtype) -> None:
    """Values within the dtype's tolerance (NaN where eager's), indices exactly, eager's strides."""
    for r, e in zip(tc_ir.leaves(got), tc_ir.leaves(want), strict=True):
        assert r.dtype == e.dtype and r.shape == e.shape, (r.dtype, e.dtype, r.shape, e.shape)
        tol = 0 if e.dtype == torch.int64 else TOL[dtype]
        # bf16 backward: eager rounds after each window's addition, tc once, so a gradient summed
        # from overlapping windows (with cancellation) differs by ulps of its terms, not of itself
        atol = tol * (1 + e.detach().double().nan_to_num(0, 0, 0).abs().max().item()) \
            if dtype == torch.bfloat16 and e.numel() else tol
        torch.testing.assert_close(r, e, atol=atol, rtol=tol, equal_nan=True)
        assert all(a == b for a, b, n in zip(r.stride(), e.stride(), r.shape) if n > 1), (r.stride(), e.stride())


def _ours(compiled) -> None:
    """No extern call and no reduction: the pooling is the lowering's, not ATen's or torch's
    decomposition (a gather, then a max over the window)."""
    assert compiled.stats["extern_calls"] == 0, compiled.source
    assert not any("RBLOCK" in k or "int64_t r0 " in k for k in compiled.kernels), compiled.kernels


def _check_forward(make, op, args, backend="cpp", dtype=torch.float32, ours=True):
    """Compile max pooling of ``make()`` (a fresh input each call) and compare values and indices
    with eager on it and on two fresh inputs; then the backward on the forward's indices."""
    x = make()
    compiled = tc_inductor.compile(_forward_graph(x, op, args), [x], _opts(backend))
    if ours:
        _ours(compiled)
    for fresh in (x, make(), make()):
        want = op(fresh, *args)
        _assert_same(compiled(fresh), want, dtype)
    _check_backward(fresh, want[1], op, args, backend, dtype, ours)
    return compiled


def _check_backward(x, indices, op, args, backend, dtype, ours=True):
    backward = {aten.max_pool2d_with_indices.default: aten.max_pool2d_with_indices_backward.default,
                aten.max_pool3d_with_indices.default: aten.max_pool3d_with_indices_backward.default}[op]
    bargs = tuple(args) + ([], [0], [1], False)[len(args) - 1:]  # the backward's schema has no defaults

    def fresh():
        return torch.randn(indices.shape, dtype=dtype, device=indices.device)

    first = fresh()
    compiled = tc_inductor.compile(_backward_graph(first, x, indices, backward, bargs), [first, x, indices],
                                   _opts(backend))
    if ours:
        _ours(compiled)
    for grad in (first, fresh()):
        _assert_same(compiled(grad, x, indices), backward(grad, x, *bargs, indices), dtype)


# ---- forward and backward on ATen graphs ----------------------------------------------------------------

@pytest.mark.parametrize("config", CONFIGS, ids=_id)
def test_window_parameters(config):
    """Kernel 2/3, stride 1/2/3, padding 0/1, dilation 1/2, ceil_mode, on odd and even sizes."""
    for h, w in ((9, 8), (7, 11)):
        _check_forward(lambda h=h, w=w: torch.randn(2, 3, h, w), aten.max_pool2d_with_indices.default, _pool_args(config))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("config", [(3, 2, 1, 1, False), (2, 1, 1, 2, True)], ids=_id)
def test_dtypes(dtype, config):
    _check_forward(lambda: torch.randn(2, 3, 9, 10, dtype=dtype), aten.max_pool2d_with_indices.default,
                   _pool_args(config), dtype=dtype)


def _special(shape, dtype=torch.float32):
    """Windows of NaN (one, several, all), +-inf, -inf everywhere (eager's index: the window's
    first position in the input), and constant runs (ties: the first wins), at random places."""
    def make():
        x = torch.randn(shape, dtype=dtype)
        flat = x.view(-1)
        n = flat.numel()
        perm = torch.randperm(n)
        flat[perm[: n // 10]] = NAN
        flat[perm[n // 10: n // 5]] = -INF
        flat[perm[n // 5: n // 4]] = INF
        x[0, 0] = -INF  # a plane of -inf: every window is all -inf (padding too)
        x[0, 1] = 1.5  # a plane of ties
        x[1, 0, 1:4] = NAN  # rows of NaN: windows of NaN only
        x[1, 1] = torch.randint(0, 3, x[1, 1].shape).to(dtype)  # many ties in a window
        return x
    return make


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("config", [(3, 2, 1, 1, False), (3, 1, 1, 2, True), (2, 2, 0, 1, True)], ids=_id)
def test_nan_ties_and_infinities(backend, config):
    """NaN wins (the last NaN's index, as eager's ``val > max || isnan(val)``), ties keep the
    first element, padding never wins, all -inf gives eager's starting index."""
    _check_forward(_special((2, 3, 9, 8)), aten.max_pool2d_with_indices.default, _pool_args(config), backend)


def test_nan_ties_and_infinities_bfloat16():
    _check_forward(_special((2, 3, 9, 8), torch.bfloat16), aten.max_pool2d_with_indices.default,
                   _pool_args((3, 2, 1, 1, False)), dtype=torch.bfloat16)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_channels_last_input(backend):
    """Values, indices and the gradient laid out as eager lays them out: channels-last."""
    def make():
        return torch.randn(2, 5, 9, 9).contiguous(memory_format=torch.channels_last)

    _check_forward(make, aten.max_pool2d_with_indices.default, _pool_args((3, 2, 1, 1, False)), backend)


@pytest.mark.parametrize("view", ["transposed", "sliced", "unbatched"])
def test_non_contiguous_and_unbatched_inputs(view):
    def make():
        if view == "transposed":
            return torch.randn(2, 3, 8, 9).transpose(2, 3)
        if view == "sliced":
            return torch.randn(2, 6, 9, 18)[:, ::2, :, 1::2]
        return torch.randn(3, 9, 9)

    _check_forward(make, aten.max_pool2d_with_indices.default, _pool_args((3, 2, 1, 1, True)))


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_zero_size_batch(backend):
    x = torch.randn(0, 3, 8, 8)
    op, args = aten.max_pool2d_with_indices.default, _pool_args((3, 2, 1, 1, False))
    compiled = tc_inductor.compile(_forward_graph(x, op, args), [x], _opts(backend))
    _assert_same(compiled(x), op(x, *args), torch.float32)
    indices = op(x, *args)[1]
    _check_backward(x, indices, op, args, backend, torch.float32)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_windows_wholly_in_the_padding(backend):
    """Dilation 2 over a 1-pixel image: the window's elements are at -1 and 1, both outside.
    Eager gives -inf and the index of its starting position (1 * 1 + 1 = 2, past the plane);
    the convolution fuzzer meets this. (Eager's CPU backward then writes out of bounds: not compared.)"""
    op, args = aten.max_pool2d_with_indices.default, _pool_args((2, 1, 1, 2, True))
    first = torch.randn(2, 3, 1, 1)
    compiled = tc_inductor.compile(_forward_graph(first, op, args), [first], _opts(backend))
    _ours(compiled)
    for x in (first, torch.randn(2, 3, 1, 1), torch.randn(2, 3, 3, 1)[:, :, :1]):
        _assert_same(compiled(x), op(x, *args), torch.float32)


@pytest.mark.parametrize("config", [(2, 2, 0, 1, False), (3, 2, 1, 1, True), (3, 2, 1, 2, False)], ids=_id)
def test_3d(config):
    """(A 3x3x3 window is past ``MAX_WINDOW``: the first dim's is 2 here.)"""
    k, s, p, d, c = config
    args = [2, k, k], [s] * 3, [min(p, 1)] * 3, [d] * 3, c
    _check_forward(lambda: torch.randn(2, 2, 5, 7, 6), aten.max_pool3d_with_indices.default, args)


def test_parameters_as_eager_reads_them():
    """One value for every dim, an empty stride (the kernel's), defaults left out, unequal dims."""
    op = aten.max_pool2d_with_indices.default
    for args in (([3],), ([3, 2], []), ([2, 3], [1, 2], [1, 0]), ([3, 2], [2], [1], [1, 1], True)):
        _check_forward(lambda: torch.randn(2, 3, 8, 7), op, args)


@pytest.mark.parametrize("stride", [1, 2])
def test_the_largest_unrolled_window(stride):
    """5x5 (``MAX_WINDOW``): forward 25 elements, backward up to 25 windows. The values and the
    indices share one walk of each window: built twice, comparing the two equal trees took
    2**25 steps (a 3-d 2x3x3 pooling compiled in 10 s, a 5x5 one never)."""
    _check_forward(lambda: torch.randn(2, 3, 11, 10), aten.max_pool2d_with_indices.default,
                   _pool_args((5, stride, 2, 1, False)))


def test_large_windows_are_not_unrolled():
    """A window past ``MAX_WINDOW`` elements runs eager's kernel, not torch 2.13's decomposition
    (``decompositions.WRONG_DECOMPOSITIONS``: its index of a NaN window is the first NaN's)."""
    compiled = _check_forward(_special((2, 2, 12, 12)), aten.max_pool2d_with_indices.default,
                              _pool_args((6, 1, 0, 1, False)), ours=False)
    assert compiled.stats["extern_calls"] == 1


def test_integer_inputs_are_not_lowered():
    from tc_inductor.lowering import LOWERINGS

    class Ctx:
        spec = None

    with pytest.raises(tc_inductor.ir.Unsupported):
        LOWERINGS[aten.max_pool2d_with_indices.default](Ctx(), _Buffer((1, 1, 4, 4), torch.int64), [2])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_float64_forward_on_cuda_declines(dtype, device):
    """float64 on CUDA is eager's kernel (ptxas miscompiled the index chain twice, NOTES §30-31);
    every other dtype and device is lowered. Decided from the specs alone, so it runs anywhere."""
    from tc_inductor.lowering import LOWERINGS

    x = _Buffer((1, 2, 6, 6), dtype, device)
    out = tc_ir.TensorSpec((1, 2, 3, 3), dtype, device=torch.device(device))

    class Ctx:
        spec = (out, tc_ir.TensorSpec((1, 2, 3, 3), torch.int64, device=torch.device(device)))

    lower = LOWERINGS[aten.max_pool2d_with_indices.default]
    if dtype == torch.float64 and device == "cuda":
        with pytest.raises(tc_inductor.ir.Unsupported, match="float64 max pooling on CUDA"):
            lower(Ctx(), x, [2])
    else:
        values, indices = lower(Ctx(), x, [2])
        assert values.dtype == dtype and indices.dtype == torch.int64


class _Buffer(tc_inductor.ir.BufferValue):
    def __init__(self, shape, dtype, device="cpu"):
        super().__init__("b", shape, tc_ir.spec.contiguous_strides(shape), dtype, torch.device(device))


# ---- training through tc_autograd: gradients against eager autograd --------------------------------------

def _train(fn, x, backend="cpp"):
    """``fn(g, x)`` as a torch-level graph, trained through tc_autograd on fresh inputs: the
    output, and x's gradient for a random cotangent, against eager autograd."""
    tc_autograd = pytest.importorskip("tc_autograd")
    g = tc_ir.Graph()
    node = g.input("x", tc_ir.TensorSpec.from_tensor(x))
    g.output(fn(g, node))
    compiled = []

    def compiler(graph, examples):
        compiled.append(tc_inductor.compile(graph, examples, _opts(backend)))
        return compiled[-1]

    f = tc_autograd.aot(g, [x.detach().requires_grad_()], fw_compiler=compiler, bw_compiler=compiler,
                        decompositions=tc_inductor.decompositions())
    for _ in range(2):
        a = _fresh_like(x).requires_grad_()
        b = a.detach().clone().requires_grad_()
        got, want = f(a), tc_ir.interpret(g, [b])
        torch.testing.assert_close(got, want, equal_nan=True)
        cotangent = torch.randn_like(want)
        (ga,), (gb,) = torch.autograd.grad(got, [a], cotangent), torch.autograd.grad(want, [b], cotangent)
        torch.testing.assert_close(ga, gb, atol=1e-5, rtol=1e-5, equal_nan=True)
        assert all(s == t for s, t, n in zip(ga.stride(), gb.stride(), ga.shape) if n > 1)
    for c in compiled:
        _ours(c)
    return compiled


def _fresh_like(x: torch.Tensor) -> torch.Tensor:
    fresh = torch.randn(x.shape, dtype=x.dtype)
    return fresh.contiguous(memory_format=torch.channels_last) if x.dim() == 4 and \
        x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous() else fresh


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("config", [(3, 2, 1, 1, False), (3, 1, 1, 1, True), (2, 2, 0, 2, True)], ids=_id)
def test_training_2d(backend, config):
    """Overlapping windows (kernel 3 over stride 2 and 1), dilation, ceil_mode: the gradient is
    the backward's gather, fused with the pointwise ops on either side (one kernel each way)."""
    k, s, p, d, c = config

    def fn(g, x):
        return g.call(torch.mul, g.call(F.max_pool2d, g.call(torch.sin, x), k, s, p, d, c), 3.0)

    forward, backward = _train(fn, torch.randn(2, 3, 9, 10), backend)
    assert backward.stats["kernels"] == 1, backward.kernels


def test_training_channels_last():
    def fn(g, x):
        return g.call(F.max_pool2d, x, 3, 2, 1)

    _train(fn, torch.randn(2, 4, 9, 9).contiguous(memory_format=torch.channels_last))


@pytest.mark.parametrize("config", [(3, 2, 1, 1, False), (2, 1, 0, 2, True), (3, 3, 1, 1, True)], ids=_id)
def test_training_1d(config):
    k, s, p, d, c = config
    _train(lambda g, x: g.call(F.max_pool1d, x, k, s, p, d, c), torch.randn(2, 3, 13))


def test_training_3d():
    _train(lambda g, x: g.call(F.max_pool3d, x, (2, 3, 3), 2, 1), torch.randn(2, 2, 5, 6, 7))


def test_training_ties_and_nan():
    """Constant windows (the gradient goes to each window's first element, summed over the
    windows that share it) and NaN."""
    x = torch.ones(2, 3, 8, 8)
    _train(lambda g, x: g.call(F.max_pool2d, g.call(torch.round, x), 3, 1, 1), x)
    _train(lambda g, x: g.call(F.max_pool2d, g.call(torch.log, x), 3, 2), x)  # log of negatives: NaN


# ---- on the GPU ------------------------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("config", [(3, 2, 1, 1, False), (3, 1, 1, 2, True), (2, 2, 0, 1, True)], ids=_id)
def test_cuda(dtype, config):
    """Triton kernels on the GPU against eager's CUDA kernels: NCHW, channels-last, NaN and ties,
    forward and backward. (3, 2, 1, 1) in bfloat16 is the config whose backward Triton 3.6
    compiled wrong at 16 elements a thread (NOTES §28; tc runs at most 8 now)."""
    op, args = aten.max_pool2d_with_indices.default, _pool_args(config)
    special = _special((4, 16, 15, 14), dtype)
    _check_forward(lambda: special().cuda(), op, args, "triton", dtype)
    x = special().cuda().contiguous(memory_format=torch.channels_last)
    compiled = tc_inductor.compile(_forward_graph(x, op, args), [x], _opts("triton"))
    _ours(compiled)
    for fresh in (x, special().cuda().contiguous(memory_format=torch.channels_last)):
        got, nhwc, nchw = compiled(fresh), op(fresh, *args), op(fresh.contiguous(), *args)
        # Eager's CUDA channels-last kernel starts each window's index at the plane's first
        # element: where a window's max is -inf (all -inf) it returns 0, its NCHW kernel (and the
        # CPU's) the window's first position. tc returns the latter in both layouts; elsewhere
        # eager's two kernels agree.
        _assert_same(got, (nhwc[0], nchw[1].contiguous(memory_format=torch.channels_last)), dtype)
        finite = nhwc[0] != -INF
        assert torch.equal(nhwc[1][finite], nchw[1][finite])
    _check_backward(fresh, got[1], op, args, "triton", dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("size", [6, 7, 12], ids=str)
def test_cuda_indices_beside_float64_pointwise(size):
    """The kernel timm's dla46_c training got wrong on the H200 in float64 at 96x96 (NOTES §30):
    a 2x2/2 pooling's indices over a 6x6 map, fused beside a batch norm and ReLU of another
    tensor of the output's shape. Its int64 index math came out of ptxas -O3 (12.8 to 13.0) with
    hundreds of the 4,608 indices wrong; int32 index math was right here, but not in inception_v3
    (§31), so a float64 forward on CUDA is eager's kernel now: one extern call beside one kernel."""
    g = torch.Generator().manual_seed(size)
    x = torch.randn(4, 128, size, size, generator=g, dtype=torch.float64).cuda()
    a = torch.randn(4, 128, size // 2, size // 2, generator=g, dtype=torch.float64).cuda()
    stats = [torch.randn(128, 1, 1, generator=g, dtype=torch.float64).cuda() for _ in range(4)]
    gr = tc_ir.Graph()
    xn, an, *sn = (gr.input(f"i{i}", tc_ir.TensorSpec.from_tensor(t)) for i, t in enumerate([x, a, *stats]))
    bn = gr.call(aten.add.Tensor, gr.call(aten.mul.Tensor, gr.call(aten.mul.Tensor, gr.call(
        aten.sub.Tensor, an, sn[0]), sn[1]), sn[2]), sn[3])
    pool = gr.call(aten.max_pool2d_with_indices.default, xn, [2, 2], [2, 2])
    gr.output((gr.call(aten.relu.default, bn), gr.call(operator.getitem, pool, 1, spec=pool.spec[1])))
    compiled = tc_inductor.compile(gr, [x, a, *stats], _opts("triton"))
    assert len(compiled.kernels) == 1 and compiled.stats["extern_calls"] == 1, compiled.source
    for fresh in (x, torch.randn_like(x)):
        relu, indices = compiled(fresh, a, *stats)
        torch.testing.assert_close(relu, torch.relu((a - stats[0]) * stats[1] * stats[2] + stats[3]))
        assert torch.equal(indices, F.max_pool2d_with_indices(fresh, 2, 2)[1])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_backward_with_channel_sums(dtype):
    """ResNet's stem pooling (k3 s2 p1, channels-last, 16x64x112x112) backward with batch norm's
    per-channel sums of ``grad * x`` after it, in one graph, at tc's own configs; every gradient
    element is compared with eager's; the backward's gather fuses into the reduction kernels."""
    op, args = aten.max_pool2d_with_indices.default, _pool_args((3, 2, 1, 1, False))
    x = torch.randn(16, 64, 112, 112, device="cuda", dtype=dtype).contiguous(memory_format=torch.channels_last)
    indices = op(x, *args)[1]
    grad = torch.randn(indices.shape, device="cuda", dtype=dtype).contiguous(memory_format=torch.channels_last)
    g = tc_ir.Graph()
    gn, xn, idx = (g.input(n, tc_ir.TensorSpec.from_tensor(t)) for n, t in (("g", grad), ("x", x), ("i", indices)))
    gi = g.call(aten.max_pool2d_with_indices_backward.default, gn, xn, *args, idx)
    prod = g.call(aten.mul.Tensor, g.call(aten._to_copy.default, gi, kwargs={"dtype": torch.float32}),
                  g.call(aten._to_copy.default, xn, kwargs={"dtype": torch.float32}))
    g.output((gi, g.call(aten.sum.dim_IntList, prod, [0, 2, 3])))
    compiled = tc_inductor.compile(g, [grad, x, indices], _opts("triton"))
    for _ in range(2):
        want = aten.max_pool2d_with_indices_backward.default(grad, x, *args, indices)
        got, sums = compiled(grad, x, indices)
        _assert_same(got, want, dtype)
        ref = (want.double() * x.double()).sum([0, 2, 3])
        torch.testing.assert_close(sums.double(), ref, rtol=1e-3, atol=1e-2 * ref.abs().max().item())
        grad = torch.randn_like(grad)
