"""The sweeps' config knobs (tests/forced_configs.py): what each one patches."""

from __future__ import annotations

import os

import forced_configs
import torch

from tc_inductor import kir
from tc_inductor.codegen import triton as triton_codegen


def _pointwise_kernel(n: int) -> kir.Kernel:
    x = kir.xvars(1)[0]
    load = kir.UOp(kir.Ops.LOAD, torch.float32, (), ("a", x))
    return kir.Kernel((n,), (), (kir.Stage((kir.Store("b", x, load, torch.float32),), ()),),
                      (("a", torch.float32),), (("b", torch.float32),))


def test_gpu_configs_generate_for_a_gpu_into_a_cache_of_their_own(monkeypatch, tmp_path):
    monkeypatch.setattr(triton_codegen, "_interpreting", triton_codegen._interpreting)  # undone after
    monkeypatch.setenv("TC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(forced_configs.GPU_ENV, "1")
    monkeypatch.delenv(forced_configs.ENV, raising=False)
    assert triton_codegen._interpreting(torch.device("cpu"))
    forced_configs.force_configs()
    assert not triton_codegen._interpreting(torch.device("cpu"))
    assert os.environ["TC_CACHE_DIR"] != str(tmp_path) and os.path.isdir(os.environ["TC_CACHE_DIR"])
    # the GPU's pointwise config (8 elements a thread), not the interpreter's 4096
    assert triton_codegen.heuristic_config(_pointwise_kernel(1 << 20), False)["XBLOCK"] == 1024


def test_a_forced_pointwise_config_applies_to_every_pointwise_kernel(monkeypatch):
    monkeypatch.setattr(triton_codegen, "heuristic_config", triton_codegen.heuristic_config)  # undone after
    monkeypatch.delenv(forced_configs.GPU_ENV, raising=False)
    forced_configs.force_configs("2048,4")
    for n in (64, 1 << 20):  # a small kernel too (its own config: a 64-element block)
        assert triton_codegen.heuristic_config(_pointwise_kernel(n), False) == {"XBLOCK": 2048, "num_warps": 4}
