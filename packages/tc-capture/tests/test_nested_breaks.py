"""Graph breaks at any depth: a break inside an inlined call compiles the caller up to the call,
the callee as frames of its own (graphs around its break), then the caller's rest.

Each case runs eagerly and compiled on fresh inputs, twice with different values: results,
gradients, printed output (order included) equal; graph counts say every region was compiled.
"""

import functools
import warnings

import pytest
import torch
import torch.nn as nn

import tc_capture


def counting_backend():
    graphs = []

    def backend(graph, example_inputs):
        graphs.append(graph)
        return tc_capture.interpret_backend(graph, example_inputs)

    return backend, graphs


def check(fn, make_inputs, capsys, calls=2, compiled=None):
    """fn compiled vs eager on ``calls`` fresh inputs: outputs, grads, prints. Returns the graphs."""
    backend, graphs = counting_backend()
    compiled = compiled or tc_capture.optimize(backend)(fn)
    for _ in range(calls):
        inputs = make_inputs()
        mine = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
        expected = fn(*inputs)
        eager_out = capsys.readouterr().out
        got = compiled(*mine)
        got_out = capsys.readouterr().out
        assert got_out == eager_out
        torch.testing.assert_close(got, expected)
        expected.sum().backward()
        got.sum().backward()
        for a, b in zip(inputs, mine):
            if a.requires_grad:
                torch.testing.assert_close(b.grad, a.grad)
    return graphs


def rand(*shape):
    return lambda: [torch.randn(*shape, requires_grad=True)]


# ---- depth 1, 2, 3 -----------------------------------------------------------------------------
def d3(x):
    x = x.sin() + 1
    print("d3", x.shape[0])
    return x * 2


def d2(x):
    return d3(x.cos()) - 1


def d1(x):
    return d2(x + 3) / 2


def top3(x):
    return d1(x * 1.5).exp()


def top2(x):
    return d2(x * 1.5).exp()


def top1(x):
    return d3(x * 1.5).exp()


@pytest.mark.parametrize("fn, regions", [(top1, 4), (top2, 6), (top3, 8)])
def test_break_at_depth(fn, regions, capsys):
    graphs = check(fn, rand(5), capsys)
    # every frame on the path compiles a graph before and after its call/break: nothing eager
    assert len(graphs) == regions
    assert all(g.calls for g in graphs)


def test_explain_lists_the_break_once():
    r = tc_capture.explain(top3, torch.randn(4))
    assert r.graph_count == 8
    assert r.graph_break_count == 1
    assert "print" in r.break_reasons[0] or "builtin" in r.break_reasons[0]


# ---- in a loop -------------------------------------------------------------------------------
def step(x, i):
    x = x * 1.1 + i
    print("step", i)
    return x.tanh()


def looped(x):
    for i in range(3):
        x = step(x, i) + x
    return x.sum(-1)


def test_break_in_a_loop(capsys):
    graphs = check(looped, rand(2, 3), capsys)
    assert graphs  # the callee's regions compiled once, shared by every iteration
    n = len(graphs)
    check(looped, rand(2, 3), capsys)
    assert len(graphs) == n


# ---- modules ---------------------------------------------------------------------------------
class Child(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x).relu()
        print("child", h.shape)
        return h * 3


