"""How call targets are named in text and found again, and which targets are impure or random.

Four kinds of target, each with its own text form:

========================  =====================================  ==========================
kind                      example object                         text
========================  =====================================  ==========================
``torch.ops`` overload    ``torch.ops.aten.mul.Tensor``          ``aten.mul.Tensor``
Python function           ``torch.nn.functional.relu``           ``torch.nn.functional.relu``
``operator`` function     ``operator.getitem``                   ``operator.getitem``
tensor method             ``"view"``                             ``.view``
========================  =====================================  ==========================

Python functions are named by the public module that exposes them, so the name is stable
across torch versions even when the implementation moves (``F.gelu`` lives in ``torch._C``).

Naming and loading are asymmetric on purpose. Any live target gets a name (:func:`target_name`,
exact, for keys; :func:`display_name`, never failing, for text). A name read back from a file
(:func:`resolve_target`) finds only ``torch.ops`` overloads and a fixed table of Python operators:
text is data, and loading it never imports a module or reaches an arbitrary function.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import math
import operator
import re
import sys
from typing import Any

import torch

# Modules searched, in order, for the public name of a Python function target.
PUBLIC_MODULES = (
    "torch",
    "torch.nn.functional",
    "torch.linalg",
    "torch.special",
    "torch.fft",
    "torch.autograd",
    "torch.amp",
    "operator",
    "math",
    "builtins",
    "tc_ir.ops",
)


class TargetError(ValueError):
    """A target that has no stable text name, or a name that resolves to nothing."""


@functools.cache
def _public_names() -> dict[int, str]:
    names: dict[int, str] = {}
    for module_name in reversed(PUBLIC_MODULES):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for attr, value in vars(module).items():
            if callable(value) and not isinstance(value, type) and not attr.startswith("__"):
                names[id(value)] = f"{module_name}.{attr}"
    return names


_OVERLOAD_NAMES: dict[Any, str] = {}  # overloads live as long as torch.ops: their names, made once


def target_name(target: Any) -> str:
    """The exact text name of a call target (see the module docstring for the forms).

    Raises :class:`TargetError` when the target has no name that finds this very object again
    (a local function, a pybind function of a private class): cache keys and CSE use this name,
    so two different targets must never share one. For display, use :func:`display_name`."""
    if isinstance(target, str):
        return "." + target
    if isinstance(target, torch._ops.OpOverload):
        name = _OVERLOAD_NAMES.get(target)
        if name is None:
            name = _OVERLOAD_NAMES[target] = f"{target.namespace}.{target._schema.name.split('::')[1]}.{target._overloadname}"
        return name
    if isinstance(target, torch._ops.OpOverloadPacket):
        raise TargetError(f"{target} is an overload packet; pick an overload such as {target}.default")
    name = _public_names().get(id(target)) or _qualified_name(target)
    if name is None or _lookup_loaded(name) is not target:
        raise TargetError(f"target {display_name(target)} has no stable name")
    return name


def display_name(target: Any) -> str:
    """A readable name for any target; never raises. Targets without an exact name
    (:func:`target_name`) print in angle brackets, which no parser accepts."""
    try:
        return target_name(target)
    except Exception:
        pass
    try:
        module = getattr(target, "__module__", None) or ""
        name = getattr(target, "__name__", None) or type(target).__name__
        text = f"{module}.{name}" if module else str(name)
    except Exception:
        text = type(target).__name__
    return "<" + re.sub(r"[^\w.:-]", "_", text)[:200] + ">"


def _qualified_name(target: Any) -> str | None:
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    return f"{module}.{qualname}"


def _lookup_loaded(name: str) -> Any:
    """The object ``name`` denotes among modules already imported (nothing is imported here);
    None when there is none. Used only to check that a live target's name is exact."""
    parts = name.split(".")
    for split in range(len(parts) - 1, 0, -1):
        obj = sys.modules.get(".".join(parts[:split]))
        if obj is None:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except Exception:
            return None
        return obj
    return None


