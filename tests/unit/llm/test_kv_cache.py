"""The in-place KV cache and row-by-row batch assembly of the local transformers backend.

The growing cache must give the model exactly the keys and values of transformers' default
cache (bit-identical logits), also when it outgrows its storage; a batch assembled from rows
prefilled alone must decode like each row alone.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, MistralConfig, MistralForCausalLM
from transformers.cache_utils import DynamicCache

from ragtrail.llm.backends.kv_cache import (
    GrowingLayer,
    batch_cache,
    growing_cache,
    growing_cache_layers,
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


@torch.inference_mode()
def test_batch_from_rows_prefilled_alone_decodes_like_each_row_alone(
    llama: torch.nn.Module,
) -> None:
    torch.manual_seed(2)
    rows = [torch.randint(5, llama.config.vocab_size, (n,)).tolist() for n in (9, 17, 1, 12)]
    layers = growing_cache_layers(llama)
    assert layers is not None
    width = max(map(len, rows))
    caches = []
    for row in rows:
        if len(row) == 1:
            caches.append(None)  # nothing to cache before the last token
            continue
        out = llama(input_ids=torch.tensor([row[:-1]]), use_cache=True)
        caches.append(out.past_key_values)
    cache = batch_cache(caches, width - 1, width + 8, layers)
    assert cache.get_seq_length() == width - 1
    # Right-aligned rows, zero padding before them.
    first = cache.layers[0]
    assert torch.count_nonzero(first.keys[0, :, : width - len(rows[0])]) == 0
    assert torch.equal(first.keys[1, :, :], caches[1].layers[0].keys[0])
    assert torch.count_nonzero(first.keys[2]) == 0

    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = llama(
        input_ids=ids[:, -1:],
        attention_mask=mask,
        position_ids=positions[:, -1:],
        past_key_values=cache,
    )
    for i, row in enumerate(rows):
        alone = llama(input_ids=torch.tensor([row])).logits[0, -1]
        torch.testing.assert_close(out.logits[i, -1], alone, rtol=1e-4, atol=1e-5)


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
