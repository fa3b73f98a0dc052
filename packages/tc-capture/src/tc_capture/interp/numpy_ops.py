"""NumPy on tensors, traced as torch ops with NumPy's semantics (as torch.compile does).

Inside a captured frame ``x.numpy()`` (also ``np.asarray(x)``, a NumPy function given a tensor, an
ndarray argument of the compiled function) is an :class:`NdarrayV`: a tracked ndarray whose data
is a graph tensor. NumPy functions, ufuncs, ndarray methods, attributes, operators and indexing on
it are recorded as the torch ops that compute the same values, with NumPy's dtypes:

* **dtypes are NumPy's own answer.** A ufunc's loop is asked of the installed NumPy
  (``ufunc.resolve_dtypes``: NEP 50 rules, Python numbers weak, NumPy scalars strong) and the
  operation is checked on empty arrays of those dtypes (an ``OverflowError`` eager would raise is a
  break); tensor operands are cast to the loop's dtypes before the torch op, the result to the
  loop's output dtype. Reductions and other functions ask NumPy for their result dtype the same way
  on tiny arrays (``np.sum`` of bool is int64, ``np.mean`` of ints float64...).
* **scalars**: where NumPy returns a scalar (a ufunc or reduction with a 0-d result, full integer
  indexing) the value is one (``scalar=True``): ``type()`` answers ``np.float32``..., and it is
  returned as ``arr[()]``.
* **what escapes** to Python (returned, or live at a graph break) is a real ndarray: the graph's
  tensor ``.numpy()``; an ndarray that is a graph input's own data (``x.numpy()`` of an argument)
  shares its memory, as in eager.
* **breaks, never a guess**: an unmapped NumPy function or ufunc, in-place writes (``a += 1``,
  ``a[i] = v``: the array may alias a tensor), data-dependent results (``bool(a)``, ``a.item()``,
  boolean masks), ``.numpy()`` of a tensor that requires grad or is not on the CPU (eager raises),
  mixing a tensor and an ndarray in one operator.
"""

from __future__ import annotations

import operator
import weakref

import torch

from ..cache import sources as S
from .base import Unsupported, hashable
from .pyops import realize_const
from .record import record
from .session import WRAP_TYPES
from .variables import BoundV, Const, IterV, TensorV, TupleV, V

try:
    import numpy as np
except ImportError:  # torch works without NumPy: nothing here is registered then
    np = None

_NP_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
              "complex64", "complex128")
TORCH_OF_NP = {} if np is None else {np.dtype(n): getattr(torch, n) for n in _NP_DTYPES}
_NP_OF_TORCH = {t: n for n, t in TORCH_OF_NP.items()}
_WEAK = (bool, int, float, complex)  # Python numbers: NEP 50 "weak" operands
REQUIRED = object()  # a required parameter in a signature table
_ARRAY_ITERATOR = None if np is None else type(iter(np.empty(1)))


class NdarrayV(V):
    """A NumPy array (or, ``scalar=True``, a NumPy scalar) whose data is the graph tensor ``t``."""

    __slots__ = ("t", "scalar")

    def __init__(self, t: TensorV, scalar: bool = False, source=None):
        super().__init__(source)
        self.t, self.scalar = t, scalar

    def __repr__(self) -> str:
        return f"NdarrayV({self.t!r}{', scalar' if self.scalar else ''})"

    @property
    def dtype(self):
        return _NP_OF_TORCH[self.t.fake.dtype]

    @property
    def ndim(self) -> int:
        return self.t.fake.dim()

    def py_type(self) -> type:
        return self.dtype.type if self.scalar else np.ndarray

    def truthy(self, f) -> bool:
        raise Unsupported("truth of a NumPy array or scalar (depends on its data)")

    def realize(self):
        raise Unsupported("a NumPy array's value used in Python (float(), str(), abs()...: it depends on data)")

    def length(self, f) -> V:
        if self.ndim == 0:
            raise Unsupported("len() of a NumPy scalar or 0-d array (eager raises TypeError)")
        return Const(self.t.fake.shape[0])

    def attr(self, f, name: str) -> V | None:
        return _attr(f, self, name)

    def getitem(self, f, key: V) -> V:
        return _getitem(f, self, key)

    def rows(self, f) -> IterV:
        """``iter(a)``: its rows (NumPy scalars for a 1-d array)."""
        if self.ndim == 0:
            raise Unsupported("iteration over a NumPy scalar or 0-d array (eager raises TypeError)")
        return IterV([_getitem(f, self, Const(i)) for i in range(self.t.fake.shape[0])], cls=_ARRAY_ITERATOR)

    def operate(self, f, fn, *operands: V) -> V:
        """A Python operator (``pyops``) with this value among its operands."""
        return _operator(f, fn, operands)

    def rebuild(self, rb) -> str:
        if self.source is not None:  # an ndarray argument, unchanged: the caller's own object
            return self.source.expr
        return rb._bind(self, f"{rb.refs(_to_numpy)}({rb.expr(self.t)}, {self.scalar})")


