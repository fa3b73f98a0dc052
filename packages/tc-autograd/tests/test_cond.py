"""``tc_ir.ops.cond``: one cond node over ATen sub-graphs, inference and training, against eager."""

from __future__ import annotations

import pytest
import torch

import tc_autograd
import tc_ir

S = tc_ir.TensorSpec
TWO = (S((4,)), S((4,)))


def branch(name, fn, specs=TWO):
    b = tc_ir.Graph(name)
    b.output(fn(b, *[b.input(f"a{i}", s) for i, s in enumerate(specs)]))
    return b


def cond_graph(true, false, specs=TWO, scale=True):
    g = tc_ir.Graph("g")
    inputs = [g.input(f"x{i}", s) for i, s in enumerate(specs)]
    pred = g.call(torch.gt, g.call(torch.sum, inputs[0]), 0)
    out = g.call(tc_ir.ops.cond, pred, true, false, tuple(inputs))
    g.output(g.call(torch.mul, out, 2) if scale else out)
    return g


def sin_mul():
    return branch("t", lambda b, x, w: b.call(torch.sin, b.call(torch.mul, x, w)))


def cos_add():
    return branch("f", lambda b, x, w: b.call(torch.add, b.call(torch.cos, x), w))


def run_both_ways(g, make_inputs, grad=True, **kw):
    """Compile once, then compare with the interpreter on inputs taking each branch."""
    fn = tc_autograd.aot(g, make_inputs(1), **kw)
    for sign in (1, -1):
        mine, ref = make_inputs(sign), make_inputs(sign)
        for m, r in zip(mine, ref):
            r.data.copy_(m.data)
        got = fn(*mine)
        with torch.enable_grad():  # the graph may switch grad mode off
            want = tc_ir.interpret(g, ref)
        got_t = [got] if isinstance(got, torch.Tensor) else list(got)
        want_t = [want] if isinstance(want, torch.Tensor) else list(want)
        for out, expected in zip(got_t, want_t):
            torch.testing.assert_close(out, expected)
            assert out.requires_grad == expected.requires_grad
        if grad:
            sum(t.float().sum() for t in got_t if t.requires_grad).backward()
            sum(t.float().sum() for t in want_t if t.requires_grad).backward()
            for a, b in zip(mine, ref):
                if b.requires_grad:  # an operand the branch taken ignores gets zeros, as under torch.cond
                    torch.testing.assert_close(a.grad, torch.zeros_like(a) if b.grad is None else b.grad)
    for graph in (fn.inference_graph, fn.forward_graph, fn.backward_graph):
        if graph is not None:
            graph.verify()
    return fn


def inputs(grad):
    return lambda sign: [(sign * torch.rand(4)).requires_grad_(grad), torch.randn(4).requires_grad_(grad)]


def test_inference_records_one_cond_with_aten_branches():
    fn = run_both_ways(cond_graph(sin_mul(), cos_add()), inputs(False), grad=False)
    g = fn.inference_graph
    (node,) = [n for n in g.calls if n.target is tc_ir.ops.cond]
    true, false = node.args[1], node.args[2]
    assert [n.target for n in true.calls] == [torch.ops.aten.mul.Tensor, torch.ops.aten.sin.default]
    assert [n.target for n in false.calls] == [torch.ops.aten.cos.default, torch.ops.aten.add.Tensor]
    assert tc_ir.parse(str(g)) == g


def test_training_gets_a_backward_cond_on_the_same_predicate():
    fn = run_both_ways(cond_graph(sin_mul(), cos_add()), inputs(True))
    fw = [n for n in fn.forward_graph.calls if n.target is tc_ir.ops.cond]
    bw = [n for n in fn.backward_graph.calls if n.target is tc_ir.ops.cond]
    assert len(fw) == 1 and len(bw) == 1
    assert bw[0].args[0].name == fw[0].args[0].name  # the saved predicate


def test_grad_for_some_operands_only():
    def make(sign):
        return [(sign * torch.rand(4)).requires_grad_(False), torch.randn(4, requires_grad=True)]
    run_both_ways(cond_graph(sin_mul(), cos_add()), make)


def test_branch_ignoring_an_operand_gives_it_zero_grad():
    true = branch("t", lambda b, x, w: b.call(torch.exp, x))
    run_both_ways(cond_graph(true, cos_add()), inputs(True))


