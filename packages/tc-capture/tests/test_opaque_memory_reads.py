"""A call that reads tensor memory without dispatching (``torch.cuda.jiterator``'s launcher,
dlpack) cannot run on capture's fake tensors: it is a graph break with a reason, and the values
are eager's. Before, a fake's null data pointer reached the call (on CUDA, a kernel launched on it
faults and poisons the process)."""

from __future__ import annotations

import warnings

import torch
import torch.utils.dlpack

import tc_capture


def reads_memory(x):
    return torch.from_dlpack(torch.utils.dlpack.to_dlpack(x)) * 2


def program(x):
    y = x.sin()
    return reads_memory(y) + 1


def test_a_call_reading_memory_is_a_break_with_its_reason():
    for _ in range(2):
        x = torch.randn(5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = tc_capture.capture(program, x)
        torch.testing.assert_close(report.result, program(x))
        assert any("data pointer" in str(b) for b in report.breaks), report.breaks