def _to_numpy(t: torch.Tensor, scalar: bool):
    """The ndarray (or NumPy scalar) a graph result stands for (runs in generated runners)."""
    arr = t.numpy()
    return arr[()] if scalar else arr


# ---- entering NumPy -----------------------------------------------------------------------------
def tensor_to_ndarray(f, t: V, what: str = "Tensor.numpy()") -> NdarrayV:
    """``x.numpy()`` / ``np.asarray(x)``: the array sharing ``x``'s data; a break where eager raises."""
    if not isinstance(t, TensorV):
        raise Unsupported(f"{what} of a {type(t).__name__}")
    fake = t.fake
    if fake.requires_grad:
        raise Unsupported(f"{what} of a tensor that requires grad (eager raises RuntimeError)")
    if fake.device.type != "cpu":
        raise Unsupported(f"{what} of a tensor on {fake.device} (eager raises TypeError)")
    if fake.dtype not in _NP_OF_TORCH or fake.is_conj() or fake.is_neg() or fake.layout != torch.strided:
        raise Unsupported(f"{what} of a {fake.dtype} tensor with no NumPy equivalent here")
    return NdarrayV(t)


def tensor_numpy(f, self_v: V, args, kwargs) -> V:
    """``Tensor.numpy(force=False)``."""
    force = kwargs.get("force", args[0] if args else Const(False))
    if len(args) > 1 or set(kwargs) - {"force"} or realize_const(force) is not False:
        raise Unsupported("Tensor.numpy(force=True) (it copies and detaches)")
    return tensor_to_ndarray(f, self_v)


def _ndarray_input(session, value, source) -> V:
    """An ndarray argument: a graph input read as ``torch.from_numpy(arg)`` at call time, guarded
    on its type, dtype, shape and strides (as torch.compile treats ndarray inputs as tensors)."""
    if value.dtype not in TORCH_OF_NP or not value.flags.writeable or any(s < 0 for s in value.strides) \
            or any(s % value.itemsize for s in value.strides):
        raise Unsupported(f"an ndarray argument of dtype {value.dtype} (read-only, or a layout torch cannot view)")
    g = session.guards
    g.type_is(source, value)
    seen = _NDARRAY_INPUTS.setdefault(session, [])
    same = _same_or_apart(session, value, source, seen)
    if same is not None:
        return same
    expr = f"{g.ref(torch.from_numpy)}({source.expr})"
    t = session._tensor_input(torch.from_numpy(value), S.Source(expr, source.name))
    seen.append((source, value, NdarrayV(t, source=source)))
    return seen[-1][2]


_NDARRAY_INPUTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # session -> [(source, array, V)]


def _same_or_apart(session, value, source, seen: list) -> NdarrayV | None:
    """One array reached twice (a local and the stack after a break) is one input, guarded ``is``.
    Other ndarray inputs must not share memory (an in-place op through one would not be seen
    through the other, as it is in eager): checked now and guarded."""
    g = session.guards
    for other_source, other, other_v in seen:
        if other is value:
            g.add(source, f"{source.expr} is {other_source.expr}", f"{g.readable(source)} is {g.readable(other_source)}")
            return other_v
        if np.may_share_memory(value, other):
            raise Unsupported("two ndarray arguments that share memory")
        g.add(source, f"not {g.ref(np.may_share_memory)}({source.expr}, {other_source.expr})",
              f"{g.readable(source)} and {g.readable(other_source)} do not share memory")
    return None


