"""The NumPy functions and ndarray methods traced as torch ops (tables of ``numpy_ops``).

Each handler binds NumPy's signature, asks NumPy for the result's dtype on stand-in arrays of the
operands' dtypes (so its promotion rules, default dtypes and argument checks are NumPy's own),
and records the torch ops computing the values. See ``numpy_ops`` for the value model.
"""

from __future__ import annotations

import warnings

import torch

from .base import Unsupported
from .numpy_ops import (
    FUNCTIONS,
    METHODS,
    REQUIRED,
    TORCH_OF_NP,
    NdarrayV,
    as_array,
    ask_numpy,
    bind,
    cast,
    const_array,
    dtype_arg,
    is_array,
    np,
    result,
    tensor_to_ndarray,
    transpose,
    ufunc_call,
    weak,
)
from .pyops import realize_const
from .record import record
from .variables import Const, ListV, TensorV, TupleV, V


def _rec(f, fn, *args, **kwargs) -> TensorV:
    return record(f.session, fn, tuple(_v(a) for a in args), {k: _v(v) for k, v in kwargs.items()})


def _v(x) -> V:
    if isinstance(x, V):
        return x
    return ListV(x) if isinstance(x, list) and x and isinstance(x[0], V) else Const(x)


def _stand_in(a: NdarrayV):
    """A one-item array of ``a``'s dtype and rank to ask NumPy about (sizes are checked by torch on
    fake tensors; reading them here would specialise symbolic sizes)."""
    return np.empty((1,) * a.ndim, a.dtype)


