"""Unit tests of the umbrella's own pieces on hand-built graphs (no capture involved)."""

from __future__ import annotations

import pytest
import torch

import tc
import tc_autograd
import tc_ir
from tc.backends import lookup, with_fallback
from tc.options import Options

aten = torch.ops.aten


def mlp_graph(hold_weight: bool) -> tuple[tc_ir.Graph, list]:
    g = tc_ir.Graph("mlp")
    x = g.input("x", tc_ir.TensorSpec((4, 8), torch.float32))
    weight = torch.nn.Parameter(torch.randn(16, 8))
    w = g.param("fc.weight", weight) if hold_weight else g.input("w", tc_ir.TensorSpec.from_tensor(weight))
    g.output(g.call(torch.nn.functional.gelu, g.call(torch.nn.functional.linear, x, w)))
    return g, [weight] if not hold_weight else []


@pytest.mark.parametrize("mode, cudagraphs, autotune", [
    (None, False, False), ("default", False, False), ("reduce-overhead", True, False),
    ("max-autotune", True, True), ("max-autotune-no-cudagraphs", False, True)])
def test_modes_set_policy(mode, cudagraphs, autotune):
    options = Options.from_user(mode, {"fallback": False, "backend": "cpp"})
    assert (options.cudagraphs, options.max_autotune, options.fallback) == (cudagraphs, autotune, False)
    assert options.inductor["backend"] == "cpp"


def test_unknown_mode_and_backend_are_clear():
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        Options.from_user("fast", None)
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        lookup("nope")


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("hold_weight", [False, True])
def test_builtin_backends_run_hand_built_graphs(backend, hold_weight):
    graph, extra = mlp_graph(hold_weight)
    x = torch.randn(4, 8, requires_grad=True)
    fn = with_fallback(lookup(backend), backend, Options(fallback=False))(graph, [x, *extra])
    got = fn(x, *extra)
    want = tc_ir.interpret(graph, [x, *extra])
    torch.testing.assert_close(got, want)
    got.sum().backward()
    grad = x.grad.clone()
    x.grad = None
    want.sum().backward()
    torch.testing.assert_close(grad, x.grad)


def test_register_backend_decorator():
    @tc.register_backend("double_check", graph="tc_ir")
    def double_check(graph, example_inputs, options=None):
        return lambda *inputs: tc_ir.interpret(graph, inputs)

    assert "double_check" in tc.list_backends()
    graph, extra = mlp_graph(False)
    fn = lookup("double_check")(graph, [torch.randn(4, 8), *extra], Options())
    assert fn(torch.randn(4, 8), *extra).shape == (4, 16)


def test_fallback_warns_once_per_graph_and_names_the_cause():
    def broken(graph, example_inputs, options):
        raise ValueError("lowering exploded")

    graph, extra = mlp_graph(False)
    x = torch.randn(4, 8)
    with pytest.warns(UserWarning, match="back end 'broken' failed on graph mlp .ValueError: lowering exploded"):
        fn = with_fallback(broken, "broken", Options())(graph, [x, *extra])
    torch.testing.assert_close(fn(x, *extra), tc_ir.interpret(graph, [x, *extra]))
    with pytest.raises(tc.BackendCompilerFailed, match="lowering exploded"):
        with_fallback(broken, "broken", Options(fallback=False))(graph, [x, *extra])


def test_a_variant_compiled_later_falls_back_too():
    """tc_autograd compiles the training variant on the first call that needs grads; if the
    back end fails then, that call (and later ones) run eagerly with one warning."""
    calls = []

    def fw_fails_in_training(graph, example_inputs, options=None):
        def compiler(g, ex):
            if len(g.inputs) != len(graph.inputs) or torch.is_grad_enabled():  # a training graph
                raise RuntimeError("no training kernels today")
            calls.append(g)
            return lambda *a: tc_ir.interpret(g, a)

        return tc_autograd.aot(graph, example_inputs, fw_compiler=compiler, bw_compiler=compiler)

    graph, extra = mlp_graph(False)
    x = torch.randn(4, 8)
    with torch.no_grad():  # compiled for inference first
        fn = with_fallback(fw_fails_in_training, "flaky", Options())(graph, [x, *extra])
        torch.testing.assert_close(fn(x, *extra), tc_ir.interpret(graph, [x, *extra]))
    with pytest.warns(UserWarning, match="no training kernels today"):
        out = fn(x, *extra)
    out.sum().backward()
    assert extra[0].grad is not None and len(calls) == 1
    with torch.no_grad():
        strict = with_fallback(fw_fails_in_training, "flaky", Options(fallback=False))(graph, [x, *extra])
    with pytest.raises(tc.BackendCompilerFailed, match="no training kernels today"):
        strict(x, *extra)
