"""What export needs beyond the graph: how to rebuild the frame's return value from the graph's
outputs, and which user argument or module state each graph input is.

Recorded on ``graph.meta`` for a frame captured as one graph with no break (the ``fullgraph``
case):

* ``graph.meta["returns"]``: the return value's structure. Tuples, lists, dicts and namedtuples
  are kept as themselves; leaves are ``("output", i)`` (graph output ``i``) or
  ``("constant", value)``; objects built while capturing (dataclasses, Hugging Face
  ``ModelOutput``) are ``("object", cls, {field: structure})``. A leaf or object is a tuple whose
  first item is a ``str``; a container tuple never starts with one. :func:`rebuild_returns`
  turns it back into a value.
* ``graph.meta["user_inputs"]``: one entry per graph input, in order: ``("arg", (slot, *keys))``
  for (a part of) argument ``slot`` of the root function (``graph.meta["arg_names"][slot]``
  names it; for a module's forward slot 0 is ``self``), ``("param", qualified_name)`` /
  ``("buffer", qualified_name)`` for module state, ``("global", name)``, ``("closure", name)``,
  or ``("other", expression)``.
"""

from __future__ import annotations

import ast
import functools
from typing import Any

import torch

from ..interp.variables import Const, DataDictV, DictV, ListV, ObjV, TensorV, TupleV, V


def returns_spec(v: V, outputs: list) -> Any:
    """The structure of ``v`` over graph outputs; graph inputs returned as they are join ``outputs``."""
    if isinstance(v, TensorV):
        if v.node not in outputs:
            outputs.append(v.node)
        return ("output", outputs.index(v.node))
    if isinstance(v, Const):
        return ("constant", v.value)
    if isinstance(v, TupleV):
        items = [returns_spec(x, outputs) for x in v.items]
        if v.cls is tuple:
            return tuple(items)
        return v.cls(*items) if hasattr(v.cls, "_fields") else v.cls(items)
    if isinstance(v, ListV):
        return [returns_spec(x, outputs) for x in v.items]
    if isinstance(v, DataDictV):
        if not v.made_by_init():  # items or attributes its constructor would not make
            raise TypeError(f"cannot describe a returned {v.cls.__name__} whose items were set after it was made")
        return ("object", v.cls, {k: returns_spec(x, outputs) for k, x in v.fields.items()})
    if isinstance(v, DictV):
        return v.cls({k: returns_spec(x, outputs) for k, x in v.items.items()})
    if isinstance(v, ObjV):
        return ("object", v.cls, {k: returns_spec(x, outputs) for k, x in v.attrs.items()})
    raise TypeError(f"cannot describe a returned {type(v).__name__}")


def rebuild_returns(spec: Any, outputs) -> Any:
    """The frame's return value, from ``graph.meta["returns"]`` and the graph's outputs."""
    if isinstance(spec, tuple) and spec and isinstance(spec[0], str):
        if spec[0] == "output":
            return outputs[spec[1]]
        if spec[0] == "constant":
            return spec[1]
        cls, fields = spec[1], {k: rebuild_returns(x, outputs) for k, x in spec[2].items()}
        if issubclass(cls, dict):
            return cls(**fields)
        obj = cls.__new__(cls)
        for k, x in fields.items():
            object.__setattr__(obj, k, x)
        return obj
    if isinstance(spec, (tuple, list)):
        items = [rebuild_returns(x, outputs) for x in spec]
        if type(spec) in (tuple, list):
            return type(spec)(items)
        return type(spec)(*items) if hasattr(type(spec), "_fields") else type(spec)(items)
    if isinstance(spec, dict):
        return type(spec)({k: rebuild_returns(x, outputs) for k, x in spec.items()})
    raise TypeError(f"not a returns structure: {spec!r}")


def user_input(source, example: Any) -> tuple:
    """What one graph input is, from its source expression (see the module docstring)."""
    base, keys = _parsed_path(source.expr)
    if source.gated:
        _, root_keys = _parsed_path(source.root.expr)
        name = ".".join(str(k) for k in keys[len(root_keys):])
        return ("param" if isinstance(example, torch.nn.Parameter) else "buffer", name)
    if base[0] == "F":
        return ("arg", (base[1], *keys))
    if base[0] == "G" and not keys:
        return ("global", base[1])
    if base[0] == "C" and keys == ["cell_contents"]:
        return ("closure", source.name)
    return ("other", source.expr)


def _parsed_path(expr: str) -> tuple[tuple, list]:
    base, keys = _parsed_path_cached(expr)
    return base, list(keys)


@functools.lru_cache(maxsize=4096)
def _parsed_path_cached(expr: str) -> tuple[tuple, tuple]:
    """``_path`` of the expression text (a pure function of it): every module-owned input parsed
    its root (``F[0]``) again."""
    base, keys = _path(ast.parse(expr, mode="eval").body)
    return base, tuple(keys)


def _path(node) -> tuple[tuple, list]:
    """``F[1].a[0]`` -> (("F", 1), ["a", 0]); ``getattr(x, 'n')`` is ``x.n``."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        return (node.value.id, ast.literal_eval(node.slice)), []
    if isinstance(node, ast.Attribute):
        base, keys = _path(node.value)
        return base, keys + [node.attr]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
            and node.value.attr in ("_parameters", "_buffers", "_modules"):
        base, keys = _path(node.value.value)  # a read from a module's store (module_state): m.name
        return base, keys + [ast.literal_eval(node.slice)]
    if isinstance(node, ast.Subscript):
        base, keys = _path(node.value)
        return base, keys + [ast.literal_eval(node.slice)]
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr":
        base, keys = _path(node.args[0])
        return base, keys + [ast.literal_eval(node.args[1])]
    raise ValueError(f"cannot read the path {ast.unparse(node)!r}")
