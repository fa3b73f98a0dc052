"""Library code paths that differ between torch / transformers / torchvision versions.

Faithful small re-creations of the constructs the GPU host's versions run (transformers 5.17's
``maybe_autocast`` with ``nullcontext``, torch 2.11's ``MultiheadAttention`` fast-path checks,
torchvision 0.26's ResNet-50 and ViT-B/16 forwards), each compared with eager on fresh inputs,
twice and with changed inputs, and each in one graph.
"""

from __future__ import annotations

import abc
import contextlib
import copy
import math
import warnings
from collections import OrderedDict
from contextlib import nullcontext
from functools import partial

import pytest
import torch
import torch.nn.modules.activation as activation
from helpers import check, tree_close
from torch import nn

import tc_capture


def one_graph(fn, *args):
    r = tc_capture.capture(fn, *args)
    assert (r.graph_count, r.graph_break_count) == (1, 0), r.breaks
    return r


# ---- transformers 5.17: maybe_autocast -> nullcontext() ---------------------------------------------
def maybe_autocast(device_type, dtype=None, enabled=True, cache_enabled=None):
    """transformers/utils/generic.py (5.17), as LlamaRotaryEmbedding.forward uses it."""
    if device_type == "meta":
        return nullcontext()
    if torch.is_autocast_enabled(device_type) or enabled:
        return torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
    else:
        return nullcontext()


def rotary(x, inv_freq, position_ids):
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
    position_ids_expanded = position_ids[:, None, :].float()
    device_type = x.device.type if isinstance(x.device.type, str) and x.device.type != "mps" else "cpu"
    with maybe_autocast(device_type=device_type, enabled=False):  # Force float32
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def test_maybe_autocast_nullcontext_one_graph():
    def inputs(t=8):
        return torch.randn(2, t, 16), torch.rand(8), torch.arange(t)[None].expand(2, t)

    check(rotary, inputs, lambda: inputs(5))
    r = one_graph(rotary, *inputs())
    assert "torch.is_autocast_enabled('cpu') == False" in r.guards


def test_autocast_query_is_guarded():
    f = tc_capture.optimize(tc_capture.interpret_backend)(rotary)
    args = torch.randn(2, 4, 16), torch.rand(8), torch.arange(4)[None].expand(2, 4)
    tree_close(rotary(*args), f(*args))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the query now answers True: recompile
        tree_close(rotary(*args), f(*args))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        tree_close(rotary(*args), f(*args))


