"""Back ends written for ``torch.compile`` work unchanged with ``tc.compile``.

Each back end below is one a torch.compile user writes (they are the examples of PyTorch's
custom back-end tutorial and its usual variants): it receives a ``torch.fx.GraphModule`` and
the example inputs. Every result is checked against eager on fresh inputs, values and gradients.
"""

from __future__ import annotations

import copy
import operator
import warnings

import pytest
import torch
import torch.nn as nn

import tc
import tc_ir


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)) * 2).sin()


def returns_forward(gm, example_inputs):
    assert isinstance(gm, torch.fx.GraphModule)
    return gm.forward


def reads_graph(gm, example_inputs):
    ops = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    assert ops, gm.graph
    gm.graph.lint()
    gm.print_readable(print_output=False)
    return gm


def calls_gm(gm, example_inputs):
    gm(*example_inputs)  # a warm-up call on the example inputs, as profiling back ends do
    return gm


def fx_interpreter(gm, example_inputs):
    return lambda *args: torch.fx.Interpreter(gm).run(*args)


def reads_fake_values(gm, example_inputs):
    for node in gm.graph.nodes:
        if node.op == "placeholder" and isinstance(node.meta.get("val"), torch.Tensor):
            val = node.meta["example_value"]
            assert val.shape is not None and val.dtype is not None and val.device.type == "cpu"
    return gm.forward


def aot_autograd_backend(gm, example_inputs):
    """functorch's AOTAutograd with a forward and backward compiler that return the graph."""
    from functorch.compile import aot_module_simplified, make_boxed_func

    return aot_module_simplified(gm, example_inputs, fw_compiler=lambda g, _: make_boxed_func(g.forward))


TORCH_STYLE = [returns_forward, reads_graph, calls_gm, fx_interpreter, reads_fake_values, aot_autograd_backend]


def run_no_warnings(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an eager fallback warns: it must not happen
        return fn(*args)


@pytest.mark.parametrize("backend", TORCH_STYLE, ids=lambda b: b.__name__)
def test_torch_compile_backend_gets_a_graph_module_and_trains(backend):
    torch.manual_seed(0)
    model = MLP()
    twin = copy.deepcopy(model)
    compiled = tc.compile(twin, backend=backend, options={"fallback": False})
    for _ in range(2):  # the second call brings fresh inputs to the cached entry
        x = torch.randn(5, 8, requires_grad=True)
        x_eager = x.detach().clone().requires_grad_()
        got = run_no_warnings(compiled, x)
        want = model(x_eager)
        torch.testing.assert_close(got, want)
        got.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(x.grad, x_eager.grad)
    for p, q in zip(twin.parameters(), model.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_a_rewriting_backend_runs_its_rewrite():
    """The callable the back end returns is what runs: here it rewrites ``*`` to ``+``."""

    def mul_to_add(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target in (operator.mul, torch.mul):
                node.target = operator.add
        gm.recompile()
        return gm.forward

    fn = tc.compile(lambda x, y: torch.cos(x * y), backend=mul_to_add, options={"fallback": False})
    x, y = torch.randn(6), torch.randn(6)
    torch.testing.assert_close(fn(x, y), torch.cos(x + y))


def test_parameters_reach_the_backend_as_themselves():
    """The module's own parameters, held by the GraphModule or lifted to inputs as Dynamo does."""
    seen = []

    def keep(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    model = MLP()
    tc.compile(model, backend=keep)(torch.randn(2, 8))
    gm, example_inputs = seen[0]
    held = {id(t) for t in [*gm.parameters(), *gm.buffers(), *example_inputs]}
    assert all(id(p) in held for p in model.parameters())


def test_tc_ir_backends_ask_for_tc_ir_graphs():
    seen = []

    @tc.tc_ir_backend
    def wants_tc_ir(graph, example_inputs):
        seen.append(graph)
        return lambda *args: tc_ir.interpret(graph, args)

    fn = tc.compile(lambda x: torch.relu(x) * 3, backend=wants_tc_ir, options={"fallback": False})
    x = torch.randn(5)
    torch.testing.assert_close(fn(x), torch.relu(x) * 3)
    assert isinstance(seen[0], tc_ir.Graph) and "relu" in str(seen[0])


def test_register_backend_fx_by_default_tc_ir_on_request():
    kinds = []
    tc.register_backend("test_fx_kind", lambda gm, ex: kinds.append(type(gm)) or gm.forward)
    tc.register_backend("test_ir_kind", lambda g, ex: kinds.append(type(g)) or (lambda *a: tc_ir.interpret(g, a)),
                        graph="tc_ir")
    x = torch.randn(3)
    for name in ("test_fx_kind", "test_ir_kind"):
        torch.testing.assert_close(tc.compile(lambda v: v.exp() - 1, backend=name)(x), x.exp() - 1)
    assert issubclass(kinds[0], torch.fx.GraphModule) and kinds[1] is tc_ir.Graph
    assert {"test_fx_kind", "test_ir_kind"} <= set(tc.list_backends())
    with pytest.raises(ValueError, match="graph="):
        tc.register_backend("bad", lambda g, ex: g, graph="aten")
