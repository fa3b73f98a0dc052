"""torch features under ``fullgraph=True`` against eager: ``torch.cond``, ``autograd.Function``,
``torch.utils.checkpoint``, ``torch.compiler.disable``/``allow_in_graph``, ``custom_op`` objects and
overload packets, ``torch.func`` (a clean break). Each family runs on several inputs, two calls with
different values, and compares gradients where there are any."""

from __future__ import annotations

import pytest
import torch
from helpers import counting_backend, tree_close

import tc_capture


def _leaves(args):
    return [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


def _fresh(args):
    return [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]


def compare(fn, make_inputs, calls=3, fullgraph=True, graphs=None):
    """Eager vs compiled on ``calls`` fresh inputs: outputs and the gradients of every leaf that
    requires grad (of ``sum(out * r)`` for a random ``r``). Returns the counting backend."""
    be = counting_backend()
    compiled = tc_capture.optimize(be, fullgraph=fullgraph)(fn)
    for _ in range(calls):
        args = make_inputs()
        a, b = _fresh(args), _fresh(args)
        expected, got = fn(*a), compiled(*b)
        tree_close(expected, got)
        outs = [o for o in (expected if isinstance(expected, (tuple, list)) else [expected])
                if isinstance(o, torch.Tensor) and o.requires_grad]
        if outs:
            got_outs = [o for o in (got if isinstance(got, (tuple, list)) else [got])
                        if isinstance(o, torch.Tensor) and o.requires_grad]
            weights = [torch.randn_like(o) for o in outs]
            ga = torch.autograd.grad(outs, _leaves(a), weights, allow_unused=True)
            gb = torch.autograd.grad(got_outs, _leaves(b), weights, allow_unused=True)
            tree_close(list(ga), list(gb), "grads")
    if graphs is not None:
        assert len(be.graphs) == graphs, [str(g) for g in be.graphs]
    return be


def rand(*shape, grad=False, sign=None):
    t = torch.randn(*shape)
    if sign is not None:
        t = t.abs() * sign
    return t.requires_grad_(grad)


# ---- torch.cond ------------------------------------------------------------------------------------
def _signs():
    return iter([1, -1, 1, -1, 1, -1])


@pytest.mark.parametrize("grad", [False, True])
def test_torch_cond_lambdas(grad):
    signs = _signs()
    be = compare(lambda x: torch.cond(x.sum() > 0, lambda a: a.sin() * 2, lambda a: a.cos() + 1, (x,)) - 1,
                 lambda: [rand(5, grad=grad, sign=next(signs))], calls=4, graphs=1)
    assert any(n.target is torch.cond or "cond" in str(n.target) for n in be.graphs[0].calls)


def test_torch_cond_tuple_and_list_outputs_several_operands():
    signs = _signs()

    def f(x, y):
        a, b = torch.cond(x.mean() > 0, lambda p, q: (p * q, p + q), lambda p, q: (p - q, p / (q.abs() + 1)), (x, y))
        c = torch.cond(y.sum() > x.sum(), lambda p: [p.exp()], lambda p: [p.tanh()], [a])
        assert type(c) is list
        return a + b * c[0]

    compare(f, lambda: [rand(3, 4, grad=True, sign=next(signs)), rand(3, 4, grad=True)], calls=4, graphs=1)


def test_torch_cond_closed_over_tensors_and_parameters():
    lin = torch.nn.Linear(4, 4)
    scale = torch.randn(4)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.w = lin, torch.nn.Parameter(torch.randn(4))

        def forward(self, x):
            h = x * 3

            def true_fn(a):
                return self.lin(a) * h + scale  # a parameter first read here, a closure, a global

            def false_fn(a):
                return a * self.w - h

            return torch.cond(x.sum() > 0, true_fn, false_fn, (x,))

    m = M()
    signs = _signs()
    be = compare(m, lambda: [rand(2, 4, grad=True, sign=next(signs))], calls=4, graphs=1)
    g = be.graphs[0]
    assert {n.meta.get("source") for n in g.inputs} >= {"F[0]._modules['lin']._parameters['weight']"} or \
        len(g.inputs) >= 4
    x = rand(2, 4, sign=1)
    m.lin.weight.data.mul_(2)  # parameters are read at call time, not baked into the sub-graph
    compiled = tc_capture.optimize(tc_capture.interpret_backend, fullgraph=True)(m)
    tree_close(m(x), compiled(x))


def test_torch_cond_nested():
    signs = _signs()
    w = torch.randn(3)

    def f(x):
        def outer_true(a):
            return torch.cond(a.max() > 1, lambda b: b * w, lambda b: b + w, (a,)) * 2

        return torch.cond(x.sum() > 0, outer_true, lambda a: a.neg(), (x,))

    compare(f, lambda: [rand(3, grad=True, sign=next(signs))], calls=6, graphs=1)


def test_torch_cond_bool_predicate_takes_the_branch():
    compare(lambda x, k: torch.cond(k > 2, lambda a: a + 1, lambda a: a - 1, (x,)),
            lambda: [rand(3, grad=True), 3], calls=2, graphs=1)


@pytest.mark.parametrize("body", ["side_effect", "in_place"])
def test_torch_cond_effects_break_cleanly(body):
    seen = []

    def true_fn(a):
        if body == "side_effect":
            seen.append(1)
            return a + 1
        b = a * 1
        b.add_(1)
        return b

    def f(x):
        return torch.cond(x.sum() > 0, true_fn, lambda a: a - 1, (x,))

    with pytest.raises(tc_capture.GraphBreakError):
        tc_capture.optimize(tc_capture.interpret_backend, fullgraph=True)(f)(rand(3, sign=1))
    if body == "in_place":
        compare(f, lambda: [rand(3, sign=1)], calls=2, fullgraph=False)
        return
    with pytest.raises(Exception) as eager_error:  # torch.cond refuses side effects in eager too
        f(rand(3, sign=1))
    with pytest.raises(type(eager_error.value)):  # ... and the compiled call runs it natively
        tc_capture.optimize(tc_capture.interpret_backend)(f)(rand(3, sign=1))


# ---- autograd.Function -------------------------------------------------------------------------------
class ScaledMul(torch.autograd.Function):
    """Saved tensors, a non-tensor argument kept on ctx, two outputs; the backward is NOT the
    forward's derivative (3 * g for ``a``), so autograd's own derivative would be caught."""

    @staticmethod
    def forward(ctx, a, b, k):
        ctx.save_for_backward(a, b)
        ctx.k = k
        return a * b * k, (a + b).sum(-1)

    @staticmethod
    def backward(ctx, g1, g2):
        a, b = ctx.saved_tensors
        return g1 * 3 + g2[..., None], g1 * a * ctx.k, None


class ClampGrad(torch.autograd.Function):
    """The straight-through estimator with a clipped gradient (an intermediate saved)."""

    @staticmethod
    def forward(ctx, x):
        y = x.round()
        ctx.save_for_backward(x.abs() <= 1)
        return y

    @staticmethod
    def backward(ctx, g):
        (inside,) = ctx.saved_tensors
        return g * inside


class SetupContextExp(torch.autograd.Function):
    """New-style: forward without ctx, setup_context, a non-differentiable index output."""

    @staticmethod
    def forward(x):
        y = x.exp()
        return y, y.argmax(-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        y, idx = output
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(y)
        ctx.needs = ctx.needs_input_grad

    @staticmethod
    def backward(ctx, gy, gidx):
        (y,) = ctx.saved_tensors
        return gy * y * 2 if ctx.needs[0] else None


def test_autograd_function_saved_tensors_and_ctx_attributes():
    def f(x, y):
        o1, o2 = ScaledMul.apply(x.sin(), y, 2.5)
        return o1 * 2, o2

    be = compare(f, lambda: [rand(3, 4, grad=True), rand(3, 4, grad=True)], graphs=1)
    assert any("autograd_function" in str(n.target) for n in be.graphs[0].calls)
    x, y = rand(3, 4, grad=True), rand(3, 4, grad=True)
    tc_capture.optimize(tc_capture.interpret_backend, fullgraph=True)(f)(x, y)[0].sum().backward()
    assert torch.allclose(x.grad, 2 * 3 * x.detach().cos())  # the user's backward, not autograd's


@pytest.mark.parametrize("shape", [(5,), (2, 3), (0, 4)])
def test_autograd_function_straight_through(shape):
    compare(lambda x: ClampGrad.apply(x * 2) + x, lambda: [rand(*shape, grad=True)], graphs=1)


def test_autograd_function_setup_context_and_non_differentiable_output():
    def f(x, w):
        y, idx = SetupContextExp.apply(x @ w)
        assert not idx.requires_grad
        return y, idx

    compare(f, lambda: [rand(2, 3, grad=True), rand(3, 4, grad=True)], graphs=1)
    compare(f, lambda: [rand(2, 3), rand(3, 4)], graphs=1)  # no grads: needs_input_grad all False


def test_autograd_function_in_a_module_with_parameters_and_closure():
    scale = torch.randn(4)

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x @ w.t() + scale  # a global read inside the forward: no gradient (as eager)

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return g @ w * 0.5, g.t() @ x

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 3))

        def forward(self, x):
            return Fn.apply(x.relu(), self.w).tanh()

    m = M()
    be = counting_backend()
    compiled = tc_capture.optimize(be, fullgraph=True)(m)
    for _ in range(2):
        x = rand(2, 3, grad=True)
        x2 = x.detach().requires_grad_()
        expected, got = m(x), compiled(x2)
        tree_close(expected, got)
        ge = torch.autograd.grad(expected.sum(), [x, m.w])
        gg = torch.autograd.grad(got.sum(), [x2, m.w])
        tree_close(list(ge), list(gg), "grads")
    assert len(be.graphs) == 1


class _Dirty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


class _NoMaterialize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, g1, g2):
        return g1 * 2 if g2 is None else g1 * 2 + g2 * 3


class _ItemInForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * float(x.sum().item() > 0)

    @staticmethod
    def backward(ctx, g):
        return g


class _PrintInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        print(end="")
        return g * 5


class _ReturnsInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 7


@pytest.mark.parametrize("fn_cls", [_Dirty, _NoMaterialize, _ItemInForward, _PrintInBackward, _ReturnsInput])
def test_autograd_function_unsupported_parts_break_cleanly(fn_cls):
    def f(x):
        out = fn_cls.apply(x * 1)
        return out[0] if isinstance(out, tuple) else out

    with pytest.raises(tc_capture.GraphBreakError, match="autograd.Function"):
        tc_capture.optimize(tc_capture.interpret_backend, fullgraph=True)(f)(rand(3, grad=True))
    compare(f, lambda: [rand(3, grad=True)], fullgraph=False)  # the apply runs in Python: same grads


# ---- checkpoint ------------------------------------------------------------------------------------
def test_checkpoint_non_reentrant_same_values_and_grads():
    from torch.utils.checkpoint import checkpoint

    lin = torch.nn.Linear(4, 4)

    def block(x, y, *, scale):
        return torch.nn.functional.gelu(lin(x)) * y * scale

    def f(x, y):
        h = checkpoint(block, x, y, use_reentrant=False, scale=2.0)
        return checkpoint(lambda a: a.sin() + 1, h, use_reentrant=False)

    compare(f, lambda: [rand(3, 4, grad=True), rand(3, 4, grad=True)], graphs=1)


