"""Shared-prefix attention: split prefill and prefix-apart decoding give plain attention's logits.

A tiny grouped-query Llama (4 query heads over 2 key/value heads) with random weights; the
split paths must actually run (counted) and agree with transformers' SDPA to float32 rounding.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ragtrail.llm.backends import prefix_attention
from ragtrail.llm.backends.kv_cache import growing_cache_layers, stack_batches

PREFIX = 10


def _llama(attention: str = "sdpa") -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=60,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        attn_implementation=attention,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def models(monkeypatch: pytest.MonkeyPatch) -> tuple[LlamaForCausalLM, LlamaForCausalLM, list[str]]:
    """(the model switched to shared-prefix attention, a plain copy, the split paths taken)."""
    plain = _llama()
    split = copy.deepcopy(plain)
    assert prefix_attention.install(split)
    assert split.config._attn_implementation == prefix_attention.ATTENTION
    taken: list[str] = []
    for name in ("grouped_decode", "_prefill"):
        real = getattr(prefix_attention, name)

        def counted(*args: object, _real: object = real, _name: str = name) -> object:
            taken.append(_name)
            return _real(*args)  # type: ignore[operator]

        monkeypatch.setattr(prefix_attention, name, counted)
    return split, plain, taken


def _decoding_step(
    model: LlamaForCausalLM,
    parts: list[tuple[object, torch.Tensor]],
    rows: list[list[int]],
    offset: int,
    shared: object,
) -> tuple[int, torch.Tensor]:
    """Stack the rows' prefilled caches (``parts``) into one batch and decode every row's last
    token in one step inside ``decoding_over(shared)``, the rows' positions starting after
    ``offset`` tokens: the stacked cache's length before the step, and each row's logits."""
    layers = growing_cache_layers(model)
    assert layers is not None
    cache, mask = stack_batches(parts, 32, layers)
    length = cache.get_seq_length()
    step = torch.cat([mask, torch.ones((len(rows), 1), dtype=torch.bool)], dim=1)
    with prefix_attention.decoding_over(shared):
        logits = model(
            input_ids=torch.tensor([[row[-1]] for row in rows]),
            attention_mask=step,
            position_ids=torch.tensor([[offset + len(row) - 1] for row in rows]),
            past_key_values=cache,
        ).logits[:, -1]
    return length, logits


def test_install_needs_sdpa() -> None:
    eager = _llama("eager")
    assert not prefix_attention.install(eager)
    assert eager.config._attn_implementation == "eager"


@torch.inference_mode()
def test_split_prefill_matches_plain_attention(models: tuple) -> None:
    split, plain, taken = models
    torch.manual_seed(1)
    prefix = torch.randint(3, 60, (1, PREFIX))
    cache = split(input_ids=prefix, use_cache=True).past_key_values
    assert taken == []  # the prefix itself is plain causal attention
    for n in (1, 4, 12):
        rest = torch.randint(3, 60, (1, n))
        with prefix_attention.prefilling_after(PREFIX):
            got = split(input_ids=rest, past_key_values=copy.deepcopy(cache)).logits
        expected = plain(input_ids=rest, past_key_values=copy.deepcopy(cache)).logits
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert taken == ["_prefill"] * 3 * 2  # 3 rows, 2 layers each
    taken.clear()
    with prefix_attention.prefilling_after(PREFIX + 1):  # not what the cache holds: plain
        split(input_ids=rest, past_key_values=copy.deepcopy(cache))
    assert taken == []


@torch.inference_mode()
def test_rows_decoding_apart_from_the_shared_prefix_match_each_row_alone(models: tuple) -> None:
    split, plain, taken = models
    torch.manual_seed(2)
    prefix = torch.randint(3, 60, (1, PREFIX))
    shared = split(input_ids=prefix, use_cache=True).past_key_values
    rows = [torch.randint(3, 60, (n,)).tolist() for n in (7, 2, 12)]
    parts = []
    for row in rows:
        out = split(input_ids=torch.tensor([row[:-1]]), past_key_values=copy.deepcopy(shared))
        mask = torch.tensor([[False] * PREFIX + [True] * (len(row) - 1)])  # prefix left out
        parts.append((out.past_key_values, mask))
    taken.clear()
    cached, logits = _decoding_step(split, parts, rows, PREFIX, shared)
    assert cached == max(map(len, rows)) - 1  # no prefix in the rows' caches
    assert taken == ["grouped_decode"] * 2
    for i, row in enumerate(rows):
        alone = plain(input_ids=torch.cat([prefix, torch.tensor([row])], dim=1)).logits[0, -1]
        torch.testing.assert_close(logits[i], alone, rtol=1e-5, atol=1e-6)


@torch.inference_mode()
def test_decoding_without_a_shared_prefix_groups_the_query_heads(models: tuple) -> None:
    """``decoding_over(None)``: rows whose caches hold their whole prompts decode through the
    grouped-query path (no copied key/value heads) and get plain attention's logits."""
    split, plain, taken = models
    torch.manual_seed(3)
    rows = [torch.randint(3, 60, (n,)).tolist() for n in (9, 3, 14)]
    parts = []
    for row in rows:
        out = split(input_ids=torch.tensor([row[:-1]]), use_cache=True)
        parts.append((out.past_key_values, torch.ones((1, len(row) - 1), dtype=torch.bool)))
    taken.clear()
    _, logits = _decoding_step(split, parts, rows, 0, None)
    assert taken == ["grouped_decode"] * 2
    for i, row in enumerate(rows):
        alone = plain(input_ids=torch.tensor([row])).logits[0, -1]
        torch.testing.assert_close(logits[i], alone, rtol=1e-5, atol=1e-6)
