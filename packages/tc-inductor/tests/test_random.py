"""Random ops as generated kernels: Philox numbers, seeds per call, lowerings, fusion, training.

Results are not eager's numbers (a different generator), so these tests check distributions,
exact relations (dropout's output against the mask it returns), reproducibility under
``torch.manual_seed``, and that C++ and Triton kernels agree for the same seeds.
"""

from __future__ import annotations

import math
import operator
import re

import pytest
import torch

import tc_inductor
import tc_ir

aten = torch.ops.aten
BACKENDS = ["cpp", "triton"]


def compile_graph(fn, inputs, backend, **options):
    g = tc_ir.Graph()
    nodes = [g.input(f"in{i}", tc_ir.TensorSpec.from_tensor(t)) for i, t in enumerate(inputs)]
    g.output(fn(g, *nodes))
    return tc_inductor.compile(g, inputs, {"backend": backend, "cache": False, **options})


def with_seeds(compiled, seeds: list[int]):
    """``compiled`` with the wrapper's per-call seed draw replaced by ``seeds`` (to compare backends)."""
    wrapper_globals = compiled._fn.__globals__
    wrapper_globals["randint"] = lambda low, high, size, dtype, device: torch.tensor(seeds[:size[0]], dtype=dtype,
                                                                                     device=device)
    return compiled


def dropout_outputs(g, x, p, train=True):
    node = g.call(aten.native_dropout.default, x, p, train)
    return tuple(g.call(operator.getitem, node, i) for i in (0, 1))


def device_kwargs(x):
    return {"device": x.spec.device}


def dropout_graph(p):
    """``relu(dropout(x + 1))`` as the autograd tracer writes dropout on CPU (bernoulli + div + mul)."""
    def fn(g, x):
        h = g.call(aten.add.Tensor, x, 1.0)
        keep = g.call(aten.bernoulli.p, g.call(aten.empty_like.default, h), 1 - p)
        mask = g.call(aten.div.Scalar, keep, 1 - p)
        return (g.call(aten.relu.default, g.call(aten.mul.Tensor, h, mask)), mask)
    return fn


# ---- the numbers --------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_uniform_and_normal_moments(backend):
    x = torch.empty(100_003)
    k = compile_graph(lambda g, x: (g.call(aten.rand_like.default, x), g.call(aten.randn_like.default, x)), [x], backend)
    assert k.stats["kernels"] == 1 and k.stats["extern_calls"] == 0
    u, n = k(x)
    assert u.dtype == n.dtype == torch.float32 and u.shape == n.shape == x.shape
    assert 0 <= u.min() and u.max() < 1
    se = 5 / math.sqrt(x.numel())  # five standard errors of a unit-variance mean
    assert abs(u.mean() - 0.5) < se * math.sqrt(1 / 12)
    assert abs(u.var() - 1 / 12) < se * math.sqrt(1 / 180)  # var of (U - 1/2)^2 is 1/180
    assert abs(n.mean()) < se and abs(n.std() - 1) < se
    assert abs((n.abs() < 1).float().mean() - 0.6827) < se  # shape, not just moments
    assert (u.unique().numel() > 0.99 * x.numel())  # no short cycles or repeated streams


def test_cpp_and_triton_give_the_same_numbers():
    x = torch.empty(37, 29)
    fn = lambda g, x: (g.call(aten.rand_like.default, x), g.call(aten.randn_like.default, x))  # noqa: E731
    seeds = [12345, -(2**62) + 7]
    cpp = with_seeds(compile_graph(fn, [x], "cpp"), seeds)(x)
    triton = with_seeds(compile_graph(fn, [x], "triton"), seeds)(x)
    assert torch.equal(cpp[0], triton[0])  # same Philox words, same float mapping
    torch.testing.assert_close(cpp[1], triton[1], rtol=1e-5, atol=1e-5)  # log/cos differ in the last bits