class Parent(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.child, self.b = nn.Linear(4, 4), Child(), nn.Linear(4, 2)

    def forward(self, x):
        return self.b(self.child(self.a(x)).sigmoid())


def test_break_in_a_child_module_forward(capsys):
    model = Parent()
    backend, graphs = counting_backend()
    compiled = tc_capture.optimize(backend)(model)
    for _ in range(2):
        x = torch.randn(3, 4)
        expected = model(x)
        eager_out = capsys.readouterr().out
        got = compiled(x)
        assert capsys.readouterr().out == eager_out
        torch.testing.assert_close(got, expected)
        ge = torch.autograd.grad(expected.sum(), list(model.parameters()))
        gc = torch.autograd.grad(got.sum(), list(model.parameters()))
        for a, b in zip(ge, gc):
            torch.testing.assert_close(b, a)
    # parent: a(x) | child(...) | rest; child: lin+relu | *3
    assert len(graphs) == 4


def test_child_module_hooks_run_around_its_compiled_forward(capsys):
    model = Parent()
    seen = []
    model.child.register_forward_pre_hook(lambda m, args: seen.append("pre") or (args[0] * 2,))
    model.child.register_forward_hook(lambda m, args, out: seen.append("post") or out + 1)
    x = torch.randn(3, 4)
    expected = model(x)
    capsys.readouterr()
    backend, graphs = counting_backend()
    got = tc_capture.optimize(backend)(model)(x)
    torch.testing.assert_close(got, expected)
    assert seen == ["pre", "post", "pre", "post"]
    assert len(graphs) == 4


class CallBreaks:
    """A callable object whose Python ``__call__`` breaks."""

    def __call__(self, x):
        y = x.sin()
        print("call")
        return y + 1


def test_break_in_a_callable_objects_call(capsys):
    obj = CallBreaks()
    graphs = check(lambda x: obj(x * 2) * 3, rand(4), capsys)
    assert len(graphs) == 4


# ---- decorator wrappers ----------------------------------------------------------------------
def deco(fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    return wrapper


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, y):
        h = self.lin(x).relu()
        loss = nn.CrossEntropyLoss()(h, y)  # a stateless module built in forward: captured
        print(end="")  # a break
        return h * 2, loss


class Wrapped(Base):
    @deco
    def forward(self, x, y):
        return super().forward(x, y)


@pytest.mark.parametrize("cls", [Base, Wrapped])
def test_break_under_a_decorator_wrapper(cls):
    model = cls()
    backend, graphs = counting_backend()
    compiled = tc_capture.optimize(backend)(model)
    for _ in range(2):
        x, y = torch.randn(3, 4), torch.randint(0, 4, (3,))
        (h0, l0), (h1, l1) = model(x, y), compiled(x, y)
        torch.testing.assert_close(h1, h0)
        torch.testing.assert_close(l1, l0)
        g0 = torch.autograd.grad(l0 + h0.sum(), list(model.parameters()))
        g1 = torch.autograd.grad(l1 + h1.sum(), list(model.parameters()))
        for a, b in zip(g0, g1):
            torch.testing.assert_close(b, a)
    assert len(graphs) >= 2  # forward's graphs around the break, also under the wrapper


# ---- closures, exceptions, generators ---------------------------------------------------------
def with_inner(x, k):
    def inner(y):
        y = y * k
        print("inner", k)
        return y.cos()

    return inner(x + 1) - 1


def test_a_closure_made_per_call_is_one_cached_frame(capsys):
    backend, graphs = counting_backend()
    compiled = tc_capture.optimize(backend)(with_inner)
    for k in (2.0, 2.0, 2.0):
        x = torch.randn(3)
        expected = with_inner(x, k)
        eager_out = capsys.readouterr().out
        torch.testing.assert_close(compiled(x, k), expected)
        assert capsys.readouterr().out == eager_out
    # the callee (a new function object on every call) is one frame cache, keyed by its code.
    # (with_inner's own region after the call still guards the local ``inner`` by identity.)
    assert len([g for g in graphs if g.name.startswith("inner")]) == 2
    x = torch.randn(3)  # a different closed-over value: guarded, recompiles, right answer
    torch.testing.assert_close(compiled(x, 5.0), with_inner(x, 5.0))


class MyError(Exception):
    pass


def raises_after_break(x):
    y = x + 1
    print("before")
    if y.sum() > -1e9:
        raise MyError("from the callee")
    return y


def calls_raiser(x):
    return raises_after_break(x * 2) + 1


def test_users_exception_from_a_nested_frame_is_unchanged(capsys):
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(calls_raiser)
    with pytest.raises(MyError, match="from the callee") as info:
        compiled(torch.randn(3))
    assert type(info.value) is MyError
    assert capsys.readouterr().out == "before\n"


def caught(x):
    try:
        return raises_after_break(x) * 2
    except MyError:
        return x - 1


def test_users_exception_caught_by_the_caller(capsys):
    check(caught, rand(3), capsys)


def gen(x):
    for i in range(3):
        print("yield", i)
        yield x * i


def consumes_generator(x):
    return sum(gen(x.sin())) + 1


def test_break_inside_a_generator(capsys):
    check(consumes_generator, rand(3), capsys)


# ---- the warning -----------------------------------------------------------------------------
def all_eager(x):
    print("a")
    y = x.item()
    print("b")
    return y


def test_a_function_capturing_no_graph_warns_once(capsys):
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(all_eager)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        compiled(torch.tensor(1.0))
        compiled(torch.tensor(2.0))
    mine = [str(m.message) for m in w if "captured no graph" in str(m.message)]
    assert len(mine) == 1
    assert "test_nested_breaks.py" in mine[0] and "item" in mine[0]


def test_a_function_with_graphs_does_not_warn(capsys):
    compiled = tc_capture.optimize(tc_capture.interpret_backend)(top2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        compiled(torch.randn(3))
    assert not [m for m in w if "graph breaks" in str(m.message)]


# ---- tiny HF models trained with labels= (the loss, and its breaks, inside a wrapped forward) ----
def _tiny_hf(name):
    transformers = pytest.importorskip("transformers")
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return transformers.GPT2LMHeadModel(cfg)
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                  vocab_size=100, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    return transformers.BertForMaskedLM(cfg)


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_tiny_hf_model_with_labels_captures_graphs(name):
    model = _tiny_hf(name).train()
    backend, graphs = counting_backend()
    compiled = tc_capture.optimize(backend)(model)
    params = [p for p in model.parameters() if p.requires_grad]
    for _ in range(2):
        ids, labels = torch.randint(1, 100, (2, 16)), torch.randint(1, 100, (2, 16))
        expected = model(input_ids=ids, labels=labels)
        got = compiled(input_ids=ids, labels=labels)
        torch.testing.assert_close(got.loss, expected.loss)
        torch.testing.assert_close(got.logits, expected.logits)
        g0 = torch.autograd.grad(expected.loss, params, allow_unused=True)
        g1 = torch.autograd.grad(got.loss, params, allow_unused=True)
        for a, b in zip(g0, g1):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)
    assert len(graphs) >= 1  # was 0: the break inside the decorated forward ran it all eagerly
    assert sum(len(g.calls) for g in graphs) > 20  # the model's body, not a sliver of it
