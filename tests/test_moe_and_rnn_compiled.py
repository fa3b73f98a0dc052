"""Architectures the zoo met on 2026-12-02, in a few lines each, through ``tc.compile``
with the default back end, against eager on fresh inputs (values and every gradient):

- a mixture-of-experts layer as transformers writes it without grouped_mm: a loop over the
  experts hit, tokens picked by ``torch.where`` and written back by ``index_add_``. Each expert
  sees another token count every call, in a row slice ``chunk`` leaves at a stride of twice its
  width: capture made that count a size symbol only for dense layouts, so every count was a new
  graph until the recompile limit sent the layer to Python (Mixtral, Qwen2-MoE in the zoo).
- an LSTM trained on the CPU: oneDNN's RNN kernel keeps a workspace for its backward that fake
  tensors give 0 bytes and a compiled forward (under no_grad) none at all; the backward crashed
  (timm sequencer2d).
"""

from __future__ import annotations

import copy
import warnings

import torch
import torch.nn.functional as F
from torch import nn

import tc


class Experts(nn.Module):
    def __init__(self, experts=4, hidden=8, inner=6):
        super().__init__()
        self.experts = experts
        self.gate_up = nn.Parameter(torch.randn(experts, 2 * inner, hidden) / hidden ** 0.5)
        self.down = nn.Parameter(torch.randn(experts, hidden, inner) / inner ** 0.5)
        self.router = nn.Linear(hidden, experts, bias=False)

    def forward(self, x):
        weights, chosen = torch.topk(self.router(x).softmax(-1), 2, dim=-1)
        out = torch.zeros_like(x)
        with torch.no_grad():
            mask = F.one_hot(chosen, num_classes=self.experts).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for e in hit:
            e = e[0]
            slot, token = torch.where(mask[e])
            gate, up = F.linear(x[token], self.gate_up[e]).chunk(2, dim=-1)
            h = F.linear(F.silu(gate) * up, self.down[e]) * weights[token, slot, None]
            out.index_add_(0, token, h)
        return out


def _steps(model: nn.Module, make, calls: int) -> None:
    """``calls`` training steps of ``model`` compiled and eager, on the same fresh inputs each."""
    compiled_model = copy.deepcopy(model)
    compiled = tc.compile(compiled_model)
    for seed in range(calls):
        x = make(torch.Generator().manual_seed(seed))
        want = model(x)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = compiled(x)
        fallbacks = [str(w.message) for w in caught if str(w.message).startswith(("tc:", "tc_capture:"))
                     and "graph breaks" not in str(w.message)]  # the note on many breaks is no fallback
        assert not fallbacks, fallbacks
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        for m, y in ((model, want), (compiled_model, got)):
            m.zero_grad(set_to_none=True)
            (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        for (name, p), q in zip(model.named_parameters(), compiled_model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-5, msg=name)


def test_mixture_of_experts_loop_over_changing_token_counts():
    torch.manual_seed(0)
    # 12 calls: each expert meets many token counts (more than the recompile limit of 8)
    _steps(Experts(), lambda g: torch.randn(16, 8, generator=g), calls=12)


def test_lstm_training_on_the_cpu():
    torch.manual_seed(0)
    lstm = nn.LSTM(8, 6, batch_first=True, bidirectional=True)

    class Last(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = lstm

        def forward(self, x):
            out, (h, c) = self.lstm(x)
            return out[..., :6].tanh() + out[..., 6:] * h.sum(0).unsqueeze(1) + c[0].unsqueeze(1)

    _steps(Last(), lambda g: torch.randn(3, 4, 8, generator=g), calls=2)
