"""Soundness: bounds-checked indirect loads, constants that differ only in sign or type, and
eager's strides for zero-size dims. Every case is compared with eager on fresh inputs."""

from __future__ import annotations

import pytest
import torch
from inductor_helpers import assert_same, build

import tc_inductor
import tc_ir
from tc_inductor import kir
from tc_inductor.codegen import triton as triton_backend
from tc_ir.spec import contiguous_strides

aten = torch.ops.aten
BACKENDS = ["cpp", "triton"]


def _emb(g, w, i):
    return g.call(aten.embedding.default, w, i)


def _index(g, w, i):
    return g.call(aten.index.Tensor, w, [i])


def _index_select(g, w, i):
    return g.call(aten.index_select.default, w, 0, i)


def _gather_sum(g, w, i):  # the gather fused into a reduction
    return g.call(aten.sum.dim_IntList, g.call(aten.gather.default, w, 1, i), [1])


def _index_two_dims(g, w, i):
    return g.call(aten.index.Tensor, w, [i, g.call(aten.remainder.Scalar, i, 4)])


# (lowering, index maker for the compile, index values that must raise as in eager)
INDEXING = {
    "embedding": (_emb, lambda: torch.randint(0, 10, (5,)), [12, 10, -1, 10**9]),
    "index": (_index, lambda: torch.randint(-10, 10, (5,)), [10, -11, 10**9, -10**9]),
    "index_select": (_index_select, lambda: torch.randint(0, 10, (5,)), [10, -1]),
    "gather_sum": (_gather_sum, lambda: torch.randint(0, 4, (10, 3)), [4, -1]),
    "index_two_dims": (_index_two_dims, lambda: torch.randint(0, 4, (6,)), [10, -11]),
}


def _eager_error(g, inputs) -> BaseException | None:
    try:
        tc_ir.interpret(g, inputs)
    except tc_ir.InterpretError as e:
        return e.__cause__ or e
    return None


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(INDEXING))
def test_out_of_range_indices_raise_like_eager(name, backend):
    fn, make_index, bad_values = INDEXING[name]
    weight = torch.randn(10, 4)
    g = build(fn, [weight, make_index()])
    k = tc_inductor.compile(g, [weight, make_index()], {"backend": backend})
    for _ in range(2):  # in range: the same values as eager, on fresh inputs
        fresh = [torch.randn(10, 4), make_index()]
        assert_same(k(*fresh), tc_ir.interpret(g, fresh))
    for bad in bad_values:
        index = make_index()
        index.view(-1)[-1] = bad
        assert _eager_error(g, [weight, index]) is not None, "eager accepts it: not an out-of-range case"
        with pytest.raises(IndexError, match=f"index {bad} is out of bounds for dimension with size"):
            k(weight, index)


@pytest.mark.parametrize("backend", BACKENDS)
def test_negative_indices_wrap_only_where_eager_wraps(backend):
    w, i = torch.randn(10, 4), torch.tensor([-1, -10, 3])
    k = tc_inductor.compile(build(_index, [w, i]), [w, i], {"backend": backend})
    torch.testing.assert_close(k(w, i), w[i])
    k = tc_inductor.compile(build(_emb, [w, i.abs()]), [w, i.abs()], {"backend": backend})
    with pytest.raises(IndexError):
        k(w, i)


def test_gpu_source_asserts_each_indirect_load(monkeypatch):
    """The GPU kernel checks with ``tl.device_assert`` in a debug kernel without overflow checks."""
    monkeypatch.setattr(triton_backend, "_interpreting", lambda device: False)
    w, i = torch.randn(10, 4), torch.tensor([1, -2, 3])
    k = tc_inductor.compile(build(_index, [w, i]), [w, i], {"backend": "triton", "cache": False})
    src = k.kernels[0]
    assert "tl.device_assert((i >= 0) & (i < n)" in src and "@triton.jit(debug=True)" in src
    assert src.count("_tc_check_index(") == 2  # the helper and its one use
    torch.testing.assert_close(k(w, i), w[i])  # the GPU source, run by the interpreter
    unchecked = tc_inductor.compile(build(lambda g, x: g.call(aten.relu.default, x), [w]), [w],
                                    {"backend": "triton", "cache": False})
    assert "debug" not in unchecked.kernels[0] and "sanitize_overflow" not in unchecked.source


@pytest.mark.parametrize("rows, checked", [(1000, True), (3_000_000, True), (1000, False)])
def test_a_checked_index_bounds_the_address_for_int32_math(rows, checked):
    """Past its check an index lies in [0, rows): a gather whose addresses then fit in int32 does
    its loop math in int32 (int64 division cost GPU gathers ~15%); a table too large to fit, or an
    unchecked index (unknown bound), keeps int64."""
    x0, x1 = kir.xvars(2)
    index = kir.load("i", x0, torch.int64)
    if checked:
        index = kir.checked_index(index, rows, False)
    sym = kir.indirect_symbol(index)
    kernel = kir.Kernel((64, 1024), (), (kir.Stage((kir.Store("o", 1024 * x0 + x1, kir.load(
        "w", 1024 * sym + x1, torch.float32), torch.float32),), ()),),
        (("w", torch.float32), ("i", torch.int64)), (("o", torch.float32),))
    assert triton_backend.fits_int32(kernel) == (checked and rows * 1024 < triton_backend.INT32_LIMIT)


