"""Hugging Face models (tiny random-weight configs, nothing downloaded), compared with eager.

Skipped when ``transformers`` is not installed.
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import tree_close

import tc_capture

transformers = pytest.importorskip("transformers")


def _gpt2():
    c = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=2)
    c.use_cache = False
    return transformers.GPT2LMHeadModel(c), lambda o: o.logits


def _bert():
    c = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
    c.use_cache = False
    return transformers.BertModel(c), lambda o: o.last_hidden_state


def _llama():
    c = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                                 vocab_size=1000)
    c.use_cache = False
    return transformers.LlamaForCausalLM(c), lambda o: o.logits


MODELS = {"gpt2": _gpt2, "bert": _bert, "llama": _llama}



def _eval_in_one_graph(model, get):
    """Eval outputs equal eager's (a hit, then a new shape) and the model is one graph, no break."""
    model.eval()
    f = tc_capture.optimize(tc_capture.interpret_backend)(model)
    with torch.no_grad():
        for shape in ((2, 8), (2, 8), (3, 5)):
            ids = torch.randint(0, 1000, shape)
            tree_close(get(model(input_ids=ids)), get(f(input_ids=ids)))
        r = tc_capture.capture(model, input_ids=torch.randint(0, 1000, (2, 8)))
    assert (r.graph_count, r.graph_break_count) == (1, 0), r.breaks
    return r

@pytest.mark.parametrize("name", list(MODELS))
def test_hf_eval_one_graph(name):
    torch.manual_seed(0)
    model, get = MODELS[name]()
    r = _eval_in_one_graph(model, get)
    assert type(r.result) is type(model(input_ids=torch.randint(0, 1000, (2, 8))))


@pytest.mark.parametrize("name", list(MODELS))
def test_hf_train_gradients(name):
    torch.manual_seed(0)
    model, get = MODELS[name]()
    model.train()
    for mod in model.modules():  # dropout draws differ between runs: compare without it
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    if hasattr(model.config, "attn_pdrop"):
        model.config.attn_pdrop = 0.0
    twin = copy.deepcopy(model)
    f = tc_capture.optimize(tc_capture.interpret_backend)(twin)
    ids = torch.randint(0, 1000, (2, 8))
    get(model(input_ids=ids)).square().mean().backward()
    get(f(input_ids=ids)).square().mean().backward()
    for (n, a), b in zip(model.named_parameters(), twin.parameters()):
        assert (a.grad is None) == (b.grad is None), n
        if a.grad is not None:
            assert torch.allclose(a.grad, b.grad, atol=1e-5, rtol=1e-4), n
    r = tc_capture.capture(twin, input_ids=ids)
    assert r.graph_break_count == 0, r.breaks


def _rotary_forward_517(self, x, position_ids):
    """LlamaRotaryEmbedding.forward as transformers 5.17 has it: float32 under ``maybe_autocast``,
    which returns ``contextlib.nullcontext()`` (an ``ABCMeta`` class) when autocast is off."""
    from transformers.utils.generic import maybe_autocast

    inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
    position_ids_expanded = position_ids[:, None, :].float()
    device_type = x.device.type if isinstance(x.device.type, str) and x.device.type != "mps" else "cpu"
    with maybe_autocast(device_type=device_type, enabled=False):  # Force float32
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def test_llama_517_rotary_with_nullcontext_one_graph(monkeypatch):
    generic = pytest.importorskip("transformers.utils.generic")
    if not hasattr(generic, "maybe_autocast"):
        pytest.skip("this transformers has no maybe_autocast")
    from transformers.models.llama import modeling_llama

    monkeypatch.setattr(modeling_llama.LlamaRotaryEmbedding, "forward", _rotary_forward_517)
    torch.manual_seed(0)
    model, get = _llama()
    _eval_in_one_graph(model, get)


def _cache_tensors(cache) -> list:
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


@pytest.mark.parametrize("use_cache", [True, False])
def test_gpt2_default_cache_one_graph(use_cache):
    """GPT-2 as configured by default (``use_cache=True``) builds a ``DynamicCache``, whose
    constructor iterates ``config.per_layer_config`` (a ``collections.abc.Sequence`` view):
    one graph, logits and the returned cache equal eager's, then a decode step with that cache."""
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=64, n_layer=2, n_head=2)).eval()
    f = tc_capture.optimize(tc_capture.interpret_backend)(model)
    ids = torch.randint(0, 1000, (2, 8))
    with torch.no_grad():
        r = tc_capture.capture(model, input_ids=ids, use_cache=use_cache)
        assert (r.graph_count, r.graph_break_count) == (1, 0), r.breaks
        expected, got = model(input_ids=ids, use_cache=use_cache), f(input_ids=ids, use_cache=use_cache)
        tree_close(expected.logits, got.logits)
        if not use_cache:
            assert got.past_key_values is None
            return
        assert type(got.past_key_values) is type(expected.past_key_values)
        tree_close(_cache_tensors(expected.past_key_values), _cache_tensors(got.past_key_values))
        step = torch.randint(0, 1000, (2, 1))
        expected = model(input_ids=step, past_key_values=expected.past_key_values)
        got = f(input_ids=step, past_key_values=got.past_key_values)
        tree_close(expected.logits, got.logits)
        tree_close(_cache_tensors(expected.past_key_values), _cache_tensors(got.past_key_values))
