"""Checkpoint regions (``meta["recompute"]``): the backward recomputes them instead of reading saved
activations, values and gradients stay eager's, and random ops keep the forward's draw.

Graphs are traced by the test tracer with a stand-in ``checkpoint`` that tags the nodes its
function records, as capture tags the ops of a ``torch.utils.checkpoint.checkpoint`` call; eager
runs the same program through torch's real non-reentrant checkpoint."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn as nn
from autograd_tracer import _Tracer, module_inputs
from test_corpus import TransformerBlock

import tc_autograd
import tc_ir
from tc_autograd.checkpoint import must_recompute
from tc_autograd.partition import nbytes

aten = torch.ops.aten


def eager_checkpoint(fn, *args):
    return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)


def trace_program(program, module: nn.Module, args: list[torch.Tensor], tag: bool = True) -> tc_ir.Graph:
    """``program(checkpoint, module, *args)`` as a torch-level graph (inputs: args, then the
    module's parameters); ``checkpoint`` tags the nodes its function records with a region id."""
    graph = tc_ir.Graph("prog")
    tracer = _Tracer(graph)
    state, names = module_inputs(module)
    for i, value in enumerate(args):
        tracer.bind(value, graph.input(f"arg{i}", tc_ir.spec_of(value)))
    for value, name in zip(state, names):
        tracer.bind(value, graph.input(name, tc_ir.spec_of(value)))

    def checkpoint(fn, *fn_args):
        start = len(graph.nodes)
        out = fn(*fn_args)
        region = 1 + max((n.meta.get("recompute", 0) for n in graph.nodes), default=0)
        for node in graph.nodes[start:]:
            if tag and node.op == "call":
                node.meta["recompute"] = region
        return out

    with tracer:
        out = program(checkpoint, module, *args)
    graph.output(tc_ir.map_structure(out, tracer.node_of))
    return graph


class Stack(nn.Module):
    def __init__(self, layers: int = 4, dim: int = 64, p: float = 0.0):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))
        self.p = p

    def layer(self, i: int, h: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.layers[i](h))
        return torch.nn.functional.dropout(h, self.p) if self.p else h


def per_layer(checkpoint, m, x):
    for i in range(len(m.layers)):
        x = checkpoint(m.layer, i, x)
    return x


def whole(checkpoint, m, x):
    return checkpoint(lambda h: per_layer(lambda fn, *a: fn(*a), m, h), x)


def nested(checkpoint, m, x):
    def two(h):
        return checkpoint(m.layer, 1, checkpoint(m.layer, 0, h))
    return m.layer(3, checkpoint(m.layer, 2, checkpoint(two, x)))


def middle(checkpoint, m, x):
    h = m.layer(0, x)
    h = checkpoint(lambda a: m.layer(2, m.layer(1, a)), h)
    return m.layer(3, h).tanh()


def attention(checkpoint, m, x):
    return checkpoint(m, x) * 2


PROGRAMS = {"per_layer": per_layer, "whole": whole, "nested": nested, "middle": middle}


def compile_program(program, module, x, partition="min_cut", tag=True):
    graph = trace_program(program, module, [x], tag=tag)
    state, _ = module_inputs(module)
    return tc_autograd.aot(graph, [x, *state], partition=partition)


def run_both(program, module, compiled, x, seed):
    """Eager (torch's checkpoint) and compiled on the same fresh input and seed: outputs, the
    input's and the parameters' gradients under a random cotangent."""
    results = []
    for run in ("eager", "compiled"):
        for p in module.parameters():
            p.grad = None
        xi = x.detach().clone().requires_grad_()
        torch.manual_seed(seed)
        out = program(eager_checkpoint, module, xi) if run == "eager" else compiled(xi, *module_inputs(module)[0])
        torch.manual_seed(seed + 1)
        (out * torch.randn_like(out)).sum().backward()
        results.append((out.detach(), xi.grad, [p.grad for p in module.parameters()]))
    return results


