"""Generated conformance corpus: torch ops x dtypes x shapes, through optimize vs eager."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from helpers import check

SHAPES = [(6,), (3, 5), (2, 3, 4)]
DTYPES = [torch.float32, torch.float64]

UNARY = {
    "sin": torch.sin, "cos": torch.cos, "exp": torch.exp, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "relu": torch.relu, "abs": torch.abs, "neg": operator.neg, "sqrt_abs": lambda x: torch.sqrt(x.abs() + 1),
    "gelu": F.gelu, "silu": F.silu, "softmax": lambda x: F.softmax(x, dim=-1),
    "log_softmax": lambda x: x.log_softmax(-1), "cumsum": lambda x: x.cumsum(0), "square": lambda x: x * x,
    "clamp": lambda x: x.clamp(-0.5, 0.5), "leaky": lambda x: F.leaky_relu(x, 0.1), "erf": torch.erf,
    "pow2": lambda x: x ** 2, "sum_keep": lambda x: x.sum(-1, keepdim=True), "mean": lambda x: x.mean(),
    "flip": lambda x: x.flip(0), "T": lambda x: x.T.contiguous(), "mul_scalar": lambda x: 3.0 * x - 1,
}

BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": lambda a, b: a / (b.abs() + 1),
    "maximum": torch.maximum, "minimum": torch.minimum, "where": lambda a, b: torch.where(a > b, a, b),
    "lt_float": lambda a, b: (a < b).float(), "atan2": torch.atan2, "addcmul": lambda a, b: a.addcmul(a, b, value=0.5),
    "lerp": lambda a, b: torch.lerp(a, b, 0.3), "hypot": torch.hypot, "iadd_clone": lambda a, b: a.clone().add_(b),
}


def _unary_fn(op):
    def fn(x):
        return op(x)

    return fn


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name, dtype, shape):
    fn = _unary_fn(UNARY[name])
    changed = shape[:-1] + (shape[-1] + 1,)
    check(fn, lambda: (torch.randn(shape, dtype=dtype),), lambda: (torch.randn(changed, dtype=dtype),))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary(name, dtype, shape):
    op = BINARY[name]

    def fn(a, b):
        return op(a, b)

    check(fn, lambda: (torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)))


METHODS = {
    "view": lambda x: x.view(-1), "reshape": lambda x: x.reshape(x.shape[0], -1),
    "unsqueeze": lambda x: x.unsqueeze(1).squeeze(1), "flatten": lambda x: x.flatten(),
    "max_dim": lambda x: x.max(dim=0), "split": lambda x: x.split(1, dim=0), "chunk": lambda x: torch.chunk(x, 2, 0),
    "index0": lambda x: x[0], "slice": lambda x: x[1:], "ellipsis": lambda x: x[..., None],
    "neg_index": lambda x: x[-1] * 2, "cat": lambda x: torch.cat([x, x * 2], 0), "stack": lambda x: torch.stack((x, x)),
    "size_math": lambda x: x.view(x.size(0), -1) * x.numel(), "dim_branch": lambda x: x.sum(0) if x.dim() > 1 else x,
    "dtype_to": lambda x: x.to(torch.float64) + 1, "zeros_like": lambda x: torch.zeros_like(x) + x,
    "new_ones": lambda x: x.new_ones(x.shape) - x, "arange": lambda x: x + torch.arange(x.shape[-1]),
    "setitem": lambda x: _setitem(x.clone()), "unbind_loop": lambda x: sum(r * 2 for r in x),
    "tuple_unpack": lambda x: _unpack(x), "contiguous": lambda x: x.transpose(0, -1).contiguous(),
}


def _setitem(y):
    y[0] = 1.0
    return y


def _unpack(x):
    a, *rest = x
    return a, rest


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4)], ids=str)
@pytest.mark.parametrize("name", list(METHODS))
def test_methods(name, shape):
    op = METHODS[name]

    def fn(x):
        return op(x)

    check(fn, lambda: (torch.randn(shape),))


@pytest.mark.parametrize("name", ["add_", "mul_", "zero_", "copy_", "clamp_", "index_put"])
@pytest.mark.parametrize("shape", [(5,), (2, 3)], ids=str)
def test_input_mutation(name, shape):
    def fn(x, y):
        if name == "add_":
            x.add_(y)
        elif name == "mul_":
            x.mul_(2)
        elif name == "zero_":
            x.zero_()
        elif name == "copy_":
            x.copy_(y)
        elif name == "clamp_":
            x.clamp_(min=0)
        else:
            x[0] = y[0]
        return x + 1

    check(fn, lambda: (torch.randn(shape), torch.randn(shape)))
