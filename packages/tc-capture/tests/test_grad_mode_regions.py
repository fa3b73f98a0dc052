"""Grad mode, inference mode and autocast switched inside a compiled frame: the process state after
the call, the outputs' ``requires_grad`` and gradients all equal eager's, with and without breaks
inside the block, and when the user's code raises inside it.

The back end used here behaves as tc-autograd's runtime does: it restores the grad mode it was
called in, and when called with grad mode off it runs an inference graph (outputs never require
grad), so capture must neither trust a graph to leave the process in the mode it ended in nor call
a graph that turns grad mode on inside with grad mode off.
"""

from __future__ import annotations

import pytest
import torch

import tc_capture
from tc_capture.api import interpret_backend


def restoring_backend(graph, example_inputs):
    run = interpret_backend(graph, example_inputs)

    def call(*args):
        mode = torch.is_grad_enabled()
        try:
            out = run(*args)
        finally:
            torch._C._set_grad_enabled(mode)
        return out if mode else [o.detach() if isinstance(o, torch.Tensor) else o for o in out]

    return call


def _brk():
    print("break")


def no_grad_start(x):
    with torch.no_grad():
        y = x * 2
    return x * y


def no_grad_middle(x):
    a = x.sin()
    with torch.no_grad():
        y = a * 2
    return a * y + x


def no_grad_break_inside(x):
    with torch.no_grad():
        y = x * 2
        _brk()
        y = y + 1
    return x * y


def set_grad_false_then_true(x):
    torch.set_grad_enabled(False)
    y = x * 3
    torch.set_grad_enabled(True)
    return x * y


def enable_grad_inside_no_grad(x):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * a
        c = b * 2
    return b + c


def set_grad_ctx_break(x):
    with torch.set_grad_enabled(False):
        y = x.cos()
        _brk()
    return (x * y).sum()


def no_grad_returns_inside(x):
    with torch.no_grad():
        return x * 2


def inference_mode_block(x):
    with torch.inference_mode():
        y = x * 2
    return y.is_inference(), x * 2


def nested_break_twice(x):
    with torch.no_grad():
        _brk()
        with torch.enable_grad():
            y = x * x
            _brk()
        z = y * 2
    return y + z


FNS = [no_grad_start, no_grad_middle, no_grad_break_inside, set_grad_false_then_true,
       enable_grad_inside_no_grad, set_grad_ctx_break, no_grad_returns_inside, inference_mode_block,
       nested_break_twice]


def _leaves(out):
    return [o for o in (out if isinstance(out, tuple) else (out,)) if isinstance(o, torch.Tensor)]


@pytest.mark.parametrize("fn", FNS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("ambient", [True, False], ids=["grad", "nograd"])
def test_grad_mode_after_call_and_outputs(fn, ambient):
    compiled = tc_capture.optimize(restoring_backend)(fn)
    for _ in range(2):  # second call: a cache hit
        x = torch.randn(5, requires_grad=True)
        with torch.set_grad_enabled(ambient):
            expected = fn(x)
            mode_eager = torch.is_grad_enabled()
            torch.set_grad_enabled(ambient)
            got = compiled(x)
            mode_tc = torch.is_grad_enabled()
        assert mode_tc == mode_eager
        assert type(got) is type(expected)
        for e, g in zip(_leaves(expected), _leaves(got)):
            assert e.requires_grad == g.requires_grad
            torch.testing.assert_close(g, e)
        if not isinstance(expected, tuple):
            assert got == expected if not isinstance(got, torch.Tensor) else True
        else:
            assert [v for v in got if not isinstance(v, torch.Tensor)] == \
                [v for v in expected if not isinstance(v, torch.Tensor)]
        grads_e = [torch.autograd.grad(e.sum(), x, retain_graph=True)[0] for e in _leaves(expected) if e.requires_grad]
        grads_t = [torch.autograd.grad(g.sum(), x, retain_graph=True)[0] for g in _leaves(got) if g.requires_grad]
        for e, g in zip(grads_e, grads_t):
            torch.testing.assert_close(g, e)


class UserError(Exception):
    pass


def raises_in_no_grad(x, fail):
    with torch.no_grad():
        y = x * 2
        if fail:
            raise UserError("mine")
    return x * y


def raises_after_break_in_no_grad(x, fail):
    with torch.no_grad():
        y = x * 2
        _brk()
        if fail:
            raise UserError("mine")
    return x * y


def raises_in_inference_mode(x, fail):
    with torch.inference_mode():
        y = x * 2
        if fail:
            raise UserError("mine")
    return y


@pytest.mark.parametrize("fn", [raises_in_no_grad, raises_after_break_in_no_grad, raises_in_inference_mode],
                         ids=lambda f: f.__name__)
def test_user_exception_inside_block_restores_mode(fn):
    compiled = tc_capture.optimize(restoring_backend)(fn)
    for fail in (True, False, True):
        x = torch.randn(4, requires_grad=True)
        if fail:
            with pytest.raises(UserError, match="mine"):
                compiled(x, True)
        else:
            torch.testing.assert_close(compiled(x, False), fn(x, False))
        assert torch.is_grad_enabled()
        assert not torch.is_inference_mode_enabled()


def test_fullgraph_no_grad_has_one_graph_and_restores():
    compiled = tc_capture.optimize(restoring_backend, fullgraph=True)(no_grad_middle)
    for _ in range(2):
        x = torch.randn(3, requires_grad=True)
        out = compiled(x)
        assert torch.is_grad_enabled() and out.requires_grad
        torch.testing.assert_close(out, no_grad_middle(x))


def autocast_block(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
    return y.dtype, (y.float() + x.sum()).dtype


def test_autocast_block_restores_state():
    compiled = tc_capture.optimize(restoring_backend)(autocast_block)
    for _ in range(2):
        x, w = torch.randn(4, 4), torch.randn(4, 4)
        assert compiled(x, w) == autocast_block(x, w)
        assert not torch.is_autocast_enabled("cpu")
