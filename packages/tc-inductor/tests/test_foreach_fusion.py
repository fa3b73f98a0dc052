"""Functional ``_foreach_*`` ops lowered per element (lowering/foreach.py) and many small
pointwise kernels launched as one multi-tensor kernel (combo.py), on both back ends.

Graphs are built by hand; results are compared with the reference interpreter on fresh inputs
(twice), and in-place outputs with the interpreter's run on clones taken before the call."""

from __future__ import annotations

import operator

import pytest
import torch
from inductor_helpers import assert_same, build

import tc_inductor
import tc_ir
from tc_inductor import combo

aten = torch.ops.aten
BACKENDS = ["cpp", "triton"]
SHAPES = [(3, 5), (7,), (1,), (0, 4), (2, 3, 4), (33,)]


def _items(g, node, n):
    return [g.call(operator.getitem, node, i, spec=node.spec[i]) for i in range(n)]


def _adamw(g, *inputs):
    """One AdamW step over n parameters as the foreach optimizer traces it: steps, the state
    and the parameters, every new value returned (an output per mutated input)."""
    n = len(inputs) // 5
    params, grads, avgs, sqs, steps = (list(inputs[k * n:(k + 1) * n]) for k in range(5))
    steps = _items(g, g.call(aten._foreach_add.Scalar, steps, 1), n)
    params = _items(g, g.call(aten._foreach_mul.Scalar, params, 0.99), n)
    avgs = _items(g, g.call(aten._foreach_lerp.Scalar, avgs, grads, 0.1), n)
    sqs = _items(g, g.call(aten._foreach_mul.Scalar, sqs, 0.999), n)
    sqs = _items(g, g.call(aten._foreach_addcmul.Scalar, sqs, grads, grads, 0.001), n)
    corr = _items(g, g.call(aten._foreach_pow.ScalarAndTensor, 0.999, steps), n)
    corr = _items(g, g.call(aten._foreach_sqrt.default, _items(g, g.call(aten._foreach_sub.Scalar, corr, 1), n)), n)
    denom = _items(g, g.call(aten._foreach_sqrt.default, sqs), n)
    denom = _items(g, g.call(aten._foreach_div.List, denom, corr), n)
    denom = _items(g, g.call(aten._foreach_add.Scalar, denom, 1e-8), n)
    new = _items(g, g.call(aten._foreach_addcdiv.Scalar, params, avgs, denom, -0.01), n)
    return tuple(new + avgs + sqs + steps)


def _adamw_inputs(shapes, seed):
    g = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=g) for s in shapes]
    grads = [torch.randn(s, generator=g) for s in shapes]
    avgs = [torch.randn(s, generator=g) for s in shapes]
    sqs = [torch.rand(s, generator=g) for s in shapes]
    steps = [torch.tensor(float(seed % 5 + 1)) for _ in shapes]
    return params + grads + avgs + sqs + steps


def _run_in_place(g, compiled, inputs, pairs):
    expected = tc_ir.interpret(g, [t.clone() for t in inputs])
    got = compiled(*inputs)
    assert_same(got, expected)
    outs = list(tc_ir.leaves(got))
    return sum(outs[o] is inputs[i] for o, i in pairs.items())


