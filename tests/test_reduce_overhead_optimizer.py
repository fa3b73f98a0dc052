"""The whole training step under ``mode="reduce-overhead"`` (issue 15): ``tc.compile(model)`` and
``tc.compile(opt.step)`` both replay graphs, the optimizer's with parameters, gradients and state
read and written in place. On the CPU: tc_runtime's fake recorder stands in for CUDA graphs (a
replay recomputes into the same output memory and reads the recorded input addresses), so the
runtime's decisions are the GPU's. Every step is compared with an eager twin."""

from __future__ import annotations

import pytest
import torch

import tc
import tc.backends
import tc_runtime
from tc_autograd import runtime
from tc_capture.interp import optimizers
from tc_runtime.testing import FakeCudagraphs

OPTIMIZERS = {
    "adamw": lambda ps, lr: torch.optim.AdamW(ps, lr=lr, weight_decay=0.01, foreach=True),
    "sgd_momentum": lambda ps, lr: torch.optim.SGD(ps, lr=lr, momentum=0.9, foreach=True),
}


@pytest.fixture
def graphs(monkeypatch):
    tc.reset()  # an optimizer compiled by an earlier test would be served from the cache
    fake = FakeCudagraphs()
    monkeypatch.setattr(tc_runtime, "cudagraphify", fake)
    monkeypatch.setattr(tc.backends, "runs_on_cuda", lambda example_inputs: True)
    return fake


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))


def twins(make_opt, lr=0.05):
    torch.manual_seed(0)
    model, ref = mlp(), mlp()
    ref.load_state_dict(model.state_dict())
    return model, ref, make_opt(list(model.parameters()), lr), make_opt(list(ref.parameters()), lr)


class Steps:
    """``tc.compile(opt.step, mode="reduce-overhead")``, noting the graphed callables its calls made."""

    def __init__(self, opt, graphs):
        self.step, self.graphs, self.made = tc.compile(opt.step, mode="reduce-overhead"), graphs, []

    def __call__(self):
        before = len(self.graphs.made)
        self.step()
        self.made += self.graphs.made[before:]

    def states(self):
        return [s for g in self.made for s in g.planner.states.values()]


def train(model, ref, opt, opt_ref, step, steps, schedulers=(), set_to_none=True):
    compiled = tc.compile(model, mode="reduce-overhead")
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(5, 6, generator=g), torch.randn(5, 3, generator=g)
        loss = torch.nn.functional.mse_loss(compiled(x), y)
        loss.backward()
        want = torch.nn.functional.mse_loss(ref(x), y)
        want.backward()
        torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)
        step()
        opt_ref.step()
        for o in (opt, opt_ref):
            o.zero_grad(set_to_none=set_to_none)
        for s in schedulers:
            s.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        for key, value in opt_ref.state[q].items():
            torch.testing.assert_close(opt.state[p][key], value, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_training_step_replays_the_optimizer_graph_in_place(name, graphs):
    """Forward, backward, ``opt.step``, ``zero_grad(set_to_none=True)``: after warm-up the step is
    one replay per call, nothing copied in or out."""
    model, ref, opt, opt_ref = twins(OPTIMIZERS[name])
    step = Steps(opt, graphs)
    before = runtime.COUNTERS["skipped_copies"]
    train(model, ref, opt, opt_ref, step, steps=7)
    recorded = [s for s in step.states() if s.graph is not None]
    assert len(recorded) == 1, step.states()  # the steady step (the first step, which made the state, ran once)
    (state,) = recorded
    assert not [s.fallback for s in step.states() if s.fallback]
    assert state.replays >= 4 and state.eager_calls == 0 and state.blocked == 0
    graph = state.graph
    assert graph.copied == [], graph.copied  # nothing copied in: parameters and state static...
    params = len(list(model.parameters()))
    assert len(graph.in_place) == params  # ...and the gradients read where the backward graph wrote them
    # nothing copied out either: every parameter and state tensor was written at its own address
    assert runtime.COUNTERS["skipped_copies"] - before >= state.replays * params


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_scheduled_float_lr_recompiles(name, graphs):
    """A float lr is a constant of the compiled step, guarded: a scheduler's new value compiles a
    new step (never a replay of the old lr); the parameters match eager's at every step."""
    model, ref, opt, opt_ref = twins(OPTIMIZERS[name])
    schedulers = [torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.1) for o in (opt, opt_ref)]
    step = Steps(opt, graphs)  # the scheduler's wrapper of opt.step, compiled
    train(model, ref, opt, opt_ref, step, steps=8, schedulers=schedulers)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05 * 0.01)
    assert len([s for s in step.states() if s.graph is not None]) >= 2  # a graph per lr value
    assert not [s.fallback for s in step.states() if s.fallback]


