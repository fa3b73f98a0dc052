"""FX interop on real modules traced by torch.fx."""

import pytest
import torch
import torch.fx as fx
import torch.nn as nn

import tc_ir


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 32), nn.GELU(), nn.Linear(32, 5))
        self.register_buffer("offset", torch.randn(5))

    def forward(self, x):
        return torch.softmax(self.net(x) + self.offset, dim=-1)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        return self.head(h.mean(dim=(2, 3)))


def check_module(module, shape):
    module.eval()
    gm = fx.symbolic_trace(module)
    example = torch.randn(shape)
    g = tc_ir.from_fx(gm, [example])
    g.verify()
    assert not any(n.op == "call" and n.target.__class__.__name__ == "Module" for n in g.nodes)
    for _ in range(3):
        x = torch.randn(shape)
        torch.testing.assert_close(tc_ir.interpret(g, [x]), module(x))
    back = tc_ir.from_fx(tc_ir.to_fx(g), [example])
    assert back == g
    x = torch.randn(shape)
    torch.testing.assert_close(tc_ir.to_fx(g)(x), module(x))
    return g


def test_mlp_roundtrip():
    g = check_module(MLP(), (4, 10))
    assert {n.target for n in g.nodes if n.op == "param"} >= {"net.0.weight", "net.2.bias"}
    assert [n.target for n in g.nodes if n.op == "constant"] == ["offset"]


def test_convnet_roundtrip():
    g = check_module(ConvNet(), (2, 3, 8, 8))
    text = str(g)
    assert "torch.conv2d" in text or "torch.nn.functional.conv2d" in text
    # torch-level targets print by name but do not load: text is data (ATen graphs round-trip)
    with pytest.raises(tc_ir.ParseError, match="cannot be loaded"):
        tc_ir.parse(text)


def test_to_fx_keeps_subgraphs_runnable():
    spec = tc_ir.TensorSpec((3,), torch.float32)
    g = tc_ir.Graph()
    p = g.input("p", tc_ir.ScalarSpec(bool))
    x = g.input("x", spec)
    t, f = tc_ir.Graph("t"), tc_ir.Graph("f")
    t.output(t.call(torch.sin, t.input("x", spec)))
    f.output(f.call(torch.cos, f.input("x", spec)))
    g.output(g.call(tc_ir.ops.cond, p, t, f, (x,)))
    gm = tc_ir.to_fx(g)
    v = torch.randn(3)
    torch.testing.assert_close(gm(True, v), v.sin())
    torch.testing.assert_close(gm(False, v), v.cos())