def test_tuple_outputs_and_an_operand_returned_as_is():
    true = branch("t", lambda b, x, w: (b.call(torch.relu, x), w))
    false = branch("f", lambda b, x, w: (x, b.call(torch.tanh, w)))
    run_both_ways(cond_graph(true, false, scale=False), inputs(True))
    run_both_ways(cond_graph(true, false, scale=False), inputs(False), grad=False)


def test_nested_cond_and_decompositions():
    inner = cond_graph(sin_mul(), cos_add())
    inner.name = "inner"
    outer_true = branch("ot", lambda b, x, w: b.call(tc_ir.ops.cond, b.call(torch.gt, b.call(torch.mean, w), 0),
                                                    inner_true(), inner_false(), (x, w)))
    run_both_ways(cond_graph(outer_true, cos_add()), inputs(True),
                  decompositions=torch._decomp.get_decompositions([torch.ops.aten.gelu]))


def inner_true():
    return branch("it", lambda b, x, w: b.call(torch.nn.functional.gelu, b.call(torch.mul, x, w)))


def inner_false():
    return branch("if_", lambda b, x, w: b.call(torch.sub, x, w))


def test_cond_under_no_grad_inside_a_training_graph():
    g = cond_graph(sin_mul(), cos_add())
    first = g.calls[0]
    # tc_ir's spec inference runs the target, so building this node switches grad mode off.
    with g.inserting_before(first), torch.enable_grad():
        g.call(torch._C._set_grad_enabled, False, spec=None)
    fn = run_both_ways(g, inputs(True), grad=False)
    assert fn.backward_graph is None


def test_python_bool_predicate_inlines_the_branch():
    g = tc_ir.Graph("g")
    x, w = g.input("x", S((4,))), g.input("w", S((4,)))
    g.output(g.call(tc_ir.ops.cond, False, sin_mul(), cos_add(), (x, w)))
    fn = tc_autograd.aot(g, inputs(False)(1))
    assert not [n for n in fn.inference_graph.calls if n.target is tc_ir.ops.cond]
    a, b = inputs(False)(1)
    torch.testing.assert_close(fn(a, b), a.cos() + b)


def test_branches_that_disagree_are_named():
    false = branch("f", lambda b, x, w: b.call(torch.sum, x))
    with pytest.raises(tc_ir.InterpretError, match=r"branches of cond1 return different things: true gives f32\[4\]"):
        tc_autograd.aot(cond_graph(sin_mul(), false, scale=False), inputs(False)(1))


def test_branch_writing_an_operand_is_refused():
    true = branch("t", lambda b, x, w: b.call("add_", x, 1.0))
    with pytest.raises(NotImplementedError, match="writes to its operands"):
        tc_autograd.aot(cond_graph(true, cos_add()), inputs(False)(1))


def test_integer_output_is_not_differentiable():
    true = branch("t", lambda b, x, w: (b.call(torch.sin, x), b.call(torch.argmax, w)))
    false = branch("f", lambda b, x, w: (b.call(torch.cos, w), b.call(torch.argmin, x)))
    run_both_ways(cond_graph(true, false, scale=False), inputs(True))


def test_through_the_inductor():
    tc_inductor = pytest.importorskip("tc_inductor")
    compile_ = lambda g, ex: tc_inductor.compile(g, ex)  # noqa: E731
    run_both_ways(cond_graph(sin_mul(), cos_add()), inputs(True), fw_compiler=compile_, bw_compiler=compile_,
                  decompositions=tc_inductor.decompositions())


@pytest.mark.parametrize("grad", [False, True])
def test_cond_captured_by_tc_capture(grad):
    tc_capture = pytest.importorskip("tc_capture")

    def fn(x, w):
        return tc_ir.ops.cond(x.sum() > 0, lambda a, b: (a * b).sin(), lambda a, b: a.cos() + b, (x, w)) * 2

    compiled = tc_capture.optimize(lambda g, ex: tc_autograd.aot(g, ex), fullgraph=True)(fn)
    for sign in (1, -1):
        x, w = (sign * torch.rand(4)).requires_grad_(grad), torch.randn(4, requires_grad=grad)
        x2, w2 = x.detach().clone().requires_grad_(grad), w.detach().clone().requires_grad_(grad)
        got, want = compiled(x, w), fn(x2, w2)
        torch.testing.assert_close(got, want)
        if grad:
            got.sum().backward()
            want.sum().backward()
            torch.testing.assert_close((x.grad, w.grad), (x2.grad, w2.grad))
