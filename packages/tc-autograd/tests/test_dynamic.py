"""Symbolic sizes through tc_autograd: one trace, run at many sizes, against eager.

Graphs with size symbols are built by hand (``tc_ir.sym``) or taken from Dynamo with
``dynamic=True`` (test-only: Dynamo is the easiest source of realistic symbolic torch-level
graphs; ``tc_ir.from_fx`` converts them). Compiled with the reference interpreter, so what is
tested is the trace: forward values, input and parameter gradients, guards.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import tc_autograd
import tc_ir

s0, s1 = tc_ir.sym("s0"), tc_ir.sym("s1")
TOL = dict(atol=2e-5, rtol=2e-4)


def _leaf(t: torch.Tensor, grad: bool = True) -> torch.Tensor:
    return t.detach().clone().requires_grad_(grad)


def test_one_trace_serves_every_size():
    g = tc_ir.Graph("mlp")
    x = g.input("x", tc_ir.TensorSpec((s0, 8)))
    w = g.input("w", tc_ir.TensorSpec((16, 8), requires_grad=True))
    h = g.call(F.gelu, g.call(F.linear, x, w))
    g.output(g.call(torch.softmax, g.call("view", h, [s0 * 4, 4]), -1))
    w_real = torch.randn(16, 8, requires_grad=True)
    f = tc_autograd.aot(g, [torch.randn(5, 8, requires_grad=True), w_real])
    assert "f32[4*s0, 4]" in str(f.forward_graph) and "s0" in str(f.backward_graph)
    assert f.guards == []
    for n in [3, 5, 9, 17, 2]:
        x_real = torch.randn(n, 8, requires_grad=True)
        x_ref, w_ref = _leaf(x_real), _leaf(w_real)
        out = f(x_real, w_real)
        want = torch.softmax(F.gelu(F.linear(x_ref, w_ref)).view(n * 4, 4), -1)
        torch.testing.assert_close(out, want, **TOL)
        cot = torch.randn_like(want)
        out.backward(cot)
        want.backward(cot)
        torch.testing.assert_close(x_real.grad, x_ref.grad, **TOL)
        torch.testing.assert_close(w_real.grad, w_ref.grad, **TOL)
        w_real.grad = None
    assert len(f.variants) == 1 and f.variants[(True, True)].other is None  # traced once


def test_guards_are_data_and_checked():
    """Adding [s0, 8] to [s1, 8] makes the trace assume s0 == s1: a guard, checked per call."""
    g = tc_ir.Graph("g")
    x = g.input("x", tc_ir.TensorSpec((s0, 8)))
    y = g.input("y", tc_ir.TensorSpec((s1, 8), requires_grad=True))
    n = g.input("n", tc_ir.ScalarSpec(int, s1))
    g.output(g.call(torch.sum, g.call("view", g.call(torch.add, x, y), [n, 2, 4])))
    f = tc_autograd.aot(g, [torch.randn(6, 8), torch.randn(6, 8, requires_grad=True), 6])
    assert f.guards == [tc_ir.spec.sympy.Eq(s0, s1)] or f.guards == [tc_ir.spec.sympy.Eq(s1, s0)]
    # The backward needs s1 and saves no tensor: it takes the size as an int input.
    assert any(isinstance(i.spec, tc_ir.ScalarSpec) and i.spec.expr == s1 for i in f.backward_graph.inputs)
    for k in [3, 7, 12]:
        x_real, y_real = torch.randn(k, 8), torch.randn(k, 8, requires_grad=True)
        y_ref = _leaf(y_real)
        out = f(x_real, y_real, k)
        want = (x_real + y_ref).view(k, 2, 4).sum()
        torch.testing.assert_close(out, want)
        out.backward()
        want.backward()
        torch.testing.assert_close(y_real.grad, y_ref.grad)
    assert f.last.guard([torch.randn(3, 8), torch.randn(3, 8), 3])
    assert not f.last.guard([torch.randn(3, 8), torch.randn(4, 8), 4])
    with pytest.raises(tc_ir.InterpretError, match="must match"):  # eager rejects them too; the re-trace fails
        f(torch.randn(3, 8), torch.randn(4, 8, requires_grad=True), 4)


def test_a_branch_on_a_size_retraces_the_other_way():
    """A decomposition or kernel choice that depends on a size is a guard (``s0 > 4`` here, made
    by Python code in the graph); a call on the other side of it is traced again, never run
    with the first trace's choice."""

    def pick(x):
        return x * 2 if x.shape[0] > 4 else x - 1

    g = tc_ir.Graph("branch")
    x = g.input("x", tc_ir.TensorSpec((s0, 3)))
    g.output(g.call(pick, x))
    f = tc_autograd.aot(g, [torch.randn(6, 3)])
    assert [str(r) for r in f.guards] == ["s0 > 4"]
    for n in [5, 9, 3, 4, 2, 7]:
        x_real = torch.randn(n, 3)
        torch.testing.assert_close(f(x_real), pick(x_real))
    assert f.variants["inference"].other is not None  # the second trace, for s0 <= 4
    assert f.variants["inference"].other.other is None


