"""torch features through the whole pipeline (capture -> tc_autograd -> back end) against eager:
``torch.cond`` with closed-over tensors, ``autograd.Function`` with the user's backward,
non-reentrant ``checkpoint``, ``allow_in_graph``, ``custom_op`` with a registered autograd rule.
Every case is ``fullgraph=True``, two calls with different values, outputs and gradients."""

from __future__ import annotations

import warnings

import pytest
import torch

import tc

BACKENDS = ["eager", "aot_eager", "inductor"]


class ScaledMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, k):
        ctx.save_for_backward(a, b)
        ctx.k = k
        return a * b * k, (a + b).sum(-1)

    @staticmethod
    def backward(ctx, g1, g2):
        a, b = ctx.saved_tensors
        return g1 * 3 + g2[..., None], g1 * a * ctx.k, None  # not the derivative: 3 * g1 for a


class Straight(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.round(), x.argmax(-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(inputs[0].abs() <= 1)

    @staticmethod
    def backward(ctx, g, _):
        (inside,) = ctx.saved_tensors
        return g * inside


@torch.library.custom_op("tc_e2e_tests::scale_add", mutates_args=())
def scale_add(a: torch.Tensor, b: torch.Tensor, k: float) -> torch.Tensor:
    return a * k + b


@scale_add.register_fake
def _(a, b, k):
    return torch.empty_like(a)


scale_add.register_autograd(lambda ctx, g: (g * ctx.k, g, None),
                            setup_context=lambda ctx, inputs, output: setattr(ctx, "k", inputs[2]))


def _allowed(a, b):
    return a * b + a.exp()


torch.compiler.allow_in_graph(_allowed)
W = torch.randn(4)


def f_cond(x, y):
    h = x * 2
    o1, o2 = torch.cond(x.sum() > 0, lambda a: (a.sin() * W + h, a * 2), lambda a: (a.cos() - W * h, a - 1), (y,))
    return o1 * o2


def f_function(x, y):
    o1, o2 = ScaledMul.apply(x.sin(), y, 2.5)
    r, idx = Straight.apply(o1 * 0.3)
    return r * y + o2[..., None], idx


def f_checkpoint(x, y):
    from torch.utils.checkpoint import checkpoint

    h = checkpoint(lambda a, b: torch.nn.functional.gelu(a @ b.t()) * 2, x, y, use_reentrant=False)
    return checkpoint(lambda a: a.tanh() + 1, h, use_reentrant=False)


def f_ops(x, y):
    return scale_add(_allowed(x, y), y, 0.5) + torch.ops.aten.div(x, y.abs() + 1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [f_cond, f_function, f_checkpoint, f_ops], ids=lambda f: f.__name__)
def test_matches_eager_with_grads(fn, backend):
    compiled = tc.compile(fn, backend=backend, fullgraph=True)
    for sign in (1, -1):
        x, y = (torch.randn(3, 4) * sign).requires_grad_(), torch.randn(3, 4, requires_grad=True)
        x2, y2 = x.detach().requires_grad_(), y.detach().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no eager fallback of the compiled graph
            got = compiled(x2, y2)
        expected = fn(x, y)
        got, expected = (got if isinstance(got, tuple) else (got,)), (expected if isinstance(expected, tuple) else (expected,))
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
        weights = [torch.randn_like(e) for e in expected if e.requires_grad]
        ge = torch.autograd.grad([e for e in expected if e.requires_grad], (x, y), weights, allow_unused=True)
        gg = torch.autograd.grad([g for g in got if g.requires_grad], (x2, y2), weights, allow_unused=True)
        torch.testing.assert_close(gg, ge, atol=1e-4, rtol=1e-4)
