"""Graph inputs reached through a ``torch.optim.Optimizer``: static addresses, step counters on the device.

An optimizer's parameters and state (``exp_avg``, ``momentum_buffer``, ``step``, a tensor ``lr``)
keep their memory from step to step and are written in place by the step. A graph input read
through the optimizer's ``param_groups`` or ``state`` is therefore marked ``meta["static"]``: a
CUDA-graph back end reads and writes it at its own address (no copy in, no copy out), as
``torch.compile`` does with ``mark_static_address`` on the same tensors. Gradients (``p.grad``)
are not marked: they are new tensors whenever ``zero_grad(set_to_none=True)`` ran, and the
runtime reads them in place when a graph in its pool produced them (a compiled backward's).

Step counters: a non-capturable foreach/for-loop optimizer keeps ``state[p]["step"]`` as a CPU
scalar tensor. A CUDA graph cannot read a CPU tensor (a kernel would get its value at capture,
and every replay would reuse that stale step), so such a step runs without a graph. When the
optimizer is read by a capture, a CPU step of a parameter on another device is moved to that
parameter's device, as ``torch.compile`` does (Dynamo's ``move_step_if_cpu``); the optimizer's
code under compilation computes on the step as a tensor, so the value is read at every replay.

Capturable groups: with its steps on a GPU, a non-capturable Adam-family update refuses to be
compiled (torch's ``_disable_dynamo_if_unsupported`` runs it as torch internals: a graph break).
A param group whose parameters are all on a CUDA-graph device is therefore switched to
``capturable=True``, as Dynamo does: the update computes its bias corrections on the device from
the step tensor instead of reading the step back to the host. The values are the same; the group
stays capturable after the capture (eager steps of it are correct too, with no host syncs).
"""

from __future__ import annotations

import torch

from ..cache import sources as S

CAPTURABLE_DEVICES = ("cuda", "xpu")


def prepare(optimizer: torch.optim.Optimizer) -> None:
    """Make all-GPU param groups capturable and move CPU step counters to their parameter's
    device (before capture reads the state)."""
    for group in getattr(optimizer, "param_groups", ()):
        params = group.get("params", ()) if isinstance(group, dict) else ()
        if group.get("capturable") is False and not group.get("fused") and params and all(
                isinstance(p, torch.Tensor) and p.device.type in CAPTURABLE_DEVICES for p in params):
            group["capturable"] = True
    state = getattr(optimizer, "state", None)
    if not isinstance(state, dict):
        return
    for param, entry in list(state.items()):
        if not (isinstance(param, torch.Tensor) and isinstance(entry, dict)):
            continue
        step = entry.get("step")
        if isinstance(step, torch.Tensor) and step.is_cpu and param.device.type != "cpu":
            entry["step"] = step.to(param.device)


def is_static(source: S.Source, optimizer_sources: set[str]) -> bool:
    """Is the tensor read from ``source`` an optimizer's parameter or state (not a gradient)?"""
    if not optimizer_sources or source.expr.endswith(".grad"):
        return False
    base = source.base
    while base is not None:
        if base.expr in optimizer_sources:
            return True
        base = base.base
    return False
