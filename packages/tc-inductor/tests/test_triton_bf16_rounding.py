"""float32 -> bfloat16 in Triton kernels run by the interpreter rounds as torch and the GPU do (to
the nearest even). Triton 3.6's interpreter truncates instead, so about half of all values came
out one ulp below eager's, and a ReLU or a comparison after the cast could flip: the back end
casts through ``_tc_bf16`` under the interpreter (``BF16_INTERPRETED``)."""

from __future__ import annotations

import torch
from inductor_helpers import build

import tc_inductor
import tc_ir

aten = torch.ops.aten


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.view(torch.int16) == b.view(torch.int16)) | (a.isnan() & b.isnan())


def _values() -> torch.Tensor:
    x = torch.randn(4096) * torch.logspace(-40, 38, 4096)  # float32 subnormals to near the max
    x[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 3.3895e38, -3.3895e38, -0.0])
    return x


def test_cast_and_store_round_to_nearest_even():
    def cast(g, x):  # an explicit cast
        return g.call(aten._to_copy.default, g.call(aten.mul.Tensor, x, 1.0), kwargs={"dtype": torch.bfloat16})

    def store(g, x, y):  # a bf16 result computed in float32, converted where it is stored
        return g.call(aten.add.Tensor, x, y)

    for _ in range(2):
        x = _values()
        k = tc_inductor.compile(build(cast, [x]), [x], {"backend": "triton", "cache": False})
        assert "_tc_bf16(" in k.kernels[0]
        assert bool(_bits_equal(k(x), x.to(torch.bfloat16)).all())
        a, b = torch.randn(4096, dtype=torch.bfloat16), torch.randn(4096, dtype=torch.bfloat16)
        k = tc_inductor.compile(build(store, [a, b]), [a, b], {"backend": "triton", "cache": False})
        assert bool(_bits_equal(k(a, b), tc_ir.interpret(build(store, [a, b]), [a, b])).all())