def from_numpy_call(f, fn, args, kwargs) -> V | None:
    """``torch.from_numpy(a)`` / ``torch.as_tensor(a)`` / ``torch.asarray(a)`` / ``torch.tensor(a)``
    of a tracked ndarray: its tensor (a copy for ``torch.tensor``). None when no argument is one;
    another torch function given an ndarray is a break."""
    if not any(isinstance(a, NdarrayV) for a in [*args, *kwargs.values()]):
        return None
    name = getattr(fn, "__name__", str(fn))
    a = args[0] if args else None
    if not isinstance(a, NdarrayV) or name not in ("from_numpy", "as_tensor", "asarray", "tensor") or len(args) > 1:
        raise Unsupported(f"torch.{name} given a NumPy array")
    if name == "from_numpy" and (kwargs or a.scalar):
        raise Unsupported("torch.from_numpy of a NumPy scalar (eager raises TypeError)")
    extra = set(kwargs) - {"dtype", "device"}
    device = realize_const(kwargs.get("device", Const(None)))
    if extra or device is not None and torch.device(device).type != "cpu":
        raise Unsupported(f"torch.{name}(ndarray, {', '.join(sorted(kwargs))})")
    t = a.t
    dtype = realize_const(kwargs.get("dtype", Const(None)))
    if dtype is not None and dtype != t.fake.dtype:
        t = record(f.session, "to", (t, Const(dtype)), {})
    elif name == "tensor":
        t = record(f.session, "clone", (t,), {})
    return t


# ---- operands -----------------------------------------------------------------------------------
def as_array(f, v: V, what: str, tensors: bool = False) -> NdarrayV:
    """An array operand. A tensor is one (through its ``__array__``) only for the functions that
    convert their arguments (``tensors``: C functions such as ``np.where``, ``np.concatenate``);
    the others call the tensor's own method in eager (``np.sum(t)`` is ``t.sum(axis=...)``)."""
    if isinstance(v, NdarrayV):
        return v
    if isinstance(v, TensorV):
        if not tensors:
            raise Unsupported(f"{what} of a tensor (eager calls the tensor's own method)")
        return tensor_to_ndarray(f, v, f"{what} of a tensor")
    raise Unsupported(f"{what} of a {type(v).__name__} (only arrays and tensors are traced)")


def is_array(v: V) -> bool:
    return isinstance(v, (NdarrayV, TensorV))


def weak(v: V):
    """A constant operand: a Python number (weak) or a NumPy scalar (strong)."""
    if isinstance(v, Const):
        value = v.value
        if type(value) in _WEAK or isinstance(value, np.generic) and value.dtype in TORCH_OF_NP:
            return value
        raise Unsupported(f"a NumPy operand of type {type(value).__name__} (arrays, tensors and numbers are traced)")
    raise Unsupported(f"a NumPy operand that is a {type(v).__name__} (arrays, tensors and numbers are traced)")


def _proxy(v):
    """What stands for an operand when NumPy is asked for dtypes: an empty array of its dtype."""
    return np.empty((0,), v.dtype) if isinstance(v, NdarrayV) else v


def dtype_arg(v: V):
    value = realize_const(v)
    if value is None:
        return None
    try:
        return np.dtype(value)
    except TypeError as e:
        raise Unsupported(f"dtype {value!r}: {e}") from e


def cast(f, t: TensorV, dtype) -> TensorV:
    target = TORCH_OF_NP.get(np.dtype(dtype))
    if target is None:
        raise Unsupported(f"NumPy dtype {dtype} has no torch equivalent here")
    return t if t.fake.dtype == target else record(f.session, "to", (t, Const(target)), {})


def result(t: V, scalar: bool | None = None) -> NdarrayV:
    """An op's result: a NumPy scalar where it is 0-d (ufuncs, reductions), unless told."""
    if not isinstance(t, TensorV):
        raise Unsupported("a NumPy operation gave no array")
    return NdarrayV(t, t.fake.dim() == 0 if scalar is None else scalar)


