"""The wrapper's per-call work: input layouts, kernel pointers and extern calls, each paid once."""

from __future__ import annotations

import re

import torch
from inductor_helpers import assert_same, build

import tc_inductor
import tc_ir

aten = torch.ops.aten


def _graph(x, w, b):
    # the matmul is an extern call; C++ kernels read x, and the matmul's result, more than once
    def body(g, x, w, b):
        mm = g.call(aten.addmm.default, b, g.call(aten.sin.default, x), g.call(aten.t.default, w))
        total = g.call(aten.sum.dim_IntList, mm, [0], True)
        return (g.call(aten.add.Tensor, g.call(aten.relu.default, mm), total),
                g.call(aten.mul.Tensor, g.call(aten.cos.default, x), x))

    return build(body, [x, w, b])


def _inputs():
    return [torch.randn(8, 16), torch.randn(4, 16), torch.randn(4)]


def _compile(inputs, **options):
    return tc_inductor.compile(_graph(*inputs), inputs, {"backend": "cpp", "cache": False, **options})


def test_an_input_in_another_layout_is_copied_into_the_compiled_one():
    inputs = _inputs()
    k = _compile(inputs)
    x = torch.randn(16, 8).t()  # the same shape, column-major
    fresh = [x, *_inputs()[1:]]
    assert_same(k(*fresh), tc_ir.interpret(_graph(*inputs), fresh))


def test_guarded_inputs_are_not_checked_again_and_give_the_same_results():
    inputs = _inputs()
    k = _compile(inputs, guarded_inputs=[1, 2])
    assert "in0.stride()" in k.source
    assert "in1.stride()" not in k.source and "in2.stride()" not in k.source
    fresh = [torch.randn(16, 8).t(), *_inputs()[1:]]  # in0 is not guarded: still laid out
    assert_same(k(*fresh), tc_ir.interpret(_graph(*inputs), fresh))


def test_each_buffer_pointer_is_read_once_a_call():
    k = _compile(_inputs())
    reads = re.findall(r"(\w+)\.data_ptr\(\)", k.source)
    assert reads and len(reads) == len(set(reads)), k.source
    launches = [line for line in k.source.splitlines() if re.match(r"\s*k\d+\(", line)]
    assert launches and all(".data_ptr()" not in line for line in launches)


def test_extern_calls_skip_the_op_overload_wrapper():
    k = _compile(_inputs())
    externs = {n: v for n, v in k._fn.__globals__.items() if n.startswith("ext_")}
    assert externs and all(not isinstance(v, torch._ops.OpOverload) for v in externs.values())
