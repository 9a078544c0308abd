"""Log-probabilities of a given continuation under a fixed causal LM, with a content cache.

SEER's helpfulness expert (METHODS §10) is ``sigmoid(log p(a | q + e) - log p(a | q))``: the
same answer ``a`` scored under two prompts. :class:`ScoreRequest` is one such score: chat
``messages`` and the ``continuation`` whose log-probability, as the assistant's reply, is wanted.

Rendering (shared with the LPO trainer, :mod:`ragtrail.train.evidence.lpo`): the prompt is the
tokenizer's chat template with the generation prompt (as the transformers backend renders it),
or, for a tokenizer without a template, the messages' contents joined by newlines. Prompt and
continuation are tokenised separately and their ids concatenated, so the scored tokens are
exactly the continuation's own (no end-of-sequence token is added). The value is the natural-log
sum over the continuation's tokens.

Length: a sequence longer than ``max_length`` loses tokens from the *left of the prompt*; the
continuation is always scored whole (a continuation that leaves no room for at least one prompt
token is an error). The system message is what goes first, so very long prompts should be cut
by the caller where it matters.

Batching pads on the right with an attention mask; a request's value does not depend on its batch
mates, up to float rounding (~1e-5).

torch and transformers are imported only when a :class:`TransformersLogProbScorer` is built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ragtrail.llm.backends.base import Message, _freeze_messages
from ragtrail.llm.backends.lazy_local import BuiltOnFirstUse
from ragtrail.llm.backends.model_store import dtype_tag, keeps_logits
from ragtrail.llm.cache import canonical_json
from ragtrail.llm.score_cache import MappingScoreCache, ScoreStore
from ragtrail.records import sha256_text

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ScoreRequest:
    """Score ``continuation`` as the assistant's reply to ``messages``."""

    messages: tuple[Message, ...]
    continuation: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", _freeze_messages(self.messages))
        if not isinstance(self.continuation, str) or not self.continuation:
            raise ValueError("a score request needs a non-empty continuation")


class LogProbScorer(Protocol):
    """Anything that scores continuations; ``model_id`` identifies the model in cache keys."""

    model_id: str

    def log_probs(self, requests: Sequence[ScoreRequest]) -> list[float]:
        """One summed natural-log probability per request, in order."""
        ...


# --------------------------------------------------------------------------- encoding


