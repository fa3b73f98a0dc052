"""``torch.utils.checkpoint`` through the whole pipeline, recomputed in the backward.

Values and input/parameter gradients against eager's own checkpoint (MLP and attention blocks,
nested modules, a sequence of layers, dropout under the same seed), two calls with different
inputs, every back end; then the recompute itself: the backward graph holds the regions' matmuls
again, and the tensors kept between forward and backward (counted by autograd's saved-tensor
hooks on the compiled module) are fewer bytes than without checkpoint."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import tc
import tc_autograd
import tc_ir

BACKENDS = ["eager", "aot_eager", "inductor"]
aten = torch.ops.aten


def ckpt(fn, *args):
    return checkpoint(fn, *args, use_reentrant=False)


def call(fn, *args):
    return fn(*args)


class Regions(nn.Module):
    """A module whose ``wrap`` checkpoints (``ck``, the default) or calls plainly."""

    ck = True

    def wrap(self, fn, *args):
        return ckpt(fn, *args) if self.ck else call(fn, *args)


class MLPBlock(nn.Module):
    def __init__(self, dim=32, p=0.0):
        super().__init__()
        self.up, self.down, self.norm, self.p = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim), nn.LayerNorm(dim), p

    def forward(self, x):
        h = F.gelu(self.up(self.norm(x)))
        return x + F.dropout(self.down(h), self.p, self.training)


class Attention(nn.Module):
    def __init__(self, dim=32, heads=4, p=0.0):
        super().__init__()
        self.qkv, self.out, self.heads, self.p = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), heads, p

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5).softmax(-1)
        att = F.dropout(scores, self.p, self.training) @ v
        return x + self.out(att.transpose(1, 2).reshape(b, t, d))


class PerLayer(Regions):
    """Each layer checkpointed on its own."""

    def __init__(self, make, n=4):
        super().__init__()
        self.layers = nn.ModuleList(make() for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = self.wrap(layer, x)
        return x


class OverSequence(Regions):
    """One region over a ``Sequential`` of layers, between plain layers."""

    def __init__(self, make, n=3):
        super().__init__()
        self.first, self.seq, self.last = make(), nn.Sequential(*(make() for _ in range(n))), make()

    def forward(self, x):
        return self.last(self.wrap(self.seq, self.first(x))).tanh()


class Nested(Regions):
    """Regions inside regions, through nested modules."""

    def __init__(self, make):
        super().__init__()
        self.inner = PerLayer(make, 2)
        self.other = make()

    def forward(self, x):
        return self.other(self.wrap(self.inner, x)) * 2


MODELS = {
    "mlp_per_layer": lambda p: PerLayer(lambda: MLPBlock(p=p)),
    "attention_per_layer": lambda p: PerLayer(lambda: Attention(p=p), 2),
    "mlp_over_sequence": lambda p: OverSequence(lambda: MLPBlock(p=p)),
    "attention_nested": lambda p: Nested(lambda: Attention(p=p)),
}


def run(model, x, seed):
    """Output, input grad and parameter grads under a random cotangent, from ``seed``."""
    model.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_()
    torch.manual_seed(seed)
    out = model(x)
    torch.manual_seed(seed + 100)
    (out * torch.randn_like(out)).sum().backward()
    return out.detach(), x.grad, [p.grad for p in model.parameters()]


def compiled_run(compiled, x, seed):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no eager fallback, no graph break
        return run(compiled, x, seed)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_matches_eager_checkpoint(name, backend):
    torch.manual_seed(0)
    model = MODELS[name](0.0)
    compiled = tc.compile(copy.deepcopy(model), backend=backend, fullgraph=True)
    for k in (1, 2):  # two calls, different inputs
        x = torch.randn(2, 8, 32) * k
        got, want = compiled_run(compiled, x, k), run(model, x, k)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dropout_matches_eager_under_the_same_seed(name):
    """The interpreter back end draws from torch's generator as eager does: the same masks, and
    the recompute uses the forward's mask, as eager's checkpoint replays its RNG state."""
    torch.manual_seed(0)
    model = MODELS[name](0.3)
    compiled = tc.compile(copy.deepcopy(model), backend="aot_eager", fullgraph=True)
    for k in (1, 2):
        x = torch.randn(2, 8, 32) * k
        got, want = compiled_run(compiled, x, k), run(model, x, k)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dropout_backward_uses_the_forwards_mask(backend):
    """The inductor draws from its own Philox stream, so masks differ from eager's: the gradient
    must still be the one of the mask the forward used (dropped where the output is 0)."""
    w = torch.randn(64)

    def f(x):
        return ckpt(lambda a: F.dropout(a.sin() * w, 0.5, True) + 0.0, x)

    compiled = tc.compile(f, backend=backend, fullgraph=True)
    for k in (1, 2):
        x = (torch.rand(32, 64) + 0.5).mul(k).requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = compiled(x)
        out.sum().backward()
        kept = out.detach() != 0
        assert 0.3 < kept.float().mean() < 0.7
        torch.testing.assert_close(out.detach(), torch.where(kept, x.detach().sin() * w * 2, 0.0))
        torch.testing.assert_close(x.grad, torch.where(kept, x.detach().cos() * w * 2, 0.0))


def aot_backend(seen: list):
    """A back end keeping the AOTFunction, to look at its partition."""
    @tc.tc_ir_backend
    def backend(graph, example_inputs):
        lifted, held = tc_ir.lift_held(graph)
        compiled = tc_autograd.aot(lifted, [*example_inputs, *held])
        seen.append(compiled)
        return (lambda *inputs: compiled(*inputs, *held)) if held else compiled
    return backend


def saved_between(model, x):
    """(count, bytes) of activations autograd keeps from the forward for the backward
    (parameters, alive anyway, left out), as the saved-tensor hooks see them."""
    params = {p.data_ptr() for p in model.parameters()}
    sizes = []

    def pack(t):
        if t.data_ptr() not in params and t.numel():
            sizes.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    out.sum().backward()
    return len(sizes), sum(sizes)


@pytest.mark.parametrize("name", ["mlp_per_layer", "attention_per_layer", "mlp_over_sequence"])
def test_recompute_happens(name):
    torch.manual_seed(0)
    with_ckpt = MODELS[name](0.0)
    x = torch.randn(4, 16, 32, requires_grad=True)
    plain = copy.deepcopy(with_ckpt)
    _no_checkpoint(plain)
    figures = {}
    for label, model in (("checkpoint", with_ckpt), ("plain", plain)):
        seen: list = []
        compiled = tc.compile(model, backend=aot_backend(seen), fullgraph=True)
        compiled(x).sum().backward()  # compile (tracing on fakes runs the hooks too)
        figures[label] = saved_between(compiled, x)
        (aot,) = seen
        figures[label + "_mm"] = sum(n.target in (aten.mm.default, aten.addmm.default, aten.bmm.default)
                                     for n in aot.backward_graph.calls)
        # reductions min-cut alone never recomputes: in the backward only when checkpointed
        figures[label + "_bw_reductions"] = sum(n.target in (aten.native_layer_norm.default, aten._softmax.default)
                                                for n in aot.backward_graph.calls)
    assert figures["checkpoint"][1] < figures["plain"][1], figures
    assert figures["checkpoint_mm"] > figures["plain_mm"], figures  # the regions' matmuls, again
    assert figures["checkpoint_bw_reductions"] > 0 == figures["plain_bw_reductions"], figures
    print(f"\n[{name}] saved activations (count, bytes): {figures}")


def _no_checkpoint(model):
    """The same model with every checkpoint call made a plain call."""
    for m in model.modules():
        if hasattr(m, "ck"):
            m.ck = False
