"""A function that reads tensor memory without dispatching (a kernel launcher such as
torch.cuda.jiterator's) is refused when traced on fake tensors, never launched on their null
pointers (on CUDA an illegal memory access poisons the process)."""

from __future__ import annotations

import pytest
import torch

import tc_autograd
import tc_ir


def _launcher_by_pointer(x):
    # what torch.cuda.jiterator and Triton launchers do: hand a data pointer to C
    assert x.data_ptr() != 0
    return x * 2


def _launcher_by_dlpack(x):
    return torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(x * 2)) + 1


def _graph(fn, x):
    g = tc_ir.Graph("opaque")
    node = g.input("x", tc_ir.TensorSpec.from_tensor(x))
    g.output(g.call(torch.sin, g.call(fn, node, spec=tc_ir.TensorSpec.from_tensor(x))))
    return g


@pytest.mark.parametrize("fn", [_launcher_by_pointer, _launcher_by_dlpack])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_an_opaque_launcher_is_refused_not_run_on_fakes(fn, requires_grad):
    x = torch.randn(4, 3, requires_grad=requires_grad)
    with pytest.raises(NotImplementedError, match="reads tensor memory without dispatching"):
        tc_autograd.aot(_graph(fn, x), [x])(x)


def test_a_python_function_of_dispatching_ops_still_traces():
    x = torch.randn(4, 3, requires_grad=True)
    compiled = tc_autograd.aot(_graph(lambda t: torch.cos(t) * 2, x), [x])
    y = torch.randn(4, 3, requires_grad=True)
    got = compiled(y)
    torch.testing.assert_close(got, torch.sin(torch.cos(y) * 2))
    got.sum().backward()
    ref = y.detach().requires_grad_()
    torch.sin(torch.cos(ref) * 2).sum().backward()
    torch.testing.assert_close(y.grad, ref.grad)
