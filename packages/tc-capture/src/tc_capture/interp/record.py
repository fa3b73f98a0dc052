"""Recording tensor work: run the op on fake tensors for its spec, add the node, wrap the result."""

from __future__ import annotations

import contextlib
import operator
from typing import Any

import torch
from torch._dispatch.python import enable_python_dispatcher

import tc_ir

from .base import Unsupported
from .session import Session
from .symbols import SYM_TYPES, concrete, is_symbolic
from .variables import Const, DictV, ListV, TensorV, TupleV, V

# SymInt/SymFloat/SymBool: sizes (and numbers computed from them) of tensors with symbolic dims;
# ``symbols.finish`` writes them into the graph as sympy expressions.
_PLAIN = (int, float, bool, str, type(None), complex, torch.dtype, torch.device, torch.memory_format,
          torch.layout, type(Ellipsis), torch.Size, *SYM_TYPES)

# Tensor methods that hand a Python value to Python: the value depends on data, so we break.
DATA_METHODS = {"item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "data_ptr",
                "backward", "__array__", "storage", "untyped_storage", "register_hook", "retain_grad"}


def to_node(v: V) -> Any:
    """The graph argument for a value: a node, a constant, or a structure of them."""
    if isinstance(v, TensorV):
        return v.node
    if isinstance(v, Const):
        if isinstance(v.value, _PLAIN) or isinstance(v.value, slice) and _plain_slice(v.value):
            return v.value
        if isinstance(v.value, (tuple, list)) and all(isinstance(x, _PLAIN) for x in v.value):
            return v.value
        raise Unsupported(f"cannot pass {type(v.value).__name__} {v.value!r:.60} to a graph op")
    if isinstance(v, (ListV, TupleV)):
        items = [to_node(x) for x in v.items]
        return items if isinstance(v, ListV) else tuple(items)
    if isinstance(v, DictV):
        return {k: to_node(x) for k, x in v.items.items()}
    raise Unsupported(f"cannot pass {type(v).__name__} to a graph op")


def _plain_slice(s: slice) -> bool:
    return all(isinstance(x, (int, type(None), torch.SymInt)) for x in (s.start, s.stop, s.step))


def to_fake(v: V) -> Any:
    if isinstance(v, TensorV):
        return v.fake
    if isinstance(v, Const):
        return v.value
    if isinstance(v, ListV):
        return [to_fake(x) for x in v.items]
    if isinstance(v, TupleV):
        return tuple(to_fake(x) for x in v.items)
    if isinstance(v, DictV):
        return {k: to_fake(x) for k, x in v.items.items()}
    raise Unsupported(f"cannot pass {type(v).__name__} to a graph op")


def record(session: Session, target: Any, args: tuple, kwargs: dict) -> V:
    """Add ``target(*args, **kwargs)`` to the graph; returns the value standing for its result."""
    node_args, node_kwargs = tuple(to_node(a) for a in args), {k: to_node(a) for k, a in kwargs.items()}
    fake_args, fake_kwargs = tuple(to_fake(a) for a in args), {k: to_fake(a) for k, a in kwargs.items()}
    try:
        result = run_fake(session, target, fake_args, fake_kwargs)
    except Unsupported:
        if not is_symbolic((fake_args, tuple(fake_kwargs.values()))):
            raise
        # An op whose kernel needs plain ints (``F.pad`` by ``8 - T % 8``): its size arguments
        # are specialised (guarded equal to their values) and it runs again.
        node_args, node_kwargs = concrete(node_args), {k: concrete(a) for k, a in node_kwargs.items()}
        fake_args, fake_kwargs = concrete(fake_args), {k: concrete(a) for k, a in fake_kwargs.items()}
        result = run_fake(session, target, fake_args, fake_kwargs)
    if result is None:  # in-place work such as setitem: keep the node for its effect
        session.graph.call(target, *node_args, kwargs=node_kwargs, spec=None)
        return Const(None)
    if not _holds_tensor(result):
        if isinstance(result, _PLAIN) or _plain_tuple(result):
            return Const(result)
        raise Unsupported(f"{tc_ir.graph.default_name(target)} returned {type(result).__name__}, not a tensor")
    spec = _spec(result)
    node = session.graph.call(target, *node_args, kwargs=node_kwargs, spec=spec)
    return wrap_result(session, node, result)


def _plain_tuple(x: Any) -> bool:
    return isinstance(x, (tuple, list)) and all(isinstance(i, _PLAIN) or _plain_tuple(i) for i in x)


def run_fake(session: Session, target: Any, args: tuple, kwargs: dict) -> Any:
    try:
        with session.fake_mode, _dispatcher(session):
            if isinstance(target, str):
                return getattr(args[0], target)(*args[1:], **kwargs)
            return target(*args, **kwargs)
    except Unsupported:
        raise
    except Exception as e:
        name = tc_ir.graph.default_name(target)
        kind = type(e).__name__
        if "DataDependent" in kind or "Dynamic" in kind:
            raise Unsupported(f"data-dependent operation {name}: its result depends on tensor values") from e
        raise Unsupported(f"{name} failed on fake tensors: {kind}: {str(e)[:200]}") from e


def _dispatcher(session: Session) -> Any:
    """Under symbolic sizes, run ops through torch's Python dispatcher, as Dynamo does: composite
    kernels written in C++ (``constant_pad_nd`` behind ``F.pad``, ...) read sizes with ``aten.size``,
    which turns every symbol into a guarded constant (one recompile per sequence length); the Python
    dispatcher runs their symbolic decompositions and meta functions instead. Static captures keep
    the C++ path (cheaper, and what eager runs)."""
    return enable_python_dispatcher() if session.sizes.syms else contextlib.nullcontext()


def _holds_tensor(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return True
    return isinstance(x, (tuple, list)) and any(_holds_tensor(i) for i in x)


def _spec(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return tc_ir.TensorSpec.from_tensor(x)
    if isinstance(x, (tuple, list)):
        return tuple(_spec(i) for i in x)
    return None


def wrap_result(session: Session, node: Any, result: Any) -> V:
    if isinstance(result, torch.Tensor):
        return TensorV(node, result)
    items = []
    for i, item in enumerate(result):
        if isinstance(item, torch.Tensor):
            sub = session.graph.call(operator.getitem, node, i, spec=tc_ir.TensorSpec.from_tensor(item))
            items.append(TensorV(sub, item))
        elif isinstance(item, (tuple, list)) and _holds_tensor(item):
            sub = session.graph.call(operator.getitem, node, i, spec=_spec(item))
            items.append(wrap_result(session, sub, item))
        else:
            items.append(Const(item))
    if isinstance(result, list):
        return ListV(items)
    return TupleV(items, cls=type(result))