def test_checkpoint_with_dropout_matches_eager_rng():
    from torch.utils.checkpoint import checkpoint

    def f(x):
        return checkpoint(lambda a: torch.nn.functional.dropout(a * 2, 0.5, training=True), x, use_reentrant=False)

    compiled = tc_capture.optimize(tc_capture.interpret_backend, fullgraph=True)(f)
    for seed in (0, 1):
        x = rand(64, grad=True)
        x2 = x.detach().requires_grad_()
        torch.manual_seed(seed)
        expected = f(x)
        expected.sum().backward()
        torch.manual_seed(seed)
        got = compiled(x2)
        got.sum().backward()
        tree_close(expected, got)
        tree_close(x.grad, x2.grad, "grad")  # the mask of the recompute is the forward's


def test_checkpoint_reentrant_runs_in_python():
    from torch.utils.checkpoint import checkpoint

    def f(x):
        return checkpoint(lambda a: a.sin(), x * 2, use_reentrant=True)

    with pytest.raises(tc_capture.GraphBreakError, match="use_reentrant"):
        tc_capture.optimize(tc_capture.interpret_backend, fullgraph=True)(f)(rand(3, grad=True))
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(f)
    x = rand(3, grad=True)
    x2 = x.detach().requires_grad_()
    f(x).sum().backward()  # reentrant checkpoint refuses torch.autograd.grad: .backward() as eager
    compiled(x2).sum().backward()
    tree_close(x.grad, x2.grad, "grad")


