"""Tiny HF transformers models trained with ``labels=`` (the loss computed inside ``forward``)
through ``tc.compile``: graphs captured per forward, graph counts over sequence lengths under
dynamic shapes, and values and every parameter's gradient against eager.

The back end is a counting wrapper around ``tc.backends.aot_eager`` (capture, tc_autograd's
trace of the symbolic graph, ATen run eagerly): what is counted here is capture's work; the zoo
(``tests/zoo``) runs the same families through inductor."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import tc
import tc.backends

transformers = pytest.importorskip("transformers")

VOCAB = 99
TOL = dict(atol=1e-5, rtol=1e-4)


def _gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def _bert():
    return transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def _t5():
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_decoder_layers=2, num_heads=4,
        relative_attention_num_buckets=8, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0))


MODELS = {"gpt2": _gpt2, "bert": _bert, "t5": _t5}


def _batch(name: str, seed: int, length: int = 8) -> dict:
    """Token ids, a padding mask (the second sequence ends in 2 pads) and labels: the ids for
    causal and seq2seq models (T5 makes its decoder inputs from them), masked-LM labels with
    every other position ignored for BERT."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (2, length), generator=g)
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, -2:] = 0
    labels = ids.clone()
    if name == "bert":
        labels = torch.randint(3, VOCAB, (2, length), generator=g)
        labels[:, ::2] = -100
    return dict(input_ids=ids, attention_mask=mask, labels=labels)


class Counting:
    def __init__(self):
        self.graphs = []

    def __call__(self, graph, example_inputs):
        self.graphs.append(graph)
        return tc.backends.aot_eager(graph, example_inputs)


def _compiled(model, **options):
    be = Counting()

    @tc.tc_ir_backend
    def backend(graph, example_inputs):
        return be(graph, example_inputs)

    return tc.compile(model, backend=backend, **options), be


def _step_matches(compiled, model, ref, batch, what: str) -> None:
    """One forward and backward of each; loss, logits and every parameter's gradient compared."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(**batch)
    fallbacks = [str(w.message) for w in caught if str(w.message).startswith(("tc:", "tc_capture:"))]
    assert not fallbacks, f"{what}: {fallbacks}"  # a back end or a capture that went eager warns
    out_ref = ref(**batch)
    torch.testing.assert_close(out.loss, out_ref.loss, **TOL, msg=lambda m: f"{what}: loss: {m}")
    torch.testing.assert_close(out.logits, out_ref.logits, **TOL, msg=lambda m: f"{what}: logits: {m}")
    out.loss.backward()
    out_ref.loss.backward()
    ours = dict(model.named_parameters())
    for name, p in ref.named_parameters():
        assert ours[name].grad is not None, f"{what}: no gradient for {name}"
        torch.testing.assert_close(ours[name].grad, p.grad, **TOL, msg=lambda m, name=name: f"{what}: grad {name}: {m}")
    model.zero_grad()
    ref.zero_grad()


# Graphs per forward at HEAD (README "HF models"); a new break would raise them.
GRAPHS_PER_FORWARD = {"gpt2": 1, "bert": 1, "t5": 1}


@pytest.mark.parametrize("name", list(MODELS))
def test_hf_model_trained_with_labels_captures_graphs_and_matches_eager(name):
    torch.manual_seed(0)
    ref = MODELS[name]().train()
    model = copy.deepcopy(ref)
    compiled, be = _compiled(model)
    _step_matches(compiled, model, ref, _batch(name, 1), f"{name} seed 1")
    first = len(be.graphs)
    assert 1 <= first <= GRAPHS_PER_FORWARD[name], [len(g.calls) for g in be.graphs]
    _step_matches(compiled, model, ref, _batch(name, 2), f"{name} seed 2")
    assert len(be.graphs) == first  # same shapes: every graph's guards hold


@pytest.mark.parametrize("dynamic, most", [(True, 1), (None, 2)])
def test_gpt2_trained_with_labels_over_lengths_compiles_at_most(dynamic, most):
    """HF's causal-LM loss pads the labels (``F.pad(labels, (0, 1), value=-100)``): the padded
    length stays a symbol, so five lengths compile once with ``dynamic=True``, twice at most with
    automatic dynamic shapes."""
    torch.manual_seed(0)
    ref = _gpt2().train()
    model = copy.deepcopy(ref)
    compiled, be = _compiled(model, dynamic=dynamic)
    for length in [8, 13, 24, 40, 9]:
        ids = torch.randint(0, VOCAB, (2, length))
        _step_matches(compiled, model, ref, dict(input_ids=ids, labels=ids), f"length {length}")
        assert len(be.graphs) <= most, f"length {length}: {len(be.graphs)} compiles"
