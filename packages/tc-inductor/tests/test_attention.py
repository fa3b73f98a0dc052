"""scaled_dot_product_attention stays one fused attention op (an extern call with its own backward
op), never the batch x heads x seq x seq score matrix; values and gradients match eager.

Graphs are traced with tc_autograd (skipped where it is not installed) and compiled with
tc_inductor, as the umbrella does.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import tc_inductor
import tc_ir

tc_autograd = pytest.importorskip("tc_autograd")

FUSED = re.compile(r"aten\._scaled_dot_product_(flash_attention_for_cpu|flash_attention|efficient_attention|"
                   r"cudnn_attention)(_backward)?\.")


def _compiler(graph, example_inputs):
    return tc_inductor.compile(graph, example_inputs)


def _attention_graph(shapes: list, dtype, device, mask: str | None, kwargs: dict) -> tc_ir.Graph:
    """q, k, v (and a mask input) → SDPA, as capture records it (a torch-level graph)."""
    g = tc_ir.Graph()
    q, k, v = (g.input(n, tc_ir.TensorSpec(s, dtype, torch.device(device))) for n, s in zip("qkv", shapes))
    call_kwargs = dict(kwargs)
    if mask is not None:
        b, _, s_q, _ = shapes[0]
        s_k = shapes[1][2]
        m = g.input("m", tc_ir.TensorSpec(_mask_shape(mask, b, s_q, s_k), _mask_dtype(mask, dtype),
                                          torch.device(device)))
        if mask == "broadcast_last":  # transformers' layout: a [b, 1, q, 1] test expanded over keys
            m = g.call(torch.Tensor.expand, m, b, 1, s_q, s_k)
        call_kwargs["attn_mask"] = m
    g.output(g.call(F.scaled_dot_product_attention, q, k, v, kwargs=call_kwargs))
    return g


def _mask_shape(mask: str, b: int, s_q: int, s_k: int) -> tuple:
    return {"bool": (b, 1, s_q, s_k), "additive": (b, 1, 1, s_k), "broadcast_last": (b, 1, s_q, 1)}[mask]


def _mask_dtype(mask: str, dtype):
    return dtype if mask == "additive" else torch.bool


def _inputs(shapes, dtype, device, mask, grad=True):
    qkv = [torch.randn(s, dtype=dtype, device=device, requires_grad=grad) for s in shapes]
    if mask is None:
        return qkv
    b, _, s_q, _ = shapes[0]
    shape = _mask_shape(mask, b, s_q, shapes[1][2])
    if mask == "additive":
        return qkv + [torch.randn(shape, dtype=dtype, device=device)]
    m = torch.rand(shape, device=device) > 0.3
    m[..., 0] = True  # no fully masked row: eager's math and fused kernels differ there (NaN vs 0)
    return qkv + [m]


def _eager(graph: tc_ir.Graph, inputs: list):
    return tc_ir.interpret(graph, inputs)


def _check(graph, shapes, dtype, device, mask, atol, rtol):
    f = tc_autograd.aot(graph, _inputs(shapes, dtype, device, mask), fw_compiler=_compiler, bw_compiler=_compiler,
                        decompositions=tc_inductor.decompositions())
    for _ in range(2):  # fresh inputs each time, not the ones it was compiled with
        inputs = _inputs(shapes, dtype, device, mask)
        out = f(*inputs)
        ref = _eager(graph, inputs)
        cot = torch.randn_like(ref)
        grads = torch.autograd.grad(out, inputs[:3], cot)
        ref_grads = torch.autograd.grad(ref, inputs[:3], cot)
        torch.testing.assert_close(out, ref, atol=atol, rtol=rtol)
        for g, r in zip(grads, ref_grads):
            torch.testing.assert_close(g, r, atol=atol, rtol=rtol)
    return f


def _fused_in(graph: tc_ir.Graph) -> list[str]:
    return FUSED.findall(graph.format(data=False))


def _no_scores(graph: tc_ir.Graph, shape: tuple, s_k: int) -> None:
    """No value of the graph is a float [batch, heads, s_q, s_k] matrix (the materialised scores;
    a mask without the heads dimension is fine)."""
    b, h, s_q, _ = shape
    for node in graph.calls:
        for spec in tc_ir.leaves(node.spec):
            if isinstance(spec, tc_ir.TensorSpec) and spec.dtype.is_floating_point and len(spec.shape) >= 2 \
                    and tuple(spec.shape[-2:]) == (s_q, s_k) and spec.numel >= b * h * s_q * s_k:
                raise AssertionError(f"%{node.name} materialises the scores: {spec}")


CASES = {
    "plain": ({}, None),
    "causal": ({"is_causal": True}, None),
    "scale": ({"scale": 0.3}, None),
    "bool_mask": ({}, "bool"),
    "additive_mask": ({}, "additive"),
    "broadcast_mask": ({}, "broadcast_last"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_cpu_attention_is_fused(case):
    kwargs, mask = CASES[case]
    shapes = [(2, 3, 24, 8)] * 3
    g = _attention_graph(shapes, torch.float32, "cpu", mask, kwargs)
    f = _check(g, shapes, torch.float32, "cpu", mask, 1e-5, 1e-4)
    assert _fused_in(f.forward_graph) and _fused_in(f.backward_graph), f.forward_graph
    _no_scores(f.forward_graph, shapes[0], 24)
    _no_scores(f.backward_graph, shapes[0], 24)


def test_cpu_attention_gqa():
    shapes = [(2, 4, 16, 8), (2, 2, 16, 8), (2, 2, 16, 8)]
    g = _attention_graph(shapes, torch.float32, "cpu", None, {"is_causal": True, "enable_gqa": True})
    _check(g, shapes, torch.float32, "cpu", None, 1e-5, 1e-4)


def test_cpu_attention_inference_graph_is_fused():
    shapes = [(2, 3, 24, 8)] * 3
    g = _attention_graph(shapes, torch.float32, "cpu", "broadcast_last", {})
    inputs = _inputs(shapes, torch.float32, "cpu", "broadcast_last", grad=False)
    f = tc_autograd.aot(g, inputs, fw_compiler=_compiler, decompositions=tc_inductor.decompositions())
    assert _fused_in(f.inference_graph)
    inputs = _inputs(shapes, torch.float32, "cpu", "broadcast_last", grad=False)
    torch.testing.assert_close(f(*inputs), _eager(g, inputs), atol=1e-5, rtol=1e-4)


def test_cpu_dropout_semantics():
    """Dropout in attention: unbiased (the mean over many draws is the dropout-free result), a
    new mask per call, and ``torch.manual_seed`` repeats a call."""
    shapes = [(1, 2, 8, 4)] * 3
    g = _attention_graph(shapes, torch.float32, "cpu", None, {"dropout_p": 0.25})
    qkv = _inputs(shapes, torch.float32, "cpu", None, grad=False)
    f = tc_autograd.aot(g, qkv, fw_compiler=_compiler, decompositions=tc_inductor.decompositions())
    torch.manual_seed(1)
    first = f(*qkv)
    torch.manual_seed(1)
    torch.testing.assert_close(f(*qkv), first)
    draws = torch.stack([f(*qkv) for _ in range(300)])
    assert not torch.equal(draws[0], draws[1])
    expected = F.scaled_dot_product_attention(*qkv)
    assert (draws.mean(0) - expected).abs().max() < 0.25 * expected.abs().max()


# ---- CUDA: the fused kernels eager picks (flash / memory-efficient / cuDNN) ------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("case", sorted(CASES) + ["dropout", "gqa"])
def test_cuda_attention_is_fused(case):
    kwargs, mask = CASES.get(case, ({"dropout_p": 0.1} if case == "dropout" else
                                    {"is_causal": True, "enable_gqa": True}, None))
    s = 256
    shapes = [(2, 8, s, 64), (2, 2, s, 64), (2, 2, s, 64)] if case == "gqa" else [(2, 4, s, 64)] * 3
    g = _attention_graph(shapes, torch.bfloat16, "cuda", mask, kwargs)
    inputs = _inputs(shapes, torch.bfloat16, "cuda", mask)
    f = tc_autograd.aot(g, inputs, fw_compiler=_compiler, bw_compiler=_compiler,
                        decompositions=tc_inductor.decompositions())
    assert _fused_in(f.forward_graph) and _fused_in(f.backward_graph), f.forward_graph
    _no_scores(f.forward_graph, shapes[0], s)
    _no_scores(f.backward_graph, shapes[0], s)
    inputs = _inputs(shapes, torch.bfloat16, "cuda", mask)
    cot = torch.randn(shapes[0], dtype=torch.bfloat16, device="cuda")
    torch.manual_seed(3)  # the fused kernels draw dropout from the generator's state, as eager's call does
    out = f(*inputs)
    grads = torch.autograd.grad(out, inputs[:3], cot)
    torch.manual_seed(3)
    ref = F.scaled_dot_product_attention(*inputs[:3], **kwargs, **({"attn_mask": _eager_mask(inputs, mask)}
                                                                   if mask else {}))
    ref_grads = torch.autograd.grad(ref, inputs[:3], cot)
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, atol=5e-2, rtol=5e-2)


def _eager_mask(inputs, mask):
    m = inputs[3]
    return m.expand(m.shape[0], 1, m.shape[2], inputs[1].shape[2]) if mask == "broadcast_last" else m


@pytest.mark.cuda
def test_cuda_unaligned_bias_computed_in_the_graph():
    """BEiT's relative-position bias: [1, heads, 17, 17] float32, computed in the graph, expanded
    over the batch. Eager's memory-efficient kernel needs its rows 16-byte aligned (eager pads
    them); tc's lowering stored them dense and the backward raised "attn_bias is not correctly
    aligned"."""
    shapes = [(4, 2, 17, 16)] * 3
    g = tc_ir.Graph()
    q, k, v = (g.input(n, tc_ir.TensorSpec(s, torch.float32, torch.device("cuda"))) for n, s in zip("qkv", shapes))
    table = g.input("table", tc_ir.TensorSpec((1, 2, 17, 17), torch.float32, torch.device("cuda")))
    bias = g.call(torch.mul, table, 2.0)
    g.output(g.call(F.scaled_dot_product_attention, q, k, v, kwargs={"attn_mask": bias}))
    inputs = [torch.randn(s, device="cuda", requires_grad=True) for s in shapes]
    inputs.append(torch.randn(1, 2, 17, 17, device="cuda", requires_grad=True))
    f = tc_autograd.aot(g, inputs, fw_compiler=_compiler, bw_compiler=_compiler,
                        decompositions=tc_inductor.decompositions())
    cot = torch.randn(shapes[0], device="cuda")
    for _ in range(2):
        out = f(*inputs)
        grads = torch.autograd.grad(out, inputs, cot)
        ref = F.scaled_dot_product_attention(*inputs[:3], attn_mask=inputs[3] * 2)
        ref_grads = torch.autograd.grad(ref, inputs, cot)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
        for a, b in zip(grads, ref_grads):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
