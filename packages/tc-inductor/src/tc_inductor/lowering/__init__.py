"""Lowerings: ATen op → lazy kernel-IR values, one table keyed by op, filled by the modules here."""

from . import creation, foreach, indexing, pointwise, pooling, random, reductions, views  # noqa: F401  (register lowerings)
from .registry import LOWERINGS, LoweringContext, register

__all__ = ["LOWERINGS", "LoweringContext", "register"]