def ask_numpy(fn, *args, **kwargs):
    """Run the NumPy function on stand-ins: its error (eager's) becomes a break."""
    try:
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)
    except Exception as e:
        raise Unsupported(f"numpy.{getattr(fn, '__name__', fn)} raises {type(e).__name__}: {e}") from e


# ---- ufuncs -------------------------------------------------------------------------------------
_UFUNCS = {
    "add": torch.add, "subtract": torch.sub, "multiply": torch.mul, "divide": torch.true_divide,
    "true_divide": torch.true_divide, "floor_divide": torch.floor_divide, "remainder": torch.remainder,
    "power": torch.pow, "float_power": torch.pow, "matmul": torch.matmul, "negative": torch.neg,
    "positive": torch.positive, "absolute": torch.abs, "fabs": torch.abs, "sign": torch.sign,
    "sqrt": torch.sqrt, "square": torch.square, "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1,
    "log": torch.log, "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "arcsin": torch.asin, "arccos": torch.acos,
    "arctan": torch.atan, "arctan2": torch.atan2, "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh,
    "arcsinh": torch.asinh, "arccosh": torch.acosh, "arctanh": torch.atanh, "hypot": torch.hypot,
    "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "rint": torch.round,
    "maximum": torch.maximum, "minimum": torch.minimum, "fmax": torch.fmax, "fmin": torch.fmin,
    "equal": torch.eq, "not_equal": torch.ne, "less": torch.lt, "less_equal": torch.le, "greater": torch.gt,
    "greater_equal": torch.ge, "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor, "logical_not": torch.logical_not, "isnan": torch.isnan,
    "isinf": torch.isinf, "isfinite": torch.isfinite, "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor, "invert": torch.bitwise_not,
    "left_shift": torch.bitwise_left_shift, "right_shift": torch.bitwise_right_shift,
    "copysign": torch.copysign, "deg2rad": torch.deg2rad, "rad2deg": torch.rad2deg,
    "reciprocal": torch.reciprocal,
}
# Integer loops where torch and NumPy differ on some values: NumPy gives 0 for a zero divisor,
# truncates 1/x; torch raises or promotes. Traced only with a nonzero constant divisor / not at all.
_INT_DIVISION = {"floor_divide", "remainder"}
_FLOAT_ONLY = {"reciprocal"}
_BOOL_NATIVE = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
                "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "isnan", "isinf",
                "isfinite"}


def ufunc_call(f, uf, args, kwargs, probe=None) -> V:
    """``uf(*args)`` (``probe``: the Python operator written, whose NumPy fast paths may pick
    another loop: ``bool_array ** 2`` is ``np.square``, int8)."""
    name = uf.__name__
    if kwargs:
        raise Unsupported(f"numpy.{name} with keyword arguments {sorted(kwargs)}")
    if uf.nout != 1 or name not in _UFUNCS or len(args) != uf.nin:
        raise Unsupported(f"numpy.{name} is not traced (no torch equivalent mapped)")
    operands = [as_array(f, a, f"numpy.{name}", tensors=True) if is_array(a) else weak(a) for a in args]
    if not any(isinstance(o, NdarrayV) for o in operands):
        raise Unsupported(f"numpy.{name} of constants only")
    out_dtype = ask_numpy(probe or uf, *[_proxy(o) for o in operands]).dtype  # NumPy's checks too
    loop = _loop(uf, operands, out_dtype)
    _check_int_loop(name, loop, operands)
    # torch has no bool kernel for many ops (abs, sign, maximum...): such a bool loop runs on uint8
    # (NumPy's bool results are 0/1 alike) and its result is cast back.
    compute = [np.dtype(np.uint8) if d.kind == "b" and name not in _BOOL_NATIVE else d for d in loop[:-1]]
    torch_args = [cast(f, o.t, d) if isinstance(o, NdarrayV) else _scalar_tensor(f, o, d)
                  for o, d in zip(operands, compute)]
    out = record(f.session, _UFUNCS[name], tuple(torch_args), {})
    if name == "sign" and loop[0].kind in "fc":  # NumPy's sign(nan) is nan, torch's 0
        out = record(f.session, torch.where, (record(f.session, torch.isnan, (torch_args[0],), {}), torch_args[0], out), {})
    out = cast(f, out, out_dtype)
    if any(isinstance(a, TensorV) for a in args):  # eager wraps it back: Tensor.__array_wrap__
        return cast(f, out, np.dtype(np.uint8)) if out_dtype.kind == "b" else out
    return result(out)


