"""Shared checks: run a function eagerly and through tc_capture, compare everything."""

from __future__ import annotations

import copy

import torch

import tc_capture
from tc_capture.api import interpret_backend


def tree_close(a, b, path="out"):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), f"{path}: {type(b)}"
        assert a.shape == b.shape and a.dtype == b.dtype, f"{path}: {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4, equal_nan=True), f"{path}: values differ"
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{path}: {type(a)} vs {type(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            tree_close(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b), f"{path}: keys {list(a)} vs {list(b)}"
        for k in a:
            tree_close(a[k], b[k], f"{path}[{k!r}]")
    elif hasattr(a, "__dataclass_fields__"):
        assert type(a) is type(b)
        tree_close(vars(a), vars(b), path)
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


def clone(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(clone(i) for i in x)
    if isinstance(x, dict):
        return {k: clone(v) for k, v in x.items()}
    return copy.copy(x)


def counting_backend():
    graphs = []

    def backend(graph, example_inputs):
        graphs.append(graph)
        return interpret_backend(graph, example_inputs)

    backend.graphs = graphs
    return backend


def check(fn, make_inputs, changed_inputs=None, module=None):
    """Eager vs compiled on fresh inputs, twice (cache hit), then on changed inputs (guards)."""
    be = counting_backend()
    compiled = tc_capture.optimize(be)(module if module is not None else fn)
    eager = module if module is not None else fn
    rounds = [make_inputs(), make_inputs(), (changed_inputs or make_inputs)()]
    n_graphs = []
    for args in rounds:
        a, b = clone(args), clone(args)
        expected = eager(*a)
        got = compiled(*b)
        tree_close(expected, got)
        tree_close(list(a), list(b), "inputs after the call")
        n_graphs.append(len(be.graphs))
    assert n_graphs[1] == n_graphs[0], "second call with same-shaped inputs recompiled"
    return compiled, be
