"""Writes to a Hugging Face ``ModelOutput`` inside a compiled function keep eager's meaning:
``out[key] = v`` sets the item and the attribute (transformers' segformer adds ``hidden_states``
so, and its decode head reads ``outputs.hidden_states``), ``out.key = v`` sets the attribute
(and the item where the key is one). The object a compiled function returns has eager's items,
in eager's order, and eager's attributes. Before, the item alone was stored: ``out.b`` read
``None`` and the returned object lacked the key, with no graph break."""

from __future__ import annotations

import pytest
import torch

import tc

transformers = pytest.importorskip("transformers")
from dataclasses import dataclass  # noqa: E402

from transformers.utils import ModelOutput  # noqa: E402


@dataclass
class Out(ModelOutput):
    a: torch.Tensor | None = None
    b: torch.Tensor | None = None
    c: tuple | None = None


def set_item(x):
    out = Out(a=x + 1)
    out["b"] = x * 2
    return out


def set_item_read_attr(x):
    out = Out(a=x + 1)
    out["b"] = x * 2
    return out.b + out["a"]


def set_attr(x):
    out = Out(a=x + 1, b=x - 1)
    out.b = x * 3
    out.c = (x.sin(),)
    return out


def set_attr_none(x):
    out = Out(a=x + 1, b=x - 1)
    out.a = None  # ModelOutput keeps the item, the attribute is None
    return out


def out_of_order(x):
    out = Out(b=x - 1)
    out["a"] = x + 1  # after b in the dict, before it in the fields
    return out, out.to_tuple()


def _same(got, want):
    if isinstance(want, ModelOutput):
        assert type(got) is type(want)
        assert list(got.keys()) == list(want.keys())
        for k in want.keys():
            _same(got[k], want[k])
        for name in ("a", "b", "c"):
            _same(getattr(got, name), getattr(want, name))
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    elif want is None:
        assert got is None
    else:
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("fn", [set_item, set_item_read_attr, set_attr, set_attr_none, out_of_order],
                         ids=lambda f: f.__name__)
def test_model_output_writes_match_eager(fn):
    compiled = tc.compile(fn)
    for seed in (0, 1):
        x = torch.randn(3, generator=torch.Generator().manual_seed(seed))
        _same(compiled(x), fn(x))
