"""Direct decoding steps (:mod:`ragtrail.llm.backends.direct_step`): the model's logits bit for
bit, taken by the backend where they apply, declined where they do not."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from ragtrail.llm.backends import direct_step, prefix_attention
from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.backends.direct_step import DirectDecodingStep, forward_step
from ragtrail.llm.backends.kv_cache import growing_cache_layers, stack_batches
from ragtrail.llm.backends.packed_weights import packing_available, use_packed_weights
from ragtrail.llm.backends.transformers_local import TransformersBackend
from tests.tiny_models import build_tiny_llama

CORPUS = ["the ferry leaves at nine", "tickets are sold at the pier", "answer in one word"] * 4

pytestmark = pytest.mark.skipif(
    not packing_available(nn.Linear(4, 4).to(torch.bfloat16)) or prefix_attention._flash() is None,
    reason="this torch build lacks oneDNN's packed bf16 linear ops or the CPU flash-attention op",
)


def _model(dtype: torch.dtype = torch.bfloat16, *, install: bool = True) -> LlamaForCausalLM:
    """A grouped-query tiny Llama (4 query heads over 2 key/value heads) with random weights,
    on shared-prefix attention and packed weights."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config).to(dtype).eval()
    if install:
        assert prefix_attention.install(model)
    use_packed_weights(model)
    return model


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), CORPUS, max_positions=512)


def test_consecutive_steps_give_the_model_logits_bit_for_bit() -> None:
    """Three rows of different lengths (padded) after a shared prefix, five steps in a row,
    each checked against the model's own forward pass on a copy of the same cache."""
    model = _model()
    step = DirectDecodingStep.build(model)
    assert step is not None
    generator = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        prefix_ids = torch.randint(0, 96, (1, 12), generator=generator)
        prefix = model(input_ids=prefix_ids, use_cache=True).past_key_values
        prompts = [torch.randint(0, 96, (n,), generator=generator).tolist() for n in (7, 3, 11)]
        parts = [step._probe_row(prompt[:-1], prefix, 12) for prompt in prompts]
        cache, mask = stack_batches(parts, 12 + 11 + 8, growing_cache_layers(model), 3)
        tokens = [p[-1] for p in prompts]
        positions = [12 + len(p) - 1 for p in prompts]
        for _ in range(5):
            mask = torch.cat([mask, mask.new_ones((3, 1))], dim=1)
            ids = torch.tensor([[t] for t in tokens])
            where = torch.tensor([[p] for p in positions])
            theirs = copy.deepcopy(cache)
            expected = forward_step(model, ids, where, mask, theirs, prefix)
            got = step(ids, where, mask, cache, prefix)
            assert torch.equal(got, expected)
            assert cache.get_seq_length() == theirs.get_seq_length()
            tokens = got.argmax(dim=-1).tolist()
            positions = [p + 1 for p in positions]


def test_the_backend_takes_direct_steps_with_the_same_texts(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = "You answer questions about the ferry in one short line. " * 3
    requests = [
        GenerationRequest(
            messages=[{"role": "system", "content": system}, {"role": "user", "content": text}],
            max_new_tokens=8,
        )
        for text in ("when does the ferry leave", "where are tickets sold", "answer in one word")
    ]
    direct = TransformersBackend(str(tiny_llama), batch_size=2, dtype="bfloat16")
    plain = TransformersBackend(
        str(tiny_llama), batch_size=2, dtype="bfloat16", direct_decoding=False
    )
    assert direct._direct_step is not None and plain._direct_step is None
    assert direct.model_id == plain.model_id
    steps: list[int] = []
    call = DirectDecodingStep.__call__

    def counted(self: DirectDecodingStep, input_ids: torch.Tensor, *rest: object) -> object:
        steps.append(input_ids.shape[0])
        return call(self, input_ids, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(DirectDecodingStep, "__call__", counted)
    texts = [r.text for r in direct.generate(requests)]
    assert steps and max(steps) == 2  # batched steps, after the shared prefix
    assert texts == [r.text for r in plain.generate(requests)]
    assert [direct.generate([r])[0].text for r in requests] == [
        plain.generate([r])[0].text for r in requests
    ]


def test_models_it_does_not_cover_keep_their_own_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DirectDecodingStep.build(_model(torch.float32)) is None  # float32: nothing packed
    assert DirectDecodingStep.build(_model(install=False)) is None  # transformers' attention
    partly = _model()
    partly.model.layers[1].mlp.down_proj = nn.Linear(96, 64, bias=False).to(torch.bfloat16)
    assert DirectDecodingStep.build(partly) is None  # one layer left plain
    assert DirectDecodingStep.build(_model()) is not None


def test_a_step_whose_probe_differs_is_declined(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe compares logits bit for bit: a norm off by 1% makes build decline."""
    real = direct_step._rms_norm

    def rounded_elsewhere(norm: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        return (real(norm, hidden).float() * 1.01).to(hidden.dtype)

    monkeypatch.setattr(direct_step, "_rms_norm", rounded_elsewhere)
    assert DirectDecodingStep.build(_model()) is None
