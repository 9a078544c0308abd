"""Tiny transformers models built from a config, with a BPE tokenizer trained on the fly.

No weights exist offline for T5 or Llama, so tests build random ones: outputs are gibberish and
only the mechanics (batching, padding, constraints, adapters, training) can be checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    T5Config,
    T5ForConditionalGeneration,
)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<eos>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
"""A minimal chat template for the causal model (the seq2seq model renders without one)."""


def train_tokenizer(
    out_dir: Path,
    corpus: Sequence[str],
    *,
    chat_template: str | None,
    vocab_size: int = 320,
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (every byte encodable) trained on ``corpus``, saved to ``out_dir``."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "<eos>", "<unk>", "<bos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(list(corpus), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        bos_token="<bos>",
    )
    if chat_template:
        fast.chat_template = chat_template
    fast.save_pretrained(out_dir)
    return fast


def build_tiny_llama(
    out: Path,
    corpus: Sequence[str],
    *,
    vocab_size: int = 320,
    max_positions: int = 128,
    initializer_range: float = 0.02,
) -> Path:
    """A 2-layer Llama with the chat template, saved with its tokenizer to ``out``."""
    tok = train_tokenizer(out, corpus, chat_template=CHAT_TEMPLATE, vocab_size=vocab_size)
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
        initializer_range=initializer_range,
    )
    LlamaForCausalLM(cfg).save_pretrained(out)
    return out


def build_tiny_t5(
    out: Path, corpus: Sequence[str], *, vocab_size: int = 320, dropout_rate: float = 0.1
) -> Path:
    """A 2-layer T5 (no chat template), saved with its tokenizer to ``out``."""
    tok = train_tokenizer(out, corpus, chat_template=None, vocab_size=vocab_size)
    torch.manual_seed(0)
    cfg = T5Config(
        vocab_size=len(tok),
        d_model=32,
        d_ff=64,
        d_kv=16,
        num_layers=2,
        num_heads=2,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
        dropout_rate=dropout_rate,
    )
    T5ForConditionalGeneration(cfg).save_pretrained(out)
    return out
