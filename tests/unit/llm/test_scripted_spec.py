"""``scripted:<module>:<callable>`` specs: how worker processes select an LLM test double."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Iterator

import pytest

from ragtrail.generate.prompts import GENERATION_PROMPTS
from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.factory import load_llm_backend
from ragtrail.llm.testing import ScriptedBackend
from tests.scripted_llm import MODEL_ID
from tests.scripted_llm import SPEC as SYSTEM_SPEC


@pytest.fixture
def fake_module() -> Iterator[types.ModuleType]:
    module = types.ModuleType("ragtrail_fake_responders")
    module.echo = lambda **kw: ScriptedBackend(["hi"], model_id=kw.get("model_id", "echo-v1"))
    module.not_a_backend = lambda: object()
    module.CONSTANT = 3
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_spec_builds_backend_from_callable(fake_module: types.ModuleType) -> None:
    backend = load_llm_backend("scripted:ragtrail_fake_responders:echo")
    assert isinstance(backend, ScriptedBackend)
    assert backend.model_id == "echo-v1"
    request = GenerationRequest(messages=({"role": "user", "content": "x"},))
    assert backend.generate([request])[0].text == "hi"


def test_spec_passes_keyword_arguments(fake_module: types.ModuleType) -> None:
    backend = load_llm_backend("scripted:ragtrail_fake_responders:echo", model_id="other")
    assert backend.model_id == "other"


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("scripted:ragtrail_fake_responders", ValueError),  # no callable
        ("scripted::echo", ValueError),  # no module
        ("scripted:ragtrail_fake_responders:", ValueError),
        ("scripted:ragtrail_fake_responders:missing", ValueError),
        ("scripted:ragtrail_fake_responders:CONSTANT", ValueError),  # not callable
        ("scripted:ragtrail_fake_responders:not_a_backend", TypeError),
        ("scripted:ragtrail_no_such_module_xyz:echo", ModuleNotFoundError),
    ],
)
def test_bad_specs_are_refused(
    fake_module: types.ModuleType, spec: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        load_llm_backend(spec)


def test_spec_from_settings_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """What a worker does: the spec arrives through RAGTRAIL_GENERATION__LLM."""
    from ragtrail.config import load_settings

    monkeypatch.setenv("RAGTRAIL_GENERATION__LLM", SYSTEM_SPEC)
    settings = load_settings(home=tmp_path)
    assert settings.generation.llm == SYSTEM_SPEC
    backend = load_llm_backend(settings.generation.llm)
    assert backend.model_id == MODEL_ID


def test_system_responder_answers_every_generation_prompt_with_json() -> None:
    """The system test's backend must never leave a generation prompt unanswered."""
    from tests.unit.generate import sample_contexts

    backend = load_llm_backend(SYSTEM_SPEC)
    context = sample_contexts()[0]
    facts = ["Full-time staff receive 27 days of leave.", "Leave is requested in PeopleHub."]
    inputs = {
        "context": context.text,
        "headings": " > ".join(context.headings),
        "facts": facts,
        "statement": facts[0],
        "question": "Is it true that leave is requested in PeopleHub?",
        "answer": facts[1],
        "theme": "Annual leave",
    }
    for prompt in GENERATION_PROMPTS:
        fields = set(prompt.input_model.model_fields)
        messages = prompt.render(prompt.input_model(**{k: inputs[k] for k in fields}))
        request = GenerationRequest(messages=tuple(messages))
        (result,) = backend.generate([request])
        assert result.error is None, prompt.name
        json.loads(result.text)  # valid JSON for every prompt
