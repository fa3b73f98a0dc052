"""nn.Module forwards: parameters as graph inputs, train/eval guards, hooks, containers."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import check, clone, tree_close
from torch import nn

import tc_capture


class MLP(nn.Module):
    def __init__(self, n=8, depth=3):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(n, n) for _ in range(depth)])
        self.norm = nn.LayerNorm(n)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.norm(x)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return self.pool(torch.relu(self.bn(self.conv(x)))).flatten(1)


class Attn(nn.Module):
    def __init__(self, d=8, heads=2):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return {"out": self.proj(y.transpose(1, 2).reshape(b, t, d)), "shape": (b, t)}


class WithDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})
        self.seq = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Dropout(0.0))
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x):
        x = self.seq(x) * self.scale
        return tuple(head(x) for name, head in self.heads.items())


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.mha = nn.MultiheadAttention(4, 2, batch_first=True)

    def forward(self, idx):
        h = self.emb(idx)
        out, _ = self.mha(h, h, h, need_weights=False)
        return out + h


class Flags(nn.Module):
    def __init__(self, use_bias=True):
        super().__init__()
        self.lin = nn.Linear(4, 4, bias=use_bias)
        self.use_act = True

    def forward(self, x, scale=1.0):
        y = self.lin(x) * scale
        return torch.tanh(y) if self.use_act else y


MODULES = {
    "mlp": (MLP, lambda: (torch.randn(5, 8),)),
    "conv": (ConvNet, lambda: (torch.randn(2, 3, 6, 6),)),
    "attn": (Attn, lambda: (torch.randn(2, 4, 8),)),
    "dict": (WithDict, lambda: (torch.randn(3, 4),)),
    "embed": (Embed, lambda: (torch.randint(0, 10, (2, 5)),)),
    "flags": (Flags, lambda: (torch.randn(3, 4),)),
    "lstm_free_seq": (lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), lambda: (torch.randn(3, 4),)),
}


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("name", list(MODULES))
def test_module(name, training):
    make, inputs = MODULES[name]
    torch.manual_seed(0)
    m = make().train(training)
    m_eager = copy.deepcopy(m)
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(m)
    for _ in range(3):
        args = inputs()
        tree_close(m_eager(*clone(args)), compiled(*clone(args)))
    for (n1, b1), (n2, b2) in zip(m_eager.named_buffers(), m.named_buffers()):
        tree_close(b1, b2, n1)


def test_module_kwargs_and_method():
    m = Flags()
    check(None, lambda: (torch.randn(3, 4),), module=m)
    bound = tc_capture.optimize(tc_capture.interpret_backend)(m.forward)
    x = torch.randn(3, 4)
    tree_close(m(x, scale=2.0), bound(x, scale=2.0))


def test_training_update_is_seen():
    m = MLP()
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(m)
    x = torch.randn(5, 8)
    compiled(x)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1)
    tree_close(m(x), compiled(x))


def test_load_state_dict_and_flag_change_recompile():
    m = Flags()
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(m)
    x = torch.randn(3, 4)
    compiled(x)
    m.load_state_dict(Flags().state_dict())
    tree_close(m(x), compiled(x))
    m.use_act = False
    tree_close(m(x), compiled(x))
    assert len(compiled._cache.entries[0]) == 2


def test_dtype_change_via_to():
    m = Flags()
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(m)
    compiled(torch.randn(3, 4))
    m.double()
    x = torch.randn(3, 4, dtype=torch.float64)
    tree_close(m(x), compiled(x))


def test_hooks_run():
    m = Flags()
    seen = []
    m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    m.register_forward_hook(lambda mod, args, out: out + 1)
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(m)
    x = torch.randn(3, 4)
    tree_close(m(x), compiled(x))
    assert not seen


def test_shared_graph_across_instances():
    be_graphs = []

    def backend(g, ex):
        be_graphs.append(g)
        return tc_capture.interpret_backend(g, ex)

    blocks = [Flags() for _ in range(3)]
    fn = tc_capture.optimize(backend)(lambda block, x: block(x))
    x = torch.randn(3, 4)
    for b in blocks:
        tree_close(b(x), fn(b, x))
    assert len(be_graphs) == 1, "one graph serves every instance of the same block"


def test_libraries_named_like_torch_are_not_torch_internals(tmp_path, monkeypatch):
    """torchvision lives beside torch in site-packages: ``.../torch`` must not prefix-match it."""
    import importlib
    import os

    site = os.path.dirname(os.path.dirname(torch.__file__))
    fake = tmp_path / "torchvision_like.py"
    fake.write_text("import torch\n\ndef head(x):\n    return torch.relu(x) + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = importlib.util.spec_from_file_location("torchvision_like", fake)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.head.__module__ = "torchvision.models.resnet"  # named like torch, as torchvision's are
    mod.head.__code__ = mod.head.__code__.replace(co_filename=os.path.join(site, "torchvision", "models", "x.py"))
    r = tc_capture.capture(lambda x: mod.head(x) * 2, torch.randn(3))
    assert (len(r.graphs), len(r.breaks)) == (1, 0), r.breaks


def test_module_tuples_are_read_from_the_module_dicts_and_writes_are_caught():
    """A conv's stride/padding tuples are module state, checked on every call through the
    module's own dictionaries (not ``Sequential.__getitem__``/``Module.__getattr__``)."""
    convs = torch.nn.Sequential(*[torch.nn.Conv2d(4, 4, 3, padding=1) for _ in range(3)])
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(convs)
    x = torch.randn(1, 4, 8, 8)
    tree_close(convs(x), compiled(x))
    (entry,) = compiled._cache.entries[0]
    guard = entry.guard_source.split("def why")[0]
    # Each module is read once into a local (``_mN = _m0._modules['1']``), then its dictionaries.
    assert "._modules['1']" in guard and "._parameters['weight']" in guard and "F[0][1]" not in guard, guard
    convs[1].stride = (2, 2)  # a module write: the guards catch it
    tree_close(convs(x), compiled(x))
    assert len(compiled._cache.entries[0]) == 2


def test_slicing_a_module_list_keeps_hits_on_the_fast_path():
    """HF decoders loop over ``self.layers[: n]``; slicing a ModuleList builds a new one each call,
    which must not make hits miss (and tc patches nothing in ``nn.Module`` to know it)."""
    patched = {name: getattr(torch.nn.Module, name) for name in ("__setattr__", "_apply", "train")}

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(4))
            self.n = 3

        def forward(self, x):
            for layer in self.layers[: self.n]:
                x = torch.tanh(layer(x))
            return x

    m = Decoder()
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(m)
    x = torch.randn(2, 4)
    tree_close(compiled(x), m(x))
    for _ in range(3):
        x = torch.randn(2, 4)
        expect = m(x)
        tree_close(compiled(x), expect)
        assert len(compiled._cache.entries[0]) == 1
    assert patched == {name: getattr(torch.nn.Module, name) for name in patched}
    m.n = 2  # a module write: guards see it
    tree_close(compiled(x), m(x))
