"""The trace cache: a variant traced once is read back from the store, not traced again.

A plain dict stands in for the artifact store (the cache only needs ``get``/``put``); tests
across processes, through the umbrella and ``TC_CACHE_DIR``, are in ``tests/test_warm_start.py``.
"""

from __future__ import annotations

import copy

import pytest
import torch
from autograd_tracer import module_inputs, trace_module

import tc_autograd
from tc_autograd import cache as trace_cache


class DictStore:
    def __init__(self):
        self.data: dict[tuple[str, str], bytes] = {}
        self.gets = self.hits = self.puts = 0

    def get(self, kind: str, key: str) -> bytes | None:
        self.gets += 1
        found = self.data.get((kind, key))
        self.hits += found is not None
        return found

    def put(self, kind: str, key: str, data: bytes) -> None:
        self.puts += 1
        self.data[(kind, key)] = data


class Block(torch.nn.Module):
    def __init__(self, act: type = torch.nn.ReLU):
        super().__init__()
        self.lin, self.bn, self.act = torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), act()
        self.drop = torch.nn.Dropout(0.25)

    def forward(self, x):
        return self.drop(self.act(self.bn(self.lin(x))))


def compile_block(module: torch.nn.Module, store: DictStore, grad: bool):
    """Trace ``module`` to a torch-level graph and aot it with ``store`` as the trace cache."""
    x = torch.randn(4, 8, requires_grad=grad)
    graph = trace_module(copy.deepcopy(module), [x])
    state, _ = module_inputs(module)
    with torch.set_grad_enabled(grad):
        fn = tc_autograd.aot(graph, [x, *state], cache=store)
    return fn, state


def texts(fn) -> list[str]:
    graphs = (fn.forward_graph, fn.backward_graph, fn.inference_graph)
    return [g.format(data=False) for g in graphs if g is not None]


def reference(module: torch.nn.Module, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Eager's output with the compiled call's dropout mask (read off its output)."""
    kept = (out != 0).to(out.dtype)
    return module.act(module.bn(module.lin(x))) * kept / 0.75


@pytest.mark.parametrize("train", [True, False])
def test_a_warm_store_gives_the_same_graphs_and_eager_results(train):
    torch.manual_seed(0)
    module = Block().train(train)
    store = DictStore()
    cold, _ = compile_block(module, store, grad=train)
    assert store.puts == 1 and store.hits == 0
    eager, mine = copy.deepcopy(module), copy.deepcopy(module)
    warm, state = compile_block(mine, store, grad=train)
    assert store.hits == 1 and store.puts == 1, "the second compile must read the entry back"
    assert texts(warm) == texts(cold)
    x = torch.randn(4, 8)
    xe, xm = x.clone().requires_grad_(train), x.clone().requires_grad_(train)
    with torch.set_grad_enabled(train):
        got = warm(xm, *state)
        want = reference(eager, xe, got.detach()) if train else eager(xe)
    torch.testing.assert_close(got, want)
    for (name, b), mb in zip(eager.named_buffers(), mine.buffers()):
        torch.testing.assert_close(mb, b, msg=f"buffer {name}")
    if train:
        before_dropout = eager.act(eager.bn.eval()(eager.lin(x)))
        assert (got == 0).sum() > (before_dropout == 0).sum(), "dropout still drops"
        eager.bn.train()
        cot = torch.randn_like(got)
        (got * cot).sum().backward()
        (want * cot).sum().backward()
        torch.testing.assert_close(xm.grad, xe.grad)
        for (name, p), mp in zip(eager.named_parameters(), mine.parameters()):
            torch.testing.assert_close(mp.grad, p.grad, msg=f"grad of {name}")
        assert warm.joint_graph is not None and warm.saved_summary().startswith("saved for backward:")


@pytest.mark.parametrize("damage", [b"", b"{not json", b'{"format": 1}', "truncate", "bad graph"])
def test_a_damaged_entry_is_a_miss_and_is_traced_again(damage):
    torch.manual_seed(0)
    module = Block().train()
    store = DictStore()
    cold, _ = compile_block(module, store, grad=True)
    (key, data), = store.data.items()
    if damage == "truncate":
        damage = data[: len(data) // 2]
    elif damage == "bad graph":
        head, _, tail = data.rpartition(b"aten.")  # in the backward graph, the last one stored
        damage = head + b"aten.no_such_op_" + tail
    store.data[key] = damage
    again, state = compile_block(module, store, grad=True)
    assert store.puts == 2, "the entry is traced again and rewritten"
    assert texts(again) == texts(cold)
    out = again(torch.randn(4, 8, requires_grad=True), *state)
    out.sum().backward()


def test_a_changed_model_misses():
    torch.manual_seed(0)
    store = DictStore()
    compile_block(Block(torch.nn.ReLU).train(), store, grad=True)
    compile_block(Block(torch.nn.GELU).train(), store, grad=True)
    assert store.hits == 0 and store.puts == 2


def test_the_graph_name_is_not_in_the_key():
    # capture numbers graphs per process: a warm process may call the same graph forward_3
    torch.manual_seed(0)
    store = DictStore()
    module = Block().train()
    x = torch.randn(4, 8, requires_grad=True)
    state, _ = module_inputs(module)
    for name in ("forward_0", "forward_3"):
        graph = trace_module(copy.deepcopy(module), [x])
        graph.name = name
        tc_autograd.aot(graph, [x, *state], cache=store)
    assert store.hits == 1 and store.puts == 1


def test_grad_pattern_and_decompositions_are_in_the_key():
    torch.manual_seed(0)
    store = DictStore()
    module = Block().train()
    compile_block(module, store, grad=True)
    compile_block(module, store, grad=False)
    assert store.hits == 0 and store.puts == 2
    x = torch.randn(4, 8)
    graph = trace_module(copy.deepcopy(module), [x])
    state, _ = module_inputs(module)
    from torch._decomp import get_decompositions

    tc_autograd.aot(graph, [x, *state], cache=store, decompositions=get_decompositions([torch.ops.aten.relu]))
    assert store.hits == 0 and store.puts == 3


def test_graphs_holding_tensors_are_not_cached():
    import tc_ir

    g = tc_ir.Graph()
    x = g.input("x", tc_ir.TensorSpec((3,), torch.float32))
    g.output(g.call(torch.add, x, g.param("w", torch.ones(3))))
    store = DictStore()
    fn = tc_autograd.aot(g, [torch.randn(3)], cache=store)
    assert store.gets == 0 and store.puts == 0
    torch.testing.assert_close(fn(torch.zeros(3)), torch.ones(3))
    assert trace_cache.trace_key(g, [torch.randn(3)], "inference", {}) is None
