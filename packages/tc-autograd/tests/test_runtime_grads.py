"""The training runtime's per-call work: which cotangents autograd builds, and the memory checks.

Non-differentiable outputs (batch norm's new running stats) get no zero cotangent built for
them; a differentiable output that gets no gradient still reaches the backward graph as zeros.
The memory checks (written inputs sharing memory, saved tensors the copy-back would overwrite)
keep their meaning with their cheaper primitives. Everything is compared with eager on fresh
random inputs, over two calls.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from autograd_tracer import module_inputs, trace, trace_module
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import tc_autograd
from tc_autograd import runtime
from tc_autograd.api import interpret_compiler
from tc_autograd.functionalize import storage_groups, storage_pointers

aten = torch.ops.aten
FILLS = {aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default, aten.full.default,
         aten.full_like.default, aten.fill_.Scalar, aten.zero_.default}


class CountFills(TorchDispatchMode):
    """Counts the zero/fill ops run outside the compiled graphs (``paused`` while one runs)."""

    def __init__(self):
        super().__init__()
        self.count, self.paused = 0, False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in FILLS and not self.paused:
            self.count += 1
        return func(*args, **(kwargs or {}))


class Boxed:
    """A compiled backward that takes its arguments as a list it empties (as tc_inductor's do)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)

    def call_boxed(self, args):
        mine = list(args)
        args.clear()
        return self.fn(*mine)


def compilers(boxed: bool, counter: CountFills | None = None) -> dict:
    def paused(fn):
        def run(*args):
            if counter is None:
                return fn(*args)
            counter.paused = True
            try:
                return fn(*args)
            finally:
                counter.paused = False
        return run

    def bw(graph, example):
        run = paused(interpret_compiler(graph, example))
        return Boxed(run) if boxed else run

    return {"fw_compiler": lambda graph, example: paused(interpret_compiler(graph, example)), "bw_compiler": bw}


def bn_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4)).train()


def compile_module(module: nn.Module, x: torch.Tensor, **options) -> tc_autograd.AOTFunction:
    """The module's call as a graph of ``(x, *parameters, *buffers)``; ``module``'s own state is
    what the compiled call reads and writes."""
    graph = trace_module(copy.deepcopy(module), [x])
    return tc_autograd.aot(graph, [x, *module_inputs(module)[0]], **options)


def call(compiled, module, x):
    return compiled(x, *module_inputs(module)[0])


def assert_same_module(mine: nn.Module, ref: nn.Module) -> None:
    for (name, p), q in zip(mine.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m, name=name: f"grad of {name}: {m}")
    for (name, b), c in zip(mine.named_buffers(), ref.buffers()):
        torch.testing.assert_close(b, c, msg=lambda m, name=name: f"buffer {name}: {m}")


# -- no zeros for non-differentiable outputs -------------------------------------------------------

@pytest.mark.parametrize("boxed", [False, True])
def test_backward_builds_no_zeros_for_batch_norm_running_stats(boxed):
    """Each training batch norm has three non-differentiable outputs (the new running mean,
    variance and batch count): autograd used to build a zero cotangent for each, every step."""
    torch.manual_seed(0)
    counter = CountFills()
    ref = bn_net()
    mine = copy.deepcopy(ref)
    compiled = compile_module(mine, torch.randn(2, 3, 5, 5), **compilers(boxed, counter))
    for _ in range(2):
        x = torch.randn(2, 3, 5, 5)
        loss = call(compiled, mine, x).square().mean()
        with counter:
            loss.backward()
        ref(x).square().mean().backward()
        assert counter.count == 0
        assert_same_module(mine, ref)


def three_outputs(x, w):
    y = x * w
    return y.sin(), y.cos() * 2.0, (x + w).sum(0)


@pytest.mark.parametrize("boxed", [False, True])
@pytest.mark.parametrize("used", [(0,), (1,), (2,), (0, 2), (1, 2)])
def test_differentiable_outputs_without_a_gradient_get_zeros(used, boxed):
    """Outputs left out of the loss reach the compiled backward as zero cotangents."""
    x, w = torch.randn(4, 3), torch.randn(4, 3)
    compiled = tc_autograd.aot(trace(three_outputs, [x, w]), [x, w], **compilers(boxed))
    for _ in range(2):
        x, w = torch.randn(4, 3), torch.randn(4, 3)
        cots = [torch.randn(4, 3), torch.randn(4, 3), torch.randn(3)]
        grads = []
        for fn in (three_outputs, compiled):
            a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
            outs = fn(a, b)
            sum((outs[k] * cots[k]).sum() for k in used).backward()
            grads.append((a.grad, b.grad))
        torch.testing.assert_close(grads[1], grads[0])


def with_integer_output(x, w):
    y = x @ w
    return y.relu(), y.argmax(1), y.detach() * 2.0