def test_zero_and_one_sizes_are_pinned():
    g = tc_ir.Graph("g")
    x = g.input("x", tc_ir.TensorSpec((s0, 4)))
    g.output(g.call(torch.sum, x, 0))
    f = tc_autograd.aot(g, [torch.randn(1, 4)])
    assert [str(r) for r in f.guards] == ["Eq(s0, 1)"]
    for n in [1, 3, 1, 0, 5]:
        x_real = torch.randn(n, 4)
        torch.testing.assert_close(f(x_real), x_real.sum(0))


# ---- graphs from Dynamo (dynamic=True) ---------------------------------------------------------
def dynamo_graph(fn, *args):
    """The FX graph Dynamo makes for ``fn(*args)`` with every size symbolic, as a tc_ir graph,
    and its example inputs (SymInt examples as their values)."""
    import torch._dynamo

    got = []

    def keep(gm, example_inputs):
        got.append((gm, list(example_inputs)))
        return gm

    torch._dynamo.reset()
    torch.compile(fn, backend=keep, dynamic=True, fullgraph=True)(*args)
    torch._dynamo.reset()
    (gm, examples), = got
    examples = [int(e.node.hint) if isinstance(e, torch.SymInt) else e for e in examples]
    return tc_ir.from_fx(gm, examples), examples


class Block(torch.nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(x)))


def _inputs_like(examples, graph, x):
    """The graph's inputs for a new ``x``: int inputs are x's sizes (by the symbol they bind)."""
    is_x = [isinstance(e, torch.Tensor) and not isinstance(e, torch.nn.Parameter) and e.dim() == x.dim()
            for e in examples]
    (spec,) = [n.spec for n, hit in zip(graph.inputs, is_x) if hit]
    sizes = dict(zip(spec.shape, x.shape))
    out = []
    for node, e, hit in zip(graph.inputs, examples, is_x):
        if isinstance(node.spec, tc_ir.ScalarSpec) and node.spec.expr is not None:
            out.append(sizes[node.spec.expr])
        else:
            out.append(x if hit else e)
    return out


@pytest.mark.parametrize("partition", ["min_cut", "save_all"])
def test_dynamo_transformer_block_one_trace(partition):
    torch.manual_seed(0)
    model = Block()
    graph, examples = dynamo_graph(model, torch.randn(2, 5, 32))
    assert any(isinstance(n.spec, tc_ir.ScalarSpec) and n.spec.expr is not None for n in graph.inputs)
    ref = copy.deepcopy(model)
    f = None
    for b, t in [(2, 5), (2, 9), (3, 12), (2, 3), (4, 7), (2, 16)]:
        x = torch.randn(b, t, 32, requires_grad=True)
        x_ref = _leaf(x)
        inputs = _inputs_like(examples, graph, x)
        params = {id(p): p for p in model.parameters()}
        assert all(id(e) in params for e in inputs if isinstance(e, torch.nn.Parameter))
        if f is None:
            f = tc_autograd.aot(graph, inputs, partition=partition)
        (out,) = f(*inputs)
        want = ref(x_ref)
        torch.testing.assert_close(out, want, **TOL)
        cot = torch.randn_like(want)
        out.backward(cot)
        want.backward(cot)
        torch.testing.assert_close(x.grad, x_ref.grad, **TOL)
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **TOL, msg=lambda m, name=name: f"{name}: {m}")
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
    assert sum(1 for c in f.variants.values() for _ in _chain(c)) == 1


def _chain(compiled):
    while compiled is not None:
        yield compiled
        compiled = compiled.other


def _concrete_size_op():
    """``tcdyn::scale``: its dispatcher kernel reads a concrete size (``int(numel())``, as torch
    2.11's C++ ``matmul`` does), its Python-dispatcher version stays symbolic."""
    if not hasattr(torch.ops.tcdyn, "scale"):
        lib = torch.library.Library("tcdyn", "DEF")
        lib.define("scale(Tensor x) -> Tensor")
        lib.impl("scale", lambda x: x * 2.0 + 0 * int(x.numel()), "CompositeImplicitAutograd")
        torch.ops.tcdyn.scale.default.py_impl(torch._C.DispatchKey.CompositeImplicitAutograd)(lambda x: x * 2.0)
        _concrete_size_op.lib = lib  # the library's registrations live as long as it does
    return torch.ops.tcdyn.scale.default


def test_composites_trace_under_the_python_dispatcher():
    """Over size symbols the trace runs under torch's Python dispatcher, as Dynamo's does: a
    composite whose dispatcher kernel needs a concrete size would otherwise pin the symbol
    (``s0 == 5``: one trace per size) or fail (torch 2.11's ``linear`` on CUDA)."""
    g = tc_ir.Graph("g")
    x = g.input("x", tc_ir.TensorSpec((s0, 3), requires_grad=True))
    g.output(g.call(torch.sin, g.call(_concrete_size_op(), x)))
    f = tc_autograd.aot(g, [torch.randn(5, 3, requires_grad=True)])
    assert f.guards == [] and "s0" in str(f.forward_graph)
    for n in [2, 5, 11]:
        x_real = torch.randn(n, 3, requires_grad=True)
        x_ref = _leaf(x_real)
        out = f(x_real)
        want = torch.sin(x_ref * 2.0)
        torch.testing.assert_close(out, want)
        out.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(x_real.grad, x_ref.grad)
    assert len(f.variants) == 1 and f.variants[(True,)].other is None
