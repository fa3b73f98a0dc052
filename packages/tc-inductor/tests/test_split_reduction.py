"""Split reductions (split_reduction.py): a reduction of many rows into few outputs runs as two
kernels, partials over chunks of rows, then those reduced. Values against eager on fresh inputs
(C++ and the Triton interpreter) for every layout and reduction kind, ragged chunks, zero-size
and non-contiguous inputs, batch-norm training through tc_autograd; kernel counts show the split
happens where it should and nowhere else."""

from __future__ import annotations

import pytest
import sympy
import torch
from inductor_helpers import build

import tc_inductor
import tc_ir
from tc_inductor import split_reduction

aten = torch.ops.aten
BACKENDS = ["cpp", "triton"]
CL = torch.channels_last
DEFAULT_MIN_ELEMENTS = split_reduction.SPLIT_MIN_ELEMENTS  # (conftest.py lowers it for every test)


def _compile(fn, inputs, backend, **options):
    return tc_inductor.compile(build(fn, inputs), inputs, {"backend": backend, "cache": False, **options})


def _check(fn, make, backend, atol=1e-4, rtol=1e-4):
    """Compile ``fn`` for ``make()``'s inputs, then compare with eager on two fresh sets."""
    inputs = make()
    graph = build(fn, inputs)
    compiled = tc_inductor.compile(graph, inputs, {"backend": backend, "cache": False})
    for _ in range(2):
        fresh = make()
        got, want = compiled(*fresh), tc_ir.interpret(graph, fresh)
        for r, e in zip(tc_ir.leaves(got), tc_ir.leaves(want)):
            assert r.dtype == e.dtype and r.shape == e.shape
            torch.testing.assert_close(r, e, atol=atol, rtol=rtol, equal_nan=True, check_stride=False)
    return compiled


def _unsplit_kernels(fn, inputs, backend, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(split_reduction, "SPLIT_MIN_ROWS", 1 << 62)
        return _compile(fn, inputs, backend).stats["kernels"]


def _stats_fn(g, x):
    """Batch-norm statistics of an image batch: per-channel sum of relu(x) and max."""
    return (g.call(aten.sum.dim_IntList, g.call(aten.relu.default, x), [0, 2, 3]),
            g.call(aten.amax.default, x, [0, 2, 3], True))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["nchw", "nhwc", "transposed"])
def test_per_channel_statistics_are_split_in_every_layout(backend, layout, monkeypatch):
    def make():
        x = torch.randn(8, 16, 32, 32)
        if layout == "nhwc":
            return [x.contiguous(memory_format=CL)]
        if layout == "transposed":  # [N, C, W, H] storage: no run of rows
            return [torch.randn(8, 16, 32, 32).transpose(2, 3)]
        return [x]

    compiled = _check(_stats_fn, make, backend)
    # two reductions of one input: one kernel of partials, one final kernel for both (it waits
    # for that kernel only); the C++ back end splits only where N, H and W are one run of rows
    # (NHWC), not dividing per element
    split = backend == "triton" or layout == "nhwc"
    assert compiled.stats["kernels"] == (2 if split else 1)
    assert _unsplit_kernels(_stats_fn, make(), backend, monkeypatch) == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rt", ["sum", "prod", "amax", "amin", "any", "all", "mean", "var_mean"])