def test_autocast_query_inside_the_regions_own_autocast():
    def fn(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            on = torch.is_autocast_enabled("cpu")
            y = x @ x
        return y.float() * 2 if on else y

    check(fn, lambda: (torch.randn(4, 4),))
    one_graph(fn, torch.randn(4, 4))


class Recorder:
    """A user context manager: Python __enter__/__exit__, state written on entry and exit."""

    def __init__(self, log, scale):
        self.log, self.scale = log, scale

    def __enter__(self):
        self.log.append("enter")
        return self.scale

    def __exit__(self, *exc):
        self.log.append("exit")
        return False


class Base(abc.ABC):
    @abc.abstractmethod
    def apply(self, x): ...


class Doubler(Base):
    def __init__(self, k=2.0):
        self.k = k

    def apply(self, x):
        return x * self.k


def test_python_context_managers_and_abc_classes():
    def fn(x, log):
        with nullcontext(x.sin()) as s, Recorder(log, 3.0) as k:
            y = s * k
        with contextlib.nullcontext():
            y = Doubler(k=0.5).apply(y)
        return y + 1

    check(fn, lambda: (torch.randn(5), []), lambda: (torch.randn(7), []))
    log = []
    one_graph(fn, torch.randn(3), log)
    assert log == ["enter", "exit"]


def test_break_inside_python_context_manager():
    def fn(x, log):
        with Recorder(log, 2.0) as k:
            y = x * k
            print("in the block", end="\r")
            y = y + 1
        return y.cos()

    check(fn, lambda: (torch.randn(5), []))
    log = []
    r = tc_capture.capture(fn, torch.randn(3), log)
    assert r.graph_count == 2 and log == ["enter", "exit"]


def test_abstract_class_is_not_constructed():
    def fn(x):
        return Base()

    with pytest.raises(TypeError):
        tc_capture.optimize(tc_capture.interpret_backend)(fn)(torch.randn(2))


def test_warnings_warn_is_replayed_not_a_break():
    def fn(x):
        y = x + 1
        warnings.warn("mind the gap", UserWarning)
        return y * 2

    f = tc_capture.optimize(tc_capture.interpret_backend)(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            tree_close(fn(torch.ones(3)), f(torch.ones(3)))
    assert [str(w.message) for w in caught] == ["mind the gap"] * 4
    one_graph(fn, torch.ones(3))


# ---- torch state queries -------------------------------------------------------------------------
QUERIES = {
    "is_autocast_enabled()": lambda: torch.is_autocast_enabled(),
    "is_autocast_enabled(cpu)": lambda: torch.is_autocast_enabled("cpu"),
    "any_autocast": lambda: torch._C._is_any_autocast_enabled(),
    "mha_fastpath": lambda: torch.backends.mha.get_fastpath_enabled(),
    "cudnn_enabled": lambda: torch._C._get_cudnn_enabled(),
    "functorch": lambda: torch._C._are_functorch_transforms_active(),
    "make_fx_tracing": lambda: activation._is_make_fx_tracing(),
    "deterministic": lambda: torch.are_deterministic_algorithms_enabled(),
}


@pytest.mark.parametrize("name", list(QUERIES))
def test_state_query_is_folded_and_guarded(name):
    query = QUERIES[name]

    def fn(x):
        return x + 1 if query() else x - 1

    check(fn, lambda: (torch.randn(3),), lambda: (torch.randn(4),))
    r = one_graph(fn, torch.randn(3))
    assert len(r.guards) >= 3


def test_mha_fastpath_switch_recompiles():
    def fn(x):
        return x + 1 if torch.backends.mha.get_fastpath_enabled() else x - 1

    f = tc_capture.optimize(tc_capture.interpret_backend)(fn)
    x = torch.zeros(2)
    assert f(x)[0] == 1
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        assert f(x)[0] == -1
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    assert f(x)[0] == 1


class Mha211(nn.MultiheadAttention):
    """torch 2.11's fast-path checks, in 2.11's order (``_is_make_fx_tracing`` before grad mode)."""

    def forward(self, query, key, value, need_weights=True):
        why_not_fast_path = ""
        if not torch.backends.mha.get_fastpath_enabled():
            why_not_fast_path = "torch.backends.mha.get_fastpath_enabled() was not True"
        elif self.training:
            why_not_fast_path = "training is enabled"
        elif torch.is_autocast_enabled():
            why_not_fast_path = "autocast is enabled"
        if not why_not_fast_path:
            tensor_args = (query, key, value, self.in_proj_weight, self.in_proj_bias, self.out_proj.weight,
                           self.out_proj.bias)
            if torch.overrides.has_torch_function(tensor_args):
                why_not_fast_path = "some Tensor argument has_torch_function"
            elif activation._is_make_fx_tracing():
                why_not_fast_path = "we are running make_fx tracing"
            elif not all(activation._check_arg_device(x) for x in tensor_args):
                why_not_fast_path = "device"
            elif torch.is_grad_enabled() and any(activation._arg_requires_grad(x) for x in tensor_args):
                why_not_fast_path = "grad"
        return super().forward(query, key, value, need_weights=need_weights), why_not_fast_path


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
def test_mha_211_fast_path_checks_one_graph(grad):
    torch.manual_seed(0)
    m = Mha211(16, 2, batch_first=True).eval()

    def fn(x):
        (y, _), why = m(x, x, x, need_weights=False)
        return y, why

    with torch.set_grad_enabled(grad):
        check(fn, lambda: (torch.randn(2, 5, 16),), lambda: (torch.randn(3, 4, 16),))
        one_graph(fn, torch.randn(2, 5, 16))


# ---- torchvision 0.26: ResNet-50 and ViT-B/16 (narrow widths, same code) --------------------------------
def _log_api_usage_once(obj) -> None:
    """torchvision.utils._log_api_usage_once: runs in __init__ only."""
    module = obj.__module__
    if not module.startswith("torchvision"):
        module = f"torchvision.internal.{module}"
    name = obj.__class__.__name__
    torch._C._log_api_usage_once(f"{module}.{name}")


def conv3x3(in_planes, out_planes, stride=1, groups=1, dilation=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=dilation, groups=groups,
                     bias=False, dilation=dilation)


def conv1x1(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class Bottleneck(nn.Module):
    expansion: int = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64, dilation=1,
                 norm_layer=None):
        super().__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = norm_layer(width)
        self.conv2 = conv3x3(width, width, stride, groups, dilation)
        self.bn2 = norm_layer(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)
        out = self.conv3(out)
        out = self.bn3(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=10, width=8):
        super().__init__()
        _log_api_usage_once(self)
        self._norm_layer = nn.BatchNorm2d
        self.inplanes, self.dilation, self.groups, self.base_width = width, 1, 1, 64
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, 2 * width, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 4 * width, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 8 * width, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8 * width * block.expansion, num_classes)

    def _make_layer(self, block, planes, blocks, stride=1):
        norm_layer, downsample = self._norm_layer, None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                                       norm_layer(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample, self.groups, self.base_width, self.dilation,
                        norm_layer)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, groups=self.groups, base_width=self.base_width,
                                dilation=self.dilation, norm_layer=norm_layer))
        return nn.Sequential(*layers)

    def _forward_impl(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.fc(x)
        return x

    def forward(self, x):
        return self._forward_impl(x)


class MLP(nn.Sequential):
    """torchvision.ops.misc.MLP, as MLPBlock builds it."""

    def __init__(self, in_channels, hidden_channels, norm_layer=None, activation_layer=nn.ReLU, inplace=None,
                 bias=True, dropout=0.0):
        params = {} if inplace is None else {"inplace": inplace}
        layers, in_dim = [], in_channels
        for hidden_dim in hidden_channels[:-1]:
            layers.append(nn.Linear(in_dim, hidden_dim, bias=bias))
            if norm_layer is not None:
                layers.append(norm_layer(hidden_dim))
            layers.append(activation_layer(**params))
            layers.append(nn.Dropout(dropout, **params))
            in_dim = hidden_dim
        layers.append(nn.Linear(in_dim, hidden_channels[-1], bias=bias))
        layers.append(nn.Dropout(dropout, **params))
        super().__init__(*layers)
        _log_api_usage_once(self)


class MLPBlock(MLP):
    def __init__(self, in_dim, mlp_dim, dropout):
        super().__init__(in_dim, [mlp_dim, in_dim], activation_layer=nn.GELU, inplace=None, dropout=dropout)


class EncoderBlock(nn.Module):
    def __init__(self, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout,
                 norm_layer=partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        self.num_heads = num_heads
        self.ln_1 = norm_layer(hidden_dim)
        self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads, dropout=attention_dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = norm_layer(hidden_dim)
        self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

    def forward(self, input):
        torch._assert(input.dim() == 3, f"Expected (batch_size, seq_length, hidden_dim) got {input.shape}")
        x = self.ln_1(input)
        x, _ = self.self_attention(x, x, x, need_weights=False)
        x = self.dropout(x)
        x = x + input
        y = self.ln_2(x)
        y = self.mlp(y)
        return x + y


class Encoder(nn.Module):
    def __init__(self, seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout,
                 norm_layer=partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, hidden_dim).normal_(std=0.02))
        self.dropout = nn.Dropout(dropout)
        layers: OrderedDict[str, nn.Module] = OrderedDict()
        for i in range(num_layers):
            layers[f"encoder_layer_{i}"] = EncoderBlock(num_heads, hidden_dim, mlp_dim, dropout, attention_dropout,
                                                        norm_layer)
        self.layers = nn.Sequential(layers)
        self.ln = norm_layer(hidden_dim)

    def forward(self, input):
        torch._assert(input.dim() == 3, f"Expected (batch_size, seq_length, hidden_dim) got {input.shape}")
        input = input + self.pos_embedding
        return self.ln(self.layers(self.dropout(input)))


class VisionTransformer(nn.Module):
    def __init__(self, image_size=16, patch_size=4, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
                 num_classes=10):
        super().__init__()
        _log_api_usage_once(self)
        torch._assert(image_size % patch_size == 0, "Input shape indivisible by patch size!")
        self.image_size, self.patch_size, self.hidden_dim = image_size, patch_size, hidden_dim
        self.conv_proj = nn.Conv2d(3, hidden_dim, kernel_size=patch_size, stride=patch_size)
        seq_length = (image_size // patch_size) ** 2 + 1
        self.class_token = nn.Parameter(torch.randn(1, 1, hidden_dim))
        self.encoder = Encoder(seq_length, num_layers, num_heads, hidden_dim, mlp_dim, 0.0, 0.0)
        self.seq_length = seq_length
        self.heads = nn.Sequential(OrderedDict(head=nn.Linear(hidden_dim, num_classes)))
        fan_in = self.conv_proj.in_channels * self.conv_proj.kernel_size[0] * self.conv_proj.kernel_size[1]
        nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))

    def _process_input(self, x):
        n, c, h, w = x.shape
        p = self.patch_size
        torch._assert(h == self.image_size, f"Wrong image height! Expected {self.image_size} but got {h}!")
        torch._assert(w == self.image_size, f"Wrong image width! Expected {self.image_size} but got {w}!")
        n_h = h // p
        n_w = w // p
        x = self.conv_proj(x)
        x = x.reshape(n, self.hidden_dim, n_h * n_w)
        x = x.permute(0, 2, 1)
        return x

    def forward(self, x):
        x = self._process_input(x)
        n = x.shape[0]
        batch_class_token = self.class_token.expand(n, -1, -1)
        x = torch.cat([batch_class_token, x], dim=1)
        x = self.encoder(x)
        x = x[:, 0]
        x = self.heads(x)
        return x