def assert_matches(results):
    (want, want_gx, want_gp), (got, got_gx, got_gp) = results
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got_gx, want_gx, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got_gp, want_gp, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("partition", ["min_cut", "save_all"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_values_and_grads_match_eager(name, partition):
    torch.manual_seed(0)
    module = Stack()
    compiled = compile_program(PROGRAMS[name], module, torch.randn(8, 64, requires_grad=True), partition)
    for seed in (1, 2):  # two calls, different inputs
        assert_matches(run_both(PROGRAMS[name], module, compiled, torch.randn(8, 64) * seed, seed))


@pytest.mark.parametrize("name", ["per_layer", "whole", "middle"])
def test_region_is_recomputed_not_saved(name):
    """The backward holds the regions' matmuls again, and the saved set holds none of the
    regions' intermediates: fewer bytes than the same program without checkpoint."""
    torch.manual_seed(0)
    module, x = Stack(), torch.randn(32, 64, requires_grad=True)
    plain = compile_program(PROGRAMS[name], module, x, tag=False)
    ckpt = compile_program(PROGRAMS[name], module, x)
    joint = ckpt.last.partition and ckpt.joint_graph
    banned = must_recompute(joint)
    assert banned and not banned & set(ckpt.last.partition.saved)
    regions = {n.meta["recompute"] for n in joint.calls if "recompute" in n.meta}
    assert len(regions) == {"per_layer": 4, "whole": 1, "middle": 1}[name]
    count = lambda g: sum(n.target is aten.addmm.default for n in g.calls)  # noqa: E731
    recomputed = {"per_layer": 3, "whole": 3, "middle": 2}[name]  # the last layer's output is not needed
    assert count(plain.backward_graph) == 0 and count(ckpt.backward_graph) >= recomputed
    activations = lambda f: sum(nbytes(n) for n in f.last.partition.saved  # noqa: E731
                                if n.op != "input")
    assert ckpt.saved_bytes() < plain.saved_bytes() and activations(ckpt) < activations(plain)
    assert_matches(run_both(PROGRAMS[name], module, ckpt, torch.randn(32, 64), 3))


def test_each_region_is_recomputed_just_before_its_backward():
    """Regions' inputs are saved (as eager's checkpoint keeps them) and the backward recomputes
    one region at a time: between two recomputed matmuls lies a gradient of the later layer."""
    torch.manual_seed(0)
    module, x = Stack(), torch.randn(32, 64, requires_grad=True)
    ckpt = compile_program(per_layer, module, x)
    saved = [n for n in ckpt.last.partition.saved if n.op != "input"]
    assert [n.target for n in saved] == [aten.gelu.default] * 3  # the inputs of layers 1..3
    kinds = [n.target for n in ckpt.backward_graph.calls if n.target in (aten.addmm.default, aten.gelu_backward.default)]
    assert kinds == [aten.addmm.default, aten.gelu_backward.default] * 4


def test_dropout_mask_is_the_forwards_draw():
    """Dropout inside the regions: the forward's mask is saved (bool), the backward draws
    nothing and recomputes the rest; values and grads are eager's under the same seed."""
    torch.manual_seed(0)
    module = Stack(p=0.3)
    compiled = compile_program(per_layer, module, torch.randn(16, 64, requires_grad=True))
    assert not any(tc_ir.is_random(n.target) for n in compiled.backward_graph.calls)
    saved = compiled.last.partition.saved
    assert any(tc_ir.is_random(n.target) or n.target is operator.getitem for n in saved)
    assert any(aten.addmm.default is n.target for n in compiled.backward_graph.calls)
    for seed in (5, 6):
        assert_matches(run_both(per_layer, module, compiled, torch.randn(16, 64) * seed, seed))


def test_attention_block_in_a_region():
    torch.manual_seed(0)
    block = TransformerBlock(dim=32, heads=4)
    x = torch.randn(2, 16, 32, requires_grad=True)
    plain = compile_program(attention, block, x, tag=False)
    ckpt = compile_program(attention, block, x)
    assert ckpt.saved_bytes() < plain.saved_bytes()
    assert not must_recompute(ckpt.joint_graph) & set(ckpt.last.partition.saved)
    for seed in (1, 2):
        assert_matches(run_both(attention, block, ckpt, torch.randn(2, 16, 32), seed))


def test_trace_cache_keys_tell_regions_apart():
    """The tags are not in the graph's text: the trace cache must still not hand a checkpointed
    program the partition of the same program without checkpoint."""
    store: dict = {}

    class Store:
        def get(self, kind, key):
            return store.get((kind, key))

        def put(self, kind, key, data):
            store[(kind, key)] = data

    torch.manual_seed(0)
    module, x = Stack(), torch.randn(8, 64, requires_grad=True)
    state, _ = module_inputs(module)
    plain = tc_autograd.aot(trace_program(per_layer, module, [x], tag=False), [x, *state], cache=Store())
    ckpt = tc_autograd.aot(trace_program(per_layer, module, [x]), [x, *state], cache=Store())
    plain(x, *state).sum().backward()
    ckpt(x, *state).sum().backward()
    assert len(store) == 2 and ckpt.saved_bytes() < plain.saved_bytes()
