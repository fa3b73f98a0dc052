"""A Triton kernel that fails to build at its first launch (under the interpreter: when it runs)
is reported as a compile failure, so that tc runs the graph eagerly, unless the call may already
have written an input; a source Triton rejects ahead of time fails the compile itself."""

from __future__ import annotations

import pytest
import torch
from inductor_helpers import build

import tc_inductor
from tc_inductor.codegen import triton as triton_codegen

aten = torch.ops.aten


@pytest.fixture
def broken_kernels(monkeypatch):
    """Every Triton kernel generated meanwhile reads an undefined name (a compile error on a GPU)."""
    generate = triton_codegen.TritonKernelWriter.generate
    monkeypatch.setattr(triton_codegen.TritonKernelWriter, "generate",
                        lambda self: generate(self) + "    tc_undefined_name_in_a_kernel + 1\n")


def _compile(fn, inputs):
    return tc_inductor.compile(build(fn, inputs), inputs, {"backend": "triton", "cache": False})


def test_a_kernel_that_does_not_build_is_a_compile_failure_for_the_caller(broken_kernels):
    x = torch.randn(8, 5)
    k = _compile(lambda g, x: g.call(aten.sin.default, g.call(aten.mul.Tensor, x, 2.0)), [x])
    assert not k.writes_inputs
    with pytest.raises(Exception, match="tc_undefined_name_in_a_kernel") as info:
        k(x)
    assert getattr(info.value, "tc_while_compiling", False)


def test_not_where_the_call_may_have_written_an_input(broken_kernels):
    x = torch.randn(8, 5)
    k = _compile(lambda g, x: g.call(aten.sin.default, g.call(aten.add_.Tensor, x, 1.0)), [x])
    assert k.writes_inputs
    with pytest.raises(Exception, match="tc_undefined_name_in_a_kernel") as info:
        k(x.clone())
    assert not getattr(info.value, "tc_while_compiling", False)


def test_a_working_kernel_is_unaffected():
    x = torch.randn(8, 5)
    k = _compile(lambda g, x: g.call(aten.sin.default, x), [x])
    y = torch.randn(8, 5)
    torch.testing.assert_close(k(y), torch.sin(y))


class _Rejected:
    """A stand-in kernel whose ahead-of-time compile fails as Triton's frontend does."""

    def __init__(self, error: Exception):
        self.error = error

    def warmup(self, *args, **kwargs):
        raise self.error


def _meta():
    return {"warmup": {"pointers": ["float32"], "ints": [4], "device": 0}, "autotune": False,
            "config": {"XBLOCK": 4}}


def test_a_source_triton_rejects_ahead_of_time_fails_the_compile():
    from triton.compiler.errors import CompilationError

    with pytest.raises(CompilationError):
        triton_codegen._warmup(_Rejected(CompilationError("src", None, "bad kernel")), _meta())


def test_other_ahead_of_time_failures_leave_the_compile_to_the_launch():
    assert triton_codegen._warmup(_Rejected(RuntimeError("no driver")), _meta()) is None
