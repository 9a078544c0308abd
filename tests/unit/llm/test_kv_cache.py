"""The in-place KV cache and row-by-row batch assembly of the local transformers backend.

The growing cache must give the model exactly the keys and values of transformers' default
cache (bit-identical logits), also when it outgrows its storage; a batch assembled from rows
prefilled alone, and one batch stacked onto another mid-decoding (continuous batching), must
decode like each row alone.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, MistralConfig, MistralForCausalLM
from transformers.cache_utils import DynamicCache

from ragtrail.llm.backends.kv_cache import (
    GrowingLayer,
    attended_from,
    growing_cache,
    growing_cache_layers,
    join_batch,
    stack_batches,
)
from tests.tiny_models import build_tiny_llama

CORPUS = ["the quick brown fox jumps over the lazy dog", "answer with one json object"] * 4


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> torch.nn.Module:
    path = build_tiny_llama(tmp_path_factory.mktemp("llama"), CORPUS, max_positions=256)
    return AutoModelForCausalLM.from_pretrained(path).eval()


def _decode_logits(
    model: torch.nn.Module, cache: object, ids: torch.Tensor, mask: torch.Tensor, steps: int
) -> torch.Tensor:
    """Greedy steps from a full prompt; the logits of every step, stacked."""
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache)
    logits = [out.logits[:, -1]]
    for _ in range(steps):
        token = logits[-1].argmax(-1, keepdim=True)
        mask = torch.cat([mask, torch.ones_like(token)], dim=1)
        positions = positions[:, -1:] + 1
        out = model(
            input_ids=token, attention_mask=mask, position_ids=positions, past_key_values=cache
        )
        logits.append(out.logits[:, -1])
    return torch.stack(logits)


@pytest.mark.parametrize("capacity", [64, 8])  # 8: outgrows its storage while decoding
@torch.inference_mode()
def test_growing_cache_gives_the_default_cache_logits(
    llama: torch.nn.Module, capacity: int
) -> None:
    torch.manual_seed(1)
    ids = torch.randint(5, llama.config.vocab_size, (3, 20))
    mask = torch.ones_like(ids)
    mask[1, :7] = 0  # left padding
    mask[2, :15] = 0
    expected = _decode_logits(llama, DynamicCache(config=llama.config), ids, mask, 12)
    layers = growing_cache_layers(llama)
    assert layers == llama.config.num_hidden_layers
    got = _decode_logits(llama, growing_cache(layers, capacity), ids, mask, 12)
    assert torch.equal(got, expected)


def test_growing_layer_drops_rows_in_place_and_survives_replaced_views() -> None:
    layer = GrowingLayer(capacity=16)
    first = torch.arange(3 * 1 * 3 * 2, dtype=torch.float32).view(3, 1, 3, 2)
    keys, _ = layer.update(first, first + 100)
    assert torch.equal(keys, first)
    store = layer.keys.data_ptr()
    layer.batch_select_indices(torch.tensor([0, 2]))  # rows leaving a batch: kept in place
    assert layer.keys.data_ptr() == store
    more = torch.full((2, 1, 2, 2), -1.0)
    keys, values = layer.update(more, more)
    assert torch.equal(keys, torch.cat([first[[0, 2]], more], dim=2))
    assert torch.equal(values, torch.cat([first[[0, 2]] + 100, more], dim=2))
    layer.batch_repeat_interleave(2)  # a base-class method: .keys becomes a new tensor
    keys, _ = layer.update(torch.zeros(4, 1, 1, 2), torch.zeros(4, 1, 1, 2))
    assert keys.shape == (4, 1, 6, 2) and layer.get_seq_length() == 6
    assert torch.equal(keys[1, :, :5], keys[0, :, :5])
    assert torch.equal(keys[2, :, :3], first[2])


def _alone_logits(llama: torch.nn.Module, row: list[int]) -> torch.Tensor:
    return llama(input_ids=torch.tensor([row])).logits[0, -1]


def _step(
    llama: torch.nn.Module, cache: object, mask: torch.Tensor, rows: list[list[int]]
) -> torch.Tensor:
    """One decoding step of ``rows`` (their last tokens) over ``cache``: last-token logits."""
    mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=torch.bool)], dim=1)
    out = llama(
        input_ids=torch.tensor([[r[-1]] for r in rows]),
        attention_mask=mask,
        position_ids=torch.tensor([[len(r) - 1] for r in rows]),
        past_key_values=cache,
    )
    return out.logits[:, -1]


def _row_part(llama: torch.nn.Module, row: list[int]) -> tuple[object, torch.Tensor]:
    """A row prefilled alone, all but its last token: (cache or None, mask)."""
    if len(row) == 1:
        return None, torch.ones((1, 0), dtype=torch.bool)  # nothing to cache yet
    out = llama(input_ids=torch.tensor([row[:-1]]), use_cache=True)
    return out.past_key_values, torch.ones((1, len(row) - 1), dtype=torch.bool)


@torch.inference_mode()
def test_batch_from_rows_prefilled_alone_decodes_like_each_row_alone(
    llama: torch.nn.Module,
) -> None:
    torch.manual_seed(2)
    rows = [torch.randint(5, llama.config.vocab_size, (n,)).tolist() for n in (9, 17, 1, 12)]
    layers = growing_cache_layers(llama)
    assert layers is not None
    width = max(map(len, rows))
    parts = [_row_part(llama, row) for row in rows]
    cache, mask = stack_batches(parts, width + 8, layers)
    assert cache.get_seq_length() == width - 1 and mask.shape == (4, width - 1)
    assert mask.sum(dim=1).tolist() == [len(r) - 1 for r in rows]
    # Right-aligned rows, zero padding before them.
    first = cache.layers[0]
    assert torch.count_nonzero(first.keys[0, :, : width - len(rows[0])]) == 0
    assert torch.equal(first.keys[1, :, :], parts[1][0].layers[0].keys[0])
    assert torch.count_nonzero(first.keys[2]) == 0
    logits = _step(llama, cache, mask, rows)
    for i, row in enumerate(rows):
        torch.testing.assert_close(logits[i], _alone_logits(llama, row), rtol=1e-4, atol=1e-5)


@torch.inference_mode()
def test_rows_joining_and_leaving_a_batch_decode_like_each_row_alone(
    llama: torch.nn.Module,
) -> None:
    """Continuous batching's moves: rows leave mid-decoding, the padding only they needed is
    trimmed, a newly prefilled row that fits joins in a free row of the storage, one wider than
    the batch makes a new batch with it."""
    torch.manual_seed(3)
    rows = [torch.randint(5, llama.config.vocab_size, (n,)).tolist() for n in (30, 6, 11)]
    layers = growing_cache_layers(llama)
    assert layers is not None
    cache, mask = stack_batches([_row_part(llama, r) for r in rows], 64, layers, row_capacity=4)
    for _ in range(3):  # decode a few tokens together
        logits = _step(llama, cache, mask, rows)
        mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=torch.bool)], dim=1)
        rows = [[*r, int(t)] for r, t in zip(rows, logits.argmax(-1), strict=True)]
    storage = cache.layers[0].keys.data_ptr()
    cache.batch_select_indices(torch.tensor([1, 2]))  # the long row leaves ...
    rows, mask = rows[1:], mask[1:]
    unused = attended_from(mask)
    assert unused == 30 - 11  # ... and the padding only it needed goes
    for layer in cache.layers:
        layer.trim_front(unused)
    mask = mask[:, unused:]
    assert cache.get_seq_length() == mask.shape[1] == len(rows[1]) - 1
    assert cache.layers[0].keys.data_ptr() != storage  # a view past the trimmed columns
    logits = _step(llama, cache, mask, rows)  # decoding goes on in the trimmed storage
    for i, row in enumerate(rows):
        torch.testing.assert_close(logits[i], _alone_logits(llama, row), rtol=1e-4, atol=1e-5)
    mask = torch.cat([mask, torch.ones((2, 1), dtype=torch.bool)], dim=1)
    rows = [[*r, int(t)] for r, t in zip(rows, logits.argmax(-1), strict=True)]

    short, long = (torch.randint(5, llama.config.vocab_size, (n,)).tolist() for n in (3, 25))
    assert join_batch(cache, mask, [_row_part(llama, long)]) is None  # wider than the batch
    assert cache.get_seq_length() == mask.shape[1] == 14 and len(cache.layers[0].keys) == 2
    storage = cache.layers[0].keys.data_ptr()
    joined = join_batch(cache, mask, [_row_part(llama, short)])  # fits: a free row, in place
    assert joined is not None and cache.layers[0].keys.data_ptr() == storage
    assert joined.sum(dim=1).tolist() == [9, 14, 2]
    rows.append(short)
    logits = _step(llama, cache, joined, rows)
    for i, row in enumerate(rows):
        torch.testing.assert_close(logits[i], _alone_logits(llama, row), rtol=1e-4, atol=1e-5)
    mask = torch.cat([joined, torch.ones((3, 1), dtype=torch.bool)], dim=1)
    rows = [[*r, int(t)] for r, t in zip(rows, logits.argmax(-1), strict=True)]

    cache, mask = stack_batches([(cache, mask), _row_part(llama, long)], 64, layers)
    rows.append(long)
    assert mask.shape == (4, 24) and mask.sum(dim=1).tolist() == [len(r) - 1 for r in rows]
    logits = _step(llama, cache, mask, rows)
    for i, row in enumerate(rows):
        torch.testing.assert_close(logits[i], _alone_logits(llama, row), rtol=1e-4, atol=1e-5)


def test_sliding_window_models_keep_the_default_cache() -> None:
    config = MistralConfig(
        vocab_size=50,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        sliding_window=4,
    )
    assert growing_cache_layers(MistralForCausalLM(config)) is None
