"""LSTMs on the CPU: traced without oneDNN's RNN kernel when a backward may be traced
(``tc_autograd.rnn``: its workspace is 0 bytes on fake tensors, none under a compiled forward's
no_grad), so the joint graph holds torch's own cell arithmetic."""

from __future__ import annotations

import pytest
import torch
from autograd_harness import check
from autograd_tracer import trace_module

import tc_autograd

aten = torch.ops.aten


def _lstm(bidirectional: bool) -> torch.nn.Module:
    return torch.nn.LSTM(8, 6, num_layers=2, batch_first=True, bidirectional=bidirectional)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_lstm_training_matches_eager(bidirectional, seed):
    check(lambda: _lstm(bidirectional), lambda: [torch.randn(3, 5, 8)], seed=seed)


def test_lstm_joint_graph_has_no_onednn_rnn_layer():
    torch.manual_seed(0)
    module, x = _lstm(False), torch.randn(3, 5, 8, requires_grad=True)
    params = list(module.parameters())
    compiled = tc_autograd.aot(trace_module(module, [x]), [x, *params])
    targets = {n.target for g in (compiled.forward_graph, compiled.backward_graph) for n in g.calls}
    assert aten.mkldnn_rnn_layer.default not in targets and aten.mkldnn_rnn_layer_backward.default not in targets


def test_lstm_inference_still_matches_eager():
    check(lambda: _lstm(True), lambda: [torch.randn(3, 5, 8)], train=False, grad=False, input_grad=False)
