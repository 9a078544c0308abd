"""A local model that loads on its first uncached request (:mod:`ragtrail.llm.backends.lazy_local`).

The id computed before loading must be the id the loaded backend reports, for every setting that
changes it; a runtime whose calls are all cached must not load the model, nor import torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pydantic import BaseModel

from ragtrail.config import ModelRole, load_settings
from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.backends.lazy_local import (
    LazyLocalBackend,
    LoadedModelMismatch,
    planned_local_model_id,
)
from ragtrail.llm.backends.transformers_local import TransformersBackend
from ragtrail.llm.client import GenerationParams
from ragtrail.llm.prompts import Prompt
from ragtrail.runtime import Runtime
from tests.tiny_models import build_tiny_llama

CORPUS = ["the ferry leaves at nine", "tickets are sold at the pier", "answer in one word"] * 4


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), CORPUS, max_positions=1024)


class Topic(BaseModel):
    topic: str


class Remark(BaseModel):
    remark: str


PROMPT: Prompt[Topic, Remark] = Prompt(
    name="test.remark",
    version="1",
    instruction="Say something about the topic.",
    input_model=Topic,
    output_model=Remark,
)

REQUEST = GenerationRequest(
    messages=[{"role": "user", "content": "when does the ferry leave"}], max_new_tokens=4
)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"dtype": "bfloat16"},
        {"guided_json": False},
        {"max_string_chars": 80, "batch_size": 2},
        {"model_id": "team/ferry-model", "dtype": "float32"},
        {"decode_weights": "int8", "dtype": "bfloat16"},
    ],
)
def test_the_planned_id_is_the_loaded_backends_id(tiny_llama: Path, kwargs: dict) -> None:
    loaded = TransformersBackend(str(tiny_llama), **kwargs)
    assert planned_local_model_id(f"hf:{tiny_llama}", **kwargs) == loaded.model_id
    assert planned_local_model_id(str(tiny_llama), **kwargs) == loaded.model_id


def test_a_backend_with_adapters_is_not_planned(tiny_llama: Path) -> None:
    with pytest.raises(ValueError, match="adapters"):
        planned_local_model_id(str(tiny_llama), adapter_path=str(tiny_llama))


def test_the_model_loads_once_on_first_use_and_must_be_the_planned_one(tiny_llama: Path) -> None:
    built: list[TransformersBackend] = []

    def build() -> TransformersBackend:
        built.append(TransformersBackend(str(tiny_llama)))
        return built[-1]

    lazy = LazyLocalBackend(planned_local_model_id(str(tiny_llama)), build)
    assert (lazy.name, lazy.concurrent_requests, lazy.loaded) == ("transformers", 1, False)
    assert built == []
    threads = [threading.Thread(target=lazy.generate, args=([REQUEST],)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1 and lazy.loaded
    assert lazy.generate([REQUEST])[0].text == built[0].generate([REQUEST])[0].text
    assert lazy.tokenizer is built[0].tokenizer  # the loaded backend's own attributes
    with pytest.raises(AttributeError):
        _ = lazy._private

    wrong = LazyLocalBackend("another-model", build)
    with pytest.raises(LoadedModelMismatch, match="another-model"):
        wrong.generate([REQUEST])


def test_a_runtime_answers_cached_calls_without_loading_the_model(
    tiny_llama: Path, tmp_path: Path
) -> None:
    settings = load_settings(home=tmp_path / "home", generation={"llm": f"hf:{tiny_llama}"})
    inputs = [Topic(topic="ferries"), Topic(topic="piers")]
    params = GenerationParams(max_new_tokens=6)
    cold = Runtime(settings)
    try:
        first = cold.llm(ModelRole.ANSWERER).run(PROMPT, inputs, stage="t", params=params)
        assert cold.llm(ModelRole.ANSWERER).backend.loaded
    finally:
        cold.close()
    warm = Runtime(settings)
    try:
        client = warm.llm(ModelRole.ANSWERER)
        again = client.run(PROMPT, inputs, stage="t", params=params)
        assert [o.raw_texts for o in again] == [o.raw_texts for o in first]
        assert isinstance(client.backend, LazyLocalBackend) and not client.backend.loaded
    finally:
        warm.close()


def test_planning_a_local_model_imports_no_torch(tiny_llama: Path, tmp_path: Path) -> None:
    """In a fresh interpreter: a runtime's client for a local model, without a request, leaves
    torch and transformers unimported (the seconds a warm night saves)."""
    code = f"""
import json, sys
from ragtrail.config import ModelRole, load_settings
from ragtrail.runtime import Runtime
settings = load_settings(home={str(tmp_path / "home")!r},
                         generation={{"llm": "hf:{tiny_llama}", "llm_dtype": "float32"}})
rt = Runtime(settings)
client = rt.llm(ModelRole.ANSWERER)
print(json.dumps({{"id": client.backend.model_id,
                  "heavy": [m for m in ("torch", "transformers") if m in sys.modules]}}))
rt.close()
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"id": f"{tiny_llama}+guided:200", "heavy": []}
