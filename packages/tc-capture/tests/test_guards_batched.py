"""Static tensor guards checked in one batch (``cache/guards.py``: ``_batched_check``).

A hit checks each tensor's type where its guard stands and the rest (dtype, shape, stride,
requires_grad, device) of all of them in one C++ call; where that call fails, each tensor's own
condition decides. Reads through plain containers and plain instance attributes (an optimizer's
``param_groups[0]['params']``) are read once per check. Each change must recompile (or not) exactly
as the per-tensor guards did, and the compiled function compute what eager computes.
"""

from __future__ import annotations

import pytest
import torch
from helpers import counting_backend, tree_close

import tc_capture


def _step(tensors, scale):
    return [t * scale + 1 for t in tensors]


def _inputs(n=6):
    return [torch.randn(3, 4) for _ in range(n)] + [torch.randn(5)]


CHANGES = {
    "same": (lambda ts: ts, False),
    "stride": (lambda ts: ts[:2] + [torch.randn(4, 3).t()] + ts[3:], True),
    "dtype": (lambda ts: ts[:-1] + [torch.randn(5, dtype=torch.float64)], True),
    "shape": (lambda ts: ts[:4] + [torch.randn(3, 5)] + ts[5:], True),
    "requires_grad": (lambda ts: [ts[0].requires_grad_()] + ts[1:], True),
    "subclass_type": (lambda ts: [torch.nn.Parameter(ts[0])] + ts[1:], True),
    "fewer": (lambda ts: ts[:5], True),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_in_a_batch_recompiles_as_per_tensor_guards(change):
    be = counting_backend()
    compiled = tc_capture.optimize(be)(_step)
    make, recompiles = CHANGES[change]
    for _ in range(2):
        ts = _inputs()
        tree_close(_step(ts, 2.0), compiled(ts, 2.0))
    assert len(be.graphs) == 1
    assert "_TG.check" in compiled_guard_sources(compiled)
    ts = make(_inputs())
    tree_close(_step(ts, 2.0), compiled(ts, 2.0))
    assert len(be.graphs) == 1 + recompiles


def test_batch_failing_for_dispatch_keys_falls_back_to_each_guard():
    # A tensor made while capturing under no thread-local key exclusion, checked under one
    # (inference mode drops autograd keys from the local state): the batch fails, each
    # tensor's own condition passes, so it is a hit, not a recompile.
    be = counting_backend()
    compiled = tc_capture.optimize(be)(_step)
    ts = _inputs()
    tree_close(_step(ts, 3.0), compiled(ts, 3.0))
    with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradCPU)):
        ts = _inputs()
        tree_close(_step(ts, 3.0), compiled(ts, 3.0))
    assert len(be.graphs) == 1


def test_optimizer_step_reads_its_parameter_list_once():
    params = [torch.nn.Parameter(torch.randn(4, 3)) for _ in range(8)]
    for p in params:
        p.grad = torch.randn_like(p)
    ref = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for p, r in zip(params, ref):
        r.grad = p.grad.clone()
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True)
    ref_opt = torch.optim.SGD(ref, lr=0.1, momentum=0.9, foreach=True)
    be = counting_backend()
    step = tc_capture.optimize(be)(opt.step)
    for _ in range(4):
        step()
        ref_opt.step()
        for p, r in zip(params, ref):
            torch.testing.assert_close(p, r)
    source = compiled_guard_sources(step)
    assert "_TG.check" in source
    # ``param_groups[0]['params']`` is bound to a local once, then indexed per parameter.
    assert source.count("param_groups[0]['params'][") == 0


def compiled_guard_sources(compiled) -> str:
    """The generated guard sources of every live frame cache (the tests' own compiled function
    is the one whose entries matter; others only add text)."""
    from tc_capture.cache import frame_cache

    texts = []
    for cache in list(frame_cache.ALL_CACHES):
        for entries in cache.entries.values():
            texts += [entry.guard_source for entry in entries]
    return "\n".join(texts)


@pytest.mark.parametrize("change", ["buffer_replaced", "buffer_other_strides", "state_dropped"])
def test_optimizer_state_read_once_still_sees_each_change(change):
    def make():
        torch.manual_seed(0)
        ps = [torch.nn.Parameter(torch.randn(4, 3)) for _ in range(6)]
        for p in ps:
            p.grad = torch.randn_like(p)
        return ps, torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True)

    params, opt = make()
    ref, ref_opt = make()
    step = tc_capture.optimize(counting_backend())(opt.step)
    for i in range(5):
        if i == 3:
            for o, ps in ((opt, params), (ref_opt, ref)):
                if change == "buffer_replaced":
                    o.state[ps[2]]["momentum_buffer"] = torch.full((4, 3), 0.5)
                elif change == "buffer_other_strides":
                    o.state[ps[2]]["momentum_buffer"] = torch.full((3, 4), 0.5).t()
                else:
                    del o.state[ps[4]]
        step()
        ref_opt.step()
        for p, r in zip(params, ref):
            torch.testing.assert_close(p, r)
        for p, r in zip(params, ref):
            torch.testing.assert_close(opt.state[p]["momentum_buffer"], ref_opt.state[r]["momentum_buffer"])


def _batch_results(compiled) -> list[bool]:
    """Spy on the batched check of every entry: what each ``_TG.check`` returned."""
    from tc_capture.cache import frame_cache

    results = []
    for cache in list(frame_cache.ALL_CACHES):
        for entries in cache.entries.values():
            for entry in entries:
                scope = entry.guard.__globals__
                if "_TG" in scope:
                    real = scope["_TG"]

                    class Spy:
                        def check(self, *ts, _real=real):
                            results.append(_real.check(*ts))
                            return results[-1]
                    scope["_TG"] = Spy()
    return results


def _tied(tensors, scale):
    return [t * scale for t in tensors] + [tensors[0] + tensors[-1]]


def test_one_tensor_read_through_two_sources_stays_in_the_batch_once():
    # Tied weights: TensorGuards' check fails whenever one tensor is passed twice, so with the
    # duplicate in the batch every call fell back to checking each tensor by itself.
    be = counting_backend()
    compiled = tc_capture.optimize(be)(_tied)
    ts = _inputs()
    tied = ts + [ts[0]]
    tree_close(_tied(tied, 2.0), compiled(tied, 2.0))
    results = _batch_results(compiled)
    tree_close(_tied(tied, 2.0), compiled(tied, 2.0))
    assert results == [True]
    # untied (same metadata, another tensor), and untied with other metadata: still eager's answers
    for last in (torch.randn(3, 4), torch.randn(4, 3).t()):
        untied = ts + [last]
        tree_close(_tied(untied, 2.0), compiled(untied, 2.0))
    assert len(be.graphs) <= 3