@pytest.mark.parametrize("backend", BACKENDS)
def test_adamw_step_is_a_few_in_place_kernels(backend):
    n = len(SHAPES)
    inputs = _adamw_inputs(SHAPES, 0)
    g = build(_adamw, inputs)
    pairs = {k * n + i: src * n + i for k, src in enumerate([0, 2, 3, 4]) for i in range(n)}
    compiled = tc_inductor.compile(g, inputs, {"backend": backend, "cache": False, "inplace_outputs": pairs})
    assert compiled.stats["extern_calls"] == 0, compiled.source
    assert compiled.stats["kernels"] <= 2, compiled.source  # the steps, then every parameter's update
    assert compiled.stats["inplace_outputs"] == len(pairs)
    for seed in (1, 2):
        assert _run_in_place(g, compiled, _adamw_inputs(SHAPES, seed), pairs) == len(pairs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_parameters_take_ceil_n_over_the_pointer_budget_kernels(backend, monkeypatch):
    monkeypatch.setattr(combo, "MAX_POINTERS", 24)  # 8 pointers a parameter: 3 parameters a kernel
    shapes = [(k + 2,) for k in range(10)]  # distinct: kernels of one shape are one kernel already
    inputs = _adamw_inputs(shapes, 0)
    g = build(_adamw, inputs)
    compiled = tc_inductor.compile(g, inputs, {"backend": backend, "cache": False})
    assert compiled.stats["kernels"] == 1 + 4, compiled.source  # steps + ceil(10 / 3)
    fresh = _adamw_inputs(shapes, 3)
    assert_same(compiled(*fresh), tc_ir.interpret(g, fresh))


FOREACH_CASES = {
    "add_list_alpha": lambda g, xs, ys: g.call(aten._foreach_add.List, xs, ys, kwargs={"alpha": -0.5}),
    "sub_scalarlist": lambda g, xs, ys: g.call(aten._foreach_sub.ScalarList, xs, [1.5, -2, 0.25][:len(xs)]),
    "mul_tensor": lambda g, xs, ys: g.call(aten._foreach_mul.Tensor, xs, ys[2]),
    "div_list": lambda g, xs, ys: g.call(aten._foreach_div.List, xs, ys),
    "maximum_scalar": lambda g, xs, ys: g.call(aten._foreach_maximum.Scalar, xs, 0.1),
    "minimum_list": lambda g, xs, ys: g.call(aten._foreach_minimum.List, xs, ys),
    "clamp_min_scalarlist": lambda g, xs, ys: g.call(aten._foreach_clamp_min.ScalarList, xs, [0.0, 0.5, -1.0]),
    "pow_scalar": lambda g, xs, ys: g.call(aten._foreach_pow.Scalar, _items(g, g.call(aten._foreach_abs.default, xs), 3), 1.5),
    "pow_list": lambda g, xs, ys: g.call(aten._foreach_pow.List, _items(g, g.call(aten._foreach_abs.default, xs), 3), ys),
    "lerp_list": lambda g, xs, ys: g.call(aten._foreach_lerp.List, xs, ys, ys),
    "lerp_scalarlist": lambda g, xs, ys: g.call(aten._foreach_lerp.ScalarList, xs, ys, [0.1, 0.5, 0.9]),
    "addcdiv_scalarlist": lambda g, xs, ys: g.call(aten._foreach_addcdiv.ScalarList, xs, xs, _items(g, g.call(
        aten._foreach_exp.default, ys), 3), [1.0, -2.0, 0.5]),
    "neg_reciprocal": lambda g, xs, ys: g.call(aten._foreach_reciprocal.default,
                                               _items(g, g.call(aten._foreach_neg.default, ys), 3)),
    "sqrt_sigmoid": lambda g, xs, ys: g.call(aten._foreach_sqrt.default,
                                             _items(g, g.call(aten._foreach_sigmoid.default, xs), 3)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(FOREACH_CASES))
def test_foreach_overloads_match_the_interpreter(backend, case):
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        # mixed dtypes and shapes: a float64 list element, a 1-element and a zero-size one
        xs = [torch.randn(4, 3, generator=g), torch.randn(1, generator=g, dtype=torch.float64),
              torch.randn(0, 2, generator=g)]
        ys = [torch.randn(4, 3, generator=g), torch.randn(1, generator=g, dtype=torch.float64),
              torch.randn((), generator=g)]
        ys[2] = ys[2].expand(0, 2).contiguous() if case not in ("mul_tensor",) else ys[2]
        return xs + ys

    inputs = make(0)
    g = build(lambda g, *ins: tuple(_items(g, FOREACH_CASES[case](g, list(ins[:3]), list(ins[3:])), 3)), inputs)
    compiled = tc_inductor.compile(g, inputs, {"backend": backend, "cache": False})
    assert compiled.stats["extern_calls"] == 0, compiled.source
    for seed in (1, 2):
        fresh = make(seed)
        assert_same(compiled(*fresh), tc_ir.interpret(g, fresh))


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_and_mixed_dtype_lists(backend):
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(5, 4, generator=g).t(), torch.randn(6, generator=g, dtype=torch.float64)[::2],
                torch.randn(3, 2, generator=g).to(torch.bfloat16), torch.randn(4, 5, generator=g),
                torch.randn(3, generator=g, dtype=torch.float64), torch.randn(3, 2, generator=g).to(torch.bfloat16)]

    def fn(g, *ins):
        xs, ys = list(ins[:3]), list(ins[3:])
        out = _items(g, g.call(aten._foreach_addcmul.Scalar, xs, xs, ys, 0.5), 3)
        return tuple(_items(g, g.call(aten._foreach_mul.Scalar, out, 2.0), 3))

    inputs = make(0)
    g = build(fn, inputs)
    compiled = tc_inductor.compile(g, inputs, {"backend": backend, "cache": False, "inplace_outputs": {0: 0, 1: 1, 2: 2}})
    for seed in (1, 2):
        fresh = make(seed)
        _run_in_place(g, compiled, fresh, {0: 0, 1: 1, 2: 2})


def test_an_independent_kernel_reading_another_result_is_not_combined():
    x, y = torch.randn(8), torch.randn(5)

    def fn(g, a, b):
        first = g.call(aten.mul.Tensor, a, 2.0)
        second = g.call(aten.add.Tensor, b, 1.0)
        third = g.call(aten.add.Tensor, g.call(aten.sum.default, first), b)  # reads a reduction of first
        return first, second, third

    g = build(fn, [x, y])
    compiled = tc_inductor.compile(g, [x, y], {"backend": "triton", "cache": False})
    fresh = [torch.randn(8), torch.randn(5)]
    assert_same(compiled(*fresh), tc_ir.interpret(g, fresh))


class _InPlaceCompiled:
    """Stands for a CompiledKernel of ``x = x * 2 + 1`` written in place: computes for real."""

    function, packed_metadata = 0, None

    def __init__(self):
        self.launches = 0

    def run(self, grid0, grid1, grid2, stream, function, packed, launch_metadata, enter, exit_hook, *args):
        import ctypes

        self.launches += 1
        x = torch.frombuffer((ctypes.c_float * 16).from_address(args[0]), dtype=torch.float32)
        out = torch.frombuffer((ctypes.c_float * 16).from_address(args[1]), dtype=torch.float32)
        out.copy_(x * 2 + 1)


def test_first_direct_launch_of_an_in_place_kernel_applies_the_update_once():
    """The first launch is run twice (JITFunction.run, then the direct launcher, compared): an
    output written into its input must be computed from the input's old value both times."""
    import types

    from tc_inductor.codegen.triton_launch import TritonLauncher

    x = torch.randn(16)
    g = build(lambda g, a: (g.call(aten.add.Tensor, g.call(aten.mul.Tensor, a, 2.0), 1.0),), [x])
    k = tc_inductor.compile(g, [x], {"backend": "triton", "cache": False, "inplace_outputs": {0: 0}})
    assert k.stats["inplace_outputs"] == 1
    launcher = k._fn.__globals__["k0"]
    fake = TritonLauncher(launcher.fn, launcher.consts, launcher.n_pointers, launcher.outputs, _InPlaceCompiled())
    fake._stream = lambda device: 0
    fake._knobs = types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    k._fn.__globals__["k0"] = fake
    for _ in range(2):
        fresh = torch.randn(16)
        want = fresh * 2 + 1
        (got,) = k(fresh)
        assert got is fresh
        torch.testing.assert_close(got, want)
    assert fake.launch == fake._direct


def _sgd(g, *inputs):
    """SGD with momentum over n parameters (no pow: libdevice is not interpreted)."""
    n = len(inputs) // 3
    params, grads, bufs = (list(inputs[k * n:(k + 1) * n]) for k in range(3))
    bufs = _items(g, g.call(aten._foreach_mul.Scalar, bufs, 0.9), n)
    bufs = _items(g, g.call(aten._foreach_add.List, bufs, grads), n)
    new = _items(g, g.call(aten._foreach_add.List, params, bufs, kwargs={"alpha": -0.1}), n)
    return tuple(new + bufs)


def _compiled_sgd(shapes):
    """``(make, graph, pairs, compiled)``: SGD over parameters of ``shapes`` as one Triton
    multi-tensor kernel writing parameters and buffers in place; ``make(seed)`` new inputs."""
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(s, generator=g) for _ in range(3) for s in shapes]

    inputs = make(0)
    g = build(_sgd, inputs)
    n = len(shapes)
    pairs = {i: i for i in range(n)} | {n + i: 2 * n + i for i in range(n)}
    k = tc_inductor.compile(g, inputs, {"backend": "triton", "cache": False, "inplace_outputs": pairs})
    return make, g, pairs, k