def test_launch_options_only_for_checked_kernels():
    x0 = kir.xvars(1)[0]
    plain = kir.Kernel((4,), (), (kir.Stage((kir.Store("o", x0, kir.load("a", x0, torch.float32),
                                                       torch.float32),), ()),), (("a", torch.float32),),
                       (("o", torch.float32),))
    assert triton_backend.launch_options(plain) == {} and not kir.has_index_checks(plain)
    sym = kir.indirect_symbol(kir.checked_index(kir.load("i", x0, torch.int64), 10, False))
    checked = kir.Kernel((4,), (), (kir.Stage((kir.Store("o", x0, kir.load("a", sym, torch.float32),
                                                         torch.float32),), ()),),
                         (("a", torch.float32), ("i", torch.int64)), (("o", torch.float32),))
    assert triton_backend.launch_options(checked) == {"sanitize_overflow": False}


# ---- constants: 0.0 vs -0.0, nan, inf, 1 vs 1.0 vs True ---------------------------------------

def test_constant_keys_tell_sign_type_and_nan_apart():
    f32 = torch.float32
    assert kir.const(0.0, f32) != kir.const(-0.0, f32)
    assert hash(kir.const(0.0, f32)) != hash(kir.const(-0.0, f32))
    assert kir.const(float("nan"), f32) == kir.const(float("nan"), f32)
    assert kir.UOp(kir.Ops.CONST, torch.int64, (), 1) != kir.UOp(kir.Ops.CONST, torch.int64, (), True)
    assert kir.UOp(kir.Ops.CONST, f32, (), 1) != kir.UOp(kir.Ops.CONST, f32, (), 1.0)


def _signed_zeros(g, x):
    return (g.call(aten.div.Tensor, x, 0.0), g.call(aten.div.Tensor, x, -0.0),
            g.call(aten.add.Tensor, g.call(aten.mul.Tensor, x, -0.0), 0.0),
            g.call(aten.copysign.Scalar, x, -0.0), g.call(aten.copysign.Scalar, x, 0.0),
            g.call(aten.add.Tensor, x, float("nan")), g.call(aten.mul.Tensor, x, float("inf")),
            g.call(aten.mul.Tensor, x, float("-inf")))


@pytest.mark.parametrize("backend", BACKENDS)
def test_signed_zero_nan_and_inf_constants_in_one_graph(backend):
    x = torch.randn(64)
    k = tc_inductor.compile(build(_signed_zeros, [x]), [x], {"backend": backend})
    for _ in range(2):
        fresh = torch.randn(64)
        fresh[:4] = torch.tensor([0.0, -0.0, 1.0, -1.0])
        got, expected = k(fresh), tc_ir.interpret(build(_signed_zeros, [fresh]), [fresh])
        for r, e in zip(got, expected):
            torch.testing.assert_close(r, e, equal_nan=True)
            assert torch.equal(torch.signbit(r), torch.signbit(e)) or r.isnan().any()


def test_int_float_and_bool_constants_of_equal_value():
    x = torch.randint(-5, 5, (32,))

    def fn(g, x):
        return (g.call(aten.add.Tensor, x, 1), g.call(aten.add.Tensor, x, 1.0), g.call(aten.add.Tensor, x, True),
                g.call(aten.div.Tensor, x, 2), g.call(aten.floor_divide.default, x, 2))

    k = tc_inductor.compile(build(fn, [x]), [x])
    fresh = torch.randint(-5, 5, (32,))
    got, expected = k(fresh), tc_ir.interpret(build(fn, [fresh]), [fresh])
    for r, e in zip(got, expected):
        assert r.dtype == e.dtype
        torch.testing.assert_close(r, e)


# ---- strides of zero-size dims ------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (2, 0, 3), (1, 0), (0,), (3, 1, 0), (2, 1, 3), ()])
def test_contiguous_strides_are_eager_strides(shape):
    assert contiguous_strides(shape) == torch.empty(shape).stride()


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (2, 0, 3)])
def test_zero_size_outputs_have_eager_strides(shape):
    x = torch.randn(shape)
    k = tc_inductor.compile(build(lambda g, x: g.call(aten.mul.Tensor, x, 2.0), [x]), [x])
    assert k(torch.randn(shape)).stride() == (x * 2).stride()


