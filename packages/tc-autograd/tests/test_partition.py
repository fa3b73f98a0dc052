"""The min-cut partition saves fewer bytes than save_all, and both stay correct."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn as nn
from autograd_harness import check
from test_corpus import MLP, TransformerBlock

import tc_ir

CASES = {
    "gelu_mlp": (lambda: MLP(nn.GELU(), dim=64, hidden=256), lambda: [torch.randn(32, 64)]),
    "transformer_block": (lambda: TransformerBlock(dim=32, heads=4), lambda: [torch.randn(4, 16, 32)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_min_cut_saves_fewer_bytes_than_save_all(name, capsys):
    make, inputs = CASES[name]
    min_cut = check(make, inputs, partition="min_cut")
    save_all = check(make, inputs, partition="save_all")
    with capsys.disabled():
        print(f"\n[{name}] min_cut saves {min_cut.saved_bytes()} B in {len(min_cut.last.partition.saved)} tensors; "
              f"save_all saves {save_all.saved_bytes()} B in {len(save_all.last.partition.saved)} tensors")
    assert min_cut.saved_bytes() < save_all.saved_bytes()


def test_min_cut_recomputes_pointwise_but_not_matmul():
    make, inputs = CASES["gelu_mlp"]
    compiled = check(make, inputs)
    saved = {n.target for n in compiled.last.partition.saved if n.op == "call"}
    backward = {n.target for n in compiled.backward_graph.calls}
    aten = torch.ops.aten
    assert aten.gelu.default in backward and aten.gelu.default not in saved  # recomputed
    assert aten.addmm.default in saved and aten.addmm.default not in backward  # saved, never recomputed


def test_recomputed_values_are_placed_before_their_first_use():
    """Each recomputed activation comes just before its first backward use (``backward_order``),
    not all at the backward's start: the deepest layer's is recomputed first, and the first
    layer's after the later layers' gradient matmuls (ResNet-50's backward had recomputed every
    activation of three stages at its start: one kernel, all of them alive at once)."""
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(),
                             nn.Linear(32, 8))

    compiled = check(make, lambda: [torch.randn(4, 16)])
    calls = compiled.backward_graph.calls
    aten = torch.ops.aten
    gelus = [i for i, n in enumerate(calls) if n.target is aten.gelu.default]
    matmuls = [i for i, n in enumerate(calls) if n.target in (aten.mm.default, aten.addmm.default)]
    assert len(gelus) == 3 and matmuls
    assert any(gelus[0] < m < gelus[-1] for m in matmuls)  # interleaved with the backward's own work
    for i in gelus:  # each right before a use, its neighbour reading it
        assert any(calls[i] in tc_ir.leaves((n.args, n.kwargs)) for n in calls[i + 1:i + 3])


def test_aot_logging_shows_graphs_and_saved_summary(caplog):
    logger = tc_ir.logs.get_logger("aot")
    logger.setLevel(logging.DEBUG)
    try:
        with caplog.at_level(logging.DEBUG, logger="tc.aot"):
            check(*CASES["gelu_mlp"])
    finally:
        logger.setLevel(logging.NOTSET)
    text = caplog.text
    assert "made by: tc_autograd joint" in text and "made by: tc_autograd backward" in text
    assert "saved for backward:" in text


@pytest.mark.parametrize("name", ["inplace_acts", "small_cnn", "transformer_block_hand_attn", "batchnorm_train"])
def test_save_all_is_correct_too(name):
    from test_corpus import CORPUS

    check(*CORPUS[name], partition="save_all")
