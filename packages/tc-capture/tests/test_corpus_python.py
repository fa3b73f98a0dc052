"""Conformance corpus: Python constructs around tensors (closures, loops, containers, classes...)."""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import check

import tc_capture

Pair = collections.namedtuple("Pair", ["a", "b"])
SCALE = 2.0
COUNTER = [0]


@dataclasses.dataclass
class Out:
    y: torch.Tensor
    n: int


class Helper:
    k = 3

    def __init__(self, w):
        self.w = w

    @property
    def double(self):
        return self.w * 2

    @staticmethod
    def stat(x):
        return x + 1

    @classmethod
    def clsm(cls, x):
        return x * cls.k

    def apply(self, x):
        return x * self.double + self.stat(x) + self.clsm(x)


class Base:
    def f(self, x):
        return x + 1


class Derived(Base):
    def f(self, x):
        return super().f(x) * 2


def helper_kw(x, *, scale=1.0, shift=0.0):
    return x * scale + shift


def varargs(*xs, **kw):
    return sum(xs) * kw.get("m", 1)


def f_closure(x):
    k = 3

    def inner(y):
        return y * k

    return inner(x) + inner(1.0)


def f_nonlocal(x):
    total = x

    def add(y):
        nonlocal total
        total = total + y

    add(x)
    add(2.0)
    return total


def f_listcomp(x):
    return [x * i for i in range(3)]


def f_dictcomp(x):
    return {f"k{i}": x + i for i in range(2)}


def f_genexpr_sum(x):
    return sum(x * i for i in [1, 2, 3])


def f_for_dict(x):
    d = {"a": 1.0, "b": 2.0}
    for k, v in d.items():
        x = x + v
    return x


def f_zip_enum(x):
    out = x
    for i, (a, b) in enumerate(zip([1, 2], [3, 4])):
        out = out + a * b + i
    return out


def f_reversed(x):
    xs = [x, x * 2, x * 3]
    return [t + 1 for t in reversed(xs)]


def f_while(x):
    i = 0
    while i < 3:
        x = x * 1.5
        i += 1
    return x


def f_if_python(x, flag):
    if flag:
        return x.sin()
    return x.cos()


def f_kwargs(x):
    return helper_kw(x, scale=2.0) + helper_kw(x, shift=1.0)


def f_varargs(x):
    return varargs(x, x, m=3) + varargs(*[x, x * 2])


def f_star_call(x):
    args = (x, 2.0)
    kw = {"alpha": 0.5}
    return torch.add(*args, **kw)


def f_namedtuple(x):
    p = Pair(x, x * 2)
    return Pair(p.b, p.a + 1)


def f_dataclass_out(x):
    return Out(x * 2, 3)


def f_class(x):
    return Helper(2.0).apply(x)


def f_super(x):
    return Derived().f(x)


def f_fstring(x):
    name = f"layer{x.shape[0]}_{x.dtype}"
    return {name: x + 1}


def f_assert(x):
    assert x.dim() >= 1, "needs a dim"
    return x * 2


def f_isinstance(x):
    if isinstance(x, torch.Tensor) and not isinstance(x, (list, tuple)):
        return x + 1
    return x


def f_getattr(x):
    h = Helper(1.0)
    return x * h.w + (1 if hasattr(h, "missing") else 2)


def f_global_read(x):
    return x * SCALE + math.pi


def f_global_write(x):
    global SCALE
    y = x * SCALE
    SCALE = SCALE
    return y


def f_tuple_in(xs):
    a, b = xs
    return a + b, [a * 2]


def f_dict_in(d):
    return d["x"] * d["y"] + len(d)


def f_list_out(x):
    out = []
    for i in range(3):
        out.append(x + i)
    out.extend([x])
    out.insert(0, x * 0)
    return out, out.pop()


def f_no_grad(x):
    with torch.no_grad():
        y = x * 2
    return y + x


def f_enable_grad(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
    return y


def f_set_grad(x):
    with torch.set_grad_enabled(False):
        y = x.exp()
    return y


def f_autocast(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ x.T
    return y.float()


def f_lambda(x):
    g = lambda t, s=2: t * s  # noqa: E731
    return g(x) + g(x, 3)


def f_map(x):
    return list(map(lambda t: t + 1, [x, x * 2]))


def f_minmax(x):
    n = max(x.shape[0], 2) + min(3, 4) + abs(-1)
    return x * n


def f_slices_list(x):
    xs = [x, x + 1, x + 2, x + 3]
    return xs[1:3], xs[::-1][0]


def f_str_ops(x):
    s = "a,b,c".split(",")
    return x * len(s) if "b" in s else x


def f_cond_tensor(x):
    import tc_ir

    return tc_ir.ops.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), [x])


def f_cond_python(x):
    import tc_ir

    return tc_ir.ops.cond(x.shape[0] > 2, lambda t: t + 1, lambda t: t - 1, (x,))