# ---- decompositions that write in place -----------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_ops_whose_decompositions_write_through_views(backend):
    """diagonal_scatter's decomposition is ``out.diagonal().copy_(src)``: recorded as a graph, the
    write went to a copy and was lost (a wrong answer); such decompositions are not used."""
    def fn(g, x, src, row):
        d = g.call(aten.diagonal_scatter.default, x, src, 0, 0, 1)
        s = g.call(aten.slice_scatter.default, x, row, 0, 3, 4, 1)
        return g.call(aten.add.Tensor, d, 1.0), s

    def make():
        return [torch.randn(4, 2), torch.randn(2), torch.randn(1, 2)]

    k = tc_inductor.compile(build(fn, make()), make(), {"backend": backend})
    for _ in range(2):
        fresh = make()
        assert_same(k(*fresh), tc_ir.interpret(build(fn, fresh), fresh))


def test_index_add_rejects_a_source_eager_rejects():
    """torch's index_add decomposition broadcasts a source eager's kernel rejects (OpInfo error input)."""
    x, i, src = torch.randn(3, 2), torch.tensor([0, 2]), torch.randn(2)
    g = build(lambda g, x, i, s: g.call(aten.index_add.default, x, 0, i, s), [x, i, src])
    with pytest.raises(RuntimeError, match="source tensor shape must match"):
        tc_inductor.compile(g, [x, i, src])(x, i, src)
    ok = [torch.randn(3, 2), torch.tensor([0, 2]), torch.randn(2, 2)]
    g = build(lambda g, x, i, s: g.call(aten.index_add.default, x, 0, i, s), ok)
    assert_same(tc_inductor.compile(g, ok)(*ok), tc_ir.interpret(g, ok))


@pytest.mark.parametrize("shape, dims", [((4, 8, 32, 32), [0, 2, 3]), ((3, 50000), [1])])
def test_float_sums_are_as_accurate_as_eager(shape, dims):
    # An in-order float32 sum over a long row lost digits eager keeps: a batch norm's mean of
    # values near 100 was off by 30x eager's error, its normalised output by 2%.
    g = tc_ir.Graph()
    x = g.input("x", tc_ir.TensorSpec(shape, torch.float32))
    g.output(g.call(aten.mean.dim, x, dims))
    compiled = tc_inductor.compile(g, [torch.randn(shape)], {"backend": "cpp", "cache": False})
    for seed in (0, 1):
        t = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 0.01 + 100.0
        exact = t.double().mean(dims)
        eager_err = (t.mean(dims).double() - exact).abs().max().item()
        tc_err = (compiled(t).double() - exact).abs().max().item()
        assert tc_err <= 2 * eager_err + 1e-6


# ---- reductions over no element ------------------------------------------------------------------
# (op, input shape): a static element count of 0 read as "unknown" sized the Triton tile for 1<<20
# elements and dropped its masks (0 divides every block): unmasked loads past the buffer (an illegal
# memory access on the H100's OpInfo sweep, linear's backward over an empty batch; a segfault here).
EMPTY_REDUCTIONS = [
    (lambda g, x: g.call(aten.sum.dim_IntList, x, [0]), (0, 4)),
    (lambda g, x: g.call(aten.sum.dim_IntList, x, [1]), (4, 0)),
    (lambda g, x: g.call(aten.sum.dim_IntList, x, [0, 2]), (0, 3, 5)),
    (lambda g, x: g.call(aten.prod.dim_int, x, 1), (6, 0)),
    (lambda g, x: g.call(aten.mm.default, g.call(aten.t.default, x), x), (0, 3)),
    (lambda g, x: g.call(aten.add.Tensor, g.call(aten.sum.dim_IntList, x, [0], True), 1.5), (0, 7)),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", range(len(EMPTY_REDUCTIONS)))
def test_reductions_over_no_element(backend, case):
    fn, shape = EMPTY_REDUCTIONS[case]
    x = torch.randn(shape)
    g = build(fn, [x])
    compiled = tc_inductor.compile(g, [x], {"backend": backend})
    assert_same(compiled(x), tc_ir.interpret(g, [x]))


def test_an_empty_reduction_keeps_its_masks():
    assert triton_backend._divides((4, 2), {"RBLOCK": 8}, "RBLOCK")
    assert not triton_backend._divides((0, 2), {"RBLOCK": 8}, "RBLOCK")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", [aten.eq.Tensor, aten.lt.Tensor, aten.minimum.default, aten.sub.Tensor])
def test_a_wider_operand_is_rounded_to_the_common_dtype_first(backend, op):
    # Eager casts a float32 0-dim tensor beside a bfloat16 one to bfloat16 before computing; the
    # kernels compared it unrounded: v == s was False where eager's is True (a tie the rounding
    # makes), and minimum's backward split its gradient differently (fuzz seed 86701).
    v = torch.tensor([1.0, 1.0078125, 1.00390625, -2.5], dtype=torch.bfloat16)
    s = torch.tensor(1.00490625)  # between two bfloat16 values: rounds to 1.0078125
    g = build(lambda g, a, b: g.call(op, a, b), [v, s])
    options = {"backend": backend} if backend == "triton" else {}
    got, want = tc_inductor.compile(g, [v, s], options)(v, s), op(v, s)
    assert got.dtype == want.dtype and torch.equal(got, want)