def _ask(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ask_numpy(fn, *args, **kwargs)


def _no_out(name: str, b: dict) -> None:
    if realize_const(b.pop("out", Const(None))) is not None:
        raise Unsupported(f"numpy.{name}(out=...) writes into an array")


def _dims(axis, ndim: int) -> list[int]:
    if axis is None:
        return list(range(ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    if not axes:
        raise Unsupported("a NumPy reduction over axis=() (no axes)")
    return sorted(a % ndim for a in axes)


# ---- reductions ---------------------------------------------------------------------------------
def _sum(f, t, dims, keep, dtype, b):
    return _rec(f, torch.sum, cast(f, t, dtype), dims, keepdim=keep) if dims else cast(f, t, dtype)


def _prod(f, t, dims, keep, dtype, b):
    t = cast(f, t, dtype)
    for d in reversed(dims):
        t = _rec(f, torch.prod, t, d, keepdim=keep)
    return t


def _mean(f, t, dims, keep, dtype, b):
    compute = np.dtype("float32") if dtype == np.dtype("float16") else dtype
    return _rec(f, torch.mean, cast(f, t, compute), dims, keepdim=keep) if dims else cast(f, t, compute)


def _moment(fn):
    def build(f, t, dims, keep, dtype, b):
        compute = np.dtype("float32") if dtype == np.dtype("float16") else dtype
        return _rec(f, fn, cast(f, t, compute), dims, correction=realize_const(b["ddof"]), keepdim=keep)
    return build


def _extreme(fn):
    def build(f, t, dims, keep, dtype, b):
        return _rec(f, fn, _no_bool(f, t), dims, keepdim=keep) if dims else t
    return build


def _no_bool(f, t: TensorV) -> TensorV:
    """torch's max/argmax kernels take no bool: the same order on uint8 (the result is cast back)."""
    return cast(f, t, np.dtype(np.uint8)) if t.fake.dtype == torch.bool else t


def _logical(fn):
    def build(f, t, dims, keep, dtype, b):
        return _rec(f, fn, t, tuple(dims), keepdim=keep) if dims else cast(f, t, np.dtype(bool))
    return build


_REDUCE_PARAMS = (("a", REQUIRED), ("axis", None), ("dtype", None), ("out", None), ("keepdims", False))
_NO_DTYPE = (("a", REQUIRED), ("axis", None), ("out", None), ("keepdims", False))
_MOMENT = (("a", REQUIRED), ("axis", None), ("dtype", None), ("out", None), ("ddof", 0), ("keepdims", False))
_REDUCTIONS = {  # name: (params, builder)
    "sum": (_REDUCE_PARAMS, _sum), "prod": (_REDUCE_PARAMS, _prod), "mean": (_REDUCE_PARAMS, _mean),
    "std": (_MOMENT, _moment(torch.std)), "var": (_MOMENT, _moment(torch.var)),
    "max": (_NO_DTYPE, _extreme(torch.amax)), "min": (_NO_DTYPE, _extreme(torch.amin)),
    "amax": (_NO_DTYPE, _extreme(torch.amax)), "amin": (_NO_DTYPE, _extreme(torch.amin)),
    "any": (_NO_DTYPE, _logical(torch.any)), "all": (_NO_DTYPE, _logical(torch.all)),
}


def _reduction(name: str):
    params, build = _REDUCTIONS[name]

    def handler(f, args, kwargs) -> V:
        b = bind(name, params, args, kwargs)
        _no_out(name, b)
        a = as_array(f, b.pop("a"), f"numpy.{name}")
        opts = {k: realize_const(v) for k, v in b.items()}
        if "dtype" in opts:
            opts["dtype"] = dtype_arg(Const(opts["dtype"]))
        probe = _ask(getattr(np, name), np.empty((1,) * a.ndim, a.dtype), **opts)
        dtype = np.asarray(probe).dtype
        out = build(f, a.t, _dims(opts["axis"], a.ndim), bool(opts["keepdims"]), dtype, b)
        return result(cast(f, out, dtype))

    return handler


def _arg_extreme(name: str, fn):
    def handler(f, args, kwargs) -> V:
        b = bind(name, (("a", REQUIRED), ("axis", None), ("out", None), ("keepdims", False)), args, kwargs)
        _no_out(name, b)
        a = as_array(f, b["a"], f"numpy.{name}")
        axis, keep = realize_const(b["axis"]), bool(realize_const(b["keepdims"]))
        _ask(getattr(np, name), np.empty((1,) * a.ndim, a.dtype), axis=axis, keepdims=keep)
        t = _no_bool(f, a.t)
        if axis is None:
            out = _rec(f, fn, _rec(f, torch.reshape, t, (-1,)), 0)
            out = _rec(f, torch.reshape, out, (1,) * a.ndim) if keep else out
        else:
            out = _rec(f, fn, t, axis % a.ndim, keepdim=keep)
        return result(out)

    return handler


def _cumulative(name: str, fn):
    def handler(f, args, kwargs) -> V:
        b = bind(name, (("a", REQUIRED), ("axis", None), ("dtype", None), ("out", None)), args, kwargs)
        _no_out(name, b)
        a = as_array(f, b["a"], f"numpy.{name}")
        axis, dtype = realize_const(b["axis"]), dtype_arg(b["dtype"])
        res = _ask(getattr(np, name), np.empty((1,) * a.ndim, a.dtype), axis=axis, dtype=dtype).dtype
        t = _rec(f, torch.reshape, a.t, (-1,)) if axis is None else a.t
        return result(_rec(f, fn, cast(f, t, res), 0 if axis is None else axis % a.ndim), scalar=False)

    return handler


# ---- shapes -------------------------------------------------------------------------------------
def _shape_args(args) -> tuple:
    """``a.reshape(2, 3)`` / ``a.reshape((2, 3))`` / ``a.transpose(1, 0)``: one tuple."""
    values = [realize_const(x) for x in args]
    return tuple(values[0]) if len(values) == 1 and isinstance(values[0], (tuple, list)) else tuple(values)


def _reshape_to(f, a: NdarrayV, shape, order) -> V:
    if realize_const(order) not in ("C", None):
        raise Unsupported("numpy reshape with order other than 'C'")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return NdarrayV(_rec(f, torch.reshape, a.t, shape))


def reshape(f, args, kwargs) -> V:
    b = bind("reshape", (("a", REQUIRED), ("shape", REQUIRED), ("order", "C")), args, kwargs)
    return _reshape_to(f, as_array(f, b["a"], "numpy.reshape"), realize_const(b["shape"]), b["order"])


def method_reshape(f, args, kwargs) -> V:
    a, order = args[0], kwargs.pop("order", Const("C"))
    if kwargs:
        raise Unsupported(f"ndarray.reshape with {sorted(kwargs)}")
    return _reshape_to(f, a, _shape_args(args[1:]), order)


def method_transpose(f, args, kwargs) -> V:
    if kwargs:
        raise Unsupported("ndarray.transpose with keywords")
    axes = _shape_args(args[1:])
    return transpose(f, [args[0], Const(axes or None)], {})


def swapaxes(f, args, kwargs) -> V:
    b = bind("swapaxes", (("a", REQUIRED), ("axis1", REQUIRED), ("axis2", REQUIRED)), args, kwargs)
    a = as_array(f, b["a"], "numpy.swapaxes")
    return NdarrayV(_rec(f, torch.transpose, a.t, realize_const(b["axis1"]), realize_const(b["axis2"])))


def squeeze(f, args, kwargs) -> V:
    b = bind("squeeze", (("a", REQUIRED), ("axis", None)), args, kwargs)
    a = as_array(f, b["a"], "numpy.squeeze")
    axis = realize_const(b["axis"])
    shape = a.t.fake.shape
    dims = [d for d in range(a.ndim) if shape[d] == 1] if axis is None else _dims(axis, a.ndim)
    if any(shape[d] != 1 for d in dims):
        raise Unsupported("numpy.squeeze of an axis whose size is not 1 (eager raises ValueError)")
    return NdarrayV(_rec(f, torch.squeeze, a.t, tuple(dims)) if dims else a.t, a.scalar)


def expand_dims(f, args, kwargs) -> V:
    b = bind("expand_dims", (("a", REQUIRED), ("axis", REQUIRED)), args, kwargs)
    a = as_array(f, b["a"], "numpy.expand_dims")
    axis = realize_const(b["axis"])
    axes = axis if isinstance(axis, tuple) else (axis,)
    out = a.t
    for d in sorted(x % (a.ndim + len(axes)) for x in axes):
        out = _rec(f, torch.unsqueeze, out, d)
    return NdarrayV(out)


def ravel(f, args, kwargs) -> V:
    b = bind("ravel", (("a", REQUIRED), ("order", "C")), args, kwargs)
    return _reshape_to(f, as_array(f, b["a"], "numpy.ravel"), (-1,), b["order"])


def _sequence(f, v: V, name: str) -> list[NdarrayV]:
    if not isinstance(v, (ListV, TupleV)):
        raise Unsupported(f"numpy.{name} of a {type(v).__name__} (a list or tuple of arrays is traced)")
    return [as_array(f, x, f"numpy.{name}", tensors=True) for x in v.items]


def _joined(name: str, fn):
    def handler(f, args, kwargs) -> V:
        b = bind(name, (("arrays", REQUIRED), ("axis", 0), ("out", None), ("dtype", None)), args, kwargs)
        _no_out(name, b)
        arrays, axis = _sequence(f, b["arrays"], name), realize_const(b["axis"])
        dtype = dtype_arg(b["dtype"])
        probe = _ask(getattr(np, name), [_stand_in(a) for a in arrays], axis=axis, dtype=dtype)
        ts = [cast(f, a.t, probe.dtype) for a in arrays]
        if axis is None:
            ts, axis = [_rec(f, torch.reshape, t, (-1,)) for t in ts], 0
        return NdarrayV(_rec(f, fn, ts, axis))

    return handler


# ---- elementwise beyond ufuncs --------------------------------------------------------------------
def _operand(f, v: V, dtype, name: str) -> V:
    if is_array(v):
        return cast(f, as_array(f, v, name, tensors=True).t, dtype)
    value = weak(v)
    return Const(value.item() if isinstance(value, np.generic) else value)


def _proxy_of(f, v: V, name: str):
    return np.empty((0,), as_array(f, v, name, tensors=True).dtype) if is_array(v) else weak(v)


def where(f, args, kwargs) -> V:
    if len(args) + len(kwargs) != 3:
        raise Unsupported("numpy.where(condition) alone (its result's size depends on data)")
    b = bind("where", (("condition", REQUIRED), ("x", REQUIRED), ("y", REQUIRED)), args, kwargs)
    cond = as_array(f, b["condition"], "numpy.where", tensors=True)
    dtype = _ask(np.where, np.empty((0,), bool), _proxy_of(f, b["x"], "numpy.where"),
                 _proxy_of(f, b["y"], "numpy.where")).dtype
    x, y = (_operand(f, b[k], dtype, "numpy.where") for k in ("x", "y"))
    if not isinstance(x, TensorV) and not isinstance(y, TensorV):
        x = _rec(f, torch.full_like, cond.t, x.value, dtype=TORCH_OF_NP[dtype])
    out = _rec(f, torch.where, cast(f, cond.t, np.dtype(bool)), x, y)
    return NdarrayV(cast(f, out, dtype))


def clip(f, args, kwargs) -> V:
    b = bind("clip", (("a", REQUIRED), ("a_min", None), ("a_max", None), ("out", None), ("min", None),
                       ("max", None)), args, kwargs)
    _no_out("clip", b)
    lo, hi = _bound(b, "a_min", "min"), _bound(b, "a_max", "max")
    a = as_array(f, b["a"], "numpy.clip")
    if any(isinstance(v, TensorV) for v in (lo, hi)):
        raise Unsupported("numpy.clip with tensor bounds")
    dtype = _ask(np.clip, np.empty((0,), a.dtype), *(None if v is None else _proxy_of(f, v, "numpy.clip")
                                                    for v in (lo, hi))).dtype
    t = cast(f, a.t, dtype)
    lo, hi = (Const(None) if v is None else _operand(f, v, dtype, "numpy.clip") for v in (lo, hi))
    return result(_rec(f, torch.clamp, t, lo, hi))


def _bound(b: dict, name: str, alias: str) -> V | None:
    for v in (b[name], b[alias]):
        if not (isinstance(v, Const) and v.value is None):
            return v
    return None


def dot(f, args, kwargs) -> V:
    b = bind("dot", (("a", REQUIRED), ("b", REQUIRED), ("out", None)), args, kwargs)
    _no_out("dot", b)
    # np.dot converts its operands to arrays: a Python number is a strong (int64/float64) scalar
    x, y = (as_array(f, v, "numpy.dot", tensors=True) if is_array(v) else Const(np.asarray(weak(v))[()])
            for v in (b["a"], b["b"]))
    ranks = [v.ndim if isinstance(v, NdarrayV) else 0 for v in (x, y)]
    if 0 in ranks:
        return ufunc_call(f, np.multiply, [x, y], {})
    if max(ranks) > 2:
        raise Unsupported("numpy.dot of arrays with more than 2 dimensions")
    return ufunc_call(f, np.matmul, [x, y], {})


def around(f, args, kwargs) -> V:
    """``np.round(a, decimals)``: half to even, scaled by ``10**decimals`` as NumPy does it."""
    b = bind("round", (("a", REQUIRED), ("decimals", 0), ("out", None)), args, kwargs)
    _no_out("round", b)
    a, decimals = as_array(f, b["a"], "numpy.round"), realize_const(b["decimals"])
    if type(decimals) is not int or a.dtype.kind not in "f" and decimals < 0:
        raise Unsupported("numpy.round of integers to negative decimals")
    if a.dtype.kind not in "fc":
        return NdarrayV(_rec(f, torch.clone, a.t), a.scalar)
    return NdarrayV(_rec(f, torch.round, a.t, decimals=decimals), a.scalar)


def _same_dtype(name: str, params: tuple, build):
    """A function whose result has its first argument's dtype: ``build(f, a, **constants)``."""
    def handler(f, args, kwargs) -> V:
        b = bind(name, params, args, kwargs)
        a = as_array(f, b.pop("a"), f"numpy.{name}")
        if a.ndim == 0:
            raise Unsupported(f"numpy.{name} of a 0-d array or scalar")
        return NdarrayV(build(f, a, **{k: realize_const(v) for k, v in b.items()}))
    return handler


def _flip(f, a, axis):
    return _rec(f, torch.flip, a.t, tuple(range(a.ndim)) if axis is None else _dims(axis, a.ndim))


def _roll(f, a, shift, axis):
    if axis is None:
        return _rec(f, torch.reshape, _rec(f, torch.roll, _rec(f, torch.reshape, a.t, (-1,)), shift), tuple(a.t.fake.shape))
    return _rec(f, torch.roll, a.t, shift, axis)


def _tile(f, a, reps):
    return _rec(f, torch.tile, a.t, tuple(reps) if isinstance(reps, (tuple, list)) else (reps,))


def _repeat(f, a, repeats, axis):
    if type(repeats) is not int:
        raise Unsupported("numpy.repeat with per-item repeats")
    t = _rec(f, torch.reshape, a.t, (-1,)) if axis is None else a.t
    return _rec(f, torch.repeat_interleave, t, repeats, 0 if axis is None else axis % a.ndim)


def _triangle(fn):
    def build(f, a, k):
        if a.ndim < 2:
            raise Unsupported(f"numpy.{fn.__name__} of a 1-d array")
        return _rec(f, fn, a.t, k)
    return build


def _diff(f, a, n, axis):
    return _rec(f, torch.diff, a.t, n, axis) if n else a.t


def _broadcast_to(f, a, shape):
    return _rec(f, torch.broadcast_to, a.t, (shape,) if isinstance(shape, int) else tuple(shape))


_SAME_DTYPE = {
    "flip": ((("a", REQUIRED), ("axis", None)), _flip),
    "roll": ((("a", REQUIRED), ("shift", REQUIRED), ("axis", None)), _roll),
    "tile": ((("a", REQUIRED), ("reps", REQUIRED)), _tile),
    "repeat": ((("a", REQUIRED), ("repeats", REQUIRED), ("axis", None)), _repeat),
    "triu": ((("a", REQUIRED), ("k", 0)), _triangle(torch.triu)),
    "tril": ((("a", REQUIRED), ("k", 0)), _triangle(torch.tril)),
    "diff": ((("a", REQUIRED), ("n", 1), ("axis", -1)), _diff),
    "broadcast_to": ((("a", REQUIRED), ("shape", REQUIRED)), _broadcast_to),
}


def sort(f, args, kwargs) -> V:
    """``np.sort(a, axis=-1)``: the sorted values (which are the same for any sort kind; NaN last in
    both). ``axis=None`` sorts the flattened array."""
    b = bind("sort", (("a", REQUIRED), ("axis", -1), ("kind", None), ("order", None)), args, kwargs)
    a, axis = as_array(f, b["a"], "numpy.sort"), realize_const(b["axis"])
    if realize_const(b["order"]) is not None or a.ndim == 0 and axis is not None:
        raise Unsupported("numpy.sort with order= or of a 0-d array")
    t = _rec(f, torch.reshape, a.t, (-1,)) if axis is None else a.t
    values = _rec(f, torch.sort, _no_bool(f, t), stable=True, dim=0 if axis is None else axis).items[0]
    return NdarrayV(cast(f, values, a.dtype))


def argsort(f, args, kwargs) -> V:
    """``np.argsort(a, kind="stable")`` only: NumPy's default sort is not stable, so the order of
    equal items is its own."""
    b = bind("argsort", (("a", REQUIRED), ("axis", -1), ("kind", None), ("order", None), ("stable", None)), args, kwargs)
    if realize_const(b["kind"]) != "stable" and realize_const(b["stable"]) is not True:
        raise Unsupported("numpy.argsort without kind='stable' (the order of equal items is NumPy's own)")
    a, axis = as_array(f, b["a"], "numpy.argsort"), realize_const(b["axis"])
    t = _rec(f, torch.reshape, a.t, (-1,)) if axis is None else a.t
    return NdarrayV(_rec(f, torch.argsort, _no_bool(f, t), dim=0 if axis is None else axis, stable=True))


def norm(f, args, kwargs) -> V:
    """``np.linalg.norm(x, ord=None, axis=None, keepdims=False)``: the 2-norm of the flattened
    array, or of vectors along ``axis`` (one int)."""
    b = bind("linalg.norm", (("x", REQUIRED), ("ord", None), ("axis", None), ("keepdims", False)), args, kwargs)
    a, axis, keep = as_array(f, b["x"], "numpy.linalg.norm"), realize_const(b["axis"]), bool(realize_const(b["keepdims"]))
    if realize_const(b["ord"]) is not None or not (axis is None or type(axis) is int):
        raise Unsupported("numpy.linalg.norm with ord= or a tuple axis")
    dtype = _ask(np.linalg.norm, np.ones((1,) * max(a.ndim, 1), a.dtype), axis=axis).dtype
    t = cast(f, a.t, dtype)
    if axis is None:
        out = _rec(f, torch.linalg.vector_norm, t)
        return result(_rec(f, torch.reshape, out, (1,) * a.ndim) if keep else out)
    return result(_rec(f, torch.linalg.vector_norm, t, dim=axis, keepdim=keep))


def einsum(f, args, kwargs) -> V:
    if kwargs or not args or not isinstance(args[0], Const) or type(args[0].value) is not str:
        raise Unsupported("numpy.einsum other than einsum('subscripts', *arrays)")
    arrays = [as_array(f, a, "numpy.einsum", tensors=True) for a in args[1:]]
    dtype = np.result_type(*[a.dtype for a in arrays])
    if dtype.kind == "b":
        raise Unsupported("numpy.einsum of bool arrays")
    return result(_rec(f, torch.einsum, args[0].value, [cast(f, a.t, dtype) for a in arrays]))


# ---- dtypes, copies, new arrays -------------------------------------------------------------------
def astype(f, args, kwargs) -> V:
    b = bind("astype", (("a", REQUIRED), ("dtype", REQUIRED), ("order", "K"), ("casting", "unsafe"), ("subok", True),
                         ("copy", True)), args, kwargs)
    a, dtype = b["a"], dtype_arg(b["dtype"])
    if realize_const(b["casting"]) != "unsafe" or realize_const(b["order"]) not in ("K", "C"):
        raise Unsupported("ndarray.astype with casting= or order=")
    t = cast(f, a.t, dtype)
    return NdarrayV(_rec(f, torch.clone, t) if t is a.t else t, a.scalar)


def copy(f, args, kwargs) -> V:
    b = bind("copy", (("a", REQUIRED), ("order", "K")), args, kwargs)
    a = as_array(f, b["a"], "numpy.copy")
    return NdarrayV(_rec(f, torch.clone, a.t), a.scalar)


def asarray(f, args, kwargs) -> V:
    b = bind("asarray", (("a", REQUIRED), ("dtype", None), ("order", None), ("copy", None)), args, kwargs)
    return _to_array(f, b, copy=realize_const(b["copy"]) is True)


def array(f, args, kwargs) -> V:
    b = bind("array", (("object", REQUIRED), ("dtype", None), ("copy", True), ("order", "K")), args, kwargs)
    b["a"] = b.pop("object")
    return _to_array(f, b, copy=realize_const(b["copy"]) is not False)


def _to_array(f, b: dict, copy: bool) -> V:
    if realize_const(b["order"]) not in (None, "K", "C", "A"):
        raise Unsupported("numpy.asarray with order='F'")
    v, dtype = b["a"], dtype_arg(b["dtype"])
    if not is_array(v):
        return _constant(f, np.asarray, [Const(realize_const(v))], {"dtype": Const(dtype)})
    a = v if isinstance(v, NdarrayV) else tensor_to_ndarray(f, v, "numpy.asarray")
    if a.scalar:
        raise Unsupported("numpy.asarray of a NumPy scalar")
    t = a.t if dtype is None else cast(f, a.t, dtype)
    if copy and t is a.t:
        t = _rec(f, torch.clone, t)
    return a if t is a.t else NdarrayV(t)


def _like(name: str):
    def handler(f, args, kwargs) -> V:
        params = (("a", REQUIRED),) + ((("fill_value", REQUIRED),) if name == "full_like" else ()) + (("dtype", None),)
        b = bind(name, params, args, kwargs)
        a = as_array(f, b["a"], f"numpy.{name}")
        dtype = dtype_arg(b["dtype"])
        dtype = a.dtype if dtype is None else dtype
        fill = {"zeros_like": 0, "ones_like": 1}.get(name)
        fill = _ask(np.asarray, weak(b["fill_value"]) if fill is None else fill, dtype=dtype).item()
        return NdarrayV(_rec(f, torch.full_like, a.t, fill, dtype=TORCH_OF_NP[dtype]), a.scalar)

    return handler


def _constant(f, fn, args, kwargs) -> V:
    """A NumPy constructor of constants only (``np.arange(3)``, ``np.zeros((2, 3))``): run for real
    now (NumPy's dtype and values) and written into the graph as a new tensor."""
    try:
        values = [realize_const(a) for a in args], {k: realize_const(v) for k, v in kwargs.items()}
    except Unsupported:
        raise Unsupported(f"numpy.{fn.__name__} of values not known at capture time") from None
    return const_array(f, np.asarray(_ask(fn, *values[0], **values[1])), f"numpy.{fn.__name__}")


def _constructor(fn):
    def handler(f, args, kwargs) -> V:
        if any(is_array(a) for a in [*args, *kwargs.values()]):
            raise Unsupported(f"numpy.{fn.__name__} given an array")
        return _constant(f, fn, args, kwargs)
    return handler


def _scalar_type(cls):
    """``np.float32(v)``: of an array, its values cast (a scalar for a 0-d one); of constants
    (NumPy scalars included), the constant; else None (``stdlib_misc.numpy_scalar`` decides)."""
    def handler(f, args, kwargs) -> V | None:
        if len(args) == 1 and not kwargs and is_array(args[0]):
            a = as_array(f, args[0], f"numpy.{cls.__name__}")
            t = cast(f, a.t, np.dtype(cls))
            return NdarrayV(_rec(f, torch.clone, t) if t is a.t else t, a.scalar or a.ndim == 0)
        consts = [*args, *kwargs.values()]
        if consts and all(isinstance(v, Const) and isinstance(v.value, np.generic) for v in consts):
            return Const(_ask(cls, *[v.value for v in args], **{k: v.value for k, v in kwargs.items()}))
        return None
    return handler


def _unsupported_method(name: str):
    def handler(f, args, kwargs) -> V:
        raise Unsupported(f"ndarray.{name}() hands array data to Python or writes into it")
    return handler


def _fill_tables() -> None:
    for name in _REDUCTIONS:
        FUNCTIONS[getattr(np, name)] = _reduction(name)
        if hasattr(np.ndarray, name):
            METHODS[name] = _reduction(name)
    for name, fn in (("argmax", torch.argmax), ("argmin", torch.argmin)):
        METHODS[name] = FUNCTIONS[getattr(np, name)] = _arg_extreme(name, fn)
    for name, fn in (("cumsum", torch.cumsum), ("cumprod", torch.cumprod)):
        METHODS[name] = FUNCTIONS[getattr(np, name)] = _cumulative(name, fn)
    FUNCTIONS.update({np.reshape: reshape, np.transpose: transpose, np.swapaxes: swapaxes, np.squeeze: squeeze,
                      np.expand_dims: expand_dims, np.ravel: ravel, np.where: where, np.clip: clip,
                      np.dot: dot, np.copy: copy, np.asarray: asarray, np.array: array,
                      np.concatenate: _joined("concatenate", torch.cat), np.stack: _joined("stack", torch.stack)})
    for name, (params, build) in _SAME_DTYPE.items():
        FUNCTIONS[getattr(np, name)] = _same_dtype(name, params, build)
    FUNCTIONS[np.round] = FUNCTIONS[np.around] = METHODS["round"] = around
    FUNCTIONS.update({np.sort: sort, np.argsort: argsort, np.linalg.norm: norm, np.einsum: einsum})
    METHODS["argsort"] = argsort
    METHODS["repeat"] = FUNCTIONS[np.repeat]
    for name in ("zeros_like", "ones_like", "full_like"):
        FUNCTIONS[getattr(np, name)] = _like(name)
    for fn in (np.arange, np.linspace, np.zeros, np.ones, np.full, np.eye, np.identity):
        FUNCTIONS[fn] = _constructor(fn)
    # np.empty's contents are whatever memory held: zeros are as good an answer, and one constant
    FUNCTIONS[np.empty], FUNCTIONS[np.empty_like] = _constructor(np.zeros), FUNCTIONS[np.zeros_like]
    for dtype in TORCH_OF_NP:
        FUNCTIONS[dtype.type] = _scalar_type(dtype.type)
    METHODS.update({"reshape": method_reshape, "transpose": method_transpose, "swapaxes": swapaxes,
                    "squeeze": squeeze, "ravel": ravel, "flatten": ravel, "clip": clip, "dot": dot,
                    "astype": astype, "copy": copy})
    for name in ("item", "tolist", "tobytes", "fill", "sort", "resize", "put", "setfield"):
        METHODS[name] = _unsupported_method(name)
    for name, handler in METHODS.items():
        FUNCTIONS[getattr(np.ndarray, name)] = handler
        if hasattr(np.generic, name):  # the same methods of NumPy scalars
            FUNCTIONS[getattr(np.generic, name)] = handler


if np is not None:
    _fill_tables()
