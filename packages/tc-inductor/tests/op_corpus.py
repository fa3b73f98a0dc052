"""The op corpus: every ATen op tc_inductor lowers (plus extern ones), with input makers.

Each entry builds one call from a few tensors; ``cases`` gives several (shape, dtype, layout)
variants per op, and dtypes eager rejects for an op are skipped automatically.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import torch

aten = torch.ops.aten
F32, BF16, F16, I64, BOOL = torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool


@attrs.frozen
class Op:
    name: str
    call: Callable  # (graph, *input nodes) -> node
    nargs: int = 1
    domain: str = "any"  # any | positive | unit | nonzero2 (second arg nonzero) | index
    dtypes: tuple = (F32, BF16, I64, BOOL)
    shapes: str = "elementwise"  # elementwise | broadcast | matrix | fixed
    interpret_ok: bool = True  # runs under the Triton interpreter (no libdevice there)
    # Random ops: ``check(inputs, got, eager)`` tests the result's distribution and exact
    # relations instead of equality with eager (a different generator draws the numbers).
    check: Callable | None = None


def u(target, *extra, **kw) -> Callable:
    return lambda g, x: g.call(target, x, *extra, kwargs=kw or None)


def b(target, *extra, **kw) -> Callable:
    return lambda g, x, y: g.call(target, x, y, *extra, kwargs=kw or None)


FLOATS = (F32, BF16)
ALL = (F32, BF16, I64, BOOL)
NUM = (F32, BF16, I64)

OPS: list[Op] = []


def add(name, call, nargs=1, **kw):
    OPS.append(Op(name, call, nargs, **kw))


# ---- unary math --------------------------------------------------------------------------------
for _n in ["exp", "exp2", "expm1", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asinh", "erf", "erfc",
           "sigmoid"]:
    add(_n, u(getattr(aten, _n).default), dtypes=(F32, BF16, I64))
for _n in ["log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal"]:
    add(_n, u(getattr(aten, _n).default), domain="positive", dtypes=(F32, BF16, I64))
for _n in ["asin", "acos", "atanh", "erfinv"]:
    add(_n, u(getattr(aten, _n).default), domain="unit", dtypes=FLOATS, interpret_ok=_n == "atanh")
add("acosh", lambda g, x: g.call(aten.acosh.default, g.call(aten.add.Tensor, x, 1.5)), domain="positive", dtypes=FLOATS)
add("atan", u(aten.atan.default), dtypes=FLOATS, interpret_ok=False)
add("lgamma", u(aten.lgamma.default), domain="positive", dtypes=FLOATS, interpret_ok=False)
add("logit", u(aten.logit.default), domain="unit01", dtypes=FLOATS)
for _n in ["neg", "abs", "sign", "sgn", "square", "relu"]:
    add(_n, u(getattr(aten, _n).default), dtypes=NUM)
for _n in ["floor", "ceil", "trunc", "frac"]:
    add(_n, u(getattr(aten, _n).default), dtypes=NUM if _n != "frac" else FLOATS)
add("round", u(aten.round.default), dtypes=FLOATS, interpret_ok=False)
add("round.decimals", u(aten.round.decimals, decimals=2), dtypes=(F32,), interpret_ok=False)
for _n in ["silu", "mish", "hardsigmoid", "hardswish"]:
    add(_n, u(getattr(aten, _n).default), dtypes=FLOATS)
add("gelu", u(aten.gelu.default), dtypes=FLOATS)
add("gelu.tanh", u(aten.gelu.default, approximate="tanh"), dtypes=FLOATS)
add("hardtanh", u(aten.hardtanh.default, -0.5, 0.7), dtypes=FLOATS)
add("leaky_relu", u(aten.leaky_relu.default, 0.1), dtypes=FLOATS)
add("softplus", u(aten.softplus.default, 2.0, 1.0), dtypes=FLOATS)
add("elu", u(aten.elu.default, 0.5), dtypes=FLOATS)
add("threshold", u(aten.threshold.default, 0.1, 5.0), dtypes=NUM)
for _n in ["isnan", "isinf", "isfinite", "signbit", "isposinf", "isneginf"]:
    add(_n, u(getattr(aten, _n).default), dtypes=(F32, BF16, I64) if _n not in ("isposinf", "isneginf", "signbit") else (F32, I64))  # noqa: E501
add("bitwise_not", u(aten.bitwise_not.default), dtypes=(I64, BOOL))
add("logical_not", u(aten.logical_not.default), dtypes=ALL)
add("clone", u(aten.clone.default), dtypes=ALL)
add("positive", u(aten.positive.default), dtypes=NUM)
add("_to_copy.f16", u(aten._to_copy.default, dtype=F16), dtypes=ALL)
add("_to_copy.i64", u(aten._to_copy.default, dtype=I64), dtypes=(F32, BOOL))
add("_to_copy.bool", u(aten._to_copy.default, dtype=BOOL), dtypes=(F32, I64))
add("convert_element_type", u(torch.ops.prims.convert_element_type.default, torch.float64), dtypes=ALL)
add("clamp", u(aten.clamp.default, -0.5, 0.5), dtypes=(F32, BF16))
add("clamp_min", u(aten.clamp_min.default, 0.2), dtypes=NUM)
add("clamp_max", u(aten.clamp_max.default, 0.2), dtypes=NUM)
add("pow.Tensor_Scalar2", u(aten.pow.Tensor_Scalar, 2), dtypes=NUM)
add("pow.Tensor_Scalar2.5", u(aten.pow.Tensor_Scalar, 2.5), domain="positive", dtypes=FLOATS)
add("pow.Scalar", lambda g, x: g.call(aten.pow.Scalar, 1.5, x), dtypes=(F32,))
add("add.Scalar", u(aten.add.Scalar, 3), dtypes=NUM)
add("sub.Scalar", u(aten.sub.Scalar, 3), dtypes=NUM)
add("mul.Scalar", u(aten.mul.Scalar, 3), dtypes=NUM)
add("div.Scalar", u(aten.div.Scalar, 3), dtypes=NUM)
add("rsub.Scalar", u(aten.rsub.Scalar, 3), dtypes=NUM)
add("remainder.Scalar", u(aten.remainder.Scalar, 3), dtypes=NUM)
add("fmod.Scalar", u(aten.fmod.Scalar, 3), dtypes=NUM)
add("eq.Scalar", u(aten.eq.Scalar, 0), dtypes=ALL)
add("ne.Scalar", u(aten.ne.Scalar, 0), dtypes=ALL)
add("lt.Scalar", u(aten.lt.Scalar, 0), dtypes=NUM)
add("le.Scalar", u(aten.le.Scalar, 0), dtypes=NUM)
add("gt.Scalar", u(aten.gt.Scalar, 0), dtypes=NUM)
add("ge.Scalar", u(aten.ge.Scalar, 0), dtypes=NUM)
add("masked_fill", lambda g, x: g.call(aten.masked_fill.Scalar, x, g.call(aten.gt.Scalar, x, 0), 7), dtypes=NUM)
add("fill.Scalar", u(aten.fill.Scalar, 2), dtypes=ALL)
add("zeros_like", u(aten.zeros_like.default), dtypes=ALL)
add("ones_like", u(aten.ones_like.default), dtypes=ALL)
add("full_like", u(aten.full_like.default, 3), dtypes=NUM)
add("new_zeros", u(aten.new_zeros.default, [3, 2]), dtypes=NUM)
add("new_ones", u(aten.new_ones.default, [3, 2]), dtypes=NUM)
add("new_full", u(aten.new_full.default, [3, 2], 5), dtypes=NUM)

# ---- binary ------------------------------------------------------------------------------------
for _n in ["add", "sub", "mul"]:
    add(f"{_n}.Tensor", b(getattr(aten, _n).Tensor), 2, shapes="broadcast", dtypes=NUM)
add("add.Tensor.alpha", b(aten.add.Tensor, alpha=2), 2, shapes="broadcast", dtypes=NUM)
add("rsub.Tensor", b(aten.rsub.Tensor), 2, shapes="broadcast", dtypes=NUM)
add("div.Tensor", b(aten.div.Tensor), 2, shapes="broadcast", domain="nonzero2", dtypes=NUM)
add("div.floor", b(aten.div.Tensor_mode, rounding_mode="floor"), 2, shapes="broadcast", domain="nonzero2", dtypes=NUM)
add("div.trunc", b(aten.div.Tensor_mode, rounding_mode="trunc"), 2, shapes="broadcast", domain="nonzero2", dtypes=NUM)
add("floor_divide", b(aten.floor_divide.default), 2, shapes="broadcast", domain="nonzero2", dtypes=NUM)
add("remainder.Tensor", b(aten.remainder.Tensor), 2, shapes="broadcast", domain="nonzero2", dtypes=NUM)
add("fmod.Tensor", b(aten.fmod.Tensor), 2, shapes="broadcast", domain="nonzero2", dtypes=NUM)
for _n in ["maximum", "minimum", "fmax", "fmin"]:
    add(_n, b(getattr(aten, _n).default), 2, shapes="broadcast", dtypes=NUM if _n in ("maximum", "minimum") else FLOATS)
add("pow.Tensor_Tensor", b(aten.pow.Tensor_Tensor), 2, shapes="broadcast", domain="positive", dtypes=(F32, BF16))
add("atan2", b(aten.atan2.default), 2, shapes="broadcast", dtypes=FLOATS, interpret_ok=False)
add("hypot", b(aten.hypot.default), 2, shapes="broadcast", dtypes=FLOATS)
add("copysign", b(aten.copysign.Tensor), 2, shapes="broadcast", dtypes=FLOATS)
add("nextafter", b(aten.nextafter.default), 2, shapes="broadcast", dtypes=(F32,), interpret_ok=False)
add("xlogy", b(aten.xlogy.Tensor), 2, shapes="broadcast", domain="positive", dtypes=FLOATS)
for _n in ["bitwise_and", "bitwise_or", "bitwise_xor"]:
    add(f"{_n}.Tensor", b(getattr(aten, _n).Tensor), 2, shapes="broadcast", dtypes=(I64, BOOL))
add("bitwise_left_shift", b(aten.bitwise_left_shift.Tensor), 2, shapes="broadcast", domain="shift", dtypes=(I64,))
add("bitwise_right_shift", b(aten.bitwise_right_shift.Tensor), 2, shapes="broadcast", domain="shift", dtypes=(I64,))
for _n in ["logical_and", "logical_or", "logical_xor"]:
    add(_n, b(getattr(aten, _n).default), 2, shapes="broadcast", dtypes=ALL)
for _n in ["eq", "ne", "lt", "le", "gt", "ge"]:
    add(f"{_n}.Tensor", b(getattr(aten, _n).Tensor), 2, shapes="broadcast", dtypes=NUM)
add("where.self", lambda g, x, y: g.call(aten.where.self, g.call(aten.gt.Scalar, x, 0), x, y), 2,
    shapes="broadcast", dtypes=ALL)
add("clamp.Tensor", lambda g, x, y: g.call(aten.clamp.Tensor, x, y, None), 2, shapes="broadcast", dtypes=(F32, I64))
add("lerp.Scalar", b(aten.lerp.Scalar, 0.3), 2, shapes="broadcast", dtypes=FLOATS)
add("addcmul", lambda g, x, y: g.call(aten.addcmul.default, x, y, y, kwargs={"value": 0.5}), 2, shapes="broadcast", dtypes=FLOATS)
add("addcdiv", lambda g, x, y: g.call(aten.addcdiv.default, x, x, y, kwargs={"value": 0.5}), 2, shapes="broadcast",
    domain="nonzero2", dtypes=FLOATS)
add("threshold_backward", b(aten.threshold_backward.default, 0.0), 2, shapes="broadcast", dtypes=FLOATS)
add("sigmoid_backward", b(aten.sigmoid_backward.default), 2, shapes="broadcast", dtypes=FLOATS)
add("tanh_backward", b(aten.tanh_backward.default), 2, shapes="broadcast", dtypes=FLOATS)
add("gelu_backward", b(aten.gelu_backward.default), 2, shapes="broadcast", dtypes=FLOATS)
add("copy", b(aten.copy.default), 2, shapes="broadcast", dtypes=NUM)

# ---- reductions -----------------------------------------------------------------------------------
R = (F32, BF16, I64, BOOL)
add("sum.dim", u(aten.sum.dim_IntList, [-1]), shapes="matrix", dtypes=R)
add("sum.dim0.keepdim", u(aten.sum.dim_IntList, [0], True), shapes="matrix", dtypes=(F32, I64))
add("sum.default", u(aten.sum.default), shapes="matrix", dtypes=R)
add("mean.dim", u(aten.mean.dim, [-1], True), shapes="matrix", dtypes=FLOATS)
add("mean.default", u(aten.mean.default), shapes="matrix", dtypes=FLOATS)
add("amax", u(aten.amax.default, [-1]), shapes="matrix", dtypes=NUM)
add("amin", u(aten.amin.default, [0], True), shapes="matrix", dtypes=NUM)
add("max.default", u(aten.max.default), shapes="matrix", dtypes=NUM)
add("min.default", u(aten.min.default), shapes="matrix", dtypes=NUM)
add("max.dim", u(aten.max.dim, -1), shapes="matrix", dtypes=(F32, I64))
add("min.dim", u(aten.min.dim, 0, True), shapes="matrix", dtypes=(F32, I64))
add("argmax", u(aten.argmax.default, -1), shapes="matrix", dtypes=(F32, I64))
add("argmin", u(aten.argmin.default, 0), shapes="matrix", dtypes=(F32, I64))
add("argmax.flat", u(aten.argmax.default), shapes="matrix", dtypes=(F32,))
add("prod.dim", u(aten.prod.dim_int, -1), shapes="matrix", domain="near1", dtypes=(F32, I64))
add("prod.default", u(aten.prod.default), shapes="matrix", domain="near1", dtypes=(F32,))
add("any.dim", u(aten.any.dim, -1), shapes="matrix", dtypes=(F32, BOOL))
add("all.dim", u(aten.all.dim, 0), shapes="matrix", dtypes=(F32, BOOL))
add("any.default", u(aten.any.default), shapes="matrix", dtypes=(BOOL,))
add("all.default", u(aten.all.default), shapes="matrix", dtypes=(BOOL,))
add("var.correction", lambda g, x: g.call(aten.var.correction, x, [-1], kwargs={"correction": 1}), shapes="matrix", dtypes=FLOATS)
add("std.correction", lambda g, x: g.call(aten.std.correction, x, [0], kwargs={"correction": 0, "keepdim": True}),
    shapes="matrix", dtypes=(F32,))
add("var_mean", lambda g, x: g.call(aten.var_mean.correction, x, [-1], kwargs={"correction": 1}), shapes="matrix", dtypes=(F32,))
add("_softmax", u(aten._softmax.default, -1, False), shapes="matrix", dtypes=FLOATS)
add("_softmax.dim0", u(aten._softmax.default, 0, False), shapes="matrix", dtypes=(F32,))
add("_log_softmax", u(aten._log_softmax.default, -1, False), shapes="matrix", dtypes=FLOATS)
add("logsumexp", u(aten.logsumexp.default, [-1]), shapes="matrix", dtypes=(F32,))
# (bf16 left out: meta gives f32 mean/rstd, CPU eager gives bf16, and tc follows the graph's spec)
add("native_layer_norm", lambda g, x: g.call(aten.native_layer_norm.default, x, [x.spec.shape[-1]], None, None, 1e-5),
    shapes="matrix", dtypes=(F32,))
add("linalg_vector_norm", u(aten.linalg_vector_norm.default, 2, [-1]), shapes="matrix", dtypes=(F32,))
add("linalg_vector_norm.dims", u(aten.linalg_vector_norm.default, 3.0, [-2, -1]), shapes="matrix", dtypes=(F32, BF16))
add("linalg_vector_norm.keepdim", u(aten.linalg_vector_norm.default, 1, [-2], True), shapes="matrix", dtypes=(F32,))
add("linalg_vector_norm.inf", u(aten.linalg_vector_norm.default, float("inf"), [-1]), shapes="matrix", dtypes=(F32,))

# ---- views and movement -------------------------------------------------------------------------
add("view", lambda g, x: g.call(aten.view.default, x, [-1]), shapes="matrix", dtypes=ALL)
add("reshape.split", lambda g, x: g.call(aten.reshape.default, g.call(aten.mul.Tensor, x, x), [x.spec.shape[0], -1, 1]),
    shapes="matrix", dtypes=NUM)
add("_unsafe_view", lambda g, x: g.call(aten._unsafe_view.default, x, [x.spec.numel]), shapes="matrix", dtypes=ALL)
add("permute", u(aten.permute.default, [1, 0]), shapes="matrix", dtypes=ALL)
add("transpose", u(aten.transpose.int, 0, 1), shapes="matrix", dtypes=ALL)
add("t", u(aten.t.default), shapes="matrix", dtypes=ALL)
add("expand", lambda g, x: g.call(aten.expand.default, g.call(aten.unsqueeze.default, x, 0), [3, -1, -1]),
    shapes="matrix", dtypes=ALL)
add("slice", u(aten.slice.Tensor, 1, 1, 100, 2), shapes="matrix", dtypes=ALL)
add("select", u(aten.select.int, 0, -1), shapes="matrix", dtypes=ALL)
add("squeeze.dim", lambda g, x: g.call(aten.squeeze.dim, g.call(aten.unsqueeze.default, x, 1), 1), shapes="matrix", dtypes=ALL)
add("unsqueeze", u(aten.unsqueeze.default, -1), shapes="matrix", dtypes=ALL)
add("flip", u(aten.flip.default, [0, 1]), shapes="matrix", dtypes=ALL)
add("roll", u(aten.roll.default, [2], [1]), shapes="matrix", dtypes=ALL)
add("repeat", u(aten.repeat.default, [2, 1, 3]), shapes="matrix", dtypes=ALL)
add("cat", lambda g, x: g.call(aten.cat.default, [x, g.call(aten.neg.default, x), x], 1), shapes="matrix", dtypes=NUM)
add("stack", lambda g, x: g.call(aten.stack.default, [x, x], 1), shapes="matrix", dtypes=ALL)
add("constant_pad_nd", u(aten.constant_pad_nd.default, [1, 2, 0, 1], 0.5), shapes="matrix", dtypes=(F32, BF16))
add("constant_pad_nd.neg", u(aten.constant_pad_nd.default, [-1, 1]), shapes="matrix", dtypes=(I64,))
add("split", lambda g, x: g.call(aten.split.Tensor, x, 2, 1), shapes="matrix", dtypes=ALL)
add("unbind", u(aten.unbind.int, 0), shapes="matrix", dtypes=ALL)
add("narrow", u(aten.narrow.default, 1, 1, 2), shapes="matrix", dtypes=ALL)
add("diagonal", u(aten.diagonal.default, 0, 0, 1), shapes="matrix", dtypes=ALL)
add("unfold", u(aten.unfold.default, 1, 2, 1), shapes="matrix", dtypes=(F32,))
add("tril", u(aten.tril.default, 0), shapes="matrix", dtypes=ALL)
add("triu", u(aten.triu.default, 1), shapes="matrix", dtypes=ALL)
add("alias", u(aten.alias.default), shapes="matrix", dtypes=ALL)
add("as_strided", lambda g, x: g.call(aten.as_strided.default, g.call(aten.mul.Tensor, x, 2), [2, 2], [1, 2]),
    shapes="matrix", dtypes=(F32, I64))
add("arange.start_step", lambda g, x: g.call(aten.arange.start_step, 1, 20, 3, kwargs={"device": x.spec.device}), dtypes=(F32,))
add("arange.default", lambda g, x: g.call(aten.arange.default, 11, kwargs={"dtype": torch.float32, "device": x.spec.device}),
    dtypes=(F32,))
add("full", lambda g, x: g.call(aten.full.default, [2, 3], 1.5, kwargs={"device": x.spec.device}), dtypes=(F32,))
add("scalar_tensor", lambda g, x: g.call(aten.scalar_tensor.default, 2.5, kwargs={"device": x.spec.device}), dtypes=(F32,))

# ---- indexing -----------------------------------------------------------------------------------
add("gather", lambda g, x, i: g.call(aten.gather.default, x, 1, i), 2, shapes="fixed", domain="index", dtypes=(F32, I64))
add("index_select", lambda g, x, i: g.call(aten.index_select.default, x, 0, g.call(aten.select.int, i, 1, 0)), 2,
    shapes="fixed", domain="index", dtypes=(F32, BF16))
add("embedding", lambda g, x, i: g.call(aten.embedding.default, x, i), 2, shapes="fixed", domain="index", dtypes=(F32,))
add("index.Tensor", lambda g, x, i: g.call(aten.index.Tensor, x, [None, i]), 2, shapes="fixed", domain="index",
    dtypes=(F32, I64))

# ---- extern calls -------------------------------------------------------------------------------
add("mm", lambda g, x, y: g.call(aten.mm.default, x, g.call(aten.t.default, y)), 2, shapes="fixed", dtypes=(F32,))
add("addmm.relu", lambda g, x, y: g.call(aten.relu.default, g.call(
    aten.addmm.default, g.call(aten.select.int, y, 1, 0), x, g.call(aten.t.default, y))), 2, shapes="fixed", dtypes=(F32,))
add("bmm", lambda g, x: g.call(aten.bmm.default, g.call(aten.unsqueeze.default, x, 0),
                               g.call(aten.unsqueeze.default, g.call(aten.t.default, x), 0)), shapes="matrix", dtypes=(F32,))
add("cumsum", u(aten.cumsum.default, 1), shapes="matrix", dtypes=(F32, I64))
add("sort", lambda g, x: g.call(aten.sort.default, x, -1), shapes="matrix", dtypes=(F32,))


# ---- random ops (checked by distribution, not equality) ---------------------------------------------
def _like_eager(got, want) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)


def _mean_near(values: torch.Tensor, mean: float, std: float) -> None:
    # six standard errors: a false alarm about once in 5e8 runs
    bound = 6 * std / values.numel() ** 0.5 + 1e-2
    assert abs(values.double().mean().item() - mean) <= bound, (values.double().mean().item(), mean, bound)


def check_uniform(low: float, high: float) -> Callable:
    def check(inputs, got, want):
        _like_eager(got, want)
        # ``low + (high - low) * u`` may round up to ``high`` in a half type, as in eager
        assert low <= got.min() and (got.max() < high or (got.dtype in (BF16, F16) and got.max() == high))
        _mean_near(got, (low + high) / 2, (high - low) / 12**0.5)
    return check


def check_normal(mean: float, std: float) -> Callable:
    def check(inputs, got, want):
        _like_eager(got, want)
        assert got.isfinite().all()
        _mean_near(got, mean, std)
    return check


def check_bernoulli(p: float | None) -> Callable:
    """``p`` a probability, or None: the input holds the probabilities (0 and 1 are certain)."""
    def check(inputs, got, want):
        _like_eager(got, want)
        assert ((got == 0) | (got == 1)).all()
        probs = inputs[0].double() if p is None else torch.full(got.shape, p, dtype=torch.float64, device=got.device)
        assert (got[probs == 0] == 0).all() and (got[probs == 1] == 1).all()
        _mean_near(got.double() - probs, 0.0, 0.5)
    return check


def check_dropout(p: float) -> Callable:
    def check(inputs, got, want):
        (out, mask), x = got, inputs[0]
        _like_eager(out, want[0]), _like_eager(mask, want[1])
        expected = x * mask * (1 / (1 - p))  # ATen: input * mask * scale, computed in one rounding
        # exact, but the Triton interpreter truncates float32 -> bfloat16 (GPUs round to nearest)
        rtol = 2.0**-7 if out.dtype == torch.bfloat16 else 0
        torch.testing.assert_close(out, expected, rtol=rtol, atol=0)
        _mean_near(mask.double(), 1 - p, (p * (1 - p)) ** 0.5)
    return check


def _sized(target, *extra) -> Callable:
    return lambda g, x: g.call(target, [x.spec.shape[0], 33], *extra,
                               kwargs={"dtype": x.spec.dtype, "device": x.spec.device})


RANDOM_FLOATS = (F32, BF16, F16)
add("rand_like", u(aten.rand_like.default), dtypes=RANDOM_FLOATS, check=check_uniform(0, 1))
add("randn_like", u(aten.randn_like.default), dtypes=RANDOM_FLOATS, check=check_normal(0, 1))
add("rand", _sized(aten.rand.default), dtypes=RANDOM_FLOATS, check=check_uniform(0, 1))
add("randn", _sized(aten.randn.default), dtypes=RANDOM_FLOATS, check=check_normal(0, 1))
add("bernoulli.p", u(aten.bernoulli.p, 0.3), dtypes=RANDOM_FLOATS, check=check_bernoulli(0.3))
add("bernoulli", u(aten.bernoulli.default), domain="probability", dtypes=RANDOM_FLOATS, check=check_bernoulli(None))
add("bernoulli.Tensor", lambda g, x: g.call(aten.bernoulli.Tensor, g.call(aten.zeros_like.default, x), x),
    domain="probability", dtypes=RANDOM_FLOATS, check=check_bernoulli(None))
add("native_dropout", u(aten.native_dropout.default, 0.25, True), dtypes=RANDOM_FLOATS, check=check_dropout(0.25))
add("uniform", u(aten.uniform.default, -2.0, 3.0), dtypes=RANDOM_FLOATS, check=check_uniform(-2, 3))
add("normal_functional", u(aten.normal_functional.default, 1.0, 2.0), dtypes=RANDOM_FLOATS, check=check_normal(1, 2))
add("normal.Tensor_float", u(aten.normal.Tensor_float, 0.5), dtypes=(F32,), check=check_normal(0, 0.5))


# ---- inputs --------------------------------------------------------------------------------------
SHAPES = {
    "elementwise": [((4, 9), "t"), ((7,), ""), ((1, 5), ""), ((2, 3, 4), "")],
    "broadcast": [(((4, 9), (9,)), "t"), (((7,), (7,)), ""), (((3, 1, 5), (1, 4, 1)), ""), (((1,), (6,)), "")],
    "matrix": [((6, 9), "t"), ((5, 1), ""), ((3, 17), ""), ((1, 4), "")],
    "fixed": [None],
}


def make(shape, dtype, domain: str, layout: str = "", gen: torch.Generator | None = None, second: bool = False):
    if layout == "t" and len(shape) >= 2:
        return make(shape[::-1], dtype, domain, "", gen, second).transpose(0, 1)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if not dtype.is_floating_point:
        if domain == "shift":
            return torch.randint(0, 8, shape, generator=gen)
        if domain in ("positive", "near1") or (domain == "nonzero2" and second):
            return torch.randint(1, 4, shape, generator=gen).to(dtype)
        return torch.randint(-5, 6, shape, generator=gen).to(dtype)
    x = torch.randn(shape, generator=gen)
    if domain == "positive":
        x = x.abs() + 0.5
    elif domain == "unit":
        x = torch.tanh(x) * 0.9
    elif domain == "unit01":
        x = torch.sigmoid(x) * 0.9 + 0.05
    elif domain == "probability":  # certain outcomes (0, 1) among uncertain ones
        x = torch.where(x.abs() > 1.5, (x > 0).to(x.dtype), torch.sigmoid(x))
    elif domain == "near1":
        x = 1 + 0.1 * x
    elif domain == "nonzero2" and second:
        x = x.sign() * (x.abs() + 0.5)
    return x.to(dtype)


def cases(op: Op, gen: torch.Generator | None = None) -> list[list[torch.Tensor]]:
    """Input lists for ``op``: several shapes/layouts, cycling through its dtypes."""
    out = []
    if op.shapes == "fixed":
        for k, dtype in enumerate(op.dtypes):
            if op.domain == "index":
                x = make((5, 4), dtype, "any", "t" if k % 2 else "", gen)
                i = torch.randint(-4, 4, (3, 2), generator=gen)
                i = i if op.name == "index.Tensor" else i.abs() % 4
                out.append([x, i])
            else:
                out.append([make((5, 8), dtype, "any", "", gen), make((3, 8), dtype, "any", "t", gen)])
        return out
    for k, (shape, layout) in enumerate(SHAPES[op.shapes]):
        dtype = op.dtypes[k % len(op.dtypes)]
        if op.nargs == 1:
            out.append([make(shape, dtype, op.domain, layout, gen)])
        else:
            out.append([make(shape[0], dtype, op.domain, layout, gen), make(shape[1], dtype, op.domain, "", gen, True)])
    for dtype in op.dtypes[len(SHAPES[op.shapes]):]:
        shape, layout = SHAPES[op.shapes][1]
        out.append([make(s, dtype, op.domain, "", gen, i == 1) for i, s in enumerate(shape if op.nargs == 2 else [shape])])
    return out


def distinct_targets() -> int:
    return len(OPS)
