"""Dynamic shapes: a transformer block's ATen graph over batch and sequence-length symbols,
compiled once and run at many (batch, length) pairs, against the same block in eager."""

import pytest
import torch
from dyn_helpers import SymGraph, aten, kernel_builds
from inductor_helpers import assert_same

import tc_inductor
import tc_ir

C, H = 16, 2


def _linear(b, x2d, w, bias):
    return b.call(aten.addmm.default, bias, x2d, b.call(aten.permute.default, w, [1, 0]))


def block_graph(device: str = "cpu", sizes: tuple | None = None) -> tc_ir.Graph:
    """The block over symbols ``s0, s1`` (batch, length), or over fixed ``sizes``."""
    b = SymGraph()
    s0, s1 = sizes or (b.sym("s0", 2), b.sym("s1", 5))
    x = b.input("x", (s0, s1, C), device=device)
    params = {name: b.input(name, shape, device=device) for name, shape in [
        ("ln1_w", (C,)), ("ln1_b", (C,)), ("qkv_w", (3 * C, C)), ("qkv_b", (3 * C,)), ("proj_w", (C, C)),
        ("proj_b", (C,)), ("ln2_w", (C,)), ("ln2_b", (C,)), ("fc_w", (4 * C, C)), ("fc_b", (4 * C,)),
        ("out_w", (C, 4 * C)), ("out_b", (C,))]}
    p = params
    h = b.call(aten.native_layer_norm.default, x, [C], p["ln1_w"], p["ln1_b"], 1e-5)[0]
    qkv = _linear(b, b.call(aten.view.default, h, [s0 * s1, C]), p["qkv_w"], p["qkv_b"])
    qkv = b.call(aten.view.default, qkv, [s0, s1, 3, H, C // H])
    qkv = b.call(aten.permute.default, qkv, [2, 0, 3, 1, 4])
    q, k, v = (b.call(aten.select.int, qkv, 0, i) for i in range(3))
    att = b.call(aten.scaled_dot_product_attention.default, q, k, v, None, 0.0, True)
    att = b.call(aten.clone.default, b.call(aten.permute.default, att, [0, 2, 1, 3]), memory_format=torch.contiguous_format)
    att = _linear(b, b.call(aten.view.default, att, [s0 * s1, C]), p["proj_w"], p["proj_b"])
    x = b.call(aten.add.Tensor, x, b.call(aten.view.default, att, [s0, s1, C]))
    h = b.call(aten.native_layer_norm.default, x, [C], p["ln2_w"], p["ln2_b"], 1e-5)[0]
    h = _linear(b, b.call(aten.view.default, h, [s0 * s1, C]), p["fc_w"], p["fc_b"])
    h = b.call(aten.gelu.default, h, approximate="tanh")
    h = _linear(b, h, p["out_w"], p["out_b"])
    return b.output(b.call(aten.add.Tensor, x, b.call(aten.view.default, h, [s0, s1, C])))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.qkv, self.proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
        self.fc, self.out = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)
        att = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(B, T, C))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    def params(self):
        return [self.ln1.weight, self.ln1.bias, self.qkv.weight, self.qkv.bias, self.proj.weight, self.proj.bias,
                self.ln2.weight, self.ln2.bias, self.fc.weight, self.fc.bias, self.out.weight, self.out.bias]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_transformer_block_over_batch_and_sequence_length(backend):
    torch.manual_seed(0)
    model = Block()
    params = [t.detach() for t in model.params()]
    graph = block_graph()
    compiled = tc_inductor.compile(graph, [torch.randn(2, 5, C), *params], {"backend": backend, "cache": False})
    assert compiled.stats["extern_calls"] == 5  # four linears and the attention: vendor kernels
    builds = kernel_builds()
    pairs = [(2, 5), (3, 2), (2, 17), (5, 31)] + ([(2, 129), (3, 64)] if backend == "cpp" else [])
    with torch.no_grad():
        for batch, length in pairs:
            x = torch.randn(batch, length, C)
            got = compiled(x, *params)
            assert_same(got, tc_ir.interpret(graph, [x, *params]))
            torch.testing.assert_close(got, model(x), atol=1e-4, rtol=1e-4)
    if backend == "cpp":
        assert kernel_builds() == builds


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_transformer_block_over_batch_and_sequence_length_on_the_gpu():
    """Symbolic Triton kernels compiled for the GPU: one compile, sizes across block buckets."""
    torch.manual_seed(0)
    model = Block().cuda()
    params = [t.detach() for t in model.params()]
    graph = block_graph("cuda")
    compiled = tc_inductor.compile(graph, [torch.randn(2, 5, C, device="cuda"), *params], {"cache": False})
    with torch.no_grad():
        for batch, length in [(2, 5), (3, 2), (2, 17), (5, 31), (2, 129), (3, 64), (8, 1000), (4, 2049)]:
            x = torch.randn(batch, length, C, device="cuda")
            got = compiled(x, *params)
            torch.testing.assert_close(got, model(x), atol=1e-4, rtol=1e-4)
