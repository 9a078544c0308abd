"""Token-level format of the generator, shared by training and by generation.

Training and inference must build prompts identically, or the fine-tuned model sees at generation
time a prompt it was never trained on. :class:`PromptFormat` is the single definition of that
format; it is stored in ``training.json`` and read back by the generation backend.

Three prompt styles:

- ``seq2seq`` (T5...): the encoder reads the input text, the decoder is trained on the target.
- ``chat`` (causal model whose tokenizer has a chat template): the input is the user message,
  rendered with the template and the generation prompt; the target follows, then EOS.
- ``plain`` (causal model without a template): ``"input\\n"`` then the target and EOS.

For causal models the loss covers only the target tokens (prompt positions are labelled -100).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ragtrail.jsonsafe import JsonObject
from ragtrail.train.data import ANSWER_TOKEN, TrainingExample

IGNORE_INDEX = -100
"""Label value that the transformers loss ignores (padding and, for causal models, the prompt)."""

PROMPT_STYLES = ("seq2seq", "chat", "plain")


def add_answer_token(tokenizer: Any) -> int:
    """Add ``<a>`` to the tokenizer (once) and return its id; also make sure a pad token exists.

    ``<a>`` is an *added* token (always one token, never split, matched on the raw text) but not
    flagged "special": decoding with ``skip_special_tokens=True`` -- what generation backends do
    to drop EOS and padding -- must keep it, since it separates the question from the answer.
    ``lstrip`` folds the space before it into the token: otherwise ``"question? <a>"`` encodes the
    space as a lone space token the model would also have to learn to emit. (Decoded text then
    reads ``"question?<a> answer"``; :func:`~ragtrail.train.data.parse_generation` handles both.)
    """
    from tokenizers import AddedToken

    if ANSWER_TOKEN not in tokenizer.get_vocab():
        token = AddedToken(ANSWER_TOKEN, special=False, normalized=False, lstrip=True)
        tokenizer.add_tokens([token])
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ValueError("tokenizer has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return int(tokenizer.convert_tokens_to_ids(ANSWER_TOKEN))


@dataclass(frozen=True)
class PromptFormat:
    """How one example becomes token ids (see module docstring). Immutable and JSON-able."""

    style: str
    max_source_len: int = 384
    max_target_len: int = 96

    def __post_init__(self) -> None:
        if self.style not in PROMPT_STYLES:
            raise ValueError(f"unknown prompt style {self.style!r}; known: {PROMPT_STYLES}")
        if self.max_source_len < 1 or self.max_target_len < 2:
            raise ValueError("max_source_len must be >= 1 and max_target_len >= 2")

    @classmethod
    def for_model(
        cls, tokenizer: Any, *, is_encoder_decoder: bool, max_source_len: int, max_target_len: int
    ) -> PromptFormat:
        """Pick the style from the architecture and whether the tokenizer has a chat template."""
        if is_encoder_decoder:
            style = "seq2seq"
        elif getattr(tokenizer, "chat_template", None):
            style = "chat"
        else:
            style = "plain"
        return cls(style, max_source_len=max_source_len, max_target_len=max_target_len)

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: JsonObject) -> PromptFormat:
        return cls(
            style=str(data["style"]),
            max_source_len=int(data["max_source_len"]),
            max_target_len=int(data["max_target_len"]),
        )

    # ------------------------------------------------------------------ prompts

    def truncate_source(self, tokenizer: Any, source: str) -> str:
        """Cut the input text to ``max_source_len`` tokens (the label prefix comes first, so it
        survives; the end of a long context is what gets dropped)."""
        ids = tokenizer(source, add_special_tokens=False)["input_ids"]
        if len(ids) <= self.max_source_len:
            return source
        return str(tokenizer.decode(ids[: self.max_source_len], skip_special_tokens=False))

    def render_prompt(self, tokenizer: Any, source: str) -> str:
        """The exact prompt text for an input (after truncation)."""
        source = self.truncate_source(tokenizer, source)
        if self.style == "chat":
            return str(
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": source}],
                    tokenize=False,
                    add_generation_prompt=True,
                )
            )
        if self.style == "plain":
            return source + "\n"
        return source

    def prompt_ids(self, tokenizer: Any, source: str) -> list[int]:
        """Token ids of the prompt: encoder input (seq2seq) or the causal prefix."""
        text = self.render_prompt(tokenizer, source)
        # A chat template already writes its own BOS/markers; plain text gets the usual specials.
        add_special = self.style != "chat"
        return list(tokenizer(text, add_special_tokens=add_special)["input_ids"])

    def target_ids(self, tokenizer: Any, target: str) -> list[int]:
        """Target ids, cut to ``max_target_len - 1`` tokens, always ending with EOS."""
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("the tokenizer needs an eos token to end targets")
        ids = list(tokenizer(target, add_special_tokens=False)["input_ids"])
        return [*ids[: self.max_target_len - 1], int(eos)]

    def encode(self, tokenizer: Any, example: TrainingExample) -> tuple[list[int], list[int]]:
        """(input_ids, labels) for one example.

        seq2seq: encoder ids and decoder labels. Causal: prompt + target as one sequence, with
        the prompt positions labelled ``IGNORE_INDEX`` so only the target is learned.
        """
        src = self.prompt_ids(tokenizer, example.input)
        tgt = self.target_ids(tokenizer, example.target)
        if self.style == "seq2seq":
            return src, tgt
        return src + tgt, [IGNORE_INDEX] * len(src) + tgt


def _pad(rows: Sequence[Sequence[int]], value: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([[*r, *([value] * (width - len(r)))] for r in rows], dtype=torch.long)


def collate(
    encoded: Sequence[tuple[list[int], list[int]]], *, pad_id: int, seq2seq: bool
) -> dict[str, torch.Tensor]:
    """Right-pad a batch of :meth:`PromptFormat.encode` outputs into model inputs.

    Padding positions get attention 0 and label ``IGNORE_INDEX``; for seq2seq the model builds
    the decoder inputs from the labels itself (shift right with the decoder start token).
    """
    inputs = [e[0] for e in encoded]
    labels = [e[1] for e in encoded]
    batch = {
        "input_ids": _pad(inputs, pad_id),
        "attention_mask": _pad([[1] * len(r) for r in inputs], 0),
        "labels": _pad(labels, IGNORE_INDEX),
    }
    if not seq2seq and batch["labels"].shape != batch["input_ids"].shape:
        raise ValueError("causal labels must align with input ids")
    return batch
