"""Whole models: ResNet and ViT blocks in one graph, breaks inside a module's forward, export metadata."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F
from helpers import check, tree_close
from torch import nn

import tc_capture
import tc_ir


# ---- torchvision-like ResNet -------------------------------------------------------------------------
def conv3x3(i, o, stride=1):
    return nn.Conv2d(i, o, 3, stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, i, o, stride=1, downsample=None):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(i, o, stride), nn.BatchNorm2d(o)
        self.relu = nn.ReLU(inplace=True)
        self.conv2, self.bn2 = conv3x3(o, o), nn.BatchNorm2d(o)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, i, o, stride=1, downsample=None):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(i, o, 1, bias=False), nn.BatchNorm2d(o)
        self.conv2, self.bn2 = conv3x3(o, o, stride), nn.BatchNorm2d(o)
        self.conv3, self.bn3 = nn.Conv2d(o, o * 4, 1, bias=False), nn.BatchNorm2d(o * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=10, width=8):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1, self.relu, self.maxpool = nn.BatchNorm2d(width), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 2 * block.expansion, num_classes)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


# ---- ViT -----------------------------------------------------------------------------------------------
class EncoderBlock(nn.Module):
    def __init__(self, d, heads, hand_written):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.hand_written, self.heads = hand_written, heads
        if hand_written:
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        else:
            self.attn = nn.MultiheadAttention(d, heads, dropout=0.0, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Dropout(0.0), nn.Linear(2 * d, d))

    def _attention(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        y = self.ln1(x)
        x = x + (self._attention(y) if self.hand_written else self.attn(y, y, y, need_weights=False)[0])
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    def __init__(self, image=16, patch=4, d=16, depth=2, heads=2, classes=5, hand_written=False):
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, patch)
        n = (image // patch) ** 2
        self.class_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embedding = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        self.layers = nn.Sequential(*[EncoderBlock(d, heads, hand_written) for _ in range(depth)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        cls = self.class_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embedding
        x = self.ln(self.layers(x))
        return self.head(x[:, 0])


MODELS = {
    "resnet_basic": (lambda: ResNet(BasicBlock, [2, 2]), (3, 16, 16)),
    "resnet_bottleneck": (lambda: ResNet(Bottleneck, [1, 2]), (3, 16, 16)),
    "vit_mha": (lambda: ViT(), (3, 16, 16)),
    "vit_hand_written": (lambda: ViT(hand_written=True), (3, 16, 16)),
}


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", list(MODELS))
def test_model_in_one_graph(name, train):
    make, shape = MODELS[name]
    torch.manual_seed(0)
    m = make().train(train)
    if train:  # batch norm running stats are mutated in place: compare on two copies
        import copy

        eager_m, comp_m = m, copy.deepcopy(m)
        f = tc_capture.optimize(tc_capture.interpret_backend)(comp_m)
        for b in (2, 2, 3):
            x = torch.randn(b, *shape)
            tree_close(eager_m(x), f(x))
        tree_close(dict(eager_m.state_dict()), dict(comp_m.state_dict()))
    else:
        check(None, lambda: (torch.randn(2, *shape),), lambda: (torch.randn(3, *shape),), module=m)
    r = tc_capture.capture(make().train(train), torch.randn(2, *shape))
    assert (r.graph_count, r.graph_break_count) == (1, 0), r


def test_model_gradients_match():
    torch.manual_seed(0)
    m = ViT(hand_written=True)
    f = tc_capture.optimize(tc_capture.interpret_backend)(m)
    x = torch.randn(2, 3, 16, 16)
    f(x).square().sum().backward()
    got = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m(x).square().sum().backward()
    for a, b in zip(got, [p.grad for p in m.parameters()]):
        assert torch.allclose(a, b, atol=1e-5)


# ---- a break inside a compiled module's forward keeps the graphs around it ----------------------------
class PrintInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.lin2 = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, scale=1.0):
        y = self.lin(x)
        print("hi")
        return self.lin2(y) * scale


def test_break_in_module_forward_gives_two_graphs():
    m = PrintInForward()
    r = tc_capture.capture(m, torch.randn(2, 4))
    assert (r.graph_count, r.graph_break_count) == (2, 1), r
    _, be = check(None, lambda: (torch.randn(2, 4),), lambda: (torch.randn(3, 4), 2.0), module=m)
    assert len(be.graphs) == 4


def test_module_hooks_run_around_compiled_forward():
    m = PrintInForward()
    m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    m.register_forward_hook(lambda mod, args, out: out + 1)
    check(None, lambda: (torch.randn(2, 4),), module=m)
    assert tc_capture.capture(m, torch.randn(2, 4)).graph_count == 2


def test_bound_method_breaks_resume():
    m = PrintInForward()
    f = tc_capture.optimize(tc_capture.interpret_backend)(m.forward)
    x = torch.randn(2, 4)
    tree_close(m.forward(x), f(x))
    assert tc_capture.capture(m.forward, x).graph_count == 2


def test_forward_with_kwargs_and_wrapped_signature():
    import functools

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            kwargs.pop("unused", None)
            return fn(self, *args, **kwargs)
        return wrapper

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        @deco
        def forward(self, x, *, shift=0.0):
            return self.lin(x) + shift

    m = M()
    f = tc_capture.optimize(tc_capture.interpret_backend)(m)
    for _ in range(2):
        x = torch.randn(2, 4)
        tree_close(m(x, shift=1.5, unused=3), f(x, shift=1.5, unused=3))


# ---- export metadata -----------------------------------------------------------------------------------
Pair = collections.namedtuple("Pair", "a b")


class Exported(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.blocks = nn.ModuleList([nn.Linear(3, 3)])
        self.register_buffer("scale", torch.ones(3))

    def forward(self, x, d):
        y = self.blocks[0](self.lin(x)) * self.scale + d["k"][1]
        return {"y": y, "pair": Pair(y.sum(), 3), "list": [x, "s"], "none": None}


def _read_input(kind, what, module, args):
    if kind == "param":
        return module.get_parameter(what)
    if kind == "buffer":
        return module.get_buffer(what)
    value = (module, *args)[what[0]]
    for key in what[1:]:
        value = value[key]
    return value


def test_export_meta_rebuilds_the_return_value():
    m = Exported()
    args = (torch.randn(2, 3), {"k": [torch.randn(3), torch.randn(3)]})
    g = tc_capture.capture(m, *args).graphs[0]
    assert g.meta["arg_names"] == ["self", "x", "d"]
    want = [("arg", (1,)), ("arg", (2, "k", 1)), ("param", "lin.weight"), ("param", "lin.bias"),
            ("param", "blocks.0.weight"), ("param", "blocks.0.bias"), ("buffer", "scale")]
    assert all(w in g.meta["user_inputs"] for w in want), g.meta["user_inputs"]
    ret = g.meta["returns"]
    assert ret["pair"].b == ("constant", 3) and ret["list"][1] == ("constant", "s")
    args2 = (torch.randn(2, 3), {"k": [torch.randn(3), torch.randn(3)]})  # same shapes: same graph
    outs = tc_ir.interpret(g, [_read_input(k, w, m, args2) for k, w in g.meta["user_inputs"]])
    tree_close(m(*args2), tc_capture.rebuild_returns(ret, outs))


def test_export_meta_function_and_returned_input():
    def fn(x, y):
        return x, (x * y, 2.0)

    g = tc_capture.capture(fn, torch.randn(3), torch.randn(3)).graphs[0]
    assert g.meta["user_inputs"] == [("arg", (0,)), ("arg", (1,))]
    x, y = torch.randn(3), torch.randn(3)
    tree_close(fn(x, y), tc_capture.rebuild_returns(g.meta["returns"], tc_ir.interpret(g, [x, y])))


def test_export_meta_only_without_breaks():
    r = tc_capture.capture(PrintInForward(), torch.randn(2, 4))
    assert all("returns" not in g.meta for g in r.graphs)
