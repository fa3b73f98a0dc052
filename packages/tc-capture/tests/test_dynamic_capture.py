"""Dynamic shapes in capture: which dims become symbols, the graphs and specs made over them, the
guards that keep every accepted size right, and recompile counts (a counting tc_ir back end that
runs graphs on tc_ir's interpreter; values always compared with eager at every size)."""

from __future__ import annotations

import logging

import pytest
import sympy
import torch
import torch.nn.functional as F
from helpers import tree_close
from torch import nn

import tc_capture
import tc_ir

S0, S1 = tc_ir.sym("s0"), tc_ir.sym("s1")
LENGTHS = [5, 7, 9, 12, 16, 3, 20, 8, 11, 6]


class Counting:
    def __init__(self):
        self.graphs: list[tc_ir.Graph] = []

    def __call__(self, graph, example_inputs):
        self.graphs.append(graph)
        return lambda *xs: tc_ir.interpret(graph, xs)


def compiled(fn, dynamic=None, limit=16):
    be = Counting()
    return tc_capture.optimize(be, dynamic=dynamic, recompile_limit=limit)(fn), be


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


def _run_lengths(cm, m, lengths, B=2):
    for T in lengths:
        x = torch.randn(B, T, 32)
        tree_close(cm(x), m(x))


@pytest.mark.parametrize("dynamic, mark, expected", [(None, False, 2), (None, True, 1), (True, False, 1),
                                                     (False, False, len(set(LENGTHS)))])
def test_transformer_block_over_sequence_lengths(dynamic, mark, expected):
    torch.manual_seed(0)
    m = Block()
    cm, be = compiled(m, dynamic)
    for T in LENGTHS:
        x = torch.randn(2, T, 32)
        if mark:
            tc_capture.mark_dynamic(x, 1)
        tree_close(cm(x), m(x))
    assert len(be.graphs) == expected
    if expected <= 2:
        graph = be.graphs[-1]
        (x_in,) = [n for n in graph.inputs if n.meta["source"] == "F[1]"]
        t = S1 if dynamic is True else S0
        assert x_in.spec.shape[1] == t and x_in.spec.stride[0] == 32 * t
        views = [n for n in graph.calls if n.target == "view" and len(n.args) == 5]
        assert views and all(list(n.args[1:]) == [x_in.spec.shape[0], t, 4, 8] for n in views), views
        ones = [n for n in graph.calls if n.target is torch.ones]
        assert ones and ones[0].args == (t, t)


def test_dynamic_true_makes_batch_and_length_symbols_with_their_guards():
    cm, be = compiled(Block(), True)
    x = torch.randn(3, 7, 32)
    tree_close(cm(x), cm._orig_mod(x))
    (graph,) = be.graphs
    x_in = next(n for n in graph.inputs if n.meta["source"] == "F[1]")
    assert x_in.spec.shape == (S0, S1, 32)
    params = [n for n in graph.inputs if n is not x_in]
    assert params and all(n.spec.is_static for n in params)  # parameters stay static
    texts = cm._cache.entries[0][0].guard_texts
    assert "x.shape[0] >= 2 (s0: sizes 0 and 1 are specialised)" in texts
    # C was made a symbol too; the layer norms need it to be 32: specialised, by a guard
    assert "x: Tensor float32[s0, s1, s2] stride=(s1*s2, s2, 1) cpu" in texts, texts
    assert "x.shape[2] == 32 (s2 == 32)" in texts, texts
    for B, T in [(2, 5), (5, 3), (4, 16)]:
        x = torch.randn(B, T, 32)
        tree_close(cm(x), cm._orig_mod(x))
    assert len(be.graphs) == 1


def branchy(x):
    T = x.shape[1]
    if T > 8:
        return x * 2, T
    return x - 1, T + 1