def test_scheduled_tensor_lr_is_read_by_the_replays(graphs):
    """A tensor lr (capturable AdamW) is static optimizer state: the scheduler writes it in place
    and the same graph reads the new value at its next replay, no recompile."""
    torch.manual_seed(0)
    model, ref = mlp(), mlp()
    ref.load_state_dict(model.state_dict())
    # capturable needs a CUDA device in eager; compiled code runs its device-side path on the CPU.
    # The eager twin: the single-tensor path, the same arithmetic.
    opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(0.05), foreach=True, capturable=True)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=torch.tensor(0.05), foreach=False)
    schedulers = [torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.1) for o in (opt, opt_ref)]
    step = Steps(opt, graphs)
    train(model, ref, opt, opt_ref, step, steps=7, schedulers=schedulers)
    assert opt.param_groups[0]["lr"].item() == pytest.approx(0.05 * 0.001)
    recorded = [s for s in step.states() if s.graph is not None]
    assert len(recorded) == 1 and recorded[0].replays >= 4 and recorded[0].graph.copied == []


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_gradients_kept_across_steps(name, graphs):
    """``zero_grad(set_to_none=False)``: the gradients are the tensors the first (plain) backward
    made, outside the graphs' memory, which autograd accumulates into from then on: the optimizer
    graph copies them in (only them) at every replay, and the parameters match eager's."""
    model, ref, opt, opt_ref = twins(OPTIMIZERS[name])
    step = Steps(opt, graphs)
    train(model, ref, opt, opt_ref, step, steps=7, set_to_none=False)
    (state,) = [s for s in step.states() if s.graph is not None]
    assert state.replays >= 4 and state.eager_calls == 0 and state.blocked == 0
    assert len(state.graph.copied) == len(list(model.parameters()))


def test_optimizer_alone_copies_only_the_gradients(graphs):
    """Gradients made outside tc's graphs (an eager model) are copied in; parameters and state
    are never copied, and the step matches eager's."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    twin = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt, opt_ref = OPTIMIZERS["adamw"](params, 0.05), OPTIMIZERS["adamw"](twin, 0.05)
    step = Steps(opt, graphs)
    for _ in range(5):
        for p, q in zip(params, twin):
            p.grad = torch.randn(p.shape)
            q.grad = p.grad.clone()
        step()
        opt_ref.step()
        for p, q in zip(params, twin):
            torch.testing.assert_close(p, q)
    ((made, state),) = [(g, s) for g in step.made for s in g.planner.states.values() if s.graph is not None]
    copied = state.graph.copied
    assert state.replays == 2 and len(copied) == len(params)  # the two gradients
    assert set(range(len(state.graph.inputs))) - set(copied) == made.static  # all the rest in place


def test_cpu_step_counters_move_to_the_parameters_device():
    """A non-capturable optimizer's CPU ``step`` of a parameter elsewhere would be read once at
    capture by a CUDA graph: capture moves it to the parameter's device (torch.compile does too)."""
    on_device = torch.nn.Parameter(torch.empty(3, device="meta"))
    on_cpu = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.AdamW([on_device, on_cpu], foreach=True)
    for p in (on_device, on_cpu):
        opt.state[p]["step"] = torch.tensor(4.0)
    optimizers.prepare(opt)
    assert opt.state[on_device]["step"].device.type == "meta"
    assert opt.state[on_cpu]["step"].device.type == "cpu"


