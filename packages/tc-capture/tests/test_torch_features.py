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
