"""NumPy calls on tensors traced as torch ops with NumPy's semantics (issue 13, part 3).

Each family runs its functions eagerly and compiled (``fullgraph=True``: no break) over two calls
with fresh inputs; results must have eager's exact types (``np.ndarray`` vs ``np.float32`` scalar
vs tensor) and dtypes, and equal values; inputs mutated alike. Programs eager rejects must raise
the same error compiled. Break cases check the reason under ``fullgraph=True`` and eager's
results (and writes through shared memory) without it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tc_capture
from tc_capture.api import interpret_backend


def same(e, c, path="out", tol=None):
    assert type(e) is type(c), f"{path}: {type(e)} vs {type(c)}"
    if isinstance(e, (np.ndarray, np.generic)):
        assert e.dtype == c.dtype and np.shape(e) == np.shape(c), f"{path}: {e.dtype}{np.shape(e)} vs {c.dtype}{np.shape(c)}"
        # float16: NumPy rounds each cumsum step to float16, torch accumulates wider
        tol = tol or (1e-2 if e.dtype == np.float16 else 2e-5)
        np.testing.assert_allclose(c, e, rtol=tol, atol=tol, err_msg=path)
    elif isinstance(e, torch.Tensor):
        assert e.dtype == c.dtype, path
        torch.testing.assert_close(c, e, msg=path)
    elif isinstance(e, (tuple, list)):
        assert len(e) == len(c), path
        for i, (x, y) in enumerate(zip(e, c)):
            same(x, y, f"{path}[{i}]", tol)
    elif isinstance(e, float):  # a sum read with .item(): float32 sums may round differently by a bit
        assert abs(e - c) <= 1e-5 * max(1.0, abs(e)), f"{path}: {e!r} vs {c!r}"
    else:
        assert e == c, f"{path}: {e!r} vs {c!r}"


def check(fn, make, calls=2, fullgraph=True, tol=None):
    """Eager vs compiled on ``calls`` fresh inputs (clones for the compiled run)."""
    compiled = tc_capture.optimize(interpret_backend, fullgraph=fullgraph)(fn)
    for _ in range(calls):
        args = make()
        clones = [a.clone() if isinstance(a, torch.Tensor) else a.copy() if isinstance(a, np.ndarray) else a
                  for a in args]
        try:
            expected = fn(*args)
        except Exception as e:  # eager rejects it: compiled must raise the same (a break falls back)
            with pytest.raises(type(e)):
                tc_capture.optimize(interpret_backend)(fn)(*clones)
            return
        same(expected, compiled(*clones), tol=tol)
        for a, b in zip(args, clones):
            same(a, b, "mutated input")


def tensor(*shape, dtype=torch.float32):
    def make():
        t = torch.randn(*shape) * 3
        return (t > 0,) if dtype is torch.bool else (t.to(dtype),)
    return make


DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.uint8, torch.bool]


# ---- ufuncs and operators, per dtype ----------------------------------------------------------------
ELEMENTWISE = {
    "sin": lambda a: np.sin(a), "exp_sqrt": lambda a: np.exp(a) + np.sqrt(np.abs(a)),
    "log1p": lambda a: np.log1p(np.abs(a)), "add_int": lambda a: a + 1, "mul_float": lambda a: a * 2.5,
    "div": lambda a: a / 2, "floordiv": lambda a: a // 3, "mod": lambda a: a % 3, "neg": lambda a: -a,
    "rsub": lambda a: 1 - a, "pow": lambda a: a ** 2, "cmp": lambda a: (a > 0, a <= 1, a == a, a != 0),
    "maximum": lambda a: (np.maximum(a, 0), np.minimum(a, a.T.T)), "where": lambda a: np.where(a > 1, a, 0),
    "where_float": lambda a: np.where(a > 1, a, 0.5), "clip": lambda a: np.clip(a, 0, 2),
    "np_scalars": lambda a: (np.float32(2) * a, a + np.float64(1), a * np.int32(3)),
    "logical": lambda a: (np.logical_and(a > 0, a < 2), np.logical_not(a > 0), np.isnan(a * 1.0)),
    "rounding": lambda a: (np.floor(a), np.ceil(a), np.rint(a * 0.5), np.trunc(a)),
    "trig2": lambda a: (np.arctan2(a, 2.0), np.hypot(a, a), np.square(a)),
    "bitwise": lambda a: (a & 1, a | a, a ^ 3, ~a), "sign_abs": lambda a: (np.sign(a), np.abs(a), abs(-2)),
    "nan": lambda a: (np.sign(a / 0 * 0), np.maximum(a / 0 * 0, a), np.fmax(a / 0 * 0, a), np.clip(a / 0 * 0, 0, 1),
                       np.sort(np.where(a > 0, a / 0 * 0, a)), np.max(np.where(a > 1, a / 0 * 0, a), axis=0)),
    "numpy_int_index": lambda a: (a[np.int64(1)], a[np.int64(1):], a[1:np.int32(3), np.int64(0)]),
    "matmul": lambda a: a @ a.T,
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise(name, dtype):
    op = ELEMENTWISE[name]
    check(lambda x: op(x.numpy()), tensor(3, 4, dtype=dtype))


# ---- reductions ----------------------------------------------------------------------------------
REDUCTIONS = {
    "sum": lambda a: (np.sum(a), np.sum(a, axis=0), a.sum(axis=1, keepdims=True), np.sum(a, axis=(0, 1))),
    "sum_dtype": lambda a: (a.sum(axis=1, dtype=np.float64), np.sum(a, dtype=np.int32)),
    "mean": lambda a: (np.mean(a), a.mean(axis=-1), np.mean(a, axis=0, keepdims=True)),
    "max_min": lambda a: (np.max(a), a.min(axis=0), np.amax(a, axis=1, keepdims=True), np.amin(a)),
    "prod": lambda a: (np.prod(a, axis=1), a.prod()),
    "std_var": lambda a: (np.std(a), np.var(a, axis=0, ddof=1), a.std(axis=1)),
    "any_all": lambda a: (np.any(a > 0, axis=0), np.all(a > -10), a.any(), (a > 1).all(axis=1)),
    "arg": lambda a: (np.argmax(a), a.argmin(axis=1), np.argmax(a, axis=0, keepdims=True)),
    "cumulative": lambda a: (np.cumsum(a, axis=0), np.cumsum(a), a.cumprod(axis=1)),
}


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d is not torch.uint8], ids=str)  # uint8: see breaks
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions(name, dtype):
    op = REDUCTIONS[name]
    check(lambda x: op(x.numpy()), tensor(3, 4, dtype=dtype))


# ---- shapes, indexing, attributes ------------------------------------------------------------------
SHAPES = {
    "reshape": lambda a: (a.reshape(-1), a.reshape(4, 3), a.reshape((2, 6)), np.reshape(a, (6, 2))),
    "transpose": lambda a: (a.T, a.transpose(), np.transpose(a, (1, 0)), a.swapaxes(0, 1)),
    "dims": lambda a: (np.expand_dims(a, 0), np.squeeze(a[None]), a.ravel(), a.flatten(), np.ravel(a)),
    "join": lambda a: (np.concatenate([a, a], axis=1), np.concatenate((a, a)), np.concatenate([a, a], axis=None),
                       np.stack([a, a]), np.stack([a, a], axis=-1)),
    "index": lambda a: (a[0], a[:, 1], a[0, 1], a[None, ..., 1], a[1:], a[..., 1:3], a[-1, -1]),
    "index_array": lambda a: a[np.arange(2)],
    "attrs": lambda a: (a.shape, a.ndim, a.dtype, a.size, a.itemsize, a.nbytes, type(a.shape)),
    "dot": lambda a: (np.dot(a, a.T), a.dot(a[0]), np.dot(a[0], a[0]), np.dot(a, 2)),
    "astype": lambda a: (a.astype(np.float64), a.astype("int32"), a.astype(bool), a.astype(float), a.copy()),
    "like": lambda a: (np.zeros_like(a), np.ones_like(a, dtype=np.float32), np.full_like(a, 2.5)),
    "rearrange": lambda a: (np.flip(a), np.flip(a, 1), np.roll(a, 2), np.roll(a, -1, axis=0), np.tile(a, 2),
                            np.tile(a, (2, 1)), np.repeat(a, 2), np.repeat(a, 3, axis=1), a.repeat(2, axis=0)),
    "triangles": lambda a: (np.triu(a), np.tril(a, -1), np.diff(a), np.diff(a, n=2, axis=0), np.broadcast_to(a[0], (2, 4))),
    "round": lambda a: (np.round(a * 1.37, 1), np.around(a), a.round(2), np.round(a)),
    "sort": lambda a: (np.sort(a), np.sort(a, axis=0), np.sort(a, axis=None), np.argsort(a, kind="stable"),
                       a.argsort(axis=0, kind="stable"), np.argsort(a // 2, axis=None, stable=True)),
    "norm_einsum": lambda a: (np.linalg.norm(a), np.linalg.norm(a, axis=1), np.linalg.norm(a, axis=0, keepdims=True),
                              np.einsum("ij,kj->ik", a, a), np.einsum("ii", a[:3, :3])),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
@pytest.mark.parametrize("name", list(SHAPES))
def test_shapes_and_indexing(name, dtype):
    op = SHAPES[name]
    check(lambda x: op(x.numpy()), tensor(3, 4, dtype=dtype))


# ---- into NumPy and back ---------------------------------------------------------------------------
def into_and_back(x):
    a, b, c, d = x.numpy(), np.asarray(x), x.cpu().numpy(), x.detach().numpy()
    y = torch.from_numpy(np.sin(a) + b * c - d)
    return y + x, torch.as_tensor(a * 2, dtype=torch.float64), torch.tensor(a), torch.asarray(np.cos(a)) * 2


def tensors_into_numpy(x):
    return np.sin(x), np.add(x, 1), np.concatenate([x, x]), np.array(x), np.asarray(x, dtype=np.float64)


def grad_off(x):
    with torch.no_grad():
        y = x * 2
    return y.numpy() + 1, (x * 3).detach().numpy()


@pytest.mark.parametrize("fn", [into_and_back, tensors_into_numpy])
def test_into_numpy_and_back(fn):
    check(fn, tensor(3, 4))
    check(fn, tensor(2, 3, dtype=torch.float64))


def test_numpy_of_computed_tensors_without_grad():
    check(grad_off, lambda: (torch.randn(3, requires_grad=True),))


def test_returned_array_shares_memory_with_the_input():
    compiled = tc_capture.optimize(interpret_backend, fullgraph=True)(lambda x: x.numpy())
    for _ in range(2):
        x = torch.randn(4)
        out = compiled(x)
        assert type(out) is np.ndarray and out.dtype == np.float32
        x.add_(1)  # eager's array is x's memory: the compiled one too
        np.testing.assert_array_equal(out, x.numpy())


def test_non_contiguous_and_zero_size():
    def fn(x):
        a = x.numpy()
        return a * 2, np.sum(a, axis=0), a.T, np.exp(a).mean(axis=1)

    check(fn, lambda: (torch.randn(4, 3).t(),))
    check(fn, lambda: (torch.randn(0, 3),))
    check(lambda x: np.max(x.numpy(), axis=0), lambda: (torch.randn(0, 3),))  # eager raises ValueError


# ---- NumPy's dtypes exactly -----------------------------------------------------------------------
def dtypes(x, i):
    a, n = x.numpy(), i.numpy()
    return (a / 2, n / 2, a + 1.0, a + np.float64(1), n + 1.5, n * np.int32(2), np.arange(3), np.arange(0.0, 1.0, 0.25),
            np.sum(a > 0), np.mean(n), np.sum(n.astype(np.int32)), np.sin(n), np.zeros((2, 3)),
            np.ones(3, dtype=np.float32), np.linspace(0, 1, 5), np.eye(3), a + np.arange(a.shape[-1]),
            np.full((2,), 7), n // 2, n % 4, a.astype(np.float16) + 1)


def test_numpy_dtypes_exactly():
    check(dtypes, lambda: (torch.randn(3, 4), torch.randint(-5, 5, (3, 4))))


def scalars(x):
    a = x.numpy()
    s = np.sum(a)
    return s, s + 1, s * a, a[0, 1], a[0, 1] * 2.0, np.mean(a.astype(np.int64)), np.float32(3) + s, a.max().astype(np.float64)


def test_scalar_results_have_numpy_scalar_types():
    check(scalars, tensor(3, 4))


# ---- ndarray arguments -----------------------------------------------------------------------------
def on_arrays(a, b):
    c = np.tanh(a) @ b + np.sum(b, axis=0)
    return c, torch.from_numpy(c) * 2, a


def test_ndarray_arguments_are_tensor_inputs():
    def make():
        return np.random.randn(3, 4).astype(np.float32), np.random.randn(4, 5).astype(np.float32)

    check(on_arrays, make)
    check(on_arrays, lambda: (np.random.randn(2, 4), np.random.randn(4, 2)))  # float64, other shapes: recompiles
    compiled = tc_capture.optimize(interpret_backend, fullgraph=True)(on_arrays)
    a, b = make()
    assert compiled(a, b)[2] is a  # an unchanged argument is the caller's own object


def test_ndarray_argument_values_are_read_on_every_call():
    compiled = tc_capture.optimize(interpret_backend, fullgraph=True)(lambda a: a + 1)
    a = np.ones(3)
    np.testing.assert_array_equal(compiled(a), a + 1)
    a[0] = 5.0
    np.testing.assert_array_equal(compiled(a), a + 1)


# ---- breaks: a clear reason, and eager's results without fullgraph ---------------------------------------
def needs_grad(x):
    return x.numpy() * 2


def in_place(x):
    a = x.numpy()
    a += 1
    return np.sin(a)


def item_write(x):
    a = x.numpy()
    a[0] = 7.0
    return a * 2


def view_write(x):
    a = (x * 2).numpy()
    b = a[0]
    b += 1
    return a, b


def branch_on_data(x):
    a = x.numpy()
    if np.any(a > 0):
        return a * 2
    return a


def unmapped(x):
    return np.unique(x.numpy()) + 1


def random(x):
    return x.numpy() + np.random.rand(3)


def tensor_with_array(x):
    return x + x.numpy()


def torch_op_on_array(x):
    return torch.sin(x.numpy())


def item_read(x):
    return x.numpy().sum().item() + 1


def uint64_sum(x):
    return np.sum(x.numpy().astype(np.uint8))  # uint64: no torch dtype traced here


def int_out_of_range(x):
    return np.all(x.numpy().astype(np.uint8) > -10)  # NumPy compares exactly; a cast would wrap


BREAKS = [(needs_grad, "requires grad"), (in_place, "in-place iadd"), (item_write, "item assignment"),
          (view_write, "in-place iadd"), (branch_on_data, "truth of a NumPy array"), (unmapped, "numpy.unique is not traced"),
          (random, "rand"), (tensor_with_array, "between a tensor and a NumPy array"),
          (torch_op_on_array, "torch.sin given a NumPy array"), (item_read, "ndarray.item()"),
          (uint64_sum, "uint64"), (int_out_of_range, "out of the range")]


@pytest.mark.parametrize("fn,reason", BREAKS, ids=[b[0].__name__ for b in BREAKS])
def test_breaks_with_reason_and_eager_results(fn, reason):
    make = (lambda: (torch.randn(3, requires_grad=True),)) if fn is needs_grad else tensor(3)
    with pytest.raises(tc_capture.GraphBreakError, match=reason):
        tc_capture.optimize(interpret_backend, fullgraph=True)(fn)(*make())
    if fn is not random:
        check(fn, make, fullgraph=False)


def test_requires_grad_raises_as_eager():
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        tc_capture.optimize(interpret_backend)(needs_grad)(x)


# ---- Python builtins on arrays, NumPy scalar arguments, changing shapes --------------------------------------
def builtins_on_arrays(x):
    a = x.numpy()
    return len(a), isinstance(a, np.ndarray), type(a) is np.ndarray, type(np.sum(a)) is np.float32, a.size


def test_python_builtins_on_arrays():
    check(builtins_on_arrays, tensor(3, 4))


def test_numpy_scalar_arguments_are_guarded_by_value():
    def fn(s, x):
        return x * s, s + 1, np.float64(s) * 2

    values = iter([np.float32(2.0), np.float32(3.0), np.float64(0.5), np.int64(4)])
    check(fn, lambda: (next(values), torch.randn(3)), calls=4)


def test_changing_shapes():
    shapes = iter([(3, 4), (5, 4), (7, 4), (2, 6)])

    def fn(x):
        a = x.numpy()
        return np.sum(a, axis=0), a.shape, np.squeeze(a[None]), np.concatenate([a, a]), a.reshape(-1), len(a)

    check(fn, lambda: (torch.randn(*next(shapes)),), calls=4)


def test_iterating_an_array():
    def fn(x):
        a = x.numpy()
        rows = [r * 2 for r in a]
        first, *rest = a[0]
        return rows, first, rest, sum(a[1]), list(a[2]), type(iter(a)) is type(iter(np.empty(1)))

    check(fn, tensor(3, 4))


def test_numpy_scalar_types_on_arrays():
    def fn(x):
        a = x.numpy()
        return np.float64(a), np.float32(np.sum(a)), np.int64(a[0, 0]), np.float16(a[0])

    check(fn, tensor(3, 4))


def test_numpy_of_constants_is_folded():
    def fn(x):
        a = x.numpy()
        d = a.shape[-1]
        return a / np.sqrt(d), np.prod(a.shape), np.log(10.0), a * np.pi, np.maximum(2, 3), np.asarray([1.5, 2]) + a[0, :2]

    check(fn, tensor(3, 4))


def test_in_place_torch_op_on_from_numpy_writes_the_array_argument():
    def fn(a):
        t = torch.from_numpy(a)
        t.add_(1)
        return t * 2

    check(fn, lambda: (np.random.randn(3),))


def test_ndarray_subclass_arguments_fall_back():
    def fn(a):
        return a + 1

    for make in (lambda: (np.ma.masked_array(np.random.randn(3), mask=[0, 1, 0]),), lambda: (np.matrix(np.random.randn(2, 2)),)):
        with pytest.raises((tc_capture.GraphBreakError, tc_capture.CompileError), match="ndarray subclass"):
            tc_capture.optimize(interpret_backend, fullgraph=True)(fn)(*make())
        compiled = tc_capture.optimize(interpret_backend)(fn)
        for _ in range(2):
            a = make()[0]
            e, c = fn(a), compiled(a)
            assert type(e) is type(c)
            np.testing.assert_array_equal(np.asarray(e), np.asarray(c))


# ---- generated chains: random compositions of array -> array steps over random dtypes -------------------------
STEPS = [lambda a: np.sin(a), lambda a: np.exp(a / 4), lambda a: a + 1, lambda a: a * 2.5, lambda a: a / 2,
         lambda a: a // 2, lambda a: a % 3, lambda a: np.maximum(a, 0), lambda a: np.where(a > 1, a, 0),
         lambda a: np.clip(a, -1, 1), lambda a: a.T, lambda a: a.reshape(-1, a.shape[-1]),
         lambda a: np.sum(a, axis=0, keepdims=True), lambda a: np.cumsum(a, axis=-1), lambda a: a.astype(np.float32),
         lambda a: a.astype(np.int32), lambda a: a > 0, lambda a: np.abs(a), lambda a: a[1:], lambda a: a * a,
         lambda a: np.mean(a, axis=-1, keepdims=True), lambda a: np.concatenate([a, a], axis=-1),
         lambda a: a @ a.T, lambda a: np.flip(a, 0), lambda a: a - np.float64(0.5), lambda a: ~(a > 1)]


@pytest.mark.parametrize("seed", range(60))
def test_generated_chains(seed):
    rng = np.random.default_rng(seed)
    dtypes = [d for d in DTYPES if d is not torch.uint8]  # uint8 sums are uint64: a break (see BREAKS)
    dtype = dtypes[rng.integers(len(dtypes))]
    chain = [STEPS[i] for i in rng.integers(len(STEPS), size=int(rng.integers(2, 5)))]

    def fn(x):
        a = x.numpy()
        for step in chain:
            a = step(a)
        return a

    check(fn, tensor(4, 3, dtype=dtype), tol=1e-2 if dtype is torch.float16 else None)


def test_argsort_needs_a_stable_sort():
    with pytest.raises(tc_capture.GraphBreakError, match="kind='stable'"):
        tc_capture.optimize(interpret_backend, fullgraph=True)(lambda x: np.argsort(x.numpy()))(torch.randn(4))


def test_ndarray_arguments_sharing_memory_are_not_one_graph():
    def fn(a, b):
        torch.from_numpy(a).add_(1)
        return b * 2

    compiled = tc_capture.optimize(interpret_backend)(fn)
    a = np.zeros(3)
    np.testing.assert_array_equal(compiled(np.zeros(3), np.zeros(3)), np.zeros(3))  # apart: compiled
    e_arr, c_arr = a.copy(), a.copy()
    np.testing.assert_array_equal(compiled(c_arr, c_arr), fn(e_arr, e_arr))  # one array twice: eager's answer
    np.testing.assert_array_equal(c_arr, e_arr)
    e_arr, c_arr = np.zeros((2, 3)), np.zeros((2, 3))
    np.testing.assert_array_equal(compiled(c_arr, c_arr[0]), fn(e_arr, e_arr[0]))  # a view of the other
    np.testing.assert_array_equal(c_arr, e_arr)


def _helper_with_break(a):
    print("", end="")  # a graph break inside an inlined call
    return a * 2


def arrays_across_breaks(x):
    a = x.numpy()
    b = _helper_with_break(np.sin(a))
    s = np.sum(a)
    print("", end="")
    return {"b": b + a, "s": s * 2, "rows": [a[0], a[-1]]}


def test_arrays_live_across_graph_breaks():
    def same_dict(e, c):
        assert list(e) == list(c)
        for k in e:
            same(e[k], c[k], k)

    compiled = tc_capture.optimize(interpret_backend)(arrays_across_breaks)
    for _ in range(3):
        x = torch.randn(2, 3)
        same_dict(arrays_across_breaks(x), compiled(x.clone()))
