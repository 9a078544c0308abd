"""Int8 weights for decoding steps (:mod:`ragtrail.llm.backends.int8_decoding`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.backends.int8_decoding import (
    Int8DecodingLinear,
    quantise_per_channel,
    use_int8_for_decoding,
)
from ragtrail.llm.backends.transformers_local import TransformersBackend
from tests.tiny_models import build_tiny_llama

CORPUS = ["the ferry leaves at nine", "tickets are sold at the pier", "answer in one word"] * 4


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), CORPUS, max_positions=512)


def test_per_channel_quantisation_by_hand() -> None:
    weight = torch.tensor([[1.0, -0.5, 0.25], [0.0, 0.0, 0.0], [-2.0, 1.0, 0.0]])
    values, scales = quantise_per_channel(weight)
    assert values.dtype == torch.int8 and scales.dtype == weight.dtype
    # row 0: scale 1/127; -0.5 * 127 = -63.5 rounds half to even (-64); 0.25 * 127 = 31.75 -> 32
    assert values[0].tolist() == [127, -64, 32]
    assert scales[0].item() == pytest.approx(1 / 127)
    assert values[1].tolist() == [0, 0, 0] and scales[1].item() > 0  # no division by zero
    assert values[2].tolist() == [-127, 64, 0]  # 1.0 / (2 / 127) = 63.5 -> 64
    # every weight is recovered within half a step of its row's scale
    assert ((values.float() * scales[:, None] - weight).abs() <= scales[:, None] / 2 + 1e-7).all()


def test_bf16_values_are_rounded_against_the_bf16_scale() -> None:
    torch.manual_seed(0)
    weight = (torch.randn(64, 96) * 0.05).to(torch.bfloat16)
    values, scales = quantise_per_channel(weight)
    assert scales.dtype == torch.bfloat16
    step = scales.float()[:, None]
    error = (values.float() * step - weight.float()).abs()
    # half a step, except where a rounded-down scale clips the row's largest weight at 127
    clipped = values.abs() == 127
    assert (error[~clipped] <= step.expand_as(error)[~clipped] / 2 + 1e-6).all()
    assert (error[clipped] <= step.expand_as(error)[clipped]).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_narrow_inputs_use_the_int8_copy_and_wide_ones_the_weight(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(64, 48).to(dtype)
    layer = Int8DecodingLinear(linear, max_rows=4)
    assert layer.weight is linear.weight and layer.bias is linear.bias
    values, scales = quantise_per_channel(linear.weight.detach())
    dequantised = (values.float() * scales.float()[:, None]).to(dtype)
    with torch.inference_mode():
        narrow = torch.randn(2, 2, 64, dtype=dtype)  # 4 rows: the int8 copy
        expected = nn.functional.linear(narrow.float(), dequantised.float(), linear.bias.float())
        got = layer(narrow)
        assert got.shape == (2, 2, 48) and got.dtype == dtype
        assert torch.allclose(got.float(), expected, atol=0.05 if dtype == torch.bfloat16 else 1e-4)
        assert not torch.equal(got, linear(narrow))  # it really is another product
        wide = torch.randn(5, 64, dtype=dtype)  # 5 rows: the original weight, bit for bit
        assert torch.equal(layer(wide), linear(wide))


def test_the_decoder_layers_are_swapped_but_not_the_output_embedding(tiny_llama: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    head = model.get_output_embeddings()
    before = {name: p for name, p in model.named_parameters()}
    keys = set(model.state_dict())
    swapped = use_int8_for_decoding(model)
    assert swapped == 7 * model.config.num_hidden_layers  # q, k, v, o, gate, up, down
    assert model.get_output_embeddings() is head and type(head) is nn.Linear
    assert all(
        isinstance(m, Int8DecodingLinear)
        for name, m in model.named_modules()
        if name.endswith(("_proj",))
    )
    # the same parameter objects, and nothing added to what the model saves
    assert dict(model.named_parameters()) == before
    assert set(model.state_dict()) == keys


def test_a_backend_with_int8_decoding_generates_and_names_it(tiny_llama: Path) -> None:
    request = GenerationRequest(
        messages=[{"role": "user", "content": "when does the ferry leave"}],
        max_new_tokens=6,
        json_schema=None,
    )
    native = TransformersBackend(str(tiny_llama), batch_size=2)
    int8 = TransformersBackend(str(tiny_llama), batch_size=2, decode_weights="int8")
    assert int8.model_id == native.model_id.replace("+guided", "+decode:int8+guided")
    layer = next(m for m in int8.model.modules() if isinstance(m, Int8DecodingLinear))
    rows: list[int] = []
    layer.register_forward_pre_hook(lambda _, args: rows.append(args[0].shape[:-1].numel()))
    results = int8.generate([request, request])
    assert all(r.ok and r.completion_tokens > 0 for r in results)
    # prompts went through the original weight, decoding steps (2 rows) through the int8 copy
    assert any(n > layer.max_rows for n in rows) and rows.count(2) >= 1
    assert results[0].text == results[1].text  # a request's text does not depend on its mate
    swapped = [m for m in int8.model.modules() if isinstance(m, Int8DecodingLinear)]
    assert len(swapped) == 14 and not any(
        isinstance(m, Int8DecodingLinear) for m in native.model.modules()
    )


def test_bad_settings_are_refused(tiny_llama: Path) -> None:
    with pytest.raises(ValueError, match="'native' or 'int8'"):
        TransformersBackend(str(tiny_llama), decode_weights="int4")
    with pytest.raises(ValueError, match="CPU"):
        TransformersBackend(str(tiny_llama), decode_weights="int8", device="cuda")


def test_the_runtime_passes_the_setting_to_local_models(tiny_llama: Path, tmp_path: Path) -> None:
    from ragtrail.config import ModelRole, load_settings
    from ragtrail.runtime import Runtime

    settings = load_settings(
        home=tmp_path / "home",
        generation={"llm": f"hf:{tiny_llama}", "llm_decode_weights": "int8"},
    )
    rt = Runtime(settings)
    try:
        lazy = rt.llm(ModelRole.ANSWERER).backend
        assert "+decode:int8" in lazy.model_id  # known before loading: cache keys stay apart
        backend = lazy.load()
        assert backend.model_id == lazy.model_id
        assert any(isinstance(m, Int8DecodingLinear) for m in backend.model.modules())
        assert rt.backends()["local decoding weights"] == "int8"
    finally:
        rt.close()
    plain = Runtime(load_settings(home=tmp_path / "plain", generation={"llm": f"hf:{tiny_llama}"}))
    try:
        assert "local decoding weights" not in plain.backends()
        assert "+decode" not in plain.llm(ModelRole.ANSWERER).backend.model_id
    finally:
        plain.close()