def render_chat_prompt(tokenizer: Any, messages: Sequence[Message]) -> tuple[str, bool]:
    """The prompt text and whether it came from the chat template (then it already holds the
    special tokens, and tokenising it must not add more)."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [dict(m) for m in messages], add_generation_prompt=True, tokenize=False
        )
        return str(text), True
    return "\n".join(m["content"] for m in messages), False


@dataclass(frozen=True)
class EncodedContinuation:
    """Token ids of prompt + continuation; the last ``n_continuation`` ids are the continuation."""

    ids: tuple[int, ...]
    n_continuation: int
    truncated: int = 0
    """Prompt tokens dropped from the left to fit ``max_length``."""


def encode_continuation(
    tokenizer: Any,
    messages: Sequence[Message],
    continuation: str,
    *,
    max_length: int | None,
) -> EncodedContinuation:
    """Tokenise the rendered prompt and the continuation separately and concatenate them; over
    ``max_length`` the prompt is cut from the left (the continuation is kept whole)."""
    text, templated = render_chat_prompt(tokenizer, messages)
    prompt = list(tokenizer(text, add_special_tokens=not templated)["input_ids"])
    cont = list(tokenizer(continuation, add_special_tokens=False)["input_ids"])
    if not cont:
        raise ValueError(f"continuation {continuation[:40]!r} encodes to no tokens")
    dropped = 0
    if max_length is not None and len(prompt) + len(cont) > max_length:
        room = max_length - len(cont)
        if room < 1:
            raise ValueError(
                f"continuation has {len(cont)} tokens; with max_length={max_length} no prompt "
                "token is left to condition on"
            )
        dropped = len(prompt) - room
        prompt = prompt[-room:]
    if not prompt:
        raise ValueError(
            "the rendered prompt is empty: the first continuation token has no context"
        )
    return EncodedContinuation(tuple(prompt + cont), len(cont), dropped)


def continuation_log_probs(
    model: Any, batch: Sequence[EncodedContinuation], pad_id: int
) -> torch.Tensor:
    """Summed log-probabilities of each sequence's continuation (shape ``[len(batch)]``), in one
    right-padded forward pass; differentiable when grad is enabled.

    Only the positions that predict a continuation token get logits (the model's
    ``logits_to_keep``, where it has one): a vocabulary-wide row per prompt token would cost a
    tensor of batch x length x vocabulary (0.8 GB in bf16 for 4 rows of 2,000 tokens with
    SmolLM2's 49,152 tokens) and up to a tenth of the forward pass.
    """
    import torch

    device = next(model.parameters()).device
    width = max(len(e.ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    scored = torch.zeros((len(batch), width - 1), dtype=torch.bool)  # targets ids[:, 1:]
    for row, enc in enumerate(batch):
        n = len(enc.ids)
        ids[row, :n] = torch.tensor(enc.ids, dtype=torch.long)
        mask[row, :n] = 1
        scored[row, n - 1 - enc.n_continuation : n - 1] = True
    keep = scored.any(dim=0).nonzero().squeeze(1)  # positions whose logits some row scores
    scored, targets = scored[:, keep], ids[:, 1:][:, keep]
    ids, mask, scored, targets, keep = (t.to(device) for t in (ids, mask, scored, targets, keep))
    if keeps_logits(model):
        logits = model(
            input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=keep
        ).logits
    else:
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, keep]
    picked = logits[scored].float()  # only continuation positions: [n_tokens, vocab]
    token_lp = torch.log_softmax(picked, dim=-1).gather(1, targets[scored][:, None]).squeeze(1)
    rows = torch.arange(len(batch), device=device)[:, None].expand_as(scored)[scored]
    out = torch.zeros(len(batch), dtype=token_lp.dtype, device=device)
    return out.index_add(0, rows, token_lp)


# --------------------------------------------------------------------------- transformers


SCORE_ALONE_FROM = 256
"""On the CPU, a sequence of at least this many tokens is scored in a forward pass of its own. A
batch of unequal lengths needs an explicit attention mask, and SDPA's CPU kernel then computes
every block of the attention, the padding and the masked half above the diagonal included,
while a sequence alone runs causally (SmolLM2-135M in bf16 on 2 cores: four sequences of
1,283-2,210 tokens 6.3 s alone against 12.4 s as one batch, four of ~1,100 3.1 s against 4.6 s,
four of ~140 tokens 0.38 s against 0.33 s). Values change by rounding only."""


def scorer_model_id(spec_or_path: str, dtype: str) -> str:
    """The id a :class:`TransformersLogProbScorer` of ``spec_or_path`` in ``dtype`` reports (its
    scores' cache key), known without loading the model."""
    return spec_or_path + dtype_tag(dtype)


class TransformersLogProbScorer:
    """Scores continuations with a local causal LM (eval mode, no grad; log-softmax in float32
    whatever the weights' dtype).

    Args:
        spec_or_path: a model spec as the transformers backend takes it (local directory, HF id,
            ``s3://`` prefix, ``builtin:smollm2-135m-instruct``); it is also the ``model_id``.
        cache_dir: the model cache (default: the configured one).
        batch_size: requests per forward pass.
        max_length: longest sequence scored (default: the model's position limit); longer ones
            lose prompt tokens from the left.
        device: torch device (default: CUDA when available, else CPU).
        dtype: the weights' precision (``float32``, ``bfloat16``, ``float16``); other than
            float32 it is part of ``model_id``, so scores of one precision are never served for
            another.
        alone_from: on the CPU, sequences of at least this many tokens are scored one per
            forward pass (:data:`SCORE_ALONE_FROM`); None batches every sequence.
    """

    def __init__(
        self,
        spec_or_path: str,
        *,
        cache_dir: str | Path | None = None,
        batch_size: int = 8,
        max_length: int | None = None,
        device: str | None = None,
        dtype: str = "float32",
        alone_from: int | None = SCORE_ALONE_FROM,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from ragtrail.llm.backends.model_store import model_dtype, resolve_model_source
        from ragtrail.llm.backends.packed_weights import use_packed_weights
        from ragtrail.models.store import cache_root

        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if max_length is not None and max_length < 2:
            raise ValueError("max_length must be >= 2")
        self.model_id = scorer_model_id(spec_or_path, dtype)
        self.batch_size = batch_size
        source, _ = resolve_model_source(spec_or_path, cache_root(cache_dir))
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.alone_from = alone_from if self.device.type == "cpu" else None
        model = AutoModelForCausalLM.from_pretrained(source, dtype=model_dtype(dtype))
        self.model = model.to(self.device).eval()
        use_packed_weights(self.model)  # bf16 on the CPU: the same products, faster
        self.tokenizer = AutoTokenizer.from_pretrained(source)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        self.pad_id = int(pad) if pad is not None else 0  # masked out: any id will do
        limit = getattr(model.config, "max_position_embeddings", None)
        self.max_length = max_length or (int(limit) if isinstance(limit, int) else None)

    def encode(self, request: ScoreRequest) -> EncodedContinuation:
        """The token ids scored for ``request`` (after any left truncation of the prompt)."""
        return encode_continuation(
            self.tokenizer, request.messages, request.continuation, max_length=self.max_length
        )

    def log_probs(self, requests: Sequence[ScoreRequest]) -> list[float]:
        """Summed log-probability of each continuation: long sequences alone (see
        ``alone_from``), the others longest first in batches."""
        import torch

        encoded = [self.encode(r) for r in requests]
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i].ids))
        cut = self.alone_from
        alone = [[i] for i in order if cut is not None and len(encoded[i].ids) >= cut]
        rest = order[len(alone) :]
        chunks = alone + [
            rest[start : start + self.batch_size] for start in range(0, len(rest), self.batch_size)
        ]
        out = [0.0] * len(encoded)
        with torch.inference_mode():
            for chunk in chunks:
                values = continuation_log_probs(
                    self.model, [encoded[i] for i in chunk], self.pad_id
                )
                for i, value in zip(chunk, values.tolist(), strict=True):
                    out[i] = float(value)
        return out


