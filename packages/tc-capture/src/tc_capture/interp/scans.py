"""``torch._higher_order_ops.associative_scan`` under capture: the scan as ops of the graph.

``associative_scan(combine_fn, xs, dim, reverse=False, combine_mode="pointwise")`` is an
inclusive prefix scan with an associative ``combine_fn`` over one dim of every tensor in ``xs``.
Library code takes it only while compiling (transformers' Mamba: ``use_associative_scan and
is_torchdynamo_compiling()``, which is True inside a tc capture). Run in Python, as a graph break
would, its ``"pointwise"`` mode compiles itself with Dynamo, and on torch 2.11 (the GPU host,
2026-12-03) that eager run's backward gives wrong gradients for the first operand (``a`` of
``combine((a, b), ...)``: as far from a sequential loop's as the gradient is large, the forward
exact), so Mamba's ``A_log`` and ``dt_proj.bias`` gradients came out wrong under tc and right in
eager (which takes the loop). tc therefore captures a ``"pointwise"`` scan as
:func:`inclusive_scan`, plain Python that capture interprets like user code: ``combine_fn`` is
inlined on slices of the operands and tc_autograd differentiates the ops it records.

:func:`inclusive_scan` is a Hillis-Steele scan: ``ceil(log2(n))`` steps, step ``k`` combining
every element with the one ``k`` before it (``combine(earlier, later)``, as the contract's order
asks). Calling ``combine_fn`` on whole slices is what ``"pointwise"`` promises (elementwise ops
only); ``"generic"`` mode calls it on single elements through ``vmap`` and stays a graph break
(torch's eager ``"generic"`` scan is plain ops and right). Results differ from a sequential loop's
only by the association of the float operations, as torch's own scans do.
"""

from __future__ import annotations

import inspect

import torch

# the devices whose tensors torch accepts in "pointwise" mode (tests add "cpu": eager refuses it)
POINTWISE_DEVICES = ("cuda", "xpu")


def inclusive_scan(combine_fn, xs, dim: int, reverse: bool):
    """``associative_scan(combine_fn, xs, dim, reverse, "pointwise")`` of tensors ``xs`` (a
    tensor, or tuples, lists and dicts of them), ``dim`` already non-negative."""
    leaves = [x.movedim(dim, 0) for x in _leaves(xs)]
    if reverse:
        leaves = [x.flip(0) for x in leaves]
    n = leaves[0].shape[0]
    step = 1
    while step < n:
        earlier = _rebuild(xs, [x[:n - step] for x in leaves])
        later = _rebuild(xs, [x[step:] for x in leaves])
        combined = _leaves(combine_fn(earlier, later))
        leaves = [torch.cat([x[:step], c], 0) for x, c in zip(leaves, combined)]
        step *= 2
    if reverse:
        leaves = [x.flip(0) for x in leaves]
    return _rebuild(xs, [x.movedim(0, dim) for x in leaves])


def _leaves(tree) -> list:
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in _leaves(item)]
    if isinstance(tree, dict):
        return [leaf for key in tree for leaf in _leaves(tree[key])]
    return [tree]


def _rebuild(like, leaves: list):
    """``leaves`` in the structure of ``like`` (tuples, lists and dicts of tensors)."""
    return _take(like, leaves)[0]


def _take(like, leaves: list):
    if isinstance(like, (tuple, list)):
        items = []
        for item in like:
            value, leaves = _take(item, leaves)
            items.append(value)
        return (tuple(items) if isinstance(like, tuple) else items), leaves
    if isinstance(like, dict):
        values = {}
        for key in like:
            values[key], leaves = _take(like[key], leaves)
        return values, leaves
    return leaves[0], leaves[1:]


def scan_arguments(fn, args: list, kwargs: dict) -> inspect.BoundArguments:
    """``associative_scan``'s arguments (capture values) by name, defaults applied."""
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound
