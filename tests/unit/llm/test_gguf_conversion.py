"""The builtin model's GGUF conversion parses its file once (``model_store._gguf_parsed_once``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from ragtrail.llm.backends.model_store import _gguf_parsed_once  # noqa: E402


def _tiny_gguf(path: Path) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_one_reader_per_file_and_one_name_map_inside_and_none_shared_outside(
    tmp_path: Path,
) -> None:
    first, second = _tiny_gguf(tmp_path / "a.gguf"), _tiny_gguf(tmp_path / "b.gguf")
    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with _gguf_parsed_once():
        reader = gguf.GGUFReader(first)
        assert gguf.GGUFReader(str(first)) is reader  # the same file: parsed once
        assert gguf.GGUFReader(second) is not reader
        assert reader.get_tensor(0).name == "token_embd.weight"
        assert np.array_equal(np.asarray(reader.get_tensor(0).data).ravel(), np.arange(12))
        arch = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
    assert gguf.GGUFReader is real_reader and gguf.get_tensor_name_map is real_map
    assert gguf.GGUFReader(first) is not gguf.GGUFReader(first)


def test_the_originals_come_back_when_the_conversion_fails(tmp_path: Path) -> None:
    real_reader = gguf.GGUFReader
    with pytest.raises(RuntimeError), _gguf_parsed_once():
        raise RuntimeError("conversion failed")
    assert gguf.GGUFReader is real_reader


@pytest.mark.slow
def test_the_converted_checkpoint_holds_exactly_the_gguf_models_weights(tmp_path: Path) -> None:
    """The fresh model skips its random initialisation: every weight it saves must be the GGUF
    model's, the tied output embedding included."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from ragtrail.llm.backends.model_store import _convert_gguf, smollm2_gguf_path

    source = smollm2_gguf_path()
    _convert_gguf(source, tmp_path / "out")
    with _gguf_parsed_once():
        expected = AutoModelForCausalLM.from_pretrained(
            str(source.parent), gguf_file=source.name, dtype=torch.float32
        ).state_dict()
    saved = load_file(tmp_path / "out" / "model.safetensors")
    assert saved, "nothing saved"
    assert "lm_head.weight" not in saved  # tied to the input embedding: saved once
    for name, tensor in saved.items():
        assert torch.equal(tensor, expected[name]), name
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert torch.equal(model.lm_head.weight, expected["model.embed_tokens.weight"])
