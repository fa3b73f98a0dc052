"""The wrapper's per-call work: input layouts, kernel pointers and extern calls, each paid once."""

from __future__ import annotations

import re

import pytest
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
    launches = [line for line in k.source.splitlines() if re.match(r"\s*k\d+(\.launch)?\(", line)]
    assert launches and all(".data_ptr()" not in line for line in launches)


def test_extern_calls_skip_the_op_overload_wrapper():
    k = _compile(_inputs())
    externs = {n: v for n, v in k._fn.__globals__.items() if n.startswith("ext_")}
    assert externs and all(not isinstance(v, torch._ops.OpOverload) for v in externs.values())


def test_vendor_kernel_externs_are_called_through_their_torch_function():
    k = _compile(_inputs())
    externs = {n: v for n, v in k._fn.__globals__.items() if n.startswith("ext_")}
    assert torch._C._VariableFunctions.addmm in externs.values()


def _bound_cases():
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    q = r(2, 3, 8, 4)
    return [
        (aten.mm.default, (r(3, 5), r(5, 2)), {}),
        (aten.bmm.default, (r(2, 3, 5), r(2, 5, 4)), {}),
        (aten.addmm.default, (r(4), r(3, 5), r(5, 4)), {"beta": 0.5, "alpha": 2.0}),
        (aten.addmm.default, (r(3, 4), r(3, 5), r(5, 4)), {}),
        (aten.baddbmm.default, (r(2, 3, 4), r(2, 3, 5), r(2, 5, 4)), {"beta": 0.0, "alpha": 1.5}),
        (aten.convolution.default, (r(1, 4, 6, 6), r(6, 2, 3, 3), r(6), [2, 1], [1, 0], [1, 2], False, [0, 0], 2), {}),
        (aten.convolution.default, (r(1, 4, 5, 5), r(4, 3, 3, 3), None, [2, 2], [1, 1], [1, 1], True, [1, 1], 1), {}),
        (aten.convolution.default, (r(2, 3, 7), r(5, 3, 2), r(5), [1], [0], [1], False, [0], 1), {}),
        (aten._scaled_dot_product_flash_attention_for_cpu.default, (q, r(2, 3, 8, 4), r(2, 3, 8, 4)),
         {"is_causal": True, "scale": 0.3}),
        (aten._scaled_dot_product_flash_attention_for_cpu.default, (q, r(2, 3, 8, 4), r(2, 3, 8, 4), 0.0, False),
         {"attn_mask": r(8, 8)}),
    ]


def test_a_bound_function_computes_its_overload():
    # the function parses each argument list to the overload it replaces: same values, same outputs
    from tc_inductor.compile import _direct_op

    for op, args, kwargs in _bound_cases():
        fast = _direct_op(op)
        assert fast is not op._op, op
        want, got = op(*args, **kwargs), fast(*args, **kwargs)
        assert_same(got, want)


def test_a_deferred_load_finishes_when_asked_or_at_the_first_call():
    # tc_autograd defers the forward's load to build its kernels while the backward is compiled
    inputs = _inputs()
    for ask in (True, False):
        graph = _graph(*inputs)
        graph.meta["defer_load"] = True
        k = tc_inductor.compile(graph, inputs, {"backend": "cpp", "cache": False})
        assert k._pending is not None and k.output_strides is not None
        if ask:
            k.finish_loading()
            assert k._pending is None
        fresh = _inputs()
        assert_same(k(*fresh), tc_ir.interpret(_graph(*inputs), fresh))
        assert k._pending is None and "ext_" in " ".join(k._fn.__globals__)


def test_a_deferred_load_that_fails_tells_the_caller_nothing_ran():
    inputs = _inputs()
    graph = _graph(*inputs)
    graph.meta["defer_load"] = True
    k = tc_inductor.compile(graph, inputs, {"backend": "cpp", "cache": False})

    def broken():
        raise RuntimeError("a kernel did not build")
    k._pending = broken
    with pytest.raises(RuntimeError, match="did not build") as info:
        k(*_inputs())
    assert info.value.tc_while_compiling