# ---- loading: what a name read from a file may stand for -----------------------------------------
#
# Text read back (exported programs, cached traces) is data: a name resolves only to a torch.ops
# overload registered in this process (aten, prims, custom ops) or to an entry of this fixed table.
# Nothing is imported and no attribute path is followed: a file cannot name os.system, a module to
# import, or a tensor method chain that reaches one.
_OPERATOR_NAMES = ("getitem", "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos", "abs",
                   "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "xor", "invert", "not_", "lshift",
                   "rshift", "matmul", "truth")


@functools.cache
def loadable_table() -> dict[str, Any]:
    """The Python-level targets a file may name (besides torch.ops overloads)."""
    from . import ops  # our own higher-order ops, defined in this package

    table: dict[str, Any] = {f"operator.{n}": getattr(operator, n) for n in _OPERATOR_NAMES}
    table |= {f"math.{n}": getattr(math, n) for n in ("ceil", "floor", "trunc", "sqrt")}
    table |= {f"builtins.{n}": getattr(builtins, n) for n in ("min", "max", "abs")}
    table |= {f"torch.{n}": getattr(torch, n) for n in ("sym_int", "sym_float", "sym_max", "sym_min", "sym_not")
              if hasattr(torch, n)}
    table |= {f"tc_ir.ops.{fn.__name__}": fn for fn in ops.HIGHER_ORDER_OPS}
    return table


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.cache
def resolve_target(name: str) -> Any:
    """The object a target name read from text stands for: a ``torch.ops`` overload registered in
    this process, or an entry of :func:`loadable_table`. Anything else raises :class:`TargetError`;
    nothing is imported."""
    if not isinstance(name, str):
        raise TargetError(f"target name must be text, not {type(name).__name__}")
    table = loadable_table()
    if name in table:
        return table[name]
    parts = name.split(".")
    if len(parts) == 3 and all(_IDENT.fullmatch(p) for p in parts) and not parts[0].startswith("_"):
        op = _op_overload(*parts)
        if op is not None:
            return op
    raise TargetError(f"target {name!r} cannot be loaded: a file may name only torch.ops overloads "
                      "registered in this process (aten, prims, custom ops) and the fixed operator table")


def _op_overload(namespace: str, op: str, overload: str) -> Any:
    try:
        space = getattr(torch.ops, namespace)
        if not isinstance(space, torch._ops._OpNamespace):
            return None
        packet = getattr(space, op)
        found = getattr(packet, overload) if isinstance(packet, torch._ops.OpOverloadPacket) else None
    except (AttributeError, RuntimeError):
        return None
    return found if isinstance(found, torch._ops.OpOverload) else None


# Python-level targets that must not be removed or merged, beyond what ATen schemas say.
IMPURE_FUNCTIONS: set[Any] = {operator.setitem, operator.delitem, print, torch.manual_seed}
RANDOM_FUNCTIONS: set[Any] = {
    torch.rand, torch.randn, torch.randint, torch.rand_like, torch.randn_like, torch.randint_like,
    torch.randperm, torch.bernoulli, torch.multinomial, torch.normal, torch.poisson, torch.dropout,
    torch.nn.functional.dropout, torch.nn.functional.dropout1d, torch.nn.functional.dropout2d,
    torch.nn.functional.dropout3d, torch.nn.functional.alpha_dropout,
    torch.nn.functional.feature_alpha_dropout, torch.nn.functional.rrelu,
}
RANDOM_METHODS = {"bernoulli", "bernoulli_", "uniform_", "normal_", "random_", "exponential_",
                  "geometric_", "log_normal_", "cauchy_"}


def is_mutating(target: Any) -> bool:
    """True for targets that write to an argument in place (``add_``, ``aten.copy_``, setitem)."""
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.is_mutable
    if isinstance(target, str):
        return target.endswith("_") and not target.endswith("__")
    return target in IMPURE_FUNCTIONS


def is_random(target: Any) -> bool:
    """True for targets whose result depends on the RNG state."""
    if isinstance(target, torch._ops.OpOverload):
        return torch.Tag.nondeterministic_seeded in target.tags
    if isinstance(target, str):
        return target in RANDOM_METHODS
    return target in RANDOM_FUNCTIONS


def is_pure(target: Any) -> bool:
    """Pure targets may be removed when unused and merged when repeated."""
    return not is_mutating(target) and not is_random(target)