def test_every_reduction_kind_over_a_flat_dim(backend, rt):
    """[5, 10007] over its 10007 rows (prime: the last chunk is ragged) and a full reduction."""
    def fn(g, x):
        if rt in ("any", "all"):
            x = g.call(aten.gt.Scalar, x, 1.5 if rt == "any" else -3.0)
        if rt == "prod":
            x = g.call(aten.add.Tensor, g.call(aten.mul.Tensor, g.call(aten.sigmoid.default, x), 0.02), 0.99)
        op = {"sum": aten.sum.dim_IntList, "prod": aten.prod.dim_int, "amax": aten.amax.default,
              "amin": aten.amin.default, "any": aten.any.dim, "all": aten.all.dim, "mean": aten.mean.dim,
              "var_mean": aten.var_mean.correction}[rt]
        if rt in ("prod", "any", "all"):
            return g.call(op, x, 1), g.call(op, g.call(aten.view.default, x, [-1]), 0)
        if rt == "var_mean":
            return g.call(op, x, [1]), g.call(op, x)
        return g.call(op, x, [1]), g.call(op, x, [0, 1])

    compiled = _check(fn, lambda: [torch.randn(5, 10007)], backend, rtol=1e-3 if rt == "prod" else 1e-4)
    assert compiled.stats["kernels"] >= 4  # each reduction in two kernels


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int32])
def test_partials_keep_the_compute_dtype(backend, dtype):
    """Half-precision sums: partials in float32 (rounding them to bf16 would lose ~3 digits);
    an int32 sum is an exact int64 one."""
    def fn(g, x):
        return g.call(aten.sum.dim_IntList, x, [0, 2, 3]), g.call(aten.amax.default, x, [0, 2, 3])

    def make():
        if dtype == torch.int32:
            return [torch.randint(-1000, 1000, (4, 8, 48, 48), dtype=dtype).contiguous(memory_format=CL)]
        return [torch.randn(4, 8, 48, 48).to(dtype).contiguous(memory_format=CL)]

    x = make()[0]
    k = _compile(fn, [x], backend)
    got = k(x)
    assert k.stats["kernels"] == 2
    want = x.double().sum((0, 2, 3))
    if dtype == torch.int32:
        assert torch.equal(got[0], x.sum((0, 2, 3)))
    else:  # as close to the exact sum as one rounding to the output dtype
        torch.testing.assert_close(got[0].double(), want, atol=0.5, rtol=torch.finfo(dtype).eps)
    assert torch.equal(got[1], x.amax((0, 2, 3)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_producer_indexed_by_division_reads_digit_by_digit(backend):
    """An upsampled value reads x at h // 2: its reduced index is not one run of rows."""
    def fn(g, x):
        up = g.call(aten.upsample_nearest2d.vec, x, None, [2.0, 2.0])
        return g.call(aten.sum.dim_IntList, g.call(aten.mul.Tensor, up, up), [0, 2, 3])

    compiled = _check(fn, lambda: [torch.randn(4, 6, 25, 23)], backend)
    assert compiled.stats["kernels"] == (2 if backend == "triton" else 1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(0, 16, 64, 64), (8, 0, 64, 64), (8, 16, 64, 0)])
def test_zero_size(backend, shape):
    def fn(g, x):
        return g.call(aten.sum.dim_IntList, x, [0, 2, 3]), g.call(aten.mean.dim, x, [0, 2, 3])

    _check(fn, lambda: [torch.randn(shape)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_small_reductions_stay_one_kernel(backend):
    """Too few rows (4*8*8), or enough outputs already (a layer norm's rows): no extra launch."""
    def fn(g, x, y):
        return g.call(aten.sum.dim_IntList, x, [0, 2, 3]), g.call(aten.sum.dim_IntList, y, [1])

    compiled = _check(fn, lambda: [torch.randn(4, 16, 8, 8), torch.randn(8192, 512)], backend)
    assert compiled.stats["kernels"] == 2


def test_plan():
    chunks, size = split_reduction.plan((64,), (64, 56, 56), "sum")
    assert chunks * size == 64 * 56 * 56 and size >= split_reduction.SPLIT_MIN_CHUNK
    assert 64 * chunks <= split_reduction.SPLIT_TARGET_OUTPUTS
    chunks, size = split_reduction.plan((), (50021,), "max")  # prime: ragged, the last chunk short
    assert (chunks - 1) * size < 50021 <= chunks * size
    s = sympy.Symbol("s0", integer=True, positive=True)
    assert split_reduction.plan((64,), (s, 56, 56), "sum") is None  # symbolic: kept whole
    assert split_reduction.plan((64,), (64, 56, 56), "argmax") is None
    assert split_reduction.plan((64,), (16, 8, 8), "sum") is None  # 1024 rows
    assert split_reduction.plan((), (8192,), "sum") is None  # 8192 elements: one fast kernel


def test_plan_defaults(monkeypatch):
    """A softmax's [64, 3000] stays one kernel (it was five: two split reductions); batch-norm
    statistics of ResNet-50's last stage (512 channels, 64*7*7 rows) split."""
    monkeypatch.setattr(split_reduction, "SPLIT_MIN_ELEMENTS", DEFAULT_MIN_ELEMENTS)
    assert split_reduction.plan((64,), (3000,), "max") is None
    assert split_reduction.plan((512,), (64, 7, 7), "sum") is not None
    assert split_reduction.plan((64,), (64, 112, 112), "sum") is not None
    assert split_reduction.plan((2048,), (64, 7, 7), "sum") == (8, 392)  # ResNet-50's last stage
    assert split_reduction.plan((16384,), (8192,), "sum") is None  # enough outputs
    assert split_reduction.plan((0,), (64, 56, 56), "sum") is None


# ---- batch norm in training, through tc_autograd ---------------------------------------------------

def _conv_bn_relu(g, x, w, rm, rv, bw, bb):
    h = g.call(aten.convolution.default, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    h = g.call(torch.nn.functional.batch_norm, h, rm, rv, bw, bb, True, 0.1, 1e-5)
    return g.call(aten.relu.default, h)


def _train(backend, channels_last, calls=2):
    """Compile conv -> batch norm -> relu through tc_autograd; run it ``calls`` times on fresh
    inputs against eager (outputs, gradients, running statistics); the compiled graphs."""
    tc_autograd = pytest.importorskip("tc_autograd")
    specs = [("x", (8, 3, 32, 32)), ("w", (8, 3, 3, 3)), ("rm", (8,)), ("rv", (8,)), ("bw", (8,)), ("bb", (8,))]
    g = tc_ir.Graph()
    nodes = [g.input(n, tc_ir.TensorSpec(s, torch.float32)) for n, s in specs]
    g.output(_conv_bn_relu(g, *nodes))

    def make():
        xs = [torch.randn(s) for _, s in specs]
        xs[3] = xs[3].abs() + 0.5
        if channels_last:
            xs[0] = xs[0].contiguous(memory_format=CL)
        for i in (0, 1, 4, 5):
            xs[i].requires_grad_(True)
        return xs

    compiled = []

    def compiler(graph, examples):
        compiled.append(tc_inductor.compile(graph, examples, {"backend": backend, "cache": False}))
        return compiled[-1]

    f = tc_autograd.aot(g, make(), fw_compiler=compiler, bw_compiler=compiler,
                        decompositions=tc_inductor.decompositions())
    for _ in range(calls):
        a = make()
        b = [t.detach().clone().requires_grad_(t.requires_grad) for t in a]
        got, want = f(*a), tc_ir.interpret(g, b)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        grad = torch.randn_like(want)
        got.backward(grad)
        want.backward(grad)
        for x, y in zip(a, b):
            if x.grad is not None:
                torch.testing.assert_close(x.grad, y.grad, atol=1e-3, rtol=1e-3)
            else:  # running statistics, updated in place
                torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
    return compiled


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("channels_last", [False, True])
def test_batch_norm_training_gradients(backend, channels_last, monkeypatch):
    """conv -> batch norm (training) -> relu over 8*32*32 rows: the statistics, the backward's
    per-channel sums (masked by relu) and the running statistics as eager's; forward and
    backward split their reductions (more kernels than unsplit; NHWC only on the C++ back end)."""
    split = [c.stats["kernels"] for c in _train(backend, channels_last)]
    with monkeypatch.context() as m:
        m.setattr(split_reduction, "SPLIT_MIN_ROWS", 1 << 62)
        whole = [c.stats["kernels"] for c in _train(backend, channels_last, calls=1)]
    if backend == "cpp" and not channels_last:  # NCHW rows are not one run: C++ keeps them whole
        assert split == whole
    else:
        assert split[0] > whole[0] and split[1] > whole[1], (split, whole)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_and_inf_propagate_through_partials(backend):
    """A NaN in one chunk makes its channel's max, min and sum NaN, as eager's; -inf/+inf stay."""
    def fn(g, x):
        return (g.call(aten.amax.default, x, [0, 2, 3]), g.call(aten.amin.default, x, [0, 2, 3]),
                g.call(aten.sum.dim_IntList, x, [0, 2, 3]))

    def make():
        x = torch.randn(8, 4, 32, 32)
        x[5, 1, 7, 3], x[2, 2, 31, 31], x[0, 3, 0, 0] = float("nan"), float("inf"), float("-inf")
        return [x.contiguous(memory_format=CL)]

    compiled = _check(fn, make, backend)
    assert compiled.stats["kernels"] > 1
