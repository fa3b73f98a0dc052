"""Queries of torch's global state, answered while capturing and guarded.

Library code branches on process-wide switches (``torch.is_autocast_enabled()``, the MHA fast
path, cuDNN, functorch transforms, the dispatch-mode stack). Recording such a call would put a
Python ``bool`` in the graph, and breaking on it splits every ``nn.MultiheadAttention``; instead
the query is evaluated for real at capture time and the entry gets a guard that evaluates it
again, so a later call under different switches recompiles. A query is safe to answer this way
when it (a) reads state only, (b) takes no tensor argument (its answer cannot depend on data),
and (c) returns a small constant that the guard compares by ``==``. The names differ between
torch versions, so the table holds what this torch has, and any other ``torch._C`` predicate
(``_is_*``/``_get_*``/``_are_*``/``_has_*``/``is_*`` of constant arguments returning a ``bool``)
is answered the same way.
"""

from __future__ import annotations

import re
import types

import torch
import torch.utils._python_dispatch as pd

from .base import Unsupported
from .variables import Const, ListV, V


def _lookup(path: str):
    obj = torch
    for part in path.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


# query -> why answering it at capture time and guarding it is safe. Each reads a switch that
# only changes between calls (a setter or a context manager outside the captured frame).
_TABLE = {
    "torch.is_autocast_enabled": "autocast state; regions' own autocast blocks are resolved below",
    "torch.get_autocast_dtype": "autocast state, as above",
    "torch.is_autocast_cache_enabled": "autocast state, as above",
    "torch._C._is_any_autocast_enabled": "autocast state, as above",
    "torch.backends.mha.get_fastpath_enabled": "a module flag set by set_fastpath_enabled",
    "torch._C._get_mha_fastpath_enabled": "the same flag in C (some versions)",
    "torch._C._get_cudnn_enabled": "torch.backends.cudnn.enabled",
    "torch._C._get_mkldnn_enabled": "torch.backends.mkldnn.enabled",
    "torch._C._get_cudnn_allow_tf32": "a backend flag",
    "torch._C._get_cublas_allow_tf32": "a backend flag",
    "torch._C._get_cudnn_deterministic": "a backend flag",
    "torch._C._get_cudnn_benchmark": "a backend flag",
    "torch.backends.cudnn.is_available": "fixed for the process",
    "torch.backends.mkldnn.is_available": "fixed for the process",
    "torch.cuda.is_available": "fixed for the process (the guard is one cached C call)",
    "torch._C._are_functorch_transforms_active": "vmap/grad transforms are entered outside the frame",
    "torch.are_deterministic_algorithms_enabled": "set by use_deterministic_algorithms, which breaks",
    "torch.is_deterministic_algorithms_warn_only_enabled": "as above",
    "torch._C._len_torch_dispatch_stack": "dispatch modes are entered outside the frame",
    "torch._C._is_torch_function_enabled": "DisableTorchFunction is entered outside the frame",
    "torch.is_inference_mode_enabled": "inference_mode blocks inside the frame are not captured",
}
_FIXED = {"torch.backends.cudnn.is_available", "torch.backends.mkldnn.is_available", "torch.cuda.is_available"}
_AUTOCAST = {"torch.is_autocast_enabled", "torch.get_autocast_dtype", "torch.is_autocast_cache_enabled",
             "torch._C._is_any_autocast_enabled"}
QUERIES = {fn: name for name in _TABLE if (fn := _lookup(name)) is not None}
_PREDICATE = re.compile(r"_?(is|are|has|get)_")
_PLAIN = (str, int, bool, type(None), torch.device, torch.dtype)


def is_query(fn) -> bool:
    try:
        if fn in QUERIES:
            return True
    except TypeError:
        return False
    return isinstance(fn, types.BuiltinFunctionType) and getattr(fn, "__module__", None) == "torch._C" \
        and _PREDICATE.match(fn.__name__) is not None


def dispatch_stack_query(fn) -> bool:
    """``torch.utils._python_dispatch._get_current_dispatch_mode_stack()`` (``_is_make_fx_tracing``)."""
    return fn is getattr(pd, "_get_current_dispatch_mode_stack", None)


def answer(f, fn, args: list[V], kwargs: dict[str, V]) -> V | None:
    """The query's value as a guarded constant, or ``None`` when it is not a plain predicate."""
    if not all(type(a) is Const and isinstance(a.value, _PLAIN) for a in [*args, *kwargs.values()]):
        return None
    a, kw = [x.value for x in args], {k: x.value for k, x in kwargs.items()}
    name = QUERIES.get(fn, getattr(fn, "__name__", "?"))
    if fn not in QUERIES and (a or kw) and name.lstrip("_").startswith("get_"):
        return None  # some torch._C getters set the value when given one

    if name in _AUTOCAST and f.session.autocast_stack:
        return _autocast_in_region(f, fn, name, a, kw)
    value = fn(*a, **kw)
    if fn not in QUERIES and type(value) is not bool:
        return None
    if not isinstance(value, _PLAIN):
        return None
    if name not in _FIXED:
            _guard(f, fn, name, a, kw, value)
    return Const(value)


def _guard(f, fn, name: str, a: list, kw: dict, value) -> None:
    g = f.session.guards
    call = ", ".join([*(g.ref(x) if not isinstance(x, (str, int)) else repr(x) for x in a),
                      *(f"{k}={g.ref(x) if not isinstance(x, (str, int)) else repr(x)}" for k, x in kw.items())])
    rhs = repr(value) if isinstance(value, (bool, int, str, type(None))) else g.ref(value)
    text_args = ", ".join([*map(repr, a), *(f"{k}={x!r}" for k, x in kw.items())])
    g.add(None, f"{g.ref(fn)}({call}) == {rhs}", f"{name}({text_args}) == {value!r}")


def _autocast_in_region(f, fn, name: str, a: list, kw: dict) -> V:
    """An autocast query inside an autocast block the region itself opened.

    When a block of the region covers the queried device, the answer is the region's own doing
    and needs no guard; otherwise it is the caller's state, which the guard must check, but the
    value seen now is no longer the value at the frame's entry.
    """
    value = fn(*a, **kw)
    device = (a[0] if a else kw.get("device_type", "cuda"))
    if name == "torch._C._is_any_autocast_enabled":
        if value and any(s._enabled for s in f.session.autocast_stack):
            return Const(value)
    elif any(s.device == str(device) for s in f.session.autocast_stack):
        return Const(value)
    raise Unsupported(f"{name}() queried inside an autocast block opened in the captured region")


def empty_dispatch_stack(f) -> V:
    """``_get_current_dispatch_mode_stack()`` is empty while capturing (no mode is entered around
    interpreted code); guarded by the C length of the stack."""
    if torch._C._len_torch_dispatch_stack() != 0:
        raise Unsupported("a TorchDispatchMode is active")
    _guard(f, torch._C._len_torch_dispatch_stack, "torch._C._len_torch_dispatch_stack", [], {}, 0)
    return ListV([])