def test_non_differentiable_user_outputs_with_an_output_unused():
    x, w = torch.randn(5, 4), torch.randn(4, 3)
    compiled = tc_autograd.aot(trace(with_integer_output, [x, w]), [x, w])
    for _ in range(2):
        x, w = torch.randn(5, 4), torch.randn(4, 3)
        results = []
        for fn in (with_integer_output, compiled):
            a, b = x.clone(), w.clone().requires_grad_()
            y, idx, det = fn(a, b)
            assert not idx.requires_grad and not det.requires_grad
            (y * idx.unsqueeze(1)).sum().backward()
            results.append((y, idx, det, b.grad))
        torch.testing.assert_close(results[1], results[0])


def _bn_pair(seed: int, shape: tuple, boxed: bool):
    """A batch-norm net, an equal copy, and the copy compiled for inputs of ``shape``."""
    torch.manual_seed(seed)
    ref = bn_net()
    mine = copy.deepcopy(ref)
    return ref, mine, compile_module(mine, torch.randn(*shape), **compilers(boxed))


@pytest.mark.parametrize("boxed", [False, True])
def test_batch_norm_training_two_steps_and_optimizer(boxed):
    ref, mine, compiled = _bn_pair(1, (3, 3, 6, 6), boxed)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (mine, ref)]
    for _ in range(2):
        x = torch.randn(3, 3, 6, 6)
        got, want = call(compiled, mine, x), ref(x)
        torch.testing.assert_close(got, want)
        got.square().mean().backward()
        want.square().mean().backward()
        assert_same_module(mine, ref)
        for opt in opts:
            opt.step()
            opt.zero_grad()
    assert int(mine[1].num_batches_tracked) == 2


@pytest.mark.parametrize("boxed", [False, True])
def test_retain_graph_twice(boxed):
    ref, mine, compiled = _bn_pair(2, (2, 3, 5, 5), boxed)
    x = torch.randn(2, 3, 5, 5)
    for out in (call(compiled, mine, x), ref(x)):
        loss = out.square().mean()
        loss.backward(retain_graph=True)
        loss.backward()
    assert_same_module(mine, ref)


def test_double_backward_is_refused():
    x, w = torch.randn(4, 3), torch.randn(4, 3)
    compiled = tc_autograd.aot(trace(three_outputs, [x, w]), [x.requires_grad_(), w.requires_grad_()])
    a, b = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    out = compiled(a, b)[0].sum()  # the other outputs get no gradient
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(out, [a], create_graph=True)


def aliasing_outputs(x, w):
    y = x * w
    return x.view(-1), y, y.t(), x[1], w.unsqueeze(0)


@pytest.mark.parametrize("used", [(1,), (2,), (0, 3), (4,), (1, 2, 4)])
def test_outputs_aliasing_inputs_and_each_other(used):
    """Outputs that are views of an input (replayed on it) or of another output (rebuilt from
    the graph value): a gradient through any subset of them matches eager's."""
    x, w = torch.randn(3, 4), torch.randn(3, 4)
    compiled = tc_autograd.aot(trace(aliasing_outputs, [x, w]), [x.requires_grad_(), w.requires_grad_()])
    for _ in range(2):
        x, w = torch.randn(3, 4), torch.randn(3, 4)
        grads = []
        for fn in (aliasing_outputs, compiled):
            a, b = x.clone().requires_grad_(), w.clone().requires_grad_()
            a2, b2 = a * 1.0, b * 1.0  # non-leaves: their views may carry history
            outs = fn(a2, b2)
            sum((outs[k] * torch.ones_like(outs[k]) * (k + 1)).sum() for k in used).backward()
            grads.append((a.grad, b.grad))
        torch.testing.assert_close(grads[1], grads[0])


# -- the memory checks ------------------------------------------------------------------------------

# Eager saves the fresh sin(x); the min-cut partition saves x (or the view) and recomputes the
# sin in the backward, which needs x as it was before the copy-back overwrites it.
def saves_a_view_then_writes(x, w):
    y = x[1:].unsqueeze(0).expand(2, 3, 3).sin() * w  # saves x[1:].unsqueeze(0): the smallest cut
    x.mul_(2.0)
    return y.sum()


def saves_the_input_then_writes(x, w):
    y = x.sin() * w
    x.add_(1.0)
    return y.sum()


@pytest.mark.parametrize("fn", [saves_a_view_then_writes, saves_the_input_then_writes])
def test_a_saved_tensor_in_a_written_input_keeps_its_old_value(fn):
    x, w = torch.randn(4, 3), torch.randn(3)
    compiled = tc_autograd.aot(trace(fn, [x, w]), [x.clone(), w.clone().requires_grad_()])
    for _ in range(2):
        x, w = torch.randn(4, 3), torch.randn(3)
        results = []
        for f in (fn, compiled):
            a, b = x.clone(), w.clone().requires_grad_()
            f(a, b).backward()
            results.append((a, b.grad))
        torch.testing.assert_close(results[1], results[0])


def writes_odd_layouts(x, e, w):
    y = (x.sin() * w).sum(0) + e.sum()  # saves x (the smallest cut), which the graph writes
    x.mul_(w)
    e.add_(1.0)
    return y


def test_written_inputs_non_contiguous_and_zero_size():
    def inputs():
        return [torch.randn(3, 4).t(), torch.randn(0, 3), torch.randn(3)]

    compiled = tc_autograd.aot(trace(writes_odd_layouts, inputs()), [*inputs()[:2], torch.randn(3, requires_grad=True)])
    for _ in range(2):
        fresh = inputs()
        results = []
        for fn in (writes_odd_layouts, compiled):
            x, e, w = fresh[0].t().clone().t(), fresh[1].clone(), fresh[2].clone().requires_grad_()
            out = fn(x, e, w)
            out.sum().backward()
            assert not x.is_contiguous()
            results.append((out, x, e, w.grad))
        torch.testing.assert_close(results[1], results[0])


def write_first_read_second(a, b):
    a.add_(1.0)
    return (b * 2).sum()


def test_training_call_with_a_written_input_sharing_memory_is_refused_before_running():
    a, b = torch.randn(3, 3), torch.randn(3, 3, requires_grad=True)
    compiled = tc_autograd.aot(trace(write_first_read_second, [a, b]), [a.clone(), b])
    x = torch.randn(3, 3)
    shared = x.t().detach().requires_grad_()  # a leaf of its own over x's memory
    before = x.clone()
    with pytest.raises(NotImplementedError, match="shares memory") as info:
        compiled(x, shared)
    assert info.value.tc_while_compiling
    torch.testing.assert_close(x, before)  # nothing ran
    a2, b2 = torch.randn(3, 3), torch.randn(3, 3)
    got_a, want_a = a2.clone(), a2.clone()
    got_b, want_b = b2.clone().requires_grad_(), b2.clone().requires_grad_()
    compiled(got_a, got_b).backward()
    write_first_read_second(want_a, want_b).backward()
    torch.testing.assert_close((got_a, got_b.grad), (want_a, want_b.grad))


def test_storage_pointers_and_groups():
    a = torch.randn(3, 4)
    array = np.zeros(6, dtype=np.float32)
    # two storages over one memory (from_numpy twice) share it, as views of one storage do
    assert storage_groups([a, 3, a.t(), torch.randn(2), a[1]]) == ((0, 2, 4),)
    assert storage_groups([torch.from_numpy(array), torch.from_numpy(array)]) == ((0, 1),)
    assert storage_groups([torch.empty(0), torch.empty(0), a, None]) == ()  # no memory: shares nothing
    pointers = storage_pointers([a, None, 2])
    assert pointers == [a.untyped_storage().data_ptr(), 0, 0]
    assert storage_groups([a, a], pointers=[1, 2]) == ()  # the given pointers decide


def test_same_memory():
    a = torch.randn(3, 4)
    array = np.zeros((2, 3), dtype=np.float32)
    assert runtime.same_memory(a, a.as_strided((3, 4), (4, 1)))
    assert runtime.same_memory(torch.from_numpy(array), torch.from_numpy(array))
    assert not runtime.same_memory(a, a.clone())
    assert not runtime.same_memory(a.t(), a.as_strided((4, 3), (1, 3), 1))
    assert not runtime.same_memory(a, a.view(torch.int32))
    assert not runtime.same_memory(a[:0], a[:0])
    # a size-1 dim's stride moves to no other element: the same elements
    b = torch.randn(1, 4, 4).transpose(-1, -2)  # strides (16, 1, 4)
    assert runtime.same_memory(b, b.as_strided((1, 4, 4), (4, 1, 4)))
    assert not runtime.same_memory(b, b.as_strided((1, 4, 4), (4, 4, 1)))


# -- one gradient for two inputs -------------------------------------------------------------------

def sum_of_two(x, a, b):
    return (a + b) * x


def test_one_gradient_for_two_inputs_reaches_autograd_as_one_tensor():
    """``a + b`` gives ``a`` and ``b`` one gradient node. A compiled backward may return it as two
    views of one buffer (a CUDA graph's replay detaches each output): handed to autograd so, both
    ``.grad`` shared its memory and a second backward accumulated into it twice."""
    def views(graph, example):
        run = interpret_compiler(graph, example)
        return lambda *args: [g.view_as(g) for g in run(*args)]  # a fresh alias per position

    x = torch.randn(3, 4)
    a, b = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)
    compiled = tc_autograd.aot(trace(sum_of_two, [x, a, b]), [x, a, b], bw_compiler=views)
    assert runtime.repeated_outputs(compiled.backward_graph) == {1: 0}
    ra, rb = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    for _ in range(2):  # the second backward adds into .grad in place
        x = torch.randn(3, 4)
        compiled(x, a, b).square().sum().backward()
        sum_of_two(x, ra, rb).square().sum().backward()
    torch.testing.assert_close(a.grad, ra.grad)
    torch.testing.assert_close(b.grad, rb.grad)
    assert a.grad.untyped_storage().data_ptr() != b.grad.untyped_storage().data_ptr()
