"""Tiny transformers models built from a config, with a BPE tokenizer trained on the fly.

No weights exist offline for T5, Llama or any NLI model, so tests build random ones: outputs are
gibberish and only the mechanics (batching, padding, constraints, adapters, training) can be
checked. The tiny NLI classifier is the exception: its classification head is set so that one
class wins on every input, which makes its verdicts known in advance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    BertTokenizerFast,
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
    byte_alphabet: bool = True,
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on ``corpus``, saved to ``out_dir``.

    With ``byte_alphabet`` every byte is encodable; without it, characters absent from the
    corpus encode as ``<unk>``.
    """
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "<eos>", "<unk>", "<bos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if byte_alphabet else [],
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
    byte_alphabet: bool = True,
) -> Path:
    """A 2-layer Llama with the chat template, saved with its tokenizer to ``out`` (see
    :func:`train_tokenizer` for ``byte_alphabet``)."""
    tok = train_tokenizer(
        out, corpus, chat_template=CHAT_TEMPLATE, vocab_size=vocab_size, byte_alphabet=byte_alphabet
    )
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
    out: Path,
    corpus: Sequence[str],
    *,
    vocab_size: int = 320,
    dropout_rate: float = 0.1,
    byte_alphabet: bool = True,
) -> Path:
    """A 2-layer T5 (no chat template), saved with its tokenizer to ``out``."""
    tok = train_tokenizer(
        out, corpus, chat_template=None, vocab_size=vocab_size, byte_alphabet=byte_alphabet
    )
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


def wordpiece_tokenizer(vocab: Sequence[str]) -> BertTokenizerFast:
    """A WordPiece tokenizer over ``vocab`` (duplicates dropped, first one kept). The vocabulary
    is passed as a mapping: transformers 5 ignores ``vocab_file`` here (every word [UNK])."""
    return BertTokenizerFast(vocab={word: i for i, word in enumerate(dict.fromkeys(vocab))})


NLI_WORDS = ("the", "a", "cat", "dog", "sat", "on", "mat", "is", "ferry", "ticket", ".", ",")
"""Word-level vocabulary of the tiny NLI classifier (other words split into letters)."""


def build_tiny_nli_classifier(
    out: Path, id2label: Mapping[int, str], *, winner: int, margin: float = 5.0
) -> Path:
    """A 1-layer BERT sequence classifier whose class ``winner`` wins on every input.

    The classification head's weights are zero and its bias is ``margin`` for ``winner`` and 0
    elsewhere, so the class probabilities are the same known softmax for any input (e.g. three
    classes: ``e**5 / (e**5 + 2)`` for the winner). Saved with ``id2label`` and a WordPiece
    tokenizer to ``out``.
    """
    out.mkdir(parents=True, exist_ok=True)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *NLI_WORDS, *letters]
    vocab += [f"##{c}" for c in letters] + [str(d) for d in range(10)]
    tok = wordpiece_tokenizer(vocab)
    tok.save_pretrained(out)
    labels = {int(i): str(name) for i, name in id2label.items()}
    cfg = BertConfig(
        vocab_size=len(tok),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=len(labels),
        id2label=labels,
        label2id={name: i for i, name in labels.items()},
    )
    torch.manual_seed(0)
    model = BertForSequenceClassification(cfg)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
        model.classifier.bias[winner] = margin
    model.save_pretrained(out)
    return out


TOY_WORDS = (
    "the", "a", "cat", "dog", "bird", "fish", "sleeps", "runs", "in", "on", "garden", "house",
    "yes", "no", "maybe", "is", "there", "what", "where", "why", "how", "summary", "reason",
)  # fmt: skip


def build_tiny_bert_encoder(out: Path) -> Path:
    """A 2-layer BERT encoder (no head) with a WordPiece vocabulary of :data:`TOY_WORDS` and
    letters, saved with its tokenizer to ``out``: a base a cross-encoder judge trains from in
    seconds (it learns word-level toy rules, nothing more)."""
    out.mkdir(parents=True, exist_ok=True)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TOY_WORDS, *letters, "."]
    vocab += [f"##{c}" for c in letters] + [str(d) for d in range(10)]
    tok = wordpiece_tokenizer(vocab)
    tok.save_pretrained(out)
    cfg = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(out)
    return out


def build_tiny_sentence_encoder(out: Path, *, pooling: str = "mean", dense: bool = False) -> Path:
    """A sentence-transformers model (Transformer + Pooling [+ Dense] + Normalize) over
    :func:`build_tiny_bert_encoder`, saved to ``out``: small enough to export in a second."""
    from sentence_transformers import SentenceTransformer, models

    base = build_tiny_bert_encoder(out.with_name(out.name + "-bert"))
    word = models.Transformer(str(base), max_seq_length=48)
    dim = word.get_embedding_dimension()
    modules = [word, models.Pooling(dim, pooling_mode=pooling)]
    if dense:
        modules.append(models.Dense(dim, 8))
    SentenceTransformer(modules=[*modules, models.Normalize()], device="cpu").save(str(out))
    return out
