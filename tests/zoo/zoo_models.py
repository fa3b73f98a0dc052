"""The zoo: real architectures from timm and HF transformers, built at tiny sizes from configs.

Nothing is downloaded: timm models are made with ``pretrained=False`` and HF models from config
objects, both with random weights from a fixed seed. Every case has dropout (and stochastic
depth) at zero, so a training step is deterministic and can be compared with eager exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

BATCH, SEQ, VOCAB, CLASSES = 2, 8, 99, 10
# Images: 4 of them, and CNNs at 64x64 so that their last feature map is at least 2x2: batch norm
# in training over 2 values of a 1x1 map is so ill-conditioned that two correct float32 runs
# differ in gradients by more than the values themselves (the zoo found that, not a tc bug).
IMAGE_BATCH = 4


@dataclass(frozen=True)
class ZooCase:
    """One model: how to build it, make its inputs, and compute a training loss."""

    name: str
    source: str  # "timm" or "hf"
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[torch.Generator], dict[str, Any]]
    loss: Callable[[Any, dict[str, Any]], torch.Tensor]
    fast: bool = False  # part of the slice that `nox -s tests` runs
    notes: str = field(default="")


# ---------------------------------------------------------------- timm image models

def _image(size: int) -> Callable[[torch.Generator], dict[str, Any]]:
    def make(g: torch.Generator) -> dict[str, Any]:
        return {"x": torch.randn(IMAGE_BATCH, 3, size, size, generator=g),
                "target": torch.randint(0, CLASSES, (IMAGE_BATCH,), generator=g)}
    return make


def _image_loss(out: Any, inputs: dict[str, Any]) -> torch.Tensor:
    return F.cross_entropy(out, inputs["target"])


def _timm(name: str, size: int, **kwargs: Any) -> ZooCase:
    def build() -> torch.nn.Module:
        import timm  # only the zoo session installs timm
        return timm.create_model(name, pretrained=False, num_classes=CLASSES, drop_rate=0.0, **kwargs)
    return ZooCase(f"timm/{name}", "timm", build, _image(size), _image_loss)


TIMM_CASES = [
    _timm("resnet18", 64, layers=(1, 1, 1, 1)),
    _timm("convnext_atto", 64, depths=(1, 1, 1, 1), drop_path_rate=0.0),
    _timm("efficientnet_b0", 64, drop_path_rate=0.0),
    _timm("mobilenetv3_small_050", 64),
    _timm("regnetx_002", 64),
    _timm("vit_tiny_patch16_224", 32, img_size=32, patch_size=8, depth=2, drop_path_rate=0.0),
    _timm("deit_tiny_distilled_patch16_224", 32, img_size=32, patch_size=8, depth=2),
    _timm("swin_tiny_patch4_window7_224", 56, img_size=56, embed_dim=24, depths=(1, 1), num_heads=(2, 4),
          window_size=7, drop_path_rate=0.0),
    _timm("densenet121", 64, growth_rate=8, block_config=(1, 2, 2, 1)),
    _timm("mixer_s16_224", 32, img_size=32),
    _timm("ghostnet_050", 64),
    _timm("mobilevit_xxs", 64),
    _timm("levit_128s", 64, img_size=64),
    _timm("resnext26ts", 64),
]


# ---------------------------------------------------------------- HF transformers models

def _tokens(g: torch.Generator, masked_lm: bool, seq2seq: bool) -> dict[str, Any]:
    ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=g)
    extra = {"decoder_input_ids": torch.randint(3, VOCAB, (BATCH, SEQ), generator=g)} if seq2seq else {}
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, -2:] = 0  # the second sequence is padded: attention masking is exercised too
    if masked_lm:
        labels = torch.randint(3, VOCAB, (BATCH, SEQ), generator=g)
        labels[:, ::2] = -100  # positions without a label, as a masked-LM batch has
    else:
        labels = ids.clone()
    return {"input_ids": ids, "attention_mask": mask, **extra, "labels": labels}


def _hf_loss(out: Any, inputs: dict[str, Any]) -> torch.Tensor:
    return out.loss


def _hf(name: str, model_cls: str, config_cls: str, masked_lm: bool, fast: bool = False,
        seq2seq: bool = False, **config: Any) -> ZooCase:
    def build() -> torch.nn.Module:
        import transformers
        cfg = getattr(transformers, config_cls)(**config)
        cfg._attn_implementation = "sdpa"
        return getattr(transformers, model_cls)(cfg)
    return ZooCase(f"hf/{name}", "hf", build, lambda g: _tokens(g, masked_lm, seq2seq), _hf_loss, fast=fast)


_BERTISH = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=37, max_position_embeddings=64, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0)
_DECODER = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=37, max_position_embeddings=64, attention_dropout=0.0)

HF_CASES = [
    _hf("bert", "BertForMaskedLM", "BertConfig", True, fast=True, **_BERTISH),
    _hf("distilbert", "DistilBertForMaskedLM", "DistilBertConfig", True, fast=True, vocab_size=VOCAB, dim=32,
        n_layers=2, n_heads=4, hidden_dim=37, max_position_embeddings=64, dropout=0.0,
        attention_dropout=0.0),
    _hf("roberta", "RobertaForMaskedLM", "RobertaConfig", True, **_BERTISH),
    _hf("albert", "AlbertForMaskedLM", "AlbertConfig", True, embedding_size=16, **_BERTISH),
    _hf("electra", "ElectraForMaskedLM", "ElectraConfig", True, embedding_size=16, **_BERTISH),
    _hf("gpt2", "GPT2LMHeadModel", "GPT2Config", False, fast=True, vocab_size=VOCAB, n_embd=32,
        n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    _hf("gpt_neox", "GPTNeoXForCausalLM", "GPTNeoXConfig", False, hidden_dropout=0.0, **_DECODER),
    _hf("llama", "LlamaForCausalLM", "LlamaConfig", False, num_key_value_heads=2, **_DECODER),
    _hf("mistral", "MistralForCausalLM", "MistralConfig", False, num_key_value_heads=2, sliding_window=4,
        **_DECODER),
    _hf("qwen2", "Qwen2ForCausalLM", "Qwen2Config", False, num_key_value_heads=2, **_DECODER),
    _hf("gemma", "GemmaForCausalLM", "GemmaConfig", False, num_key_value_heads=2, head_dim=8, **_DECODER),
    _hf("phi", "PhiForCausalLM", "PhiConfig", False, resid_pdrop=0.0, embd_pdrop=0.0, **_DECODER),
    _hf("opt", "OPTForCausalLM", "OPTConfig", False, vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, ffn_dim=37, word_embed_proj_dim=32, max_position_embeddings=64,
        dropout=0.0, attention_dropout=0.0),
    _hf("t5", "T5ForConditionalGeneration", "T5Config", False, seq2seq=True, vocab_size=VOCAB, d_model=32, d_kv=8,
        d_ff=37, num_layers=2, num_decoder_layers=2, num_heads=4, relative_attention_num_buckets=8,
        dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0),
    _hf("bart", "BartForConditionalGeneration", "BartConfig", False, seq2seq=True, vocab_size=VOCAB, d_model=32,
        encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0),
]

CASES = {case.name: case for case in TIMM_CASES + HF_CASES}
