"""Detecting that a function wrote into its (non-static) inputs.

A graph reads copies of those inputs, so a write would land in the copy and the caller's tensor
would silently stay unchanged: such functions run without a graph. Version counters catch writes
through torch ops; a bitwise comparison with a snapshot also catches writes by raw Triton/C++
kernels, which do not bump them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import torch

_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@attrs.frozen
class Snapshot:
    versions: dict[int, int]
    copies: dict[int, torch.Tensor]


def snapshot(args: Sequence[Any], positions: Sequence[int], by_value: bool) -> Snapshot:
    """Remember the inputs at ``positions`` before a call."""
    tensors = {i: args[i] for i in positions if isinstance(args[i], torch.Tensor)}
    copies = {i: t.detach().clone() for i, t in tensors.items()} if by_value else {}
    return Snapshot({i: t._version for i, t in tensors.items()}, copies)


def mutated(args: Sequence[Any], before: Snapshot) -> list[int]:
    """Positions whose tensors changed since ``before``."""
    return [i for i, version in before.versions.items()
            if args[i]._version != version or (i in before.copies and not same_bits(args[i], before.copies[i]))]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN equals itself, -0.0 differs from 0.0): the exact "was it written"."""
    a, b = a.detach(), b.detach()
    if a.dtype.is_complex:
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    as_int = _SAME_SIZE_INT.get(a.element_size())
    if as_int is None or a.dtype == as_int:
        return torch.equal(a, b)
    return torch.equal(a.view(as_int), b.view(as_int))
