"""In-place metadata ops (``t_``, ``squeeze_``, ``as_strided_``...), ops writing several arguments,
and data-dependent refusals, against eager on fresh inputs (values, grads, strides, mutated inputs).

A metadata-only in-place op is recorded as the view op it amounts to, applied to the tensor's old
value; the tensor is rebound to that view for later uses.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from autograd_tracer import trace

import tc_autograd
import tc_ir


def _fresh(shapes, seed, grad):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g).requires_grad_(grad) if isinstance(s, tuple) else s(g) for s in shapes]


def _clone(inputs):
    return [t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
            for t in inputs]


def _check(fn, shapes, *, grad=True, tol=None):
    """Compile ``fn`` on one set of inputs, then compare two fresh calls with eager: outputs
    (values and strides), input grads, and inputs after the call."""
    tol = tol or dict(atol=1e-5, rtol=1e-4)
    example = _fresh(shapes, 0, grad)
    with torch.set_grad_enabled(grad):
        compiled = tc_autograd.aot(trace(fn, _clone(example)), _clone(example))
    for seed in (1, 2):
        fresh = _fresh(shapes, seed, grad)
        ref_in, mine_in = _clone(fresh), _clone(fresh)
        with torch.set_grad_enabled(grad):
            want, got = fn(*ref_in), compiled(*mine_in)
        want_t = [v for v in tc_ir.leaves(want) if isinstance(v, torch.Tensor)]
        got_t = [v for v in tc_ir.leaves(got) if isinstance(v, torch.Tensor)]
        assert len(want_t) == len(got_t)
        for w, o in zip(want_t, got_t):
            torch.testing.assert_close(o, w, **tol)
            assert o.shape == w.shape and (o.stride() == w.stride() or o.numel() <= 1), (o.stride(), w.stride())
        for a, b in zip(mine_in, ref_in):
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(a.detach(), b.detach(), **tol)
        if grad:
            loss_w = sum((w.float() * (k + 1)).sum() for k, w in enumerate(want_t) if w.requires_grad)
            loss_o = sum((o.float() * (k + 1)).sum() for k, o in enumerate(got_t) if o.requires_grad)
            loss_w.backward()
            loss_o.backward()
            for a, b in zip(mine_in, ref_in):
                if isinstance(a, torch.Tensor) and b.requires_grad:
                    torch.testing.assert_close(a.grad, b.grad, **tol)
    return compiled


@pytest.mark.parametrize("grad", [False, True])
def test_adaptive_avg_pool_channels_last(grad):
    """ATen restrides its fresh 1x1 result with ``as_strided_`` for a channels-last input (timm ConvNeXt)."""
    def f(x):
        return F.adaptive_avg_pool2d(x.permute(0, 3, 1, 2), 1).flatten(1) * 2
    _check(f, [(2, 4, 4, 8)], grad=grad)

    def g(x):
        return F.adaptive_avg_pool2d(x.to(memory_format=torch.channels_last), 1)
    _check(g, [(2, 8, 4, 4)], grad=grad)


@pytest.mark.parametrize("grad", [False, True])
def test_quantile(grad):
    def f(x, q):
        return torch.quantile(x, q, dim=1, keepdim=True), torch.nanquantile(x, 0.3, dim=0)
    _check(f, [(5, 7), lambda g: torch.rand(3, generator=g)], grad=grad)


@pytest.mark.parametrize("grad", [False, True])
def test_metadata_ops_on_intermediates(grad):
    def f(x):
        y = x * 2
        y.t_()
        z = y + 1               # reads the transposed y
        y.unsqueeze_(0)
        y.squeeze_(0)
        y.transpose_(0, 1)      # back to x's orientation
        y.add_(x)               # a write to the rebound (non-view) tensor
        w = (x + 1)[1:].detach()  # a view requiring grad is refused: see the test below
        w.swapdims_(0, 1)
        w.mul_(3)               # a write after the rebind goes through the new view
        return y, z, w, w.sum(0)
    _check(f, [(3, 4)], grad=grad)


def test_metadata_op_then_write_reaches_base():
    """A rebound view of a fresh value stays a view: a later in-place write shows in the base."""
    def f(x):
        base = x.exp()
        v = base[:, 1:]
        v.t_()
        v.add_(1)
        return base, v
    _check(f, [(3, 4)], grad=False)


def test_metadata_op_on_view_of_input():
    """``x[1:].t_()`` rebinds the view, not the input; an output view of the input keeps its layout."""
    def f(x):
        v = x[1:]
        v.t_()
        return v, v * 2
    compiled = _check(f, [(3, 4)], grad=False)
    x = torch.randn(3, 4)
    out = compiled(x)[0]
    assert out.data_ptr() == x[1:].data_ptr() and out.stride() == x[1:].t().stride()


def test_as_strided_inplace_on_intermediate():
    def f(x):
        y = x + 1
        y.as_strided_((2, 3), (1, 2))
        return y * 2, y.sum()
    _check(f, [(6,)], grad=True)


def test_metadata_op_on_input_is_refused():
    """Eager changes the caller's tensor: a compiled graph does not, so tracing refuses cleanly."""
    def f(x):
        x.t_()
        return x + 1
    x = torch.randn(3, 4)
    with pytest.raises(NotImplementedError, match="metadata of input 0"):
        tc_autograd.aot(trace(f, [x.clone()]), [x])
    with pytest.raises(NotImplementedError, match="as_strided_ of an input"):
        tc_autograd.aot(trace(lambda x: x[1:].as_strided_((2,), (1,)) * 1, [x.clone()]), [x])