# ---- torch.compiler.disable / allow_in_graph ----------------------------------------------------
def test_compiler_disable_breaks_around_the_call():
    calls = []

    @torch.compiler.disable
    def eager_only(a):
        calls.append(torch.compiler.is_compiling())
        return a.sin() * 2

    def f(x):
        return eager_only(x + 1) * 3 + 1

    with pytest.raises(tc_capture.GraphBreakError, match="torch.compiler.disable"):
        tc_capture.optimize(tc_capture.interpret_backend, fullgraph=True)(f)(rand(3))
    calls.clear()
    be = compare(f, lambda: [rand(3, grad=True)], fullgraph=False)
    assert len(be.graphs) == 2  # before and after the disabled call, which ran in Python
    assert calls and not any(calls)


def test_dynamo_disable_on_a_method_and_nested_call():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        @torch._dynamo.disable
        def helper(self, h):
            return h.cos()

        def forward(self, x):
            return self.lin(self.helper(self.lin(x)))

    m = M()
    be = counting_backend()
    compiled = tc_capture.optimize(be)(m)
    for _ in range(2):
        x = rand(2, 3)
        tree_close(m(x), compiled(x))
    assert len(be.graphs) == 2


def test_allow_in_graph_is_one_node():
    def my_op(a, b):
        return a * b + a.exp()

    torch.compiler.allow_in_graph(my_op)

    def f(x, y):
        return my_op(x, y).sum(-1)

    be = compare(f, lambda: [rand(2, 3, grad=True), rand(2, 3, grad=True)], graphs=1)
    assert [n.target for n in be.graphs[0].calls if n.target is my_op]


# ---- custom_op objects and overload packets ----------------------------------------------------
@torch.library.custom_op("tc_capture_tests::scale_add", mutates_args=())
def scale_add(a: torch.Tensor, b: torch.Tensor, k: float) -> torch.Tensor:
    return a * k + b


@scale_add.register_fake
def _(a, b, k):
    return torch.empty_like(a)


scale_add.register_autograd(lambda ctx, g: (g * ctx.k, g, None),
                            setup_context=lambda ctx, inputs, output: setattr(ctx, "k", inputs[2]))


def test_custom_op_object_and_packet_are_graph_ops():
    def f(x, y):
        a = scale_add(x, y, 2.0)
        b = torch.ops.tc_capture_tests.scale_add(a, y, 0.5)
        return torch.ops.aten.div(b, y.abs() + 1) + torch.ops.aten.div(b, 2, rounding_mode="floor")

    be = compare(f, lambda: [rand(3, 4, grad=True), rand(3, 4, grad=True)], graphs=1)
    targets = [n.target for n in be.graphs[0].calls]
    assert torch.ops.tc_capture_tests.scale_add.default in targets
    assert torch.ops.aten.div.Tensor in targets and torch.ops.aten.div.Tensor_mode in targets


# ---- torch.func -------------------------------------------------------------------------------------
@pytest.mark.parametrize("transform", ["vmap", "grad"])
def test_torch_func_is_a_clean_break(transform):
    def f(x):
        if transform == "vmap":
            return torch.vmap(lambda r: r.sin().sum())(x) + 1
        return torch.func.grad(lambda r: r.sin().sum())(x) + 1

    with pytest.raises(tc_capture.GraphBreakError, match="torch.func transform"):
        tc_capture.optimize(tc_capture.interpret_backend, fullgraph=True)(f)(rand(2, 3))
    compare(f, lambda: [rand(2, 3)], fullgraph=False)


def test_autograd_function_method_replaced_recompiles():
    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 3

    def f(x):
        return Fn.apply(x)

    compiled = tc_capture.optimize(tc_capture.interpret_backend, fullgraph=True)(f)
    x = rand(3, grad=True)
    compiled(x).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 3.0))
    Fn.backward = staticmethod(lambda ctx, g: g * 5)
    x.grad = None
    compiled(x).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 5.0))