def test_a_branch_on_a_size_guards_the_relation_and_recompiles_when_it_flips(caplog):
    cm, be = compiled(branchy, True)
    logger = logging.getLogger("tc.recompiles")
    logger.setLevel(logging.DEBUG)
    try:
        with caplog.at_level(logging.DEBUG, logger="tc.recompiles"):
            for T in [4, 6, 3, 10, 12, 5]:
                x = torch.randn(2, T)
                tree_close(cm(x), branchy(x))
    finally:
        logger.setLevel(logging.WARNING)
    assert len(be.graphs) == 2
    message = [r.getMessage() for r in caplog.records if r.name == "tc.recompiles"][0]
    assert "failed guard: x.shape[1] <= 8 (s1 <= 8)" in message and "actual: x.shape[1]=10" in message, message


def test_sizes_0_and_1_are_static():
    def f(x):
        return x.sum(1) * x.shape[1]

    cm, be = compiled(f, True)
    for T in [1, 1, 0, 4, 5]:
        x = torch.randn(3, T)
        tree_close(cm(x), f(x))
    assert len(be.graphs) == 3  # T=1 and T=0 specialised, then one graph for T >= 2
    assert be.graphs[0].inputs[0].spec.shape == (S0, 1)
    assert be.graphs[1].inputs[0].spec.shape == (3, 0)  # zero-size: static as a whole
    assert be.graphs[2].inputs[0].spec.shape == (S0, S1)


def test_range_over_a_size_specialises_it():
    def f(x):
        out = x[:, 0]
        for i in range(1, x.shape[1]):
            out = out + x[:, i]
        return out

    cm, be = compiled(f, True)
    for T in [3, 3, 4]:
        x = torch.randn(5, T)
        tree_close(cm(x), f(x))
    assert len(be.graphs) == 2
    assert be.graphs[0].inputs[0].spec.shape == (S0, 3)  # the loop's length is baked: T static