def _loop(uf, operands, out_dtype) -> tuple:
    """The dtypes of ``uf``'s loop: NumPy's resolution with Python numbers weak; where it gives
    another result than NumPy's call did (a bool array and a Python int), with the numbers typed."""
    def resolve(typed: bool):
        dts = [o.dtype if isinstance(o, NdarrayV) else np.asarray(o).dtype if typed or type(o) not in _WEAK
               else type(o) for o in operands]
        return ask_numpy(uf.resolve_dtypes, (*dts, None))

    loop = resolve(False)
    if loop[-1] != out_dtype:
        loop = resolve(True)
    if loop[-1] != out_dtype and loop[-1].kind != "b":
        loop = (out_dtype,) * (len(operands) + 1)
    return loop


def _scalar_tensor(f, value, dtype) -> TensorV:
    """A constant operand as a 0-d tensor of its loop dtype (NumPy casts it to the loop's dtype;
    several torch ops take no Python number)."""
    value = value.item() if isinstance(value, np.generic) else value
    if type(value) is int and dtype.kind in "iu" and not np.iinfo(dtype).min <= value <= np.iinfo(dtype).max:
        # NumPy compares such a number exactly (``uint8_array > -10``); cast, it would wrap
        raise Unsupported(f"a Python int ({value}) out of the range of a NumPy {dtype} operation")
    return record(f.session, torch.full, (Const(()), Const(value)), {"dtype": Const(TORCH_OF_NP[np.dtype(dtype)])})


def _check_int_loop(name: str, loop, operands) -> None:
    if loop[0].kind not in "iub":
        return
    if name in _FLOAT_ONLY:
        raise Unsupported(f"numpy.{name} of integers (NumPy's integer loop is not torch's)")
    if name in _INT_DIVISION and (isinstance(operands[1], NdarrayV) or operands[1] == 0):
        raise Unsupported(f"numpy.{name} of integers by an array or zero (NumPy gives 0 where torch raises)")
    if name == "power" and (isinstance(operands[1], NdarrayV) or operands[1] < 0):
        raise Unsupported("numpy.power of integers by an array or a negative exponent")


_OPERATORS = {operator.add: "add", operator.sub: "subtract", operator.mul: "multiply", operator.truediv: "divide",
              operator.floordiv: "floor_divide", operator.mod: "remainder", operator.pow: "power",
              operator.matmul: "matmul", operator.and_: "bitwise_and", operator.or_: "bitwise_or",
              operator.xor: "bitwise_xor", operator.lshift: "left_shift", operator.rshift: "right_shift",
              operator.lt: "less", operator.le: "less_equal", operator.eq: "equal", operator.ne: "not_equal",
              operator.gt: "greater", operator.ge: "greater_equal", operator.neg: "negative",
              operator.pos: "positive", operator.invert: "invert"}
_INPLACE = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
            operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor, operator.ilshift,
            operator.irshift}


def _operator(f, fn, operands) -> V:
    if fn in _INPLACE:
        raise Unsupported(f"in-place {fn.__name__} on a NumPy array (it may share memory with a tensor)")
    if any(isinstance(o, TensorV) for o in operands):
        raise Unsupported(f"{getattr(fn, '__name__', fn)} between a tensor and a NumPy array")
    name = _OPERATORS.get(fn)
    if name is None:
        raise Unsupported(f"operator {getattr(fn, '__name__', fn)} on a NumPy array")
    return ufunc_call(f, getattr(np, name), list(operands), {}, probe=fn)