@pytest.mark.skipif(torch.cuda.is_available(), reason="GPU hosts run the real thing")
def test_gpu_source_of_a_multi_tensor_kernel_under_the_interpreter(monkeypatch):
    from tc_inductor.codegen import triton as triton_backend

    monkeypatch.setattr(triton_backend, "_interpreting", lambda device: False)
    # 2048: a full block, no mask
    make, g, pairs, k = _compiled_sgd([(3000,), (5, 7), (1,), (2048,), (0, 3), (4, 3)])
    combined = [s for s in k.kernels if "_tc_part1(" in s]
    assert k.stats["kernels"] == 1 and combined and "elif pid < " in combined[0], k.kernels
    for seed in (1, 2):
        assert _run_in_place(g, k, make(seed), pairs) == len(pairs)


class _LauncherLike:
    """Stands for a CompiledKernel's C launcher as triton 3.x builds it: its arguments are the
    kernel's parameters, constexprs included, nothing else (``PyArg_ParseTuple`` with a fixed
    format: one more or one fewer is a TypeError), pointers as ints. It then computes for real:
    the pointers are looked up among the tensors of the launch (``seen``) and the kernel runs
    under the interpreter."""

    function, packed_metadata = 0, None

    def __init__(self, fn):
        self.fn, self.seen, self.launches = fn, {}, 0

    def run(self, grid0, grid1, grid2, stream, function, packed, launch_metadata, enter, exit_hook, *args):
        names = self.fn.arg_names
        if len(args) != len(names):
            raise TypeError(f"function takes exactly {13 + len(names)} arguments ({13 + len(args)} given)")
        self.launches += 1
        values = [self.seen[a] if type(a) is int and a in self.seen else a for a in args]
        self.fn[(grid0,)](**dict(zip(names, values)))