def test_arithmetic_on_sizes_stays_symbolic_and_returned_sizes_are_this_calls():
    def f(x):
        B, T = x.shape
        n = max(T // 2, 1) + T % 3 - min(B, 100) * 0
        return x[:, :n].sum(), n, x.size(), T * B

    cm, be = compiled(f, True)
    for B, T in [(2, 5), (3, 9), (4, 14)]:
        x = torch.randn(B, T)
        tree_close(cm(x), f(x))
    assert len(be.graphs) == 1


def test_sizes_formatted_into_strings_are_specialised():
    def f(x):
        return x + 1, f"len={x.shape[0]}"

    cm, be = compiled(f, True)
    for n in [3, 3, 4]:
        x = torch.randn(n)
        tree_close(cm(x), f(x))
    assert len(be.graphs) == 2


def test_equal_sizes_the_program_relies_on_are_guarded():
    def f(x, y):
        return x + y, torch.cat([x, y.new_zeros(3)])

    cm, be = compiled(f, True)
    for n in [4, 6, 9]:
        x, y = torch.randn(n), torch.randn(n)
        tree_close(cm(x, y), f(x, y))
    assert len(be.graphs) == 1
    graph = be.graphs[0]
    assert [n.spec.shape for n in graph.inputs] == [(S0,), (S0,)]  # s1 replaced by s0 once relied on
    x, y = torch.randn(4), torch.randn(5)
    with pytest.raises(RuntimeError):
        cm(x, y)  # the guard fails, the recompile runs eagerly: eager's error


def test_strides_dense_permutations_are_symbolic_other_layouts_specialise():
    def f(x):
        return x * 2

    cm, be = compiled(f, True)
    for T in [4, 6]:
        x = torch.randn(T, 3).t()  # (3, T) with strides (1, 3): a permutation of contiguous
        tree_close(cm(x), f(x))
    assert len(be.graphs) == 1
    assert be.graphs[0].inputs[0].spec.shape == (S0, S1) and be.graphs[0].inputs[0].spec.stride == (1, S0)
    for T in [4, 6]:
        x = torch.randn(3, 2 * T)[:, ::2]  # a constant stride inside, dense outside: symbolic
        tree_close(cm(x), f(x))
    assert len(be.graphs) == 2 and be.graphs[1].inputs[0].spec.stride == (2 * S1, 2)
    for T in [4, 6]:
        x = torch.randn(3, T + 1)[:, :T]  # a gap outside a symbol (stride s1 + 1): static
        tree_close(cm(x), f(x))
    assert len(be.graphs) == 4 and be.graphs[2].inputs[0].spec.is_static


def test_row_slices_of_a_changing_batch_share_one_graph():
    # A mixture-of-experts layer's tokens per expert: ``linear(x[idx], w).chunk(2, -1)`` gives
    # [n, 6] at stride (12, 1) for a new n every call; each resume of the expert loop got a graph
    # per n until the recompile limit, as the layout was not a permutation of contiguous.
    def f(gate, up):
        return F.silu(gate) * up

    cm, be = compiled(f, None)
    for n in [5, 7, 9, 12, 3]:
        gate, up = torch.randn(n, 12).chunk(2, dim=-1)
        tree_close(cm(gate, up), f(gate, up))
    assert len(be.graphs) == 2
    spec = be.graphs[1].inputs[0].spec
    assert isinstance(spec.shape[0], sympy.Symbol) and spec.shape[1:] == (6,) and spec.stride == (12, 1)


def test_mark_dynamic_bounds_are_guarded(caplog):
    cm, be = compiled(lambda x: x.cos(), None)
    for T in [4, 6, 8, 12]:
        x = torch.randn(T)
        tc_capture.mark_dynamic(x, 0, min=2, max=8)
        tree_close(cm(x), x.cos())
    assert len(be.graphs) == 2  # 4..8 in one graph; 12 is outside [2, 8]
    assert be.graphs[0].inputs[0].spec.shape == (S0,)


def test_conv_net_over_batch_and_image_sizes():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(8, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(8, 5)).eval()
    cm, be = compiled(m, None)
    for B, H in [(2, 16), (3, 20), (4, 16), (2, 24), (5, 18), (3, 30)]:
        x = torch.randn(B, 3, H, H)
        tree_close(cm(x), m(x))
    assert len(be.graphs) == 2


def test_explain_lists_the_symbolic_dims():
    x = torch.randn(2, 6, 32)
    tc_capture.mark_dynamic(x, 1)
    report = tc_capture.explain(Block(), x)
    assert report.symbols == {"s0": "x.shape[1]"}
    assert "symbolic sizes: s0 = x.shape[1]" in str(report)


def test_softmax_over_a_symbolic_row_and_a_reshape_with_minus_one():
    def f(x):
        B, T, C = x.shape
        return F.softmax(x.reshape(-1, C), -1).view(B, T, C)[:, -1], x.flatten(1).shape[1]

    cm, be = compiled(f, True)
    for B, T in [(2, 3), (3, 5), (2, 8)]:
        x = torch.randn(B, T, 4)
        tree_close(cm(x), f(x))
    assert len(be.graphs) == 1
    assert any(isinstance(d, sympy.Expr) for n in be.graphs[0].calls if n.target == "reshape" for d in n.args[1:])


SIZE_PROGRAMS = {  # Python on a symbolic size: stays symbolic, or is specialised, never wrong
    "dict key": lambda x: ({x.shape[0]: 1}, x + 1),
    "in tuple": lambda x: (x.shape[0] in (4, 5), x * 2),
    "list times": lambda x: ([0] * x.shape[0], x + 0),
    "true div": lambda x: x * (x.shape[0] / 2),
    "full": lambda x: torch.full((x.shape[0],), x.shape[0] / 2) + x,
    "divmod": lambda x: (divmod(x.shape[0], 3), x + 0),
    "unpack": lambda x: torch.zeros(*x.shape, 2),
    "negative slice": lambda x: x[-x.shape[0] // 2:],
    "arange step": lambda x: torch.arange(0, x.shape[0], 2),
    "split": lambda x: x.split(x.shape[0] // 2),
    "pad to 8": lambda x: F.pad(x, (0, 8 - x.shape[0] % 8)),
    "repeat": lambda x: x.repeat(x.shape[0]),
    "format spec": lambda x: (f"{x.shape[0]:03d}", x + 0),
    "isinstance": lambda x: (isinstance(x.shape[0], int), type(x.shape[0]) is int, x + 0),
    "round": lambda x: (round(x.shape[0] / 3), x + 0),
}


@pytest.mark.parametrize("name", list(SIZE_PROGRAMS))
def test_python_on_sizes_matches_eager_at_every_size(name):
    fn = SIZE_PROGRAMS[name]
    cm, be = compiled(fn, True)
    for n in [4, 5, 6, 8, 9]:
        x = torch.randn(n)
        tree_close(cm(x), fn(x))


# Calls that take sizes as arguments: the symbols go in and come out (one graph at every length),
# however torch implements the op (``constant_pad_nd`` behind ``F.pad`` is a C++ composite that
# reads sizes as ints unless torch's Python dispatcher runs its decomposition).
SIZE_ARG_CALLS = {
    "pad labels (HF loss)": lambda x: F.pad(x, (0, 1), value=-100)[..., 1:].contiguous().view(-1) + 0,
    "constant_pad_nd": lambda x: torch.constant_pad_nd(x, (1, 2, 0, 1), 3.0) * 2,
    "pad by a symbolic amount": lambda x: F.pad(x, (0, x.shape[1] % 4 + 1)) + 1,
    "pad reflect": lambda x: F.pad(x.unsqueeze(0), (2, 2), mode="reflect") + 1,
    "pad replicate": lambda x: F.pad(x.unsqueeze(0), (1, 3), mode="replicate") + 1,
    "arange": lambda x: torch.arange(x.shape[1]) + x.sum(),
    "new_zeros": lambda x: x.new_zeros((x.shape[0], x.shape[1])) + x,
    "new_ones of shape": lambda x: x.new_ones(x.shape) + x,
    "expand": lambda x: x[:, :, None].expand(x.shape[0], x.shape[1], 3) * 2,
    "view": lambda x: x.view(x.shape[0], x.shape[1], -1) + 1,
    "reshape": lambda x: x.reshape(x.shape[0] * x.shape[1]) + 1,
    "narrow": lambda x: x.narrow(1, 1, x.shape[1] - 1) + 1,
    "repeat": lambda x: x.repeat(1, 2) + 1,
    "full": lambda x: torch.full((x.shape[1],), 2.0) + x,
    "zeros": lambda x: torch.zeros(x.shape[0], x.shape[1] + 1) + x.sum(),
    "causal mask": lambda x: torch.triu(torch.full((x.shape[1], x.shape[1]), float("-inf")), 1) + x[0],
    "split sizes": lambda x: x.split([1, x.shape[1] - 1], dim=1)[1] + 1,
    "cat with new_zeros": lambda x: torch.cat([x, x.new_zeros(x.shape[0], 1)], 1) + 1,
    "index with arange": lambda x: x[:, torch.arange(x.shape[1] - 1)] + 1,
    "unflatten": lambda x: x.flatten().unflatten(0, (x.shape[0], x.shape[1])) + 1,
}


@pytest.mark.parametrize("dynamic, most", [(True, 1), (None, 2)])
@pytest.mark.parametrize("name", list(SIZE_ARG_CALLS))
def test_size_arguments_keep_their_symbols(name, dynamic, most):
    fn = SIZE_ARG_CALLS[name]
    cm, be = compiled(fn, dynamic)
    for T in [5, 7, 9, 12, 16]:
        x = torch.randn(2, T, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        out, ref = cm(x), fn(x_ref)
        tree_close(out, ref)
        if out.is_floating_point():
            out.sum().backward()
            ref.sum().backward()
            tree_close(x.grad, x_ref.grad)
    assert len(be.graphs) == most, [str(g) for g in be.graphs]


def test_pad_of_integer_labels_keeps_the_symbol_in_the_graph():
    cm, be = compiled(SIZE_ARG_CALLS["pad labels (HF loss)"], True)
    for T in [8, 13, 24]:
        labels = torch.randint(0, 100, (2, T))
        tree_close(cm(labels), SIZE_ARG_CALLS["pad labels (HF loss)"](labels))
    assert len(be.graphs) == 1
    (pad,) = [n for n in be.graphs[0].calls if n.spec is not None and n.spec.shape[-1] == S1 + 1]
    assert pad.spec.shape == (S0, S1 + 1)