# ---- attributes, methods, indexing ----------------------------------------------------------------
def _attr(f, a: NdarrayV, name: str) -> V | None:
    fake = a.t.fake
    if name == "shape":
        return Const(tuple(fake.shape))
    if name == "ndim":
        return Const(fake.dim())
    if name == "size":
        return Const(fake.numel())
    if name == "dtype":
        return Const(a.dtype)
    if name in ("itemsize", "nbytes"):
        return Const(a.dtype.itemsize * (1 if name == "itemsize" else fake.numel()))
    if name == "T":
        return transpose(f, [a], {})
    owner = np.generic if a.scalar else np.ndarray  # the class whose method descriptor eager binds
    if getattr(owner, name, None) is None:
        return None
    if name in METHODS:
        return BoundV(Const(getattr(owner, name)), a)
    raise Unsupported(f"ndarray.{name} is not traced")


_BASIC = (int, type(None), type(Ellipsis))


def _getitem(f, a: NdarrayV, key: V) -> V:
    if a.scalar:
        raise Unsupported("indexing a NumPy scalar")
    items = list(key.items) if isinstance(key, TupleV) else [key]
    if isinstance(key, Const) and type(key.value) is tuple:
        items = [Const(k) for k in key.value]
    parts, all_ints = [], True
    for item in items:
        if isinstance(item, NdarrayV):
            if item.dtype.kind not in "iu":
                raise Unsupported("indexing a NumPy array with a boolean mask (its size depends on data)")
            parts.append(item.t)
            all_ints = all_ints and item.ndim == 0  # a NumPy integer scalar indexes as an int
            continue
        k = realize_const(item) if isinstance(item, Const) else _not_index(item)
        k = _index_value(k)
        if isinstance(k, slice) and (k.step is not None and not (type(k.step) is int and k.step > 0)):
            raise Unsupported("a NumPy slice with a negative step (torch has no negative strides)")
        if not isinstance(k, (*_BASIC, slice)) or isinstance(k, bool):
            raise Unsupported(f"indexing a NumPy array with {type(k).__name__}")
        all_ints = all_ints and type(k) is int
        parts.append(Const(k))
    out = record(f.session, operator.getitem, (a.t, TupleV(parts)), {})
    return NdarrayV(out, scalar=all_ints and out.fake.dim() == 0)


def _index_value(k):
    """NumPy integers in an index (``a[np.int64(1)]``, ``a[i:]``) as the ints torch takes."""
    if isinstance(k, slice):
        return slice(*(_index_value(x) for x in (k.start, k.stop, k.step)))
    return int(k) if isinstance(k, np.integer) else k


def _not_index(item: V):
    raise Unsupported(f"indexing a NumPy array with a {type(item).__name__}")


def bind(name: str, params: tuple, args, kwargs) -> dict:
    """Bind a NumPy call's arguments to ``params`` ((name, default) pairs, ``REQUIRED`` for required)."""
    names = [p for p, _ in params]
    if len(args) > len(params) or set(kwargs) - set(names):
        raise Unsupported(f"numpy.{name} with arguments {sorted(set(kwargs) - set(names)) or len(args)} not traced")
    out = dict(zip(names, args))
    for k, v in kwargs.items():
        if k in out:
            raise Unsupported(f"numpy.{name}() got {k!r} twice")
        out[k] = v
    for p, d in params:
        if p not in out:
            if d is REQUIRED:
                raise Unsupported(f"numpy.{name}() missing {p!r}")
            out[p] = Const(d)
    return out


# The handlers' tables (``METHODS``: ndarray methods; ``FUNCTIONS``: ``np.*``) are filled in
# ``numpy_funcs``, which imports this module.
METHODS: dict = {}
FUNCTIONS: dict = {}


def call(f, fn, args, kwargs) -> V | None:
    """A call of a NumPy callable (a CONST_CALL_RULES rule): its traced value, a break for a NumPy
    callable given tracked arrays that is not traced, or None (not NumPy's: other rules apply)."""
    if np is None:
        return None
    handler = FUNCTIONS.get(fn) if hashable(fn) else None
    if handler is not None or isinstance(fn, np.ufunc):
        constants = _constants(args, kwargs)
        if constants is not None:  # pure NumPy of constants (``np.sqrt(2.0)``, ``np.prod(shape)``)
            return _fold(f, fn, *constants)
    if handler is not None:
        return handler(f, list(args), dict(kwargs))
    if isinstance(fn, np.ufunc):
        return ufunc_call(f, fn, args, kwargs) if any(is_array(a) for a in args) else None
    module = getattr(fn, "__module__", None) or getattr(getattr(fn, "__objclass__", None), "__module__", "") or ""
    if module.split(".")[0] == "numpy" and any(isinstance(a, (NdarrayV, TensorV)) for a in [*args, *kwargs.values()]):
        raise Unsupported(f"numpy.{getattr(fn, '__name__', fn)} is not traced (no torch equivalent mapped)")
    return None


