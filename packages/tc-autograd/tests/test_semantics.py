"""Autograd semantics of compiled regions: mutation, aliasing, grad subsets, no_grad, RNG, errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from autograd_harness import check
from autograd_tracer import trace

import tc_autograd

aten = torch.ops.aten


def compile_fn(fn, *inputs, **options):
    return tc_autograd.aot(trace(fn, list(inputs)), list(inputs), **options)


def optimizer_step(p, g, m):
    m.mul_(0.9).add_(g)
    p.add_(m, alpha=-0.1)
    return p.sum()


def test_optimizer_style_updates_are_copied_back_in_order():
    p, g, m = torch.randn(8), torch.randn(8), torch.randn(8)
    f = compile_fn(optimizer_step, p.clone(), g.clone(), m.clone())
    p1, m1, p2, m2 = p.clone(), m.clone(), p.clone(), m.clone()
    want = optimizer_step(p1, g, m1)
    got = f(p2, g, m2)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close((p2, m2), (p1, m1))
    assert "copy" not in f.inference_graph.format(data=False).replace("_to_copy", "")


def write_through_views(x, y):
    x[0].mul_(2.0)
    x.t()[1:3].add_(y.t())   # a write through a chain of two views
    return x * 1.0


def test_writes_through_views_of_an_input():
    check(lambda: write_through_views, lambda: [torch.randn(4, 4), torch.randn(4, 2)], input_grad=False)


def test_grad_of_an_input_that_is_also_mutated():
    def f(x, w):
        x.mul_(w)
        return (x * 3.0).sum()

    base, w = torch.randn(5, requires_grad=True), torch.randn(5, requires_grad=True)
    compiled = compile_fn(f, base.detach().clone() * 1.0, w.detach().clone())
    x_ref, x_got = base * 1.0, base * 1.0  # non-leaf inputs may be written in place
    f(x_ref, w).backward()
    want = (base.grad.clone(), w.grad.clone(), x_ref.detach().clone())
    base.grad, w.grad = None, None
    out = compiled(x_got, w)
    out.backward()
    torch.testing.assert_close((base.grad, w.grad, x_got.detach()), want)


def test_outputs_aliasing_inputs_are_views():
    def f(x, y):
        return x.view(-1), x.t()[1], y, (y + 1).relu()

    x, y = torch.randn(3, 4, requires_grad=True), torch.randn(2)
    compiled = compile_fn(f, x, y)
    a, b, c, d = compiled(x, y)
    assert a._base is x and b._base is x and c is y
    with torch.no_grad():
        x[1, 1] = 100.0
    assert a[5] == 100.0 and b[1] == 100.0
    (a.sum() + b.sum()).backward()
    assert x.grad is not None and x.grad[0, 1] == 2.0


def test_subset_requires_grad_and_non_differentiable_outputs():
    def f(x, w, idx):
        h = x @ w
        return h.relu(), h.argmax(dim=1), idx + 1, h.shape[0]

    x, w, idx = torch.randn(4, 3), torch.randn(3, 5, requires_grad=True), torch.arange(4)
    compiled = compile_fn(f, x, w, idx)
    out, am, idx2, n = compiled(x, w, idx)
    assert out.requires_grad and not am.requires_grad and not idx2.requires_grad and n == 4
    out.sum().backward()
    w_ref = w.detach().clone().requires_grad_()
    (x @ w_ref).relu().sum().backward()
    torch.testing.assert_close(w.grad, w_ref.grad)
    assert x.grad is None
    assert len(compiled.backward_graph.outputs) == 1  # only w gets a gradient


def no_grad_and_detach(x, w):
    with torch.no_grad():
        scale = (x * w).abs().mean()
    h = (x * w).tanh() * scale
    return h + (x * w).detach().sigmoid()


def test_no_grad_region_and_detach():
    check(lambda: no_grad_and_detach, lambda: [torch.randn(6), torch.randn(6)])


def test_retain_graph_and_double_backward():
    def f(x):
        return (x.sin() * x).sum()

    x = torch.randn(5, requires_grad=True)
    compiled = compile_fn(f, x)
    out = compiled(x)
    out.backward(retain_graph=True)
    first = x.grad.clone()
    out.backward()
    torch.testing.assert_close(x.grad, 2 * first)
    with pytest.raises(RuntimeError, match="second time|freed"):
        out.backward()
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(compiled(x), x, create_graph=True)


def dropout_fn(x):
    return F.dropout(x, p=0.3, training=True)


def test_dropout_mask_shared_by_forward_and_backward_and_distribution():
    x = torch.randn(200, 100).abs() + 0.1
    compiled = compile_fn(dropout_fn, x.requires_grad_())
    x = x.detach().requires_grad_()
    out = compiled(x)
    cot = torch.randn_like(out)
    out.backward(cot)
    kept = out != 0
    torch.testing.assert_close(x.grad, cot * kept / 0.7)
    torch.testing.assert_close(out[kept], x[kept].detach() / 0.7)
    assert abs(1 - kept.float().mean().item() - 0.3) < 0.02
    second = compiled(x)
    assert not torch.equal(second != 0, kept)  # fresh randomness on every call
    assert "bernoulli" in compiled.forward_graph.format(data=False)
    assert "bernoulli" not in compiled.backward_graph.format(data=False)  # never recomputed


def test_dropout_in_inference_trace():
    x = torch.randn(1000)
    compiled = compile_fn(dropout_fn, x)
    assert abs((compiled(x) == 0).float().mean().item() - 0.3) < 0.06


def test_decompositions_are_applied():
    from torch._decomp import get_decompositions

    table = get_decompositions([aten.gelu, aten.gelu_backward, aten.native_layer_norm])
    compiled = check(lambda: torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.GELU()),
                     lambda: [torch.randn(3, 8)], decompositions=table)
    text = compiled.forward_graph.format(data=False) + compiled.backward_graph.format(data=False)
    assert "aten.gelu" not in text and "native_layer_norm.default" not in text and "aten.erf" in text


def test_custom_compilers_receive_graphs_and_examples():
    seen = []

    def compiler(graph, example_inputs):
        seen.append((graph.name, [tuple(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)]))
        return tc_autograd.interpret_compiler(graph, example_inputs)

    x = torch.randn(3, 4, requires_grad=True)
    compiled = compile_fn(lambda x: x.exp().sum(1), x, fw_compiler=compiler, bw_compiler=compiler)
    compiled(x).sum().backward()
    assert [name for name, _ in seen] == ["f_joint_forward", "f_joint_backward"]
    assert seen[0][1] == [(3, 4)]


def test_graphs_print_and_parse_and_summary(caplog):
    x = torch.randn(4, 8, requires_grad=True)
    compiled = compile_fn(lambda x: torch.nn.functional.gelu(x @ x.t()), x)
    for graph in (compiled.joint_graph, compiled.forward_graph, compiled.backward_graph):
        import tc_ir

        assert tc_ir.parse(str(graph)) == graph
    summary = compiled.saved_summary()
    assert "saved for backward" in summary and " B" in summary


def test_grad_mode_off_gives_one_forward_graph():
    x = torch.randn(3, requires_grad=True)
    compiled = compile_fn(lambda x: x.exp(), x)
    with torch.no_grad():
        out = compiled(x)
    assert not out.requires_grad and compiled.inference_graph is not None
    assert compiled.forward_graph is None


def test_double_backward_message_is_clear():
    x = torch.randn(3, requires_grad=True)
    compiled = compile_fn(lambda x: x.exp().sum(), x)
    with pytest.raises(RuntimeError, match="tc_autograd: double backward"):
        compiled(x).backward(create_graph=True)


def test_unsupported_in_place_metadata_op_is_named():
    """``t_`` and friends are supported (test_metadata_inplace.py); ``resize_`` is not."""
    def f(x):
        y = x * 2
        y.resize_(3, 2)
        return y

    x = torch.randn(2, 3)
    with pytest.raises((NotImplementedError, RuntimeError), match="in-place metadata op aten.resize_"):
        compile_fn(f, x)


def test_normal_and_uniform_in_place_become_functional():
    def f(x):
        noise = torch.empty_like(x).normal_()
        return x + noise.uniform_(0.0, 1.0) * 0.0 + noise

    x = torch.randn(500)
    compiled = compile_fn(f, x)
    text = compiled.inference_graph.format(data=False)
    assert "normal_functional" in text and "aten.uniform.default" in text and "normal_(" not in text
    # uniform_ overwrote the normal noise in place, as in eager: what is added is U(0, 1)
    assert abs((compiled(x) - x).std().item() - 12 ** -0.5) < 0.05


def test_bad_partition_name():
    with pytest.raises(ValueError, match="min_cut"):
        compile_fn(lambda x: x + 1, torch.randn(2), partition="fastest")


def test_output_structure_matches_the_interpreter():
    import tc_ir

    def f(x, y):
        return {"sum": x + y, "pair": (x * y, [x.exp(), 3])}

    x, y = torch.randn(3, requires_grad=True), torch.randn(3)
    graph = trace(f, [x, y])
    got = tc_autograd.aot(graph, [x, y])(x, y)
    want = tc_ir.interpret(graph, [x, y])
    assert tc_ir.map_structure(got, type) == tc_ir.map_structure(want, type)
    torch.testing.assert_close(got, want)


def returns_views_of_each_other(x):
    y = x * 2
    return y, y.view(-1), y[1:].t(), y.detach()


def views_of_an_intermediate(x):
    y = torch.sin(x)
    return y[0], y[1:]


def views_then_a_write(x):
    y = x + 1
    v = y.view(-1)
    y.mul_(3)
    return v, y


@pytest.mark.parametrize("fn", [returns_views_of_each_other, views_of_an_intermediate, views_then_a_write])
@pytest.mark.parametrize("grad", [True, False])
def test_outputs_aliasing_each_other_match_eager(fn, grad):
    check(lambda: fn, lambda: [torch.randn(3, 4)], grad=grad)


@pytest.mark.parametrize("grad", [True, False])
def test_outputs_aliasing_each_other_are_views(grad):
    x = torch.randn(3, 4, requires_grad=grad)
    with torch.set_grad_enabled(grad):
        y, flat, tail, detached = compile_fn(returns_views_of_each_other, x)(x)
        first, rest = compile_fn(views_of_an_intermediate, x)(x)
    assert flat._base is y and tail._base is y and detached.data_ptr() == y.data_ptr()
    assert rest.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
    assert detached.requires_grad is False and flat.requires_grad is grad
    with torch.no_grad():
        y[2, 3] = 100.0
    assert flat[11] == 100.0 and tail[3, 1] == 100.0 and detached[2, 3] == 100.0
    if grad:
        (flat.sum() + 2 * tail.sum()).backward()
        torch.testing.assert_close(x.grad, torch.tensor([[2.0] * 4, [6.0] * 4, [6.0] * 4]))


def test_to_with_copy_is_a_new_tensor_not_a_view():
    def f(x):
        y = x.to(torch.float32, copy=True)
        y.add_(1)
        same = x.to(torch.float32)
        return y, same

    x = torch.randn(4)
    before = x.clone()
    y, same = compile_fn(f, x)(x)
    torch.testing.assert_close(y, before + 1)
    assert same is x and torch.equal(x, before)


@pytest.mark.parametrize("grad", [False, True])
def test_held_tensors_stay_real_in_aten_graphs(grad):
    from torch._subclasses.fake_tensor import FakeTensor

    import tc_ir

    g = tc_ir.Graph("held")
    x = g.input("x", tc_ir.TensorSpec((4, 3)))
    weight = torch.randn(5, 3)
    y = g.call(torch.nn.functional.linear, x, g.param("w", weight))
    y = g.call(torch.add, y, g.constant("c", torch.randn(5)))
    g.output(g.call(torch.mul, y, g.call(torch.tensor, 2.0)))
    xs = torch.randn(4, 3, requires_grad=grad)
    fn = tc_autograd.aot(g, [xs])
    graphs = [fn.inference_graph, fn.forward_graph, fn.backward_graph]
    held = [v for graph in graphs if graph is not None for v in graph.tensors.values()]
    assert held and not any(isinstance(v, FakeTensor) for v in held)
    fresh = torch.randn(4, 3, requires_grad=grad)
    torch.testing.assert_close(fn(fresh), tc_ir.interpret(g, [fresh]))
    with torch.no_grad():
        weight.mul_(2)  # the graph holds the tensor itself, not a copy
    torch.testing.assert_close(fn(fresh), tc_ir.interpret(g, [fresh]))
