"""``tc.compile(opt.step)`` for foreach optimizers as fused multi-tensor kernels (issue 15).

Each case steps a compiled foreach optimizer and an eager twin 4 times over parameters of mixed
shapes (a 1-element, a zero-size, a transposed one among them), fresh gradients each step, and
compares parameters and optimizer state after every step, on the C++ back end and on Triton
(interpreted). The structural test counts the kernels and extern calls of the compiled step:
a few, whatever the number of parameters, and no per-parameter copy."""

from __future__ import annotations

import pytest
import torch

import tc
import tc_inductor
from tc_autograd import runtime

OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.01, foreach=True),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.05, foreach=True),
    "adam_amsgrad_wd": lambda ps: torch.optim.Adam(ps, lr=0.05, weight_decay=0.1, amsgrad=True, foreach=True),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, foreach=True),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True),
    "sgd_nesterov_wd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01,
                                                  foreach=True),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, foreach=True),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=0.01, foreach=True),
    "rmsprop_centered_momentum": lambda ps: torch.optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True,
                                                                foreach=True),
}
SHAPES = [(3, 5), (7,), (1,), (0, 4), (2, 3, 4), (6, 2), (33,)]


def _params(seed: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in SHAPES]
    params.append(torch.nn.Parameter(torch.randn(4, 3, generator=g).t()))  # non-contiguous
    return params


def _step_and_compare(make, options: dict, steps: int = 4) -> None:
    ref, ours = _params(0), _params(0)
    opt_ref, opt = make(ref), make(ours)
    step = tc.compile(opt.step, options={**options, "fallback": False})
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for a, b in zip(ref, ours):
            grad = torch.randn(a.shape, generator=g)
            a.grad, b.grad = grad.clone(), grad.clone()
        opt_ref.step()
        step()
        for a, b in zip(ref, ours):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
        for a, b in zip(ref, ours):
            for key, value in opt_ref.state[a].items():
                torch.testing.assert_close(opt.state[b][key], value, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_compiled_foreach_step_matches_eager_cpp(name):
    _step_and_compare(OPTIMIZERS[name], {"backend": "cpp"})


@pytest.mark.parametrize("name", ["adamw", "sgd_nesterov_wd", "rmsprop"])
def test_compiled_foreach_step_matches_eager_triton(name):
    _step_and_compare(OPTIMIZERS[name], {"backend": "triton"})


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("name", ["adamw", "sgd_momentum"])
def test_compiled_step_is_a_few_kernels_whatever_the_parameter_count(monkeypatch, backend, name):
    compiled = []
    real = tc_inductor.compile

    def spy(graph, example_inputs, options=None):
        result = real(graph, example_inputs, options)
        compiled.append(result)
        return result

    monkeypatch.setattr(tc_inductor, "compile", spy)
    counts = {}
    for n in (4, 24):
        g = torch.Generator().manual_seed(n)
        # distinct shapes: one kernel per parameter without multi-tensor kernels
        params = [torch.nn.Parameter(torch.randn(k + 2, generator=g)) for k in range(n)]
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        opt = OPTIMIZERS[name](params)
        step = tc.compile(opt.step, options={"backend": backend, "fallback": False})
        compiled.clear()
        for _ in range(2):  # the second call recompiles once the state exists
            step()
        before = runtime.COUNTERS["skipped_copies"]
        step()  # steady state: every parameter and state tensor written in place, none copied back
        mutated = sum(1 + len(opt.state[p]) for p in params)
        assert runtime.COUNTERS["skipped_copies"] - before == mutated
        steady = compiled[-1]
        assert steady.stats["extern_calls"] == 0, steady.source
        assert "copy_" not in steady.source
        assert steady.stats["inplace_outputs"] >= n, steady.stats
        counts[n] = steady.stats["kernels"]
    # the step counters (and their bias corrections), then the parameters: a few launches, the
    # count growing only by the buffer budget of a kernel (combo.MAX_POINTERS, ~30 parameters)
    assert counts[4] <= 2 and counts[24] <= 3, counts
