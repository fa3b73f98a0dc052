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
"""

from __future__ import annotations

import functools
import importlib
import operator
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
_PYTHON_ROOTS = {name.split(".")[0] for name in PUBLIC_MODULES}


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


def target_name(target: Any) -> str:
    """The stable text name of a call target (see the module docstring for the forms)."""
    if isinstance(target, str):
        return "." + target
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._schema.name.split('::')[1]}.{target._overloadname}"
    if isinstance(target, torch._ops.OpOverloadPacket):
        raise TargetError(f"{target} is an overload packet; pick an overload such as {target}.default")
    name = _public_names().get(id(target)) or _qualified_name(target)
    if name is None or resolve_target(name) is not target:
        raise TargetError(f"target {target!r} has no stable importable name")
    return name


def _qualified_name(target: Any) -> str | None:
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        return None
    return f"{module}.{qualname}"


@functools.cache
def resolve_target(name: str) -> Any:
    """The object a target name stands for; raises :class:`TargetError` if there is none."""
    if name.startswith("."):
        return name[1:]
    root, *rest = name.split(".")
    if root not in _PYTHON_ROOTS and len(rest) == 2:
        try:
            return getattr(getattr(getattr(torch.ops, root), rest[0]), rest[1])
        except (AttributeError, RuntimeError) as e:
            raise TargetError(f"no operator {name}") from e
    return _import_path(name)


def _import_path(name: str) -> Any:
    parts = name.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
            return obj
        except AttributeError:
            break
    raise TargetError(f"cannot find {name}")


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