class LazyLogProbScorer:
    """A :class:`LogProbScorer` whose model is built on its first request: a night whose scores
    are all cached (the warm night) never loads it. ``model_id`` must be the id the built
    scorer will report (it keys the cache before the model exists); a mismatch raises."""

    def __init__(self, model_id: str, build: Callable[[], LogProbScorer]) -> None:
        self.model_id = model_id
        self._inner = BuiltOnFirstUse(build, model_id, lambda scorer: scorer.model_id)

    def log_probs(self, requests: Sequence[ScoreRequest]) -> list[float]:
        return self._inner.get().log_probs(requests)


# --------------------------------------------------------------------------- cache


def score_key(model_id: str, request: ScoreRequest) -> str:
    """SHA-256 of the canonical JSON of (model id, messages, continuation)."""
    material = {
        "model_id": model_id,
        "messages": [dict(m) for m in request.messages],
        "continuation": request.continuation,
    }
    return sha256_text(canonical_json(material))


class CachedLogProbScorer:
    """A :class:`LogProbScorer` that asks ``inner`` only for requests not in ``store``.

    ``store`` is a :class:`~ragtrail.llm.score_cache.ScoreStore` or a plain
    ``MutableMapping[str, float]`` (wrapped). Repeated requests in one call are scored once.
    A non-finite value from ``inner`` is never stored: the finite ones are, then ValueError
    names the first offending request.
    """

    def __init__(
        self, inner: LogProbScorer, store: ScoreStore | MutableMapping[str, float] | None = None
    ) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        if store is None or isinstance(store, MutableMapping):
            self.store: ScoreStore = MappingScoreCache(store)
        else:
            self.store = store

    def log_probs(self, requests: Sequence[ScoreRequest]) -> list[float]:
        keys = [score_key(self.model_id, r) for r in requests]
        found = self.store.get_many(keys)
        missing = {k: r for k, r in zip(keys, requests, strict=True) if k not in found}
        if missing:
            values = self.inner.log_probs(list(missing.values()))
            if len(values) != len(missing):
                raise ValueError(
                    f"{self.model_id}: {len(values)} scores for {len(missing)} requests"
                )
            fresh = dict(zip(missing, (float(v) for v in values), strict=True))
            finite = {k: v for k, v in fresh.items() if math.isfinite(v)}
            self.store.put_many(finite, model_id=self.model_id)
            bad = next((k for k in fresh if k not in finite), None)
            if bad is not None:
                raise ValueError(_non_finite_message(self.model_id, missing[bad], fresh[bad]))
            found = {**found, **fresh}
        return [found[k] for k in keys]


def _non_finite_message(model_id: str, request: ScoreRequest, value: float) -> str:
    last = request.messages[-1]["content"] if request.messages else ""
    return (
        f"{model_id} scored {value} (not cached) for continuation "
        f"{request.continuation[:60]!r} after message {last[:60]!r}"
    )