def test_all_gpu_groups_become_capturable(monkeypatch):
    """With its steps on a GPU, a non-capturable AdamW's ``adam`` refuses compilation (torch runs
    it as internals: a graph break): capture makes a group capturable when all its parameters are
    on a CUDA-graph device (``meta`` stands in for one here), and leaves mixed and CPU groups."""
    monkeypatch.setattr(optimizers, "CAPTURABLE_DEVICES", ("meta",))
    gpu = [torch.nn.Parameter(torch.empty(3, device="meta")) for _ in range(2)]
    mixed = [torch.nn.Parameter(torch.empty(3, device="meta")), torch.nn.Parameter(torch.zeros(2))]
    cpu = [torch.nn.Parameter(torch.zeros(2))]
    opt = torch.optim.AdamW([{"params": gpu}, {"params": mixed}, {"params": cpu}], foreach=True)
    optimizers.prepare(opt)
    assert [g["capturable"] for g in opt.param_groups] == [True, False, False]
    sgd = torch.optim.SGD(gpu, lr=0.1)  # no capturable option: left alone
    optimizers.prepare(sgd)
    assert "capturable" not in sgd.param_groups[0]


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["adamw", "sgd_momentum"])
def test_cuda_training_step_graphs_the_optimizer(name, monkeypatch):
    """On a GPU: real CUDA graphs for forward, backward and the optimizer step; AdamW's CPU step
    counters moved to the device; parameters equal eager's; the optimizer graph replays."""
    tc.reset()
    made, real = [], tc_runtime.cudagraphify
    monkeypatch.setattr(tc_runtime, "cudagraphify", lambda *a, **k: made.append(real(*a, **k)) or made[-1])
    torch.manual_seed(0)
    model, ref = mlp().cuda(), mlp().cuda()
    ref.load_state_dict(model.state_dict())
    opt, opt_ref = (OPTIMIZERS[name](list(m.parameters()), 0.05) for m in (model, ref))
    compiled, step = tc.compile(model, mode="reduce-overhead"), tc.compile(opt.step, mode="reduce-overhead")
    for _ in range(8):
        x, y = torch.randn(5, 6, device="cuda"), torch.randn(5, 3, device="cuda")
        torch.nn.functional.mse_loss(compiled(x), y).backward()
        torch.nn.functional.mse_loss(ref(x), y).backward()
        step()
        opt_ref.step()
        for o in (opt, opt_ref):
            o.zero_grad(set_to_none=True)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    for p in model.parameters():
        assert all(t.is_cuda for t in opt.state[p].values() if isinstance(t, torch.Tensor))
    states = [s for g in made for s in g.planner.states.values()]
    assert not [s.fallback for s in states if s.fallback]
    optimizer_graphs = [s for g in made[2:] for s in g.planner.states.values() if s.graph is not None]
    assert optimizer_graphs and all(s.replays >= 4 and not s.graph.copied for s in optimizer_graphs)


def test_graphed_forward_tells_its_output_layouts(graphs):
    """tc_autograd compiles the backward for the strides the compiled forward reports
    (``output_strides``); the CUDA-graph wrapper passes them on (a channels-last activation saved
    for the backward would otherwise be copied into another layout at every step)."""
    model, ref, opt, opt_ref = twins(OPTIMIZERS["sgd_momentum"])
    train(model, ref, opt, opt_ref, opt.step, steps=1)
    forward = graphs.made[0]
    assert forward.output_strides is not None and len(forward.output_strides) >= 1


def test_batch_norm_statistics_written_in_place_are_static(graphs):
    """A training forward writes batch norm's running statistics into the module's buffers in
    place (tc_inductor's ``inplace_outputs``): they are static inputs of its graph, which is then
    recorded and replayed (before: "fn writes into non-static inputs", a plain call every step);
    running statistics and parameters match eager's."""
    torch.manual_seed(0)
    make = lambda: torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),  # noqa: E731
                                       torch.nn.Linear(8, 3))
    model, ref = make(), make()
    ref.load_state_dict(model.state_dict())
    opt, opt_ref = (torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, foreach=True) for m in (model, ref))
    train(model, ref, opt, opt_ref, opt.step, steps=5)
    for name, buffer in ref.named_buffers():
        torch.testing.assert_close(dict(model.named_buffers())[name], buffer, rtol=1e-5, atol=1e-6)
    states = [s for g in graphs.made for s in g.planner.states.values()]
    assert not [s.fallback for s in states if s.fallback]
    assert any(s.graph is not None and s.replays >= 2 for s in states)
