"""LSTMs traced without oneDNN's RNN kernel, whose workspace fake tensors cannot describe.

On the CPU, ``torch.lstm``'s C++ composite picks oneDNN's ``mkldnn_rnn_layer`` and autograd
saves that op's workspace for ``mkldnn_rnn_layer_backward``. The workspace's meta kernel says
0 bytes; the CPU kernel makes it as large as oneDNN's primitive wants (28 KiB for a 6-unit
layer), or returns none at all under ``no_grad``, which is how a compiled forward runs. A joint
graph traced on fake tensors would hand the backward an empty or missing workspace (timm's
sequencer2d crashed in its backward). With oneDNN off for the call, the composite traces as
torch's own cell arithmetic (``linear``, ``sigmoid``, ``tanh``), which tc compiles like any other.
Only when a backward may be traced: inference keeps oneDNN's kernel (its workspace unused).
"""

from __future__ import annotations

from typing import Any

import torch

import tc_ir

from .trace import retarget_calls

_RNN = {torch.lstm}  # torch._VF.lstm is this function; GRU and plain RNNs have no oneDNN path


def bind_rnn(graph: tc_ir.Graph) -> tc_ir.Graph:
    """``graph``, or a copy whose LSTM calls run without oneDNN while grad mode is on."""
    return retarget_calls(graph, _RNN, WithoutOneDNN)


class WithoutOneDNN:
    """A call run with ``torch.backends.mkldnn`` off when grad mode is on (a backward may need it)."""

    def __init__(self, target: Any):
        self.target = target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.target(*args, **kwargs)
        with torch.backends.mkldnn.flags(enabled=False):
            return self.target(*args, **kwargs)

    def __repr__(self) -> str:
        return f"{self.target!r} (without oneDNN)"