def f_kw_only_default(x, *, alpha=0.5):
    return x * alpha


def f_unpack_star(x):
    first, *mid, last = [x, x + 1, x + 2, x + 3]
    return first + last + len(mid)


def f_chained_compare(x):
    n = x.shape[0]
    return x * 2 if 1 < n <= 100 else x


def f_bool_ops(x):
    a, b = x.shape[0] > 1, x.dim() == 7
    return x + (1 if a and not b else 0) + (2 if a or b else 0)


def f_is_none(x, y=None):
    if y is None:
        y = torch.ones_like(x)
    return x + y


def f_functional(x):
    return F.dropout(F.relu(x), p=0.5, training=False) + F.normalize(x, dim=-1)


def f_tensor_args_kw(x):
    return torch.sum(x, dim=-1, keepdim=True) / x.size(-1)


def f_int_from_shape(x):
    n = x.shape[-1] // 2
    return x[..., :n] * x[..., n:]


def f_sorted(x):
    keys = sorted({"b": 2, "a": 1}.keys())
    return [x * len(k) for k in keys]


PY_FUNCS = [
    f_closure, f_nonlocal, f_listcomp, f_dictcomp, f_genexpr_sum, f_for_dict, f_zip_enum, f_reversed, f_while,
    f_kwargs, f_varargs, f_star_call, f_namedtuple, f_dataclass_out, f_class, f_super, f_fstring, f_assert,
    f_isinstance, f_getattr, f_global_read, f_global_write, f_list_out, f_no_grad, f_enable_grad, f_set_grad,
    f_autocast, f_lambda, f_map, f_minmax, f_slices_list, f_str_ops, f_cond_tensor, f_cond_python,
    f_kw_only_default, f_unpack_star, f_chained_compare, f_bool_ops, f_is_none, f_functional, f_tensor_args_kw,
    f_int_from_shape, f_sorted,
]


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("shape", [(4, 6), (3, 4)], ids=str)
@pytest.mark.parametrize("fn", PY_FUNCS, ids=lambda f: f.__name__)
def test_python_constructs(fn, shape, requires_grad):
    check(fn, lambda: (torch.randn(shape, requires_grad=requires_grad),),
          lambda: (torch.randn((shape[0] + 1, shape[1]), requires_grad=requires_grad),))


@pytest.mark.parametrize("flag", [True, False])
def test_python_flag(flag):
    check(f_if_python, lambda: (torch.randn(3), flag), lambda: (torch.randn(3), not flag))


def test_tuple_and_dict_inputs():
    check(f_tuple_in, lambda: ((torch.randn(3), torch.randn(3)),))
    check(f_dict_in, lambda: ({"x": torch.randn(2), "y": torch.randn(2)},))


# ---- iteration over objects of Python classes --------------------------------------------------
class ScaleView(collections.abc.Sequence):
    """Like transformers' ``config.per_layer_config``: a ``Sequence`` of ``__len__``/``__getitem__``."""

    def __init__(self, scales):
        self._scales = scales

    def __len__(self):
        return len(self._scales)

    def __getitem__(self, i):
        if i < 0 or i >= len(self):
            raise IndexError("list index out of range")
        return self._scales[i]


class GenIter:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield i + 1


class DelegatingIter:
    def __init__(self, items):
        self.items = items

    def __iter__(self):
        return iter(self.items)


class SelfIter:
    def __init__(self):
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.i += 1
        if self.i > 2:
            raise StopIteration
        return self.i


class Holder:
    view = ScaleView((2.0, 3.0))


def f_iter_sequence_view(x):
    return [x * s for s in ScaleView((1.0, 2.0, 3.0))]


def f_iter_sourced_sequence_view(x):
    scales = list(Holder.view)
    return sum(x * s for s in scales), len(scales)


def f_iter_generator_method(x):
    return [x + k for k in GenIter(3)]


def f_iter_delegating(x):
    return [x * k for k in DelegatingIter([1, 2])] + [x - a for a, _ in zip(DelegatingIter((1,)), "a")]


@pytest.mark.parametrize("fn", [f_iter_sequence_view, f_iter_sourced_sequence_view, f_iter_generator_method,
                                f_iter_delegating],
                         ids=lambda f: f.__name__)
def test_iteration_over_python_objects_one_graph(fn):
    _, be = check(fn, lambda: (torch.randn(3, 4),), lambda: (torch.randn(5, 4),))
    r = tc_capture.capture(fn, torch.randn(3, 4))
    assert (r.graph_count, r.graph_break_count) == (1, 0), r.breaks


def f_iter_self_iterator(x):
    return [x * k for k in SelfIter()]


def test_iteration_over_a_stateful_iterator_breaks_with_a_reason():
    check(f_iter_self_iterator, lambda: (torch.randn(3),))
    r = tc_capture.capture(f_iter_self_iterator, torch.randn(3))
    assert any("SelfIter" in b.reason and "__next__" in b.reason for b in r.breaks), r.breaks