def test_metadata_op_on_view_requiring_grad_is_refused():
    """Fakes regenerate a view written in place by replaying its view ops, which miss ``t_``:
    the trace would get a wrong backward, so it refuses (eager, using as_strided, is right)."""
    def f(x):
        w = (x + 1)[1:]
        w.t_()
        w.mul_(3)
        return w
    x = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(NotImplementedError, match="on a view that requires grad"):
        tc_autograd.aot(trace(f, [x.detach().clone().requires_grad_()]), [x])
    _check(f, [(3, 4)], grad=False)  # without grad it compiles


def _hand_built(fn, specs):
    g = tc_ir.Graph()
    nodes = [g.input(f"a{k}", spec) for k, spec in enumerate(specs)]
    g.output(g.call(fn, *nodes))
    return g


@pytest.mark.parametrize("case", ["tensor_split", "nonzero", "item", "repeat_interleave"])
def test_data_dependent_ops_are_refused_cleanly(case):
    """Ops needing tensor values (which fakes lack) raise ``DataDependentError``, a
    ``NotImplementedError`` naming the node, whatever way the fake tensor failed."""
    i64 = tc_ir.TensorSpec((2,), torch.int64)
    x, idx = torch.randn(4, 6), torch.tensor([1, 3])
    graph, inputs = {
        "tensor_split": (_hand_built(lambda a, b: torch.tensor_split(a, b, 1), [tc_ir.TensorSpec((4, 6)), i64]), [x, idx]),
        "nonzero": (_hand_built(torch.nonzero, [tc_ir.TensorSpec((4, 6))]), [x]),
        "item": (_hand_built(lambda a: a * a.sum().item(), [tc_ir.TensorSpec((4, 6))]), [x]),
        "repeat_interleave": (_hand_built(torch.repeat_interleave, [i64]), [idx]),
    }[case]
    with pytest.raises(tc_autograd.DataDependentError, match="data-dependent operation in node"):
        tc_autograd.aot(graph, inputs)


def test_data_dependent_backward_is_refused_cleanly():
    """``index_fill``'s backward for a tensor value calls ``_unique`` on the indices (fakes: no values)."""
    def f(x, i, v):
        return x.index_fill(1, i, v)
    args = [torch.randn(3, 4, requires_grad=True), torch.tensor([0, 2]), torch.tensor(1.5, requires_grad=True)]
    with pytest.raises(tc_autograd.DataDependentError, match="data-dependent operation in the backward: aten._unique"):
        tc_autograd.aot(trace(f, args), args)
    with torch.no_grad():  # inference has no backward: it compiles
        compiled = tc_autograd.aot(trace(f, args), args)
        fresh = [torch.randn(3, 4), torch.tensor([3, 1]), torch.tensor(-2.0)]
        torch.testing.assert_close(compiled(*fresh), f(*fresh))


@pytest.mark.parametrize("grad", [False, True])
def test_op_writing_several_arguments(grad):
    """``_batch_norm_with_update`` writes its running stats (``Tensor(a!)`` args, not self): its
    ``_functional`` twin is recorded and both stats are copied back into the inputs."""
    def f(x, w, b, rm, rv):
        y, mean, invstd, reserve = torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, 0.1, 1e-5)
        return y * 2, mean, invstd, reserve
    _check(f, [(4, 3, 5), (3,), (3,), lambda g: torch.randn(3, generator=g),
               lambda g: torch.rand(3, generator=g) + 0.5], grad=grad)


def test_op_writing_a_non_self_argument_through_a_view():
    """``rrelu_with_noise`` writes ``noise`` (here a column of a bigger input): random, so the
    check is what eager guarantees: y = x * noise where x < 0, noise in [lower, upper], 1 elsewhere."""
    def f(x, buf):
        return torch.ops.aten.rrelu_with_noise(x, buf[:, 1], 0.1, 0.3, training=True) + 0
    x, buf = torch.randn(64), torch.zeros(64, 3)
    compiled = tc_autograd.aot(trace(f, [x, buf.clone()]), [x, buf.clone()])
    x, buf = torch.randn(64), torch.full((64, 3), 7.0)
    y = compiled(x, buf)
    noise = buf[:, 1]
    assert torch.all(buf[:, [0, 2]] == 7.0)
    neg = x < 0
    assert torch.all((noise[neg] >= 0.1) & (noise[neg] <= 0.3)) and torch.all(noise[~neg] == 1)
    torch.testing.assert_close(y, x * noise)
