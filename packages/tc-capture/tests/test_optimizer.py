"""Optimizer steps (``torch.optim``) captured through ``tc_capture.optimize``, against eager.

Each test trains two copies of the same parameters for 5 steps with the same gradients, one
with ``opt.step()`` and one with the compiled ``opt.step``, an LR scheduler halving ``lr`` every
2 steps on both, and compares parameters and optimizer state. The first step creates the state
(``state["step"]``, momentum buffers, ``exp_avg``...) inside the graph: the new tensors are graph
outputs stored into ``opt.state[p]`` after the graph runs. Later steps read that state as graph
inputs and update it in place. ``lr`` is a Python float in ``param_groups``, guarded by value:
each new value recompiles (3 values in 5 steps here, well under the limit of 8).
"""

from __future__ import annotations

import pytest
import torch

import tc_capture
from tc_capture.api import interpret_backend

OPTIMIZERS = {
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "sgd_momentum_foreach": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "sgd_weight_decay_nesterov": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                                            weight_decay=1e-2),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=False),
    "adamw_foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=True),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True, weight_decay=1e-2),
}


def _params():
    return [torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True),
            torch.randn(2, 4, requires_grad=True)]


def _twins(make, scheduler: bool):
    ps = _params()
    qs = [p.detach().clone().requires_grad_() for p in ps]
    eager, compiled = make(ps), make(qs)
    scheds = [torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5) for o in (eager, compiled)] \
        if scheduler else []
    return ps, qs, eager, compiled, scheds


def _train(make, steps=5, scheduler=True):
    torch.manual_seed(0)
    ps, qs, eager, opt, scheds = _twins(make, scheduler)
    graphs = []

    def backend(g, example_inputs):
        graphs.append(g)
        return interpret_backend(g, example_inputs)

    step = tc_capture.optimize(backend)(opt.step)
    for _ in range(steps):
        for p, q in zip(ps, qs):
            grad = torch.randn_like(p)
            p.grad, q.grad = grad.clone(), grad.clone()
        eager.step()
        step()
        for s in scheds:
            s.step()
    return ps, qs, eager, opt, graphs


def _assert_same(ps, qs, eager, opt):
    for p, q in zip(ps, qs):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=0)
    assert len(opt.state) == len(eager.state)
    for p, q in zip(ps, qs):
        s_eager, s_comp = eager.state[p], opt.state[q]
        assert list(s_comp) == list(s_eager)
        for key, v in s_eager.items():
            if isinstance(v, torch.Tensor):
                assert s_comp[key].dtype == v.dtype and s_comp[key].device == v.device, key
                torch.testing.assert_close(s_comp[key], v, atol=1e-6, rtol=0)
            else:
                assert s_comp[key] == v, key


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_matches_eager(name):
    ps, qs, eager, opt, graphs = _train(OPTIMIZERS[name])
    _assert_same(ps, qs, eager, opt)
    # One graph per distinct lr (0.1, 0.05, 0.025 in 5 steps), plus the first step's (state
    # created; its `p not in state` guards fail afterwards). Plain SGD keeps no state.
    assert len(graphs) == (3 if name == "sgd" else 4)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_step_is_one_graph(name):
    """After the first step created the state: one graph, no breaks, in-place updates kept."""
    torch.manual_seed(0)
    opt = OPTIMIZERS[name](_params())
    for p in opt.param_groups[0]["params"]:
        p.grad = torch.randn_like(p)
    first = tc_capture.explain(opt.step)
    assert (first.graph_count, first.graph_break_count) == (1, 0), str(first)
    again = tc_capture.explain(opt.step)
    assert (again.graph_count, again.graph_break_count) == (1, 0), str(again)
    graph = tc_capture.capture(opt.step).graphs[0]
    targets = {str(getattr(n.target, "__name__", n.target)) for n in graph.nodes if n.op == "call"}
    assert any(t.endswith("_") for t in targets), targets  # parameters updated in place
    # step()'s no_grad for its whole body runs around the graph, not inside it
    assert "_set_grad_enabled" not in targets and torch.is_grad_enabled()


def test_first_step_creates_state_in_the_graph():
    torch.manual_seed(0)
    ps = _params()
    opt = torch.optim.AdamW(ps, lr=1e-2)
    for p in ps:
        p.grad = torch.randn_like(p)
    r = tc_capture.capture(opt.step)
    assert len(r.graphs) == 1 and not r.breaks
    assert all(set(opt.state[p]) == {"step", "exp_avg", "exp_avg_sq"} for p in ps)
    assert any("not a key of" in g for g in r.guards)


def test_state_is_read_and_guarded_by_membership():
    torch.manual_seed(0)
    ps = _params()
    opt = torch.optim.SGD(ps, lr=0.1, momentum=0.9)
    for p in ps:
        p.grad = torch.randn_like(p)
    opt.step()
    r = tc_capture.capture(opt.step)
    assert any(" is a key of " in g for g in r.guards)
    assert any("lr" in g and "0.1" in g for g in r.guards)  # hyper-parameters guarded by value


def test_missing_grad_is_skipped_and_guarded():
    """A parameter whose ``.grad`` is ``None`` is skipped, as in eager; the guard sees it."""
    torch.manual_seed(0)
    ps, qs, eager, opt, _ = _twins(OPTIMIZERS["adamw"], scheduler=False)
    step = tc_capture.optimize(interpret_backend)(opt.step)
    for i in range(3):
        for j, (p, q) in enumerate(zip(ps, qs)):
            grad = torch.randn_like(p) if (i + j) % 3 else None
            p.grad, q.grad = grad, (grad.clone() if grad is not None else None)
        eager.step()
        step()
    _assert_same(ps, qs, eager, opt)


def test_hooks_run():
    torch.manual_seed(0)
    ps = _params()
    opt = torch.optim.SGD(ps, lr=0.1)
    calls = []
    opt.register_step_pre_hook(lambda o, a, k: calls.append("pre"))
    opt.register_step_post_hook(lambda o, a, k: calls.append("post"))
    for p in ps:
        p.grad = torch.randn_like(p)
    tc_capture.optimize(interpret_backend)(opt.step)()
    assert calls == ["pre", "post"]
