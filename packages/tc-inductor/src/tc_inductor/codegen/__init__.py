"""Backends: a registry of (check, implementation) pairs; the first whose check passes is used."""

from .registry import BACKENDS, KernelBackend, choose_backend

__all__ = ["BACKENDS", "KernelBackend", "choose_backend"]