def test_multi_tensor_kernel_takes_the_direct_launch():
    """A multi-tensor kernel (hundreds of pointers, params written in place) is launched through
    the compiled kernel's C launcher after its first launch, not through JITFunction.run (which
    binds and specialises every argument on every call: 3x an SGD step's GPU time on the H100)."""
    import types

    from tc_inductor.codegen.triton_launch import TritonLauncher

    make, g, pairs, k = _compiled_sgd([(37,), (5, 7), (1,), (64,), (0, 3), (4, 3)])
    assert k.stats["kernels"] == 1, k.source
    launcher = k._fn.__globals__["k0"]
    compiled = _LauncherLike(launcher.fn)
    fake = TritonLauncher(launcher.fn, launcher.consts, launcher.n_pointers, launcher.outputs, compiled)
    fake._stream = lambda device: 0
    fake._knobs = types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)

    def spy(grid0, *args):
        compiled.seen = {a.data_ptr(): a for a in args if isinstance(a, torch.Tensor)}
        fake(grid0, *args)

    k._fn.__globals__["k0"] = types.SimpleNamespace(launch=spy)  # the wrapper calls k0.launch(...)
    for seed in (1, 2, 3):
        assert _run_in_place(g, k, make(seed), pairs) == len(pairs)
    assert fake.launch == fake._direct and compiled.launches == 3