def test_philox_known_answer():
    """Philox4x32-10's published test vector (Random123 kat_vectors): counter 0, key 0 -> first
    word 0x6627e8d5, whose uniform is (0x6627e8d5) * 2^-31 as triton.language.random maps it."""
    x = torch.empty(1)
    k = with_seeds(compile_graph(lambda g, x: g.call(aten.rand_like.default, x), [x], "cpp"), [0])
    assert k(x).item() == pytest.approx(0x6627E8D5 * 4.6566127342e-10, rel=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fresh_numbers_each_call_and_manual_seed_repeats(backend):
    x = torch.empty(64, 3)
    k = compile_graph(lambda g, x: (g.call(aten.rand_like.default, x), g.call(aten.rand_like.default, x)), [x], backend)
    torch.manual_seed(7)
    a1, b1 = k(x)
    a2, _ = k(x)
    assert not torch.equal(a1, a2) and not torch.equal(a1, b1)  # calls differ, and so do two ops
    torch.manual_seed(7)
    a3, b3 = k(x)
    assert torch.equal(a1, a3) and torch.equal(b1, b3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dtypes_and_odd_noncontiguous_shapes(backend, dtype):
    x = torch.randn(13, 7, 5).to(dtype).permute(2, 0, 1)  # odd sizes, not contiguous
    fn = lambda g, x: (g.call(aten.rand_like.default, x), g.call(aten.randn_like.default, x),  # noqa: E731
                       g.call(aten.rand.default, [3, 11], kwargs={"dtype": dtype, **device_kwargs(x)}),
                       g.call(aten.randn.default, [5], kwargs={"dtype": dtype, **device_kwargs(x)}))
    u, n, r, rn = compile_graph(fn, [x], backend)(x)
    expected = [torch.rand_like(x), torch.randn_like(x), torch.rand(3, 11, dtype=dtype), torch.randn(5, dtype=dtype)]
    for got, want in zip((u, n, r, rn), expected):
        assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
    assert 0 <= u.min() and u.max() < 1 and 0 <= r.min() and r.max() < 1
    assert abs(u.float().mean() - 0.5) < 0.1 and abs(n.float().mean()) < 0.3 and n.isfinite().all()


def test_low_precision_uniform_stays_below_one():
    x = torch.empty(200_000, dtype=torch.bfloat16)
    u = compile_graph(lambda g, x: g.call(aten.rand_like.default, x), [x], "cpp")(x)
    assert u.max() < 1 and u.max() == 1 - 2**-8  # the top of the range is kept, not rounded up


# ---- bernoulli, dropout, uniform/normal ---------------------------------------------------------------

def _binomial_ok(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_native_dropout_mask_and_scale(backend):
    x = torch.randn(301, 333)
    p = 0.3
    k = compile_graph(lambda g, x: dropout_outputs(g, x, p), [x], backend)
    assert k.stats["kernels"] == 1
    out, mask = k(x)
    assert mask.dtype == torch.bool and out.dtype == x.dtype
    assert _binomial_ok(int(mask.sum()), x.numel(), 1 - p)
    torch.testing.assert_close(out, x * mask * (1 / (1 - p)), rtol=0, atol=0)  # as ATen computes it
    assert (out[~mask] == 0).all()


@pytest.mark.parametrize("p,train", [(0.0, True), (1.0, True), (0.5, False), (0.5, None)])
def test_native_dropout_edge_cases(p, train):
    x = torch.randn(40, 9)
    out, mask = compile_graph(lambda g, x: dropout_outputs(g, x, p, train), [x], "cpp")(x)
    if train is False or p == 0.0:
        assert mask.all() and torch.equal(out, x)
    elif p == 1.0:
        assert not mask.any() and (out == 0).all()
    else:  # train=None means training, as in ATen
        assert _binomial_ok(int(mask.sum()), x.numel(), 0.5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bernoulli_forms(backend):
    x = torch.empty(50_000)
    probs = torch.rand(50_000)
    fn = lambda g, x, q: (g.call(aten.bernoulli.p, x, 0.2), g.call(aten.bernoulli.p, x, spec=x.spec),  # noqa: E731
                          g.call(aten.bernoulli.default, q), g.call(aten.bernoulli.Tensor, x, q))
    a, b, c, d = compile_graph(fn, [x, probs], backend)(x, probs)
    n = x.numel()
    assert _binomial_ok(int(a.sum()), n, 0.2)
    assert _binomial_ok(int(b.sum()), n, 0.5)  # bernoulli.p without p, as functionalized bernoulli_(x) gives
    for draws in (c, d):
        assert set(draws.unique().tolist()) <= {0.0, 1.0}
        # P(draw = 1 | q) = q: the draws are ones where q is large far more often than where small
        assert abs(draws.mean() - probs.mean()) < 0.02
        assert draws[probs < 0.1].mean() < 0.1 < 0.9 < draws[probs > 0.9].mean()


def test_bernoulli_certain_probabilities():
    q = torch.tensor([0.0, 1.0] * 500).to(torch.bfloat16)
    got = compile_graph(lambda g, q: g.call(aten.bernoulli.default, q), [q], "cpp")(q)
    assert got.dtype == torch.bfloat16 and torch.equal(got, q)


@pytest.mark.parametrize("backend", BACKENDS)
def test_uniform_and_normal_ops(backend):
    x = torch.empty(40_000)
    mean = torch.full((40_000,), 3.0)
    fn = lambda g, x, m: (g.call(aten.uniform.default, x, -2.0, 6.0), g.call(aten.normal_functional.default, x, 1.0, 2.0),  # noqa: E731
                          g.call(aten.normal.Tensor_float, m, 0.5))
    u, n, nt = compile_graph(fn, [x, mean], backend)(x, mean)
    assert -2 <= u.min() and u.max() < 6 and abs(u.mean() - 2) < 0.1
    assert abs(n.mean() - 1) < 0.05 and abs(n.std() - 2) < 0.05
    assert abs(nt.mean() - 3) < 0.02 and abs(nt.std() - 0.5) < 0.02


# ---- fusion -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_dropout_fuses_with_producer_and_consumer(backend):
    x = torch.randn(64, 50)
    k = compile_graph(dropout_graph(0.25), [x], backend)
    assert k.stats["kernels"] == 1 and k.stats["extern_calls"] == 0
    y, mask = k(x)
    keep = mask != 0
    assert _binomial_ok(int(keep.sum()), x.numel(), 0.75)
    # the output and the saved mask come from the same draw, though both are stored
    torch.testing.assert_close(y, torch.relu((x + 1) * mask), rtol=0, atol=0)


def test_random_value_read_by_two_kernels_agrees():
    """A dropout mask read by a reduction and by a pointwise kernel: recomputing the draw in
    each kernel gives the same numbers (same seed and element index), so both agree."""
    x = torch.randn(16, 40)

    def fn(g, x):
        keep = g.call(aten.bernoulli.p, g.call(aten.empty_like.default, x), 0.5)
        return (g.call(aten.sum.dim_IntList, g.call(aten.mul.Tensor, x, keep), [1]),
                g.call(aten.mul.Tensor, g.call(aten.t.default, keep), 3.0))

    for backend in BACKENDS:
        sums, scaled = compile_graph(fn, [x], backend)(x)
        mask = scaled.t() / 3
        assert set(mask.unique().tolist()) == {0.0, 1.0}
        torch.testing.assert_close(sums, (x * mask).sum(1))


# ---- one kernel source for every layer ----------------------------------------------------------------

def dropout_layers(n: int, p: float, with_masks: bool):
    """``n`` layers of ``x = dropout(relu(x @ w))`` (the matmul an extern call, so a kernel
    boundary): every layer's kernel differs from the others only in its random op's seed slot."""
    def fn(g, x, w):
        masks = []
        for _ in range(n):
            node = g.call(aten.native_dropout.default, g.call(aten.relu.default, g.call(aten.mm.default, x, w)), p, True)
            x = g.call(operator.getitem, node, 0, spec=node.spec[0])
            masks.append(g.call(operator.getitem, node, 1, spec=node.spec[1]))
        return (x, *masks) if with_masks else x
    return fn


@pytest.mark.parametrize("backend", BACKENDS)
def test_layers_differing_only_in_seed_slots_share_one_kernel_source(backend):
    x, w = torch.randn(8, 48), torch.randn(48, 48) / 4
    k = compile_graph(dropout_layers(4, 0.5, with_masks=False), [x, w], backend)
    assert k.stats["kernels"] == 4 and len(k.kernels) == 1, "the seed slot leaked into the kernel source"
    if backend == "triton":  # one compiled kernel for every slot (Triton would compile slot 1 in)
        assert "do_not_specialize=['seed0']" in k.kernels[0]
    torch.manual_seed(5)
    y1 = k(x, w)
    assert not torch.equal(y1, k(x, w))
    torch.manual_seed(5)
    assert torch.equal(y1, k(x, w))


@pytest.mark.parametrize("backend", BACKENDS)
def test_layers_sharing_a_kernel_draw_their_own_masks(backend):
    x, w = torch.randn(8, 48), torch.randn(48, 48) / 4
    k = compile_graph(dropout_layers(4, 0.5, with_masks=True), [x, w], backend)
    # the masks returned are drawn again (same seeds) in the layers' kernels: no extra launch
    assert k.stats["kernels"] == 4 and len(k.kernels) <= 3
    y, *masks = k(x, w)
    for i, a in enumerate(masks):
        assert _binomial_ok(int(a.sum()), a.numel(), 0.5)
        assert all(not torch.equal(a, b) for b in masks[i + 1:]), "two layers drew the same mask"
    # the masks recomputed for the outputs are the ones each layer's kernel applied
    expected = x
    for mask in masks:
        expected = torch.relu(expected @ w) * mask * 2.0
    torch.testing.assert_close(y, expected)


# ---- training through tc_autograd ---------------------------------------------------------------------

def test_dropout_gradient_uses_the_forward_mask():
    tc_autograd = pytest.importorskip("tc_autograd")
    g = tc_ir.Graph("drop")
    x = g.input("x", tc_ir.TensorSpec((128, 64), requires_grad=True))
    w = g.input("w", tc_ir.TensorSpec((128, 64), requires_grad=True))
    h = g.call(torch.nn.functional.dropout, g.call(operator.mul, x, w), 0.4, True)
    g.output(g.call(torch.relu, h))
    compiled = []

    def compiler(graph, inputs):
        compiled.append(tc_inductor.compile(graph, inputs, {"cache": False}))
        return compiled[-1]

    xv, wv = torch.randn(128, 64, requires_grad=True), torch.randn(128, 64, requires_grad=True)
    f = tc_autograd.aot(g, [xv, wv], fw_compiler=compiler, bw_compiler=compiler,
                        decompositions=tc_inductor.decompositions())
    y = f(xv, wv)
    grad = torch.randn_like(y)
    y.backward(grad)
    assert all(c.stats["extern_calls"] == 0 for c in compiled), [c.source for c in compiled]
    pre = (xv * wv).detach()
    kept = y.detach() != 0  # the mask where relu lets it show: kept and a positive product
    scale = 1 / (1 - 0.4)
    torch.testing.assert_close(y.detach(), torch.relu(pre * kept * scale))
    expected = grad * kept * scale  # d relu(dropout(x * w)) / d(x * w) for the mask the forward used
    torch.testing.assert_close(xv.grad, expected * wv.detach())
    torch.testing.assert_close(wv.grad, expected * xv.detach())
    assert _binomial_ok(int(kept.sum()), int((pre > 0).sum()), 0.6)


# ---- the GPU path ---------------------------------------------------------------------------------------

@pytest.mark.cuda
def test_cuda_random_kernels():
    x = torch.randn(1000, 1003, device="cuda")
    fn = lambda g, x: (g.call(aten.rand_like.default, x), g.call(aten.randn_like.default, x),  # noqa: E731
                       *dropout_outputs(g, x, 0.1))
    k = compile_graph(fn, [x], "auto")
    assert k.stats["kernels"] == 1 and k.stats["extern_calls"] == 0 and "tl.rand" in k.kernels[0]
    torch.manual_seed(3)
    u, n, out, mask = k(x)
    torch.manual_seed(3)
    u2, *_ = k(x)
    assert torch.equal(u, u2) and not torch.equal(u, k(x)[0])
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 1e-3 and abs(n.std() - 1) < 1e-2
    assert _binomial_ok(int(mask.sum()), x.numel(), 0.9)
    torch.testing.assert_close(out, x * mask * (1 / 0.9), rtol=0, atol=0)
    # GPU Triton and CPU C++ kernels agree for the same seeds
    seeds = [99, 12345678901]
    gpu = with_seeds(compile_graph(fn, [x], "auto"), seeds)(x)
    cpu = with_seeds(compile_graph(fn, [x.cpu()], "cpp"), seeds)(x.cpu())
    assert torch.equal(gpu[0].cpu(), cpu[0])
    torch.testing.assert_close(gpu[1].cpu(), cpu[1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_kernel_draws_a_bounded_number_of_masks(backend):
    # A mask returned (saved for the backward) reads only its seed, so it may join any kernel of
    # its shape: 24 of GPT-2's joined its forward's first kernel, whose 24 Philox generators took
    # Triton 11-13 s to compile. At most MAX_HORIZONTAL_DRAWS join one kernel; launches unchanged.
    from tc_inductor.scheduler import MAX_HORIZONTAL_DRAWS

    x, w = torch.randn(8, 48), torch.randn(48, 48) / 4
    k = compile_graph(dropout_layers(8, 0.5, with_masks=True), [x, w], backend)
    draws = [len(set(re.findall(r"\bseed(\d+)\b", source))) for source in k.kernels]  # seed parameters
    assert k.stats["kernels"] == 8 and max(draws) <= MAX_HORIZONTAL_DRAWS, draws
    y, *masks = k(x, w)
    expected = x
    for mask in masks:
        expected = torch.relu(expected @ w) * mask * 2.0
    torch.testing.assert_close(y, expected)
