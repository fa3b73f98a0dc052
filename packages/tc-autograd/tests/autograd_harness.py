"""Test infrastructure: compile a module or function with tc_autograd and compare it with eager.

Eager and compiled runs get deep copies of the same module and clones of the same fresh random
inputs; outputs, gradients of inputs and parameters, and buffers after the call must match.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from autograd_tracer import module_inputs, trace_module

import tc_autograd
import tc_ir

TOLERANCE = {"f32": dict(atol=1e-5, rtol=1e-4), "bf16": dict(atol=3e-2, rtol=3e-2)}


def _clone_inputs(inputs: list[Any], grad: bool) -> list[Any]:
    def one(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        t = t.detach().clone()
        return t.requires_grad_(grad and t.is_floating_point())
    return [one(t) for t in inputs]


def _tensors(value: Any) -> list[torch.Tensor]:
    return [v for v in tc_ir.leaves(value) if isinstance(v, torch.Tensor)]


def assert_close(got: Any, want: Any, what: str, tol: dict) -> None:
    if want is None or got is None:
        assert got is None and want is None, f"{what}: got {got}, want {want}"
        return
    torch.testing.assert_close(got.float(), want.float(), msg=lambda m: f"{what}: {m}", **tol)


def check(make: Callable[[], Any], make_inputs: Callable[[], list[Any]], *, mode: str = "f32",
          train: bool = True, partition: str = "min_cut", input_grad: bool = True, grad: bool = True,
          decompositions: dict | None = None, seed: int = 0) -> tc_autograd.AOTFunction:
    """Compile ``make()`` (a module or function) and compare a fresh call with eager."""
    torch.manual_seed(seed)
    module = make()
    if isinstance(module, torch.nn.Module):
        module.train(train)
    traced_copy, ref, mine = copy.deepcopy(module), copy.deepcopy(module), copy.deepcopy(module)
    example = _clone_inputs(make_inputs(), input_grad)
    autocast = mode == "bf16"
    graph = trace_module(traced_copy, example, autocast=autocast)
    mine_state, _ = module_inputs(mine) if isinstance(mine, torch.nn.Module) else ([], [])
    with torch.set_grad_enabled(grad):
        compiled = tc_autograd.aot(graph, example + mine_state, partition=partition, decompositions=decompositions)
    fresh = make_inputs()
    ref_in, mine_in = _clone_inputs(fresh, input_grad), _clone_inputs(fresh, input_grad)
    with torch.set_grad_enabled(grad):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            want = ref(*ref_in)
        got = compiled(*mine_in, *mine_state)
    _compare(got, want, ref, mine, ref_in, mine_in, TOLERANCE[mode])
    _verify(compiled)
    return compiled


def _compare(got, want, ref, mine, ref_in, mine_in, tol) -> None:
    got_t, want_t = _tensors(got), _tensors(want)
    assert len(got_t) == len(want_t)
    for i, (g, w) in enumerate(zip(got_t, want_t)):
        assert_close(g, w, f"output {i}", tol)
        assert g.requires_grad == w.requires_grad, f"output {i}: requires_grad {g.requires_grad} vs eager"
    pairs = [(g, w) for g, w in zip(got_t, want_t) if w.requires_grad]
    if pairs:
        cotangents = [torch.randn_like(w) for _, w in pairs]
        sum((w.float() * c.float()).sum() for (_, w), c in zip(pairs, cotangents)).backward()
        sum((g.float() * c.float()).sum() for (g, _), c in zip(pairs, cotangents)).backward()
    for i, (g, w) in enumerate(zip(mine_in, ref_in)):
        if isinstance(w, torch.Tensor):
            assert_close(g.grad, w.grad, f"grad of input {i}", tol)
            assert_close(g, w, f"input {i} after the call", tol)
    if isinstance(ref, torch.nn.Module):
        for (name, w), g in zip(ref.named_parameters(), mine.parameters()):
            assert_close(g.grad, w.grad, f"grad of {name}", tol)
        for (name, w), g in zip(ref.named_buffers(), mine.buffers()):
            assert_close(g, w, f"buffer {name}", tol)


def _verify(compiled: tc_autograd.AOTFunction) -> None:
    for graph in (compiled.forward_graph, compiled.backward_graph, compiled.inference_graph):
        if graph is not None:
            graph.verify()
