"""A Triton kernel that fails to build at its first launch falls back to eager with one warning."""

from __future__ import annotations

import warnings

import pytest
import torch

import tc
from tc_inductor.codegen import triton as triton_codegen


@pytest.fixture
def broken_kernels(monkeypatch):
    """Every Triton kernel generated meanwhile reads an undefined name (a compile error on a GPU)."""
    generate = triton_codegen.TritonKernelWriter.generate
    monkeypatch.setattr(triton_codegen.TritonKernelWriter, "generate",
                        lambda self: generate(self) + "    tc_undefined_name_in_a_kernel + 1\n")


@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_kernel_failing_at_its_first_launch_runs_the_graph_eagerly(broken_kernels, requires_grad):
    def fn(x, y):
        return torch.sin(x * 2) + y.sum(1, keepdim=True)

    compiled = tc.compile(fn, options={"backend": "triton", "cache": False})
    for _ in range(2):  # the second call runs eagerly without warning again
        x, y = torch.randn(6, 5, requires_grad=requires_grad), torch.randn(6, 3)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = compiled(x, y)
        torch.testing.assert_close(got, fn(x, y))
        if requires_grad:
            got.sum().backward()
            x_ref = x.detach().requires_grad_()
            fn(x_ref, y).sum().backward()
            torch.testing.assert_close(x.grad, x_ref.grad)
        messages = [str(w.message) for w in caught if str(w.message).startswith("tc:")]
        if _ == 0:
            assert len(messages) == 1 and "tc_undefined_name_in_a_kernel" in messages[0], messages
            assert "test_triton_launch_fallback.py" in messages[0], messages
        else:
            assert not messages, messages


def test_without_fallback_the_failure_is_raised(broken_kernels):
    compiled = tc.compile(lambda x: torch.cos(x) + 1, options={"backend": "triton", "cache": False, "fallback": False})
    with pytest.raises(Exception, match="tc_undefined_name_in_a_kernel"):
        compiled(torch.randn(4))
