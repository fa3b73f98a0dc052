"""Dynamic shapes end to end through ``tc.compile`` with the default inductor back end on CPU:
capture makes sizes symbols (automatic dynamic, ``mark_dynamic``, ``dynamic=True``), tc_autograd
traces the symbolic graph, tc_inductor compiles kernels over sizes (C++, and Triton under the
interpreter) or per shape (``symbolic_kernels=False``). Values, input gradients and parameter
gradients are compared with eager at every size, on fresh inputs; compile counts are the capture
cache's entries, and no graph may fall back to eager (a fallback warns)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tc
from tc_capture.cache.frame_cache import ALL_CACHES

TOL = dict(atol=1e-4, rtol=1e-4)
LENGTHS = [5, 7, 9, 12, 16, 3, 20, 8, 11, 6]
KERNELS = {
    "cpp": {"symbolic_kernels": True},
    "cpp-per-shape": {"symbolic_kernels": False},
    "triton": {"symbolic_kernels": True, "backend": "triton"},
}

CUDA = pytest.param("cuda", marks=[pytest.mark.cuda,
                                   pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")])


class Block(nn.Module):
    def __init__(self, C=32, nh=4):
        super().__init__()
        self.nh = nh
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        k = k.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        v = v.view(B, T, self.nh, C // self.nh).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


def conv_net(norm: bool = False) -> nn.Module:
    bn = [nn.BatchNorm2d(8)] if norm else []
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), *bn, nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))


def _check(cm, m, x):
    """Output, input gradient and parameter gradients of ``cm`` vs eager ``m`` on input ``x``."""
    x = x.requires_grad_()
    out, ref = cm(x), m(x)
    torch.testing.assert_close(out, ref, **TOL)
    g = torch.randn_like(ref)
    params = [p for p in m.parameters() if p.requires_grad]
    got = torch.autograd.grad(out, [x, *params], g)
    want = torch.autograd.grad(ref, [x, *params], g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOL)


def _entries(cm) -> int:
    """Compiled entries of the module's ``forward`` (its frame's start) since ``tc.reset()``."""
    forward = type(cm._orig_mod).forward
    return sum(len(c.entries.get(0, [])) for c in list(ALL_CACHES) if c.fn is forward)


@pytest.fixture(autouse=True)
def _fresh_caches():
    tc.reset()  # a compiled forward's cache is shared by every tc.compile with the same settings


def _no_fallback(caught) -> None:
    tc_warnings = [str(w.message) for w in caught if str(w.message).startswith("tc:")]
    assert not tc_warnings, tc_warnings


@pytest.mark.parametrize("kernels", list(KERNELS))
@pytest.mark.parametrize("dynamic, mark, expected", [(None, False, 2), (None, True, 1), (True, False, 1)])
def test_transformer_block_over_sequence_lengths(kernels, dynamic, mark, expected):
    if kernels == "triton" and (dynamic, mark) != (None, False):
        pytest.skip("Triton under the interpreter is slow: one mode")
    torch.manual_seed(0)
    m = Block()
    cm = tc.compile(m, dynamic=dynamic, options=KERNELS[kernels])
    lengths = LENGTHS if kernels != "triton" else LENGTHS[:6]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for T in lengths:
            x = torch.randn(2, T, 32)
            if mark:
                tc.mark_dynamic(x, 1)
            _check(cm, m, x)
    _no_fallback(caught)
    assert _entries(cm) == expected


def test_transformer_block_dynamic_false_compiles_per_shape():
    torch.manual_seed(0)
    m = Block()
    cm = tc.compile(m, dynamic=False, options=KERNELS["cpp"])
    for T in LENGTHS[:5]:
        _check(cm, m, torch.randn(2, T, 32))
    assert _entries(cm) == 5


@pytest.mark.parametrize("kernels", ["cpp", "cpp-per-shape"])
def test_conv_net_over_batch_and_image_sizes(kernels):
    torch.manual_seed(0)
    m = conv_net()
    cm = tc.compile(m, options=KERNELS[kernels])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for B, H in [(2, 16), (3, 20), (4, 16), (2, 24), (5, 18), (3, 11)]:
            _check(cm, m, torch.randn(B, 3, H, H))
    _no_fallback(caught)
    assert _entries(cm) == 2


def test_conv_net_with_batch_norm_dynamic_true_eval():
    torch.manual_seed(0)
    m = conv_net(norm=True).eval()
    cm = tc.compile(m, dynamic=True, options=KERNELS["cpp"])
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        for B, H in [(2, 16), (3, 20), (6, 14), (2, 9)]:
            x = torch.randn(B, 3, H, H)
            torch.testing.assert_close(cm(x), m(x), **TOL)
    _no_fallback(caught)
    assert _entries(cm) == 1


# Training batch norm's variance correction is a SymFloat argument (tc_ir.spec.SizeFloat); a valid
# conv or a max-pool over a symbolic image size gives contiguous strides Max(1, s - 2).
def test_conv_net_with_batch_norm_training():
    torch.manual_seed(0)
    m = conv_net(norm=True)
    cm = tc.compile(m, dynamic=True, options={**KERNELS["cpp"], "fallback": False})
    for B, H in [(2, 16), (3, 20)]:
        _check(cm, m, torch.randn(B, 3, H, H))


def test_conv_net_with_max_pool():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(2), nn.Flatten(1))
    cm = tc.compile(m, dynamic=True, options={**KERNELS["cpp"], "fallback": False})
    for B, H in [(2, 16), (3, 20)]:
        _check(cm, m, torch.randn(B, 3, H, H))


class StridedConv(nn.Module):
    def __init__(self, k: int):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, k, stride=2, padding=1)
        self.conv2 = nn.Conv2d(8, 4, 3, stride=2, padding=1, bias=False)

    def forward(self, x):
        return self.conv2(self.conv1(x).relu()).relu() * 2


@pytest.mark.parametrize("kernels", ["cpp", "triton", CUDA])
def test_a_symbolic_kernel_size_under_floor_division(kernels):
    """Instances of one class with different kernel sizes share ``forward``'s cache, so the second
    size makes the weight's dims symbols: the output width ``floor(-k/2) + 8`` floors a negative
    numerator, which C++ and Triton divide toward zero (-1 for k = 3) and the wrapper toward minus
    infinity (-2). Kernels indexed past the buffers the wrapper sized: a heap corruption (found by
    random conv nets, seeds 2 then 4). Now printed as an exact floor division."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in (1, 3, 5, 3):
            torch.manual_seed(k)
            if kernels == "cuda":  # float64: TF32 convolutions would blur the comparison
                m = StridedConv(k).to("cuda", torch.float64)
                cm = tc.compile(m, options={"symbolic_kernels": True})
            else:
                m = StridedConv(k)
                cm = tc.compile(m, options=KERNELS[kernels])
            p = next(m.parameters())
            for H in (12, 9):
                _check(cm, m, torch.randn(2, 3, H, 12, device=p.device, dtype=p.dtype))
    _no_fallback(caught)


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        T = x.shape[1]
        if T > 8:
            return self.lin(x).relu() * T
        return self.lin(x).tanh()[:, : T // 2 + 1]


def test_a_branch_on_the_length_recompiles_when_it_flips():
    torch.manual_seed(0)
    m = Branchy()
    cm = tc.compile(m, options=KERNELS["cpp"])
    for T in [4, 6, 3, 10, 12, 5, 16, 7]:
        _check(cm, m, torch.randn(2, T, 8))
    assert _entries(cm) == 3  # static T=4, then dynamic T <= 8, then dynamic T > 8


def test_sizes_zero_and_one_are_specialised():
    torch.manual_seed(0)
    m = Block()
    cm = tc.compile(m, dynamic=True, options=KERNELS["cpp"])
    for T in [1, 1, 4, 6]:
        _check(cm, m, torch.randn(2, T, 32))
    assert _entries(cm) == 2
    with torch.no_grad():
        x = torch.randn(2, 0, 32)
        torch.testing.assert_close(cm(x), m(x))


def test_explain_lists_symbolic_sizes_and_their_guards():
    def f(x):
        T = x.shape[1]
        return (x * 2)[:, : T // 2] if T > 4 else x

    x = torch.randn(2, 8)
    tc.mark_dynamic(x, 1, max=64)
    text = str(tc.explain(f, x))
    assert "symbolic sizes: s0 = x.shape[1]" in text, text
    for guard in ["x: Tensor float32[2, s0] stride=(s0, 1) cpu", "x.shape[1] >= 2 (s0: sizes 0 and 1 are specialised)",
                  "x.shape[1] <= 64 (s0: mark_dynamic bounds)", "x.shape[1] > 4 (s0 > 4)"]:
        assert guard in text, text


class SdpaBlock(Block):
    """``Block`` with fused attention: on CUDA torch chooses among flash, memory-efficient and cuDNN."""

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in self.qkv(self.ln1(x)).split(C, dim=2))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("dynamic, mark, expected", [(None, False, 2), (None, True, 1), (True, False, 1)])
def test_fused_attention_over_sequence_lengths(device, dynamic, mark, expected):
    # On CUDA torch chooses the fused kernel (cuDNN, flash, memory-efficient) from the sizes; the
    # choice must not specialise the sequence length.
    torch.manual_seed(0)
    m = SdpaBlock(C=128, nh=2).to(device)
    cm = tc.compile(m, dynamic=dynamic)
    tol = dict(atol=3e-2, rtol=3e-2) if device == "cuda" else TOL
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for T in [64, 96, 128, 200, 256, 384]:
            x = torch.randn(2, T, 128, device=device, requires_grad=True)
            if mark:
                tc.mark_dynamic(x, 1)
            with torch.autocast(device, torch.bfloat16, enabled=device == "cuda"):
                out, ref = cm(x), m(x)
            torch.testing.assert_close(out.float(), ref.float(), **tol)
            g = torch.randn_like(ref)
            got, want = torch.autograd.grad(out, [x, m.qkv.weight], g), torch.autograd.grad(ref, [x, m.qkv.weight], g)
            for a, b in zip(got, want):
                torch.testing.assert_close(a.float(), b.float(), **tol)
    _no_fallback(caught)
    assert _entries(cm) == expected


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_training_batch_norm_after_the_batch_became_dynamic(backend):
    # Eval calls over batches 4, 4, 2 make the batch a symbol; the training entry compiled next
    # traced batch norm's functional op with symbolic sizes, where the meta kernels give no spec:
    # the recorded spec had 3 outputs, the op 5 (IndexError, a fallback to eager).
    torch.manual_seed(0)
    m = conv_net(norm=True)
    cm = tc.compile(m, backend=backend)
    ref = conv_net(norm=True)
    ref.load_state_dict(m.state_dict())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m.eval(), ref.eval()
        with torch.no_grad():
            for batch in (4, 4, 2):
                x = torch.randn(batch, 3, 12, 12)
                torch.testing.assert_close(cm(x), ref(x), **TOL)
        m.train(), ref.train()
        for batch in (4, 3):
            x = torch.randn(batch, 3, 12, 12)
            out, want = cm(x), ref(x)
            torch.testing.assert_close(out, want, **TOL)
            g = torch.randn_like(want)
            got = torch.autograd.grad(out, list(m.parameters()), g)
            expected = torch.autograd.grad(want, list(ref.parameters()), g)
            for a, b in zip(got, expected):
                torch.testing.assert_close(a, b, **TOL)
    _no_fallback(caught)
    for a, b in zip(m.buffers(), ref.buffers()):
        torch.testing.assert_close(a.float(), b.float(), **TOL)
