"""Decoding-time constraints for local transformers models: schema-guided JSON and copy guards.

:class:`DecodingConstraints` builds, per batch, one logits processor applying three rules to each
row independently (a batch may mix schemas and unconstrained rows, so a request's output never
depends on its batch mates):

* **guided JSON** (lm-format-enforcer underneath): a row with a JSON schema may only pick tokens
  that keep its text a valid prefix of a schema-conforming value, and may stop (EOS) only once
  that value is complete. Strings without a ``maxLength`` get one, so a rambling value is closed
  instead of running into the token budget.
* **no repeated spans**: a guided row may not repeat a span of ``no_repeat_ngram`` generated
  tokens. Greedy decoding of a small model falls into loops ("This policy is to be implemented
  by ... This policy is to be implemented by ..."); the short structural runs of JSON stay legal.
* **copy guard**: a row may not reproduce ``copy_span`` consecutive tokens of its request's
  ``avoid_copying`` texts (the few-shot example answers). Measured on SmolLM2-135M, 6 of 8
  question requests echoed the worked example's question word for word without it. The request's
  ``avoid_words`` (the example's subject words its own input never uses: "Elm Street Library",
  "book") are banned as whole tokens too: without that, the 135M model wrote questions
  such as "How long can I hold a book from the Code of Conduct?" about a code-of-conduct text.

Bans never override the schema: when every token the schema allows is banned, the schema's
tokens stay allowed (a forced ``}`` never becomes a dead end).

The tokenizer side of guided JSON (every token's text, arranged as a prefix tree) is costly to
build for a 50k-token vocabulary, so it is built on first use and reused for every call. Inside a
JSON string, lm-format-enforcer allows a precomputed list of tokens per (characters still
required, characters still allowed); it builds each list the first time it is needed by setting
50k bits one at a time from Python (~0.25 s each on SmolLM2's vocabulary, and a 160-character
string visits up to 80 of them). :func:`install_packed_freetext_lists` builds the same lists
with one vectorised packing.

Per step, the parser state of a row is looked up by the row's generated tokens (the prompt does
not change it), so rows of one batch with the same schema and the same output so far share one
state, and the allowed-token masks of all guided rows are unpacked and applied at once.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import LogitsProcessor

from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.backends.model_store import DEFAULT_MAX_STRING_CHARS

DEFAULT_NO_REPEAT_NGRAM = 6
"""Length of generated token spans a guided row may not repeat (0 disables)."""

DEFAULT_COPY_SPAN = 5
"""Consecutive tokens of an ``avoid_copying`` text a row may not reproduce (0 disables)."""


MAX_INTEGER_ENUM = 100
"""Integer ranges up to this size are enforced by listing their values."""


def tighten_schema(schema: JsonObject, max_chars: int) -> JsonObject:
    """A copy of ``schema`` that lm-format-enforcer can enforce completely.

    Strings without ``maxLength`` get ``maxLength=max_chars`` (enums and constants keep their
    fixed length). Integers with a small ``minimum``..``maximum`` range become an enum of the
    range, because the parser checks an integer's digits but not its bounds (a rating field
    would otherwise accept 6555555).
    """

    def visit(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: visit(v) for k, v in node.items()}
            fixed = "enum" in out or "const" in out
            if out.get("type") == "string" and "maxLength" not in out and not fixed:
                out["maxLength"] = max_chars
            low, high = out.get("minimum"), out.get("maximum")
            if (
                out.get("type") == "integer"
                and not fixed
                and isinstance(low, int)
                and isinstance(high, int)
                and 0 <= high - low < MAX_INTEGER_ENUM
            ):
                out["enum"] = list(range(low, high + 1))
            return out
        if isinstance(node, list):
            return [visit(v) for v in node]
        return node

    return visit(copy.deepcopy(schema))


def span_bans(generated: Sequence[int], table: dict[tuple[int, ...], set[int]], n: int) -> set[int]:
    """Tokens that would complete an ``n``-token span listed in ``table`` (prefix -> next tokens)."""
    if n <= 0 or len(generated) < n - 1:
        return set()
    return table.get(tuple(generated[len(generated) - n + 1 :]), set())


def repeat_bans(generated: Sequence[int], n: int) -> set[int]:
    """Tokens that would repeat an ``n``-token span already present in ``generated``."""
    if n <= 0 or len(generated) < n:
        return set()
    tail = list(generated[len(generated) - n + 1 :])
    return {
        generated[i + n - 1]
        for i in range(len(generated) - n + 1)
        if list(generated[i : i + n - 1]) == tail
    }


def span_table(sequences: Sequence[Sequence[int]], n: int) -> dict[tuple[int, ...], set[int]]:
    """Every ``n``-token span of ``sequences`` as ``{first n-1 tokens: {last tokens}}``."""
    table: dict[tuple[int, ...], set[int]] = {}
    if n <= 0:
        return table
    for seq in sequences:
        for i in range(len(seq) - n + 1):
            table.setdefault(tuple(seq[i : i + n - 1]), set()).add(int(seq[i + n - 1]))
    return table


_UNUSABLE_RE = re.compile("[\x00-\x1f\ufffd]")


def _token_texts(tokenizer: Any) -> list[tuple[int, str, bool]]:
    """(id, text, starts_a_word) for every usable token, as lm-format-enforcer expects.

    A token's text is decoded after a fixed "0" token so leading spaces survive (SentencePiece
    and byte-level BPE tokenizers drop them when a token is decoded alone). Left out: special
    tokens; tokens holding control characters, newlines and tabs included (lm-format-enforcer
    would let them into strings, which strict JSON forbids; spaces still separate the JSON
    tokens); and byte fragments that decode to U+FFFD (their text cannot be tracked
    character by character).
    """
    anchor = tokenizer.encode("0", add_special_tokens=False)[-1]
    special = set(tokenizer.all_special_ids)
    out = []
    for idx in range(len(tokenizer)):
        if idx in special:
            continue
        after_anchor = tokenizer.decode([anchor, idx])[1:]
        if _UNUSABLE_RE.search(after_anchor):
            continue
        alone = tokenizer.decode([idx])
        out.append((idx, after_anchor, len(after_anchor) > len(alone)))
    return out


def pack_token_ids(token_ids: Sequence[int], words: int) -> torch.Tensor:
    """``token_ids`` as lm-format-enforcer's bitmask: ``words`` int32 words, token ``t`` is bit
    ``t % 32`` of word ``t // 32`` (bit 31 makes the word negative, as the library's ``|=``)."""
    flags = torch.zeros(words * 32, dtype=torch.bool)
    if len(token_ids):
        flags[torch.as_tensor(list(token_ids), dtype=torch.long)] = True
    weights = torch.ones(32, dtype=torch.int64) << torch.arange(32, dtype=torch.int64)
    packed = (flags.view(words, 32).to(torch.int64) * weights).sum(dim=1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def unpack_token_masks(bitmasks: torch.Tensor, vocab: int) -> torch.Tensor:
    """Packed bitmasks (rows x words, int32) as boolean masks (rows x ``vocab``)."""
    bits = torch.arange(32, dtype=torch.int32)
    return ((bitmasks.unsqueeze(-1) >> bits) & 1).flatten(1)[:, :vocab].bool()


def install_packed_freetext_lists(tokenizer_data: Any) -> None:
    """Make the JSON-string token lists of ``tokenizer_data`` (a ``TokenEnforcerTokenizerData``
    with bitmasks) build by :func:`pack_token_ids` instead of bit by bit.

    Replaces ``JsonFreetextTokenCache.lookup_allowed_tokens`` (lm-format-enforcer 0.11) on this
    one instance; the lists are the same (tested against the library's own method).
    """
    from lmformatenforcer.tokenlist import TokenList

    cache = tokenizer_data.tokenizer_tree.json_freetext_tokens

    def lookup_allowed_tokens(min_remaining: int, max_len: int) -> Any:
        key = (min_remaining, max_len)
        if key not in cache.allowlist_cache:
            with_quote = cache.quote_tokens_length_cache.get_indices_between_length(
                min_remaining + 1, max_len + 1
            )
            without_quote = cache.regular_tokens_length_cache.get_indices_between_length(
                -1, max_len
            )
            tokens = TokenList(True, cache.vocab_size)
            tokens.allowed_tokens = pack_token_ids(
                with_quote + without_quote, tokens.allowed_tokens.numel()
            )
            cache.allowlist_cache[key] = tokens
        return cache.allowlist_cache[key]

    cache.lookup_allowed_tokens = lookup_allowed_tokens


def _decode_without_partial_char(tokenizer: Any, tokens: list[int]) -> str:
    # A trailing U+FFFD is half a multi-byte character that the next token completes.
    return str(tokenizer.decode(tokens)).rstrip("\ufffd")


@dataclass
class RowRules:
    """What constrains one row: a schema enforcer, a copy-guard table, banned word tokens."""

    enforcer: Any | None = None
    copy_table: dict[tuple[int, ...], set[int]] | None = None
    word_bans: frozenset[int] = frozenset()

    @property
    def active(self) -> bool:
        return self.enforcer is not None or self.copy_table is not None or bool(self.word_bans)


class DecodingConstraints:
    """Builds per-batch logits processors for one tokenizer.

    Args:
        tokenizer: the model's tokenizer.
        eos_ids: token ids that end a sequence (allowed once the JSON value is complete).
        vocab_size: number of logits the model emits (may exceed ``len(tokenizer)``).
        max_string_chars: ``maxLength`` given to unbounded schema strings.
        no_repeat_ngram: generated spans a guided row may not repeat (0: no ban).
        copy_span: tokens of an ``avoid_copying`` text a row may not reproduce (0: no guard).
    """

    def __init__(
        self,
        tokenizer: Any,
        eos_ids: Sequence[int],
        vocab_size: int,
        *,
        max_string_chars: int = DEFAULT_MAX_STRING_CHARS,
        no_repeat_ngram: int = DEFAULT_NO_REPEAT_NGRAM,
        copy_span: int = DEFAULT_COPY_SPAN,
    ) -> None:
        self.tokenizer = tokenizer
        self.eos_ids = sorted(set(eos_ids))
        self.vocab_size = vocab_size
        self.max_string_chars = max_string_chars
        self.no_repeat_ngram = no_repeat_ngram
        self.copy_span = copy_span
        self._tokenizer_data: Any | None = None
        # Example texts and words come from a few prompts: their token ids are worked out once.
        self._copy_tables: dict[tuple[str, ...], dict[tuple[int, ...], set[int]] | None] = {}
        self._word_ids: dict[str, frozenset[int]] = {}

    def _json_data(self) -> Any:
        if self._tokenizer_data is None:
            from lmformatenforcer.tokenenforcer import TokenEnforcerTokenizerData

            data = TokenEnforcerTokenizerData(
                _token_texts(self.tokenizer),
                functools.partial(_decode_without_partial_char, self.tokenizer),
                self.eos_ids if len(self.eos_ids) > 1 else self.eos_ids[0],
                True,  # allowed tokens as a bitmask tensor: far cheaper than id lists
                self.vocab_size,
            )
            install_packed_freetext_lists(data)
            self._tokenizer_data = data
        return self._tokenizer_data

    def word_tokens(self, words: Sequence[str]) -> frozenset[int]:
        """The single-token spellings of ``words`` (as is, lower case, capitalised; with and
        without a leading space). Words that split into several tokens are skipped rather than
        banning a fragment other words share."""
        ids: set[int] = set()
        for word in words:
            if word not in self._word_ids:
                low = word.lower()
                found = set()
                for form in {word, low, low.capitalize()}:
                    for variant in (form, " " + form):
                        enc = self.tokenizer.encode(variant, add_special_tokens=False)
                        if len(enc) == 1:
                            found.add(int(enc[0]))
                self._word_ids[word] = frozenset(found)
            ids |= self._word_ids[word]
        return frozenset(ids)

    def _copy_table(self, texts: tuple[str, ...]) -> dict[tuple[int, ...], set[int]] | None:
        if not texts or self.copy_span <= 0:
            return None
        if texts not in self._copy_tables:
            seqs = [self.tokenizer.encode(t, add_special_tokens=False) for t in texts]
            self._copy_tables[texts] = span_table(seqs, self.copy_span) or None
        return self._copy_tables[texts]

    def processor(
        self,
        schemas: Sequence[JsonObject | None],
        avoid: Sequence[Sequence[str]],
        prompt_length: int,
        avoid_words: Sequence[Sequence[str]] | None = None,
    ) -> ConstrainedRows | None:
        """A logits processor for one batch, or ``None`` when no row is constrained.

        ``schemas[i]``, ``avoid[i]`` and ``avoid_words[i]`` are row ``i``'s JSON schema (or
        None), texts not to copy and words not to use; ``prompt_length`` is where generated
        tokens start in ``input_ids``.
        """
        row_words = list(avoid_words) if avoid_words is not None else [()] * len(schemas)
        rows: list[RowRules] = []
        enforcers: dict[str, Any] = {}
        for schema, texts, words in zip(schemas, avoid, row_words, strict=True):
            rule = RowRules()
            if schema is not None:
                key = json.dumps(schema, sort_keys=True)
                if key not in enforcers:
                    from lmformatenforcer import JsonSchemaParser
                    from lmformatenforcer.tokenenforcer import TokenEnforcer

                    parser = JsonSchemaParser(tighten_schema(schema, self.max_string_chars))
                    enforcers[key] = TokenEnforcer(self._json_data(), parser)
                rule.enforcer = enforcers[key]
            rule.copy_table = self._copy_table(tuple(texts))
            rule.word_bans = self.word_tokens(words)
            rows.append(rule)
        if not any(r.active for r in rows):
            return None
        return ConstrainedRows(
            rows, prompt_length, set(self.eos_ids), self.no_repeat_ngram, self.copy_span
        )


class ConstrainedRows(LogitsProcessor):
    """Applies each row's :class:`RowRules` to its logits (see the module docstring)."""

    def __init__(
        self,
        rows: list[RowRules],
        prompt_length: int,
        eos_ids: set[int],
        no_repeat_ngram: int,
        copy_span: int,
    ) -> None:
        self.rows = rows
        self.prompt_length = prompt_length
        self.eos_ids = eos_ids
        self.no_repeat_ngram = no_repeat_ngram
        self.copy_span = copy_span

    def subset(self, rows: Sequence[int]) -> ConstrainedRows:
        """The processor of the given rows only (their parser states are kept)."""
        return ConstrainedRows(
            [self.rows[r] for r in rows],
            self.prompt_length,
            self.eos_ids,
            self.no_repeat_ngram,
            self.copy_span,
        )

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return self.apply(input_ids[:, self.prompt_length :].tolist(), scores)

    def apply(
        self, generated_rows: Sequence[Sequence[int]], scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        """Masks ``scores`` (rows x vocabulary, in place) given each row's generated tokens."""
        vocab = scores.shape[-1]
        guided: list[tuple[int, set[int], torch.Tensor]] = []
        for row, rule in enumerate(self.rows):
            if not rule.active:
                continue
            generated = generated_rows[row]
            if any(t in self.eos_ids for t in generated):
                continue  # finished row: generate() pads it regardless of the scores
            banned: set[int] = set(rule.word_bans)
            if rule.copy_table is not None:
                banned |= span_bans(generated, rule.copy_table, self.copy_span)
            if rule.enforcer is None:
                if banned:
                    scores[row, [t for t in banned if t < vocab]] = float("-inf")
                continue
            banned |= repeat_bans(generated, self.no_repeat_ngram)
            # The parser state depends on the generated tokens only, so they are the key.
            bitmask = rule.enforcer.get_allowed_tokens(generated).allowed_tokens
            guided.append((row, banned, bitmask))
        if not guided:
            return scores
        allowed = unpack_token_masks(torch.stack([bitmask for _, _, bitmask in guided]), vocab)
        any_allowed = allowed.any(dim=1).tolist()
        for k, (_, banned, _) in enumerate(guided):
            if not any_allowed[k]:
                allowed[k] = True  # nothing allowed: leave the row's scores alone
            elif banned:
                narrowed = allowed[k].clone()
                narrowed[[t for t in banned if t < vocab]] = False
                if narrowed.any():
                    allowed[k] = narrowed
        rows = [row for row, _, _ in guided]
        if len(rows) == scores.shape[0]:
            return scores.masked_fill_(~allowed, float("-inf"))
        scores[rows] = scores[rows].masked_fill(~allowed, float("-inf"))
        return scores
