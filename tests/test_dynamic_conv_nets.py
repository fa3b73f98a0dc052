"""Conv nets over batch sizes and image sizes, with symbolic sizes (issue 14), in families: pools
(max, average), valid and stride-2 convolutions, and normalisations in training (batch norm, group
norm, layer norm over channels). Each is compiled with ``dynamic=None`` (at most 2 compiles),
``mark_dynamic`` on batch, height and width (1) and ``dynamic=True`` (1), on the C++ back end; the
Triton back end (interpreter) runs each model in one mode over fewer sizes. Values, input and
parameter gradients (and batch norm's running statistics) are compared with eager at every size,
on fresh inputs; no graph may fall back to eager."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from test_dynamic_shapes import KERNELS, TOL, _check, _entries, _no_fallback
from torch import nn

import tc

SIZES = [(2, 16), (3, 20), (4, 12), (2, 23), (5, 14), (3, 11)]  # (batch, image side), shuffled
TRITON_SIZES = [(2, 12), (3, 15), (2, 10)]


class ChannelsLayerNorm(nn.Module):
    """Layer norm over the channels of an NCHW image (as ConvNeXt does)."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, x):
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def _net(name: str) -> nn.Module:
    """One member of the family; every net ends in a flat (batch, features) output."""
    head = [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5)]
    body = {
        "max_pool": [nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1)],
        "avg_pool": [nn.Conv2d(3, 8, 3, padding=1), nn.AvgPool2d(2), nn.GELU(), nn.Conv2d(8, 8, 3)],
        "valid_stride2": [nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2), nn.ReLU(),
                          nn.MaxPool2d(2, ceil_mode=True)],
        "batch_norm": [nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                       nn.Conv2d(8, 8, 3, stride=2), nn.BatchNorm2d(8)],
        "group_norm": [nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.SiLU(), nn.MaxPool2d(2)],
        "layer_norm": [nn.Conv2d(3, 8, 3, stride=2, padding=1), ChannelsLayerNorm(8), nn.ReLU(),
                       nn.AvgPool2d(2, ceil_mode=True)],
    }[name]
    return nn.Sequential(*body, *head)


NETS = ["max_pool", "avg_pool", "valid_stride2", "batch_norm", "group_norm", "layer_norm"]
MODES = {"default": (None, False, 2), "mark_dynamic": (None, True, 1), "dynamic_true": (True, False, 1)}


@pytest.fixture(autouse=True)
def _fresh_caches():
    tc.reset()


def _run(name: str, kernels: str, mode: str, sizes: list) -> None:
    dynamic, mark, most = MODES[mode]
    torch.manual_seed(0)
    m = _net(name)
    twin = copy.deepcopy(m)  # batch norm's running statistics: eager's own copy
    cm = tc.compile(twin, dynamic=dynamic, options=KERNELS[kernels])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for B, H in sizes:
            x = torch.randn(B, 3, H, H + 1)  # height and width differ: two symbols
            if mark:
                for d in (0, 2, 3):
                    tc.mark_dynamic(x, d)
            _check_pair(cm, twin, m, x)
    _no_fallback(caught)
    assert 1 <= _entries(cm) <= most


def _check_pair(cm, twin, m, x) -> None:
    """Like ``_check`` when the compiled module has its own parameters (``twin``): values, input
    gradient, parameter gradients and buffers (running statistics) against eager ``m``."""
    x = x.requires_grad_()
    out, ref = cm(x), m(x)
    torch.testing.assert_close(out, ref, **TOL)
    g = torch.randn_like(ref)
    got = torch.autograd.grad(out, [x, *twin.parameters()], g)
    want = torch.autograd.grad(ref, [x, *m.parameters()], g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOL)
    for a, b in zip(twin.buffers(), m.buffers()):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", NETS)
def test_conv_net_family_cpp(name, mode):
    _run(name, "cpp", mode, SIZES)


@pytest.mark.parametrize("name", NETS)
def test_conv_net_family_triton(name):
    _run(name, "triton", "dynamic_true", TRITON_SIZES)


@pytest.mark.parametrize("name", ["max_pool", "batch_norm"])
def test_conv_net_family_per_shape_kernels(name):
    """``symbolic_kernels=False``: the symbolic graph is specialised per shape (SizeFloat
    arguments evaluated per shape) and still compiles once in capture."""
    _run(name, "cpp-per-shape", "dynamic_true", SIZES[:4])


def test_conv_net_eval_after_training_stays_dynamic():
    torch.manual_seed(0)
    m = _net("batch_norm")
    cm = tc.compile(m, dynamic=True, options=KERNELS["cpp"])
    for B, H in SIZES[:3]:
        _check(cm, m, torch.randn(B, 3, H, H))
    m.eval()
    with torch.no_grad():
        for B, H in SIZES[3:]:
            x = torch.randn(B, 3, H, H)
            torch.testing.assert_close(cm(x), m(x), **TOL)
