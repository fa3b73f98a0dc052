"""``torch.compile(model, backend="tc")`` over many sizes: Dynamo's symbolic graphs (SymInt
placeholders, fake values with symbolic sizes) compiled by tc, values and gradients vs eager.

Each test runs the same model eagerly and compiled on fresh random inputs of ≥ 10 sizes and
compares outputs, input gradients and parameter gradients; it also counts how many times tc
traced (tc_autograd) and how many graphs Dynamo handed over, so a per-size recompile shows.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import tc.dynamo
import tc_autograd.api

TOL = dict(atol=2e-5, rtol=2e-4)


class Block(torch.nn.Module):
    """A pre-norm transformer block (causal SDPA, GELU MLP)."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.head = torch.nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.c1(x))
        h = F.max_pool2d(F.relu(self.c2(h)), 2)
        return self.head(h.mean(dim=(2, 3)))


@pytest.fixture
def traces(monkeypatch):
    """How many variants tc_autograd traced (one per compile of a graph for a grad pattern)."""
    count = {"n": 0}
    real = tc_autograd.api.Compiled.__init__

    def counting(self, *args, **kwargs):
        count["n"] += 1
        real(self, *args, **kwargs)

    monkeypatch.setattr(tc_autograd.api.Compiled, "__init__", counting)
    torch._dynamo.reset()
    yield count
    torch._dynamo.reset()


def _grads(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad for p in module.parameters()]


def _check_sizes(model: torch.nn.Module, make_input, sizes, *, dynamic=None) -> None:
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend="tc", dynamic=dynamic)
    for size in sizes:
        x = make_input(size)
        x_ref = x.detach().clone().requires_grad_()
        x.requires_grad_()
        out, want = compiled(x), ref(x_ref)
        torch.testing.assert_close(out, want, **TOL, msg=lambda m, size=size: f"size {size}: forward: {m}")
        cotangent = torch.randn_like(want)
        out.backward(cotangent)
        want.backward(cotangent)
        torch.testing.assert_close(x.grad, x_ref.grad, **TOL, msg=lambda m, size=size: f"size {size}: input grad: {m}")
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            where = f"size {size}: grad of {name}"
            torch.testing.assert_close(p.grad, q.grad, **TOL, msg=lambda m, where=where: f"{where}: {m}")
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)


SEQ_LENGTHS = [5, 7, 12, 9, 16, 3, 31, 8, 20, 11, 64]


def test_transformer_block_over_sequence_lengths(traces):
    torch.manual_seed(0)
    _check_sizes(Block(), lambda t: torch.randn(2, t, 32), SEQ_LENGTHS)
    # Dynamo: a static graph for the first length, then one symbolic graph for all others.
    assert traces["n"] <= 2, f"tc traced {traces['n']} times over {len(SEQ_LENGTHS)} lengths"


def test_transformer_block_dynamic_true_traces_once(traces):
    torch.manual_seed(1)
    _check_sizes(Block(), lambda t: torch.randn(3, t, 32), SEQ_LENGTHS, dynamic=True)
    assert traces["n"] == 1, f"tc traced {traces['n']} times"


def test_convnet_over_batch_sizes_and_images(traces):
    torch.manual_seed(2)
    sizes = [2, 3, 5, 4, 7, 6, 9, 8, 11, 15]
    model = ConvNet()
    _check_sizes(model, lambda b: torch.randn(b, 3, 16, 16), sizes)
    assert traces["n"] <= 2, f"tc traced {traces['n']} times over {len(sizes)} batch sizes"
    # Eager's CPU convolution picks its kernel by batch size (>= 16 goes another way): the trace
    # guarded on it (s < 16), so a batch of 16 or more is traced again, once.
    _check_sizes(model, lambda b: torch.randn(b, 3, 16, 16), [16, 24, 17])
    assert traces["n"] <= 3, traces["n"]
    _check_sizes(ConvNet(), lambda s: torch.randn(2, 3, s, s), [8, 12, 16, 20, 24, 10, 14, 32, 18, 28])


def test_per_shape_specialisation_when_the_symbolic_compile_fails(traces, monkeypatch):
    """A back end refusing symbolic graphs: each new shape compiles a static copy, still right."""
    real = tc.dynamo.inductor

    def static_only(graph, example_inputs, options=None):
        if tc.dynamo.is_symbolic(graph):
            raise NotImplementedError("symbolic sizes")
        return real(graph, example_inputs, options)

    monkeypatch.setattr(tc.dynamo, "inductor", static_only)
    torch.manual_seed(3)
    lengths = [5, 7, 12, 9, 7, 12]
    _check_sizes(Block(), lambda t: torch.randn(2, t, 32), lengths)
    assert traces["n"] == len(set(lengths)), traces["n"]  # one per distinct shape, reused after


def test_size_guards_retrace_when_a_relation_breaks(traces):
    """A graph whose trace relies on a relation between sizes (two lengths equal): Dynamo's guard
    and tc's own guards keep other shapes from running a graph traced for equal lengths."""

    def f(x, y):
        return (x[:, : y.shape[1]] * y).sum(-1)

    compiled = torch.compile(f, backend="tc", dynamic=True)
    for a, b in [(6, 6), (9, 9), (9, 4), (12, 5), (12, 12)]:
        x, y = torch.randn(2, a), torch.randn(2, b)
        torch.testing.assert_close(compiled(x, y), f(x, y))


def test_hf_variable_length_training_matches_eager(traces):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=97, n_positions=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(4)
    model = transformers.GPT2LMHeadModel(config).train()
    ref, exact = copy.deepcopy(model), copy.deepcopy(model).double()
    compiled = torch.compile(model, backend="tc")
    models = (model, ref, exact)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in models]
    for step, length in enumerate([8, 12, 16, 9, 24, 13, 32, 10]):
        ids = torch.randint(0, 97, (2, length))
        loss = compiled(input_ids=ids, labels=ids).loss
        loss_ref = ref(input_ids=ids, labels=ids).loss
        torch.testing.assert_close(loss, loss_ref, atol=1e-5, rtol=1e-5, msg=lambda m, step=step: f"step {step}: loss: {m}")
        (loss + loss_ref + exact(input_ids=ids, labels=ids).loss).backward()
        for opt in opts:
            opt.step()
            opt.zero_grad()
    # Eight AdamW steps turn rounding into ~lr for parameters whose gradient is near zero (Adam
    # divides by its size), so tc's float32 run and eager's are both judged against float64 eager:
    # tc no further from it than eager's own float32 run (with room for one such parameter)
    for (name, p), q, e in zip(model.named_parameters(), ref.parameters(), exact.parameters()):
        mine, eagers = (p.double() - e).abs().max().item(), (q.double() - e).abs().max().item()
        assert mine <= 2 * eagers + 2e-5, f"parameter {name}: {mine:.2e} from float64 eager (eager float32: {eagers:.2e})"