TV_MODELS = {"resnet50": (lambda: ResNet(Bottleneck, [3, 4, 6, 3]), 32), "vit_b_16": (VisionTransformer, 16)}


def _tv_model_check(make, size, mode):
    torch.manual_seed(0)
    m = make().train(mode == "train")
    if mode == "train":  # batch norm running stats are updated in place: compare two copies
        twin = copy.deepcopy(m)
        f = tc_capture.optimize(tc_capture.interpret_backend)(twin)
        for b in (2, 2, 3):
            x = torch.randn(b, 3, size, size)
            tree_close(m(x), f(x))
        tree_close(dict(m.state_dict()), dict(twin.state_dict()))
    else:
        with torch.set_grad_enabled(mode == "eval"):
            check(None, lambda: (torch.randn(2, 3, size, size),), lambda: (torch.randn(3, 3, size, size),), module=m)
    with torch.set_grad_enabled(mode != "no_grad"):
        r = tc_capture.capture(m, torch.randn(2, 3, size, size))
    assert (r.graph_count, r.graph_break_count) == (1, 0), r.breaks
    return r


@pytest.mark.parametrize("mode", ["eval", "no_grad", "train"])
@pytest.mark.parametrize("name", list(TV_MODELS))
def test_torchvision_like_models_one_graph(name, mode):
    _tv_model_check(*TV_MODELS[name], mode)


def test_torch_assert_on_python_values_adds_no_node():
    def fn(x):
        torch._assert(x.dim() == 2, f"Expected 2-D got {x.shape}")
        return x + 1

    r = one_graph(fn, torch.randn(2, 3))
    assert r.ops_per_graph == [1]
    with pytest.raises(AssertionError):
        tc_capture.optimize(tc_capture.interpret_backend)(fn)(torch.randn(3))


REAL_TV = {"resnet50": ("resnet50", {}, 64), "vit_b_16": ("vit_b_16", {"image_size": 32}, 32)}


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("name", list(REAL_TV))
def test_real_torchvision_models_one_graph(name, mode):
    models = pytest.importorskip("torchvision.models")
    ctor, kwargs, size = REAL_TV[name]
    _tv_model_check(lambda: getattr(models, ctor)(num_classes=10, **kwargs), size, mode)
