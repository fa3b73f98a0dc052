"""Attention masks laid out so that torch's fused attention kernels can take them.

``scaled_dot_product_attention`` picks its kernel (flash, memory-efficient, cuDNN, or the
"math" composite that materialises the batch x heads x seq x seq scores) from its inputs'
layouts, as eager does: the tracer records whichever ATen ops that choice dispatches. A mask
whose last dimension has stride 0 (transformers builds ``[batch, 1, q, k]`` masks by
broadcasting a ``[1, 1, q, 1]`` comparison) rules out every fused kernel on CUDA, so eager and
a faithful trace both fall back to the math composite: on BERT-base 32x512 that is gigabytes of
scores kept for the backward. The mask's values do not depend on its layout, so the tracer gives
SDPA a copy with unit last stride (``[batch, 1, q, k]`` booleans, far smaller than the scores it
avoids), as torch.compile's lowering does. Everything else about the call is left to torch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

import tc_ir

from .trace import retarget_calls

_SDPA = {F.scaled_dot_product_attention, torch.ops.aten.scaled_dot_product_attention.default}


def bind_attention(graph: tc_ir.Graph) -> tc_ir.Graph:
    """``graph``, or a copy whose SDPA calls densify a mask whose last dimension is broadcast."""
    return retarget_calls(graph, _SDPA, lambda _: sdpa_with_dense_mask)


def sdpa_with_dense_mask(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
    """``F.scaled_dot_product_attention`` with ``attn_mask`` given unit last stride."""
    if args:
        args = (dense_last_dim(args[0]), *args[1:])
    elif "attn_mask" in kwargs:
        kwargs = {**kwargs, "attn_mask": dense_last_dim(kwargs["attn_mask"])}
    return F.scaled_dot_product_attention(query, key, value, *args, **kwargs)


def dense_last_dim(mask: Any) -> Any:
    """``mask``, or a contiguous copy when its last dimension is not unit-strided."""
    if not isinstance(mask, torch.Tensor) or mask.dim() == 0 or mask.shape[-1] <= 1 or mask.stride(-1) == 1:
        return mask
    return mask.contiguous()
