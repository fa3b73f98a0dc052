"""Dynamic shapes: what torch's symbolic traces put in a graph besides plain sizes. Strides
``Max(1, e)`` (contiguous strides of a dim only known ``>= 0``) are printed in every back end
(C++ ``std::max<int64_t>``, Triton ``tl.maximum``, the wrapper's ``max``); scalar arguments
computed from sizes (an int ``s0``, ``tc_ir.spec.SizeFloat(n / (n - 1))``) are fused into
kernels, the float one rounded once as eager's double arithmetic rounds it."""

import pytest
import sympy
import torch
from dyn_helpers import run_sizes

import tc_inductor
import tc_ir
from tc_ir.spec import SizeFloat

aten = torch.ops.aten
s0, s1 = tc_ir.sym("s0"), tc_ir.sym("s1")
BACKENDS = ["cpp", "triton"]


def _max_stride_graph() -> tc_ir.Graph:
    """``y`` binds ``s1``; ``x`` is ``(s0, s1 - 2)`` with the stride torch gives it,
    ``(Max(1, s1 - 2), 1)``: zero columns when ``s1`` is 2. Its transpose is copied out."""
    g = tc_ir.Graph("max_stride")
    tail = s1 - 2
    x = g.input("x", tc_ir.TensorSpec((s0, tail), stride=(sympy.Max(1, tail), 1)))
    y = g.input("y", tc_ir.TensorSpec((s1,)))
    t = g.call(aten.permute.default, x, [1, 0], spec=tc_ir.TensorSpec((tail, s0), stride=(1, sympy.Max(1, tail))))
    out = g.call(aten.clone.default, t, kwargs={"memory_format": torch.contiguous_format},
                 spec=tc_ir.TensorSpec((tail, s0), stride=(s0, 1)))
    g.output((g.call(aten.mul.Tensor, out, 2.0, spec=tc_ir.TensorSpec((tail, s0), stride=(s0, 1))),
              g.call(aten.neg.default, y, spec=tc_ir.TensorSpec((s1,)))))
    return g


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_strides_print_in_every_backend(backend):
    compiled = run_sizes(_max_stride_graph(), lambda n: [torch.randn(n + 1, n - 2), torch.randn(n)],
                         sizes=(7, 2, 3, 17) if backend == "cpp" else (7, 2, 5), backend=backend,
                         eager=lambda x, y: ((x.t().contiguous() * 2.0), -y))
    source = "\n".join(compiled.kernels)
    assert ("std::max<int64_t>" if backend == "cpp" else "tl.maximum") in source, source


def _scalar_graph() -> tc_ir.Graph:
    g = tc_ir.Graph("size_scalars")
    x = g.input("x", tc_ir.TensorSpec((s0, s1), torch.float64))
    i = g.input("i", tc_ir.TensorSpec((s0, s1), torch.int64))
    spec = tc_ir.TensorSpec((s0, s1), torch.float64)
    n = s0 * s1
    unbiased = g.call(aten.mul.Tensor, x, SizeFloat(n / (n - 1)), spec=spec)
    mean = g.call(aten.div.Tensor, unbiased, SizeFloat(n), spec=spec)
    shifted = g.call(aten.add.Tensor, i, s0, spec=tc_ir.TensorSpec((s0, s1), torch.int64))
    as_float = g.call(aten.mul.Tensor, i, SizeFloat(1 / s1), spec=tc_ir.TensorSpec((s0, s1), torch.float32))
    g.output((mean, shifted, as_float))
    return g


def _scalar_eager(x, i):
    n = x.numel()
    return x * (n / (n - 1.0)) / float(n), i + x.shape[0], i * (1.0 / x.shape[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_size_scalars_are_fused_and_exact(backend):
    compiled = run_sizes(_scalar_graph(), lambda n: [torch.randn(n, n + 3, dtype=torch.float64),
                                                     torch.randint(-50, 50, (n, n + 3))],
                         sizes=(2, 3, 9, 31) if backend == "cpp" else (2, 5), backend=backend, eager=_scalar_eager)
    x, i = torch.randn(7, 4, dtype=torch.float64), torch.randint(-50, 50, (7, 4))
    for got, want in zip(compiled(x, i), _scalar_eager(x, i)):
        assert got.dtype == want.dtype and torch.equal(got, want)  # float64: bit for bit


def test_size_scalars_through_an_extern():
    """An op tc_inductor runs through torch gets the float the wrapper computes."""
    g = tc_ir.Graph("extern_scalar")
    x = g.input("x", tc_ir.TensorSpec((s0, 4), torch.float64))
    n = s0 * 4
    spec = tc_ir.TensorSpec((s0, 4), torch.float64)
    g.output(g.call(aten.add.Tensor, x, x, kwargs={"alpha": SizeFloat(n / (n - 1))}, spec=spec))
    compiled = tc_inductor.compile(g, [torch.randn(3, 4, dtype=torch.float64)], {"cache": False})
    assert compiled.stats["extern_calls"] == 1, compiled.source
    for rows in (3, 5):
        x = torch.randn(rows, 4, dtype=torch.float64)
        k = rows * 4
        assert torch.equal(compiled(x), torch.add(x, x, alpha=k / (k - 1.0)))
