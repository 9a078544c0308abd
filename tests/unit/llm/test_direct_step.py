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
    direct = TransformersBackend(str(tiny_llama), batch_size=2, dtype="bfloat16", draft_tokens=0)
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


def _batch_after_prefix(
    model: LlamaForCausalLM, step: DirectDecodingStep, lengths: tuple[int, ...]
) -> tuple[object, torch.Tensor, object, list[list[int]]]:
    """Rows of random prompts of ``lengths`` after a 12-token shared prefix, prefilled as the
    backend does: the prefix's cache, the batch's cache and mask, the prompts."""
    generator = torch.Generator().manual_seed(2)
    prefix_ids = torch.randint(0, 96, (1, 12), generator=generator)
    prefix = model(input_ids=prefix_ids, use_cache=True).past_key_values
    prompts = [torch.randint(0, 96, (n,), generator=generator).tolist() for n in lengths]
    parts = [step._probe_row(prompt[:-1], prefix, 12) for prompt in prompts]
    cache, mask = stack_batches(parts, 12 + max(lengths) + 8, growing_cache_layers(model), 3)
    return prefix, mask, cache, prompts


def test_draft_checking_steps_give_one_token_steps_logits() -> None:
    """Several tokens per row in one step (:meth:`DirectDecodingStep.with_drafts`): at one
    token per row, the direct step's logits bit for bit; at three (one row with two, so
    padded), each token's logits are those of one-token steps up to bf16 rounding, with the
    same best token, and the cache holds the same keys for the next step."""
    model = _model()
    step = DirectDecodingStep.build(model)
    assert step is not None
    generator = torch.Generator().manual_seed(3)
    with torch.inference_mode():
        prefix, mask, cache, prompts = _batch_after_prefix(model, step, (7, 3, 11))
        fed = [[p[-1], *torch.randint(0, 96, (2,), generator=generator).tolist()] for p in prompts]
        start = [12 + len(p) - 1 for p in prompts]

        # one token per row: the direct step's logits bit for bit
        ones = copy.deepcopy(cache)
        wide = torch.cat([mask, mask.new_ones((3, 1))], dim=1)
        ids = torch.tensor([[f[0]] for f in fed])
        where = torch.tensor([[s] for s in start])
        expected = step(ids, where, wide, copy.deepcopy(cache), prefix)
        got = step.with_drafts(ids, where, ids >= 0, wide[:, None], ones, prefix)
        assert torch.equal(got, expected)

        # three tokens per row (the middle row two), against three one-token steps
        singles, single_mask, reference = copy.deepcopy(cache), mask, []
        for k in range(3):
            single_mask = torch.cat([single_mask, single_mask.new_ones((3, 1))], dim=1)
            ids = torch.tensor([[f[k]] for f in fed])
            where = torch.tensor([[s + k] for s in start])
            reference.append(step(ids, where, single_mask, singles, prefix))
        valid = torch.tensor([[True, True, True], [True, True, False], [True, True, True]])
        columns = mask.shape[1]
        drafted_mask = torch.cat([mask, valid], dim=1)
        causal = torch.ones((3, columns + 3), dtype=torch.bool)
        causal[:, columns:] = torch.ones((3, 3), dtype=torch.bool).tril()
        logits = step.with_drafts(
            torch.tensor(fed),
            torch.tensor([[s + k for k in range(3)] for s in start]),
            valid,
            drafted_mask[:, None] & causal,
            cache,
            prefix,
        )
        expected = torch.stack(
            [reference[k][row] for row in range(3) for k in range(3) if valid[row, k]]
        )
        assert logits.shape == expected.shape == (8, 96)
        torch.testing.assert_close(logits.float(), expected.float(), atol=0.05, rtol=0.02)
        assert torch.equal(logits.argmax(dim=-1), expected.argmax(dim=-1))
        kept = drafted_mask[:, columns:]
        for ours, theirs in zip(cache.layers, singles.layers, strict=True):
            torch.testing.assert_close(
                ours.keys.transpose(1, 2)[:, columns:][kept].float(),
                theirs.keys.transpose(1, 2)[:, columns:][kept].float(),
                atol=0.02,
                rtol=0.02,
            )


def test_greedy_rows_check_drafts_and_keep_their_texts(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With drafts, the backend's greedy rows take fewer steps than tokens and write what one
    token per step writes; a sampled row is never drafted."""
    system = "Repeat the ferry times back: nine, ten, nine, ten. " * 2
    requests = [
        GenerationRequest(
            messages=[{"role": "system", "content": system}, {"role": "user", "content": text}],
            max_new_tokens=24,
        )
        for text in ("the ferry leaves at nine", "tickets are sold at the pier", "nine ten")
    ]
    sampled = GenerationRequest(messages=requests[0].messages, temperature=0.8, seed=5)
    drafting = TransformersBackend(str(tiny_llama), batch_size=2, dtype="bfloat16")
    single = TransformersBackend(str(tiny_llama), batch_size=2, dtype="bfloat16", draft_tokens=0)
    assert drafting.draft_tokens == 3 and drafting.model_id == single.model_id
    checked: list[list[list[int]]] = []
    one_token: list[int] = []
    real_draft, real_step = TransformersBackend._draft_step, TransformersBackend._decode_step

    def draft_step(self: TransformersBackend, rows: list, drafts: list, *rest: object) -> object:
        checked.append([list(d) for d in drafts])
        return real_draft(self, rows, drafts, *rest)  # type: ignore[arg-type]

    def decode_step(self: TransformersBackend, rows: list, *rest: object) -> object:
        one_token.append(len(rows))
        return real_step(self, rows, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(TransformersBackend, "_draft_step", draft_step)
    monkeypatch.setattr(TransformersBackend, "_decode_step", decode_step)
    results = drafting.generate(requests)
    assert checked and all(max(map(len, d)) <= 3 for d in checked)
    row_steps = sum(map(len, checked)) + sum(one_token)
    # one token per step takes a step per token (and one more for a closing end token)
    assert row_steps < sum(r.completion_tokens for r in results)
    assert [r.text for r in results] == [r.text for r in single.generate(requests)]
    checked.clear()
    drafting.generate([sampled])
    assert not checked  # the sampled row alone: never drafted


def test_the_runtime_passes_the_draft_setting_to_local_models(
    tiny_llama: Path, tmp_path: Path
) -> None:
    from ragtrail.config import ModelRole, load_settings
    from ragtrail.runtime import Runtime

    for setting, expected in ((None, 3), (0, 0), (5, 5)):
        generation: dict[str, object] = {"llm": f"hf:{tiny_llama}"}
        if setting is not None:
            generation["llm_draft_tokens"] = setting
        rt = Runtime(load_settings(home=tmp_path / f"home-{setting}", generation=generation))
        try:
            lazy = rt.llm(ModelRole.ANSWERER).backend
            assert lazy.load().draft_tokens == expected
        finally:
            rt.close()
    with pytest.raises(ValueError, match="draft_tokens"):
        TransformersBackend(str(tiny_llama), draft_tokens=-1)


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