_CONST_VALUES = (bool, int, float, complex, str, type(None), type)


def _constants(args, kwargs) -> tuple | None:
    """The values of arguments that are all plain constants (numbers, NumPy scalars and dtypes,
    tuples/lists of them), else None. Never an ndarray: one is mutable, read as an input."""
    try:
        values = [realize_const(a) for a in args], {k: realize_const(v) for k, v in kwargs.items()}
    except Unsupported:
        return None
    return values if all(_plain(v) for v in [*values[0], *values[1].values()]) else None


def _plain(x) -> bool:
    if isinstance(x, (tuple, list)):
        return all(_plain(i) for i in x)
    return isinstance(x, (*_CONST_VALUES, np.generic, np.dtype))


def _fold(f, fn, args: list, kwargs: dict) -> V:
    out = ask_numpy(fn, *args, **kwargs)
    if isinstance(out, np.ndarray):
        return const_array(f, out, f"numpy.{getattr(fn, '__name__', fn)}")
    if not _plain(out):
        raise Unsupported(f"numpy.{getattr(fn, '__name__', fn)} of constants gave a {type(out).__name__}")
    return Const(out)


_CONST_ARRAY_LIMIT = 4096  # items of a non-uniform constant array written into a graph


def const_array(f, arr, what: str) -> NdarrayV:
    """A NumPy array computed at capture time from constants, as a new tensor of the graph."""
    if arr.dtype not in TORCH_OF_NP:
        raise Unsupported(f"{what} gives dtype {arr.dtype}, which has no torch equivalent here")
    dtype, flat = Const(TORCH_OF_NP[arr.dtype]), arr.ravel()
    if flat.size == 0 or (flat == flat[0]).all():
        first = flat[0].item() if flat.size else 0
        return NdarrayV(record(f.session, torch.full, (Const(tuple(arr.shape)), Const(first)), {"dtype": dtype}))
    if flat.size > _CONST_ARRAY_LIMIT:
        raise Unsupported(f"{what} makes a constant array of {flat.size} items")
    t = record(f.session, torch.tensor, (Const(flat.tolist()),), {"dtype": dtype})
    return NdarrayV(record(f.session, torch.reshape, (t, Const(tuple(arr.shape))), {}))


def transpose(f, args, kwargs) -> V:
    b = bind("transpose", (("a", REQUIRED), ("axes", None)), args, kwargs)
    a = as_array(f, b["a"], "numpy.transpose")
    axes = realize_const(b["axes"])
    if axes is None:
        axes = tuple(reversed(range(a.ndim)))
    out = record(f.session, "permute", (a.t, Const(tuple(axes))), {})
    return NdarrayV(out, a.scalar)


def _numpy_scalar_input(session, value, source) -> V:
    """A NumPy scalar argument (``np.float32(2.0)``): a constant guarded on its type and value
    (``np.float64`` subclasses ``float``; a type guard alone would bake the first call's value)."""
    session.guards.equals(source, value)
    return Const(value, source)


def _ndarray_subclass(session, value, source) -> V:
    raise Unsupported(f"a {type(value).__qualname__} argument (an ndarray subclass: its operations are its own)")


if np is not None:
    WRAP_TYPES[np.ndarray] = _ndarray_input
    for _cls in (np.matrix, np.ma.MaskedArray, np.memmap, np.recarray):  # else a Const whose values would be baked
        WRAP_TYPES[_cls] = _ndarray_subclass
    for _dtype in TORCH_OF_NP:
        WRAP_TYPES[_dtype.type] = _numpy_scalar_input
