"""Calling torch on fake tensors whose sizes are symbols, without specialising them.

A few torch kernels decide things by reading sizes as plain integers. Under a ``ShapeEnv``
that read turns the symbol into a constant: every later size recompiles. Both tracers (capture's
fake run of a torch call, tc_autograd's trace to ATen) call torch through :func:`sized_call` so
that the same kernels are avoided in both.

* ``scaled_dot_product_attention`` on CUDA: the cuDNN backend's eligibility checks read the
  sequence lengths as integers (torch 2.11 on an H100 chose cuDNN for GPT-2 and specialised every
  length). With symbolic sizes cuDNN is left out of the choice, and flash or memory-efficient
  attention, whose checks keep sizes symbolic, is chosen instead: the same function, another
  fused kernel. Static sizes choose exactly as eager does.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F

SDPA = (F.scaled_dot_product_attention, torch.ops.aten.scaled_dot_product_attention.default)


def has_symbolic_size(t: Any) -> bool:
    """Is ``t`` a tensor with a size that is a symbol (not a plain or a specialised int)?"""
    return isinstance(t, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in t.shape)


@contextlib.contextmanager
def _without_cudnn_attention():
    enabled = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(enabled)


def sized_call(target: Any, args: tuple, kwargs: dict) -> Any:
    """``target(*args, **kwargs)``, with the size-specialising kernel choices above avoided."""
    query = args[0] if args else kwargs.get("query")
    if target in SDPA and has_symbolic_size(query) and query.device.type == "cuda":
        with _without_cudnn_attention():
            return target(*args, **kwargs)
    return target(*args, **kwargs)
