"""Pre-packed bf16 weights for local models on the CPU (:mod:`ragtrail.llm.backends.packed_weights`)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn

from ragtrail.llm.backends import packed_weights
from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.backends.packed_weights import (
    PACKED_MAX_ROWS,
    PackedLinear,
    packing_available,
    use_packed_weights,
)
from ragtrail.llm.backends.transformers_local import TransformersBackend
from tests.tiny_models import build_tiny_llama

CORPUS = ["the ferry leaves at nine", "tickets are sold at the pier", "answer in one word"] * 4

pytestmark = pytest.mark.skipif(
    not packing_available(nn.Linear(4, 4).to(torch.bfloat16)),
    reason="this torch build has no oneDNN packed linear ops (mkldnn) for bf16 on the CPU",
)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), CORPUS, max_positions=512)


def _bf16_linear(inputs: int, outputs: int, bias: bool = True) -> nn.Linear:
    torch.manual_seed(0)
    linear = nn.Linear(inputs, outputs, bias=bias)
    nn.init.normal_(linear.weight, std=0.05)
    return linear.to(torch.bfloat16)


@pytest.fixture
def packed_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows of every product taken through the packed weight."""
    calls: list[int] = []
    product = packed_weights._packed_product

    def counted(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> object:
        calls.append(x.shape[0])
        return product(x, packed, bias)

    monkeypatch.setattr(packed_weights, "_packed_product", counted)
    return calls


@pytest.mark.parametrize("bias", [True, False])
def test_packed_products_equal_the_plain_ones_bit_for_bit(bias: bool, packed_calls: list) -> None:
    linear = _bf16_linear(96, 160, bias=bias)
    layer = PackedLinear(linear)
    assert layer.weight is linear.weight and layer.bias is linear.bias
    with torch.inference_mode():
        for rows in (1, 2, 3, 7, 8, 13, 64, 255):
            x = torch.randn(rows, 96).to(torch.bfloat16)
            assert torch.equal(layer(x), linear(x)), rows
        batched = torch.randn(3, 5, 96).to(torch.bfloat16)  # (batch, tokens, features)
        got = layer(batched)
        assert got.shape == (3, 5, 160) and torch.equal(got, linear(batched))
    assert packed_calls == [1, 2, 3, 7, 8, 13, 64, 255, 15]


def test_long_inputs_and_other_dtypes_take_the_plain_weight(packed_calls: list) -> None:
    linear = _bf16_linear(32, 24)
    layer = PackedLinear(linear)
    with torch.inference_mode():
        long = torch.randn(PACKED_MAX_ROWS + 1, 32).to(torch.bfloat16)
        assert torch.equal(layer(long), linear(long))
        wide = torch.randn(2, 32)  # float32 input: not the packed kernel's dtype
        with pytest.raises(RuntimeError):  # exactly what the plain bf16 layer does with it
            linear(wide)
        with pytest.raises(RuntimeError):
            layer(wide)
    assert packed_calls == []


def test_inputs_that_need_gradients_take_the_plain_weight(packed_calls: list) -> None:
    linear = _bf16_linear(16, 8)
    layer = PackedLinear(linear)
    x = torch.randn(2, 16).to(torch.bfloat16).requires_grad_()
    layer(x).float().sum().backward()
    assert x.grad is not None and linear.weight.grad is not None
    assert packed_calls == []


def test_a_weight_changed_in_place_is_packed_again(packed_calls: list) -> None:
    linear = _bf16_linear(32, 24)
    layer = PackedLinear(linear)
    x = torch.randn(4, 32).to(torch.bfloat16)
    with torch.inference_mode():
        before = layer(x)
    with torch.no_grad():
        linear.weight.mul_(2)
    with torch.inference_mode():
        after = layer(x)
        assert torch.equal(after, linear(x)) and not torch.equal(after, before)
    assert packed_calls == [4, 4]


def test_a_bf16_model_is_swapped_whole_and_saves_the_same(tiny_llama: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.bfloat16)
    before = dict(model.named_parameters())
    keys = set(model.state_dict())
    swapped = use_packed_weights(model)
    assert swapped == 7 * model.config.num_hidden_layers + 1  # q k v o gate up down, and the head
    assert isinstance(model.get_output_embeddings(), PackedLinear)
    assert dict(model.named_parameters()) == before  # the same parameter objects
    assert set(model.state_dict()) == keys  # the packed copies are never saved


def test_float32_models_and_layers_whose_probe_differs_are_left_alone(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoModelForCausalLM

    float32 = AutoModelForCausalLM.from_pretrained(tiny_llama)
    assert not packing_available(float32) and use_packed_weights(float32) == 0
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.bfloat16)
    product = packed_weights._packed_product
    monkeypatch.setattr(packed_weights, "_packed_product", lambda *a: product(*a) + 1)
    assert use_packed_weights(model) == 0
    assert not any(isinstance(m, PackedLinear) for m in model.modules())


def test_a_bf16_backend_writes_the_same_texts_packed(tiny_llama: Path, packed_calls: list) -> None:
    requests = [
        GenerationRequest(
            messages=[{"role": "user", "content": text}], max_new_tokens=8, json_schema=None
        )
        for text in ("when does the ferry leave", "where are tickets sold", "answer in one word")
    ]
    packed = TransformersBackend(str(tiny_llama), batch_size=2, dtype="bfloat16")
    assert packed.packed_layers == 15
    plain = TransformersBackend(
        str(tiny_llama), batch_size=2, dtype="bfloat16", packed_weights=False
    )
    assert plain.packed_layers == 0 and plain.model_id == packed.model_id
    calls_before = len(packed_calls)
    texts = [r.text for r in packed.generate(requests)]
    assert len(packed_calls) > calls_before  # the decoding steps took the packed weights
    assert texts == [r.text for r in plain.generate(requests)]
    assert [packed.generate([r])[0].text for r in requests] == [
        plain.generate([r])[0].text for r in requests
    ]


def _attention_of(tiny_llama: Path) -> tuple[nn.Module, dict[str, nn.Linear]]:
    """A packed bf16 tiny Llama's first attention module, with copies of its plain q, k, v."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.bfloat16)
    attention = model.model.layers[0].self_attn
    plain = {
        name: copy.deepcopy(getattr(attention, name)) for name in ("q_proj", "k_proj", "v_proj")
    }
    use_packed_weights(model)
    return model, plain


def test_siblings_of_one_input_share_one_stacked_product(
    tiny_llama: Path, packed_calls: list
) -> None:
    model, plain = _attention_of(tiny_llama)
    layer = model.model.layers[0]
    attention = layer.self_attn
    matrices = {id(getattr(attention, n)._matrix) for n in plain}
    assert len(matrices) == 1  # q, k and v: one stacked matrix
    assert layer.mlp.gate_proj._matrix is layer.mlp.up_proj._matrix
    assert layer.mlp.down_proj._matrix is not layer.mlp.up_proj._matrix
    assert attention.o_proj._matrix is not attention.q_proj._matrix
    del packed_calls[:]
    with torch.inference_mode():
        x = torch.randn(2, 3, plain["q_proj"].in_features).to(torch.bfloat16)
        for name, linear in plain.items():  # in the decoder layer's order, one input
            assert torch.equal(getattr(attention, name)(x), linear(x)), name
        assert packed_calls == [6]  # one product for the three
        other = torch.randn(1, plain["k_proj"].in_features).to(torch.bfloat16)
        assert torch.equal(attention.k_proj(other), plain["k_proj"](other))  # alone: its own
        assert torch.equal(attention.v_proj(x), plain["v_proj"](x))  # x's parts were used up
    assert packed_calls == [6, 1, 6]


def test_a_sibling_changed_in_place_repacks_the_stack(tiny_llama: Path) -> None:
    model, plain = _attention_of(tiny_llama)
    attention = model.model.layers[0].self_attn
    with torch.no_grad():
        attention.k_proj.weight.mul_(2)
        plain["k_proj"].weight.mul_(2)
    x = torch.randn(4, plain["q_proj"].in_features).to(torch.bfloat16)
    with torch.inference_mode():
        for name, linear in plain.items():
            assert torch.equal(getattr(attention, name)(x), linear(x)), name


def test_the_helpfulness_scorer_scores_the_same_packed(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragtrail.llm.scoring import ScoreRequest, TransformersLogProbScorer

    requests = [
        ScoreRequest(({"role": "user", "content": "when does the ferry leave"},), reply)
        for reply in ("at nine", "tickets are sold at the pier")
    ]
    packed = TransformersLogProbScorer(str(tiny_llama), dtype="bfloat16")
    assert any(isinstance(m, PackedLinear) for m in packed.model.modules())
    monkeypatch.setattr(packed_weights, "use_packed_weights", lambda model: 0)
    plain = TransformersLogProbScorer(str(tiny_llama), dtype="bfloat16")
    assert not any(isinstance(m, PackedLinear) for m in plain.model.modules())
    assert packed.log_probs(requests) == plain.log_probs(requests)
