"""ModelSpec: the one parser of ``kind:model`` specs (settings, the LLM factory, the runtime,
retraining)."""

from __future__ import annotations

import pytest

from ragtrail.config import check_llm_spec, check_nli_spec
from ragtrail.records import MODEL_KINDS, ModelKind, ModelSpec, ModelSpecError


@pytest.mark.parametrize(
    ("text", "kind", "model"),
    [
        ("builtin:smollm2-135m-instruct", "builtin", "smollm2-135m-instruct"),
        (" hf:org/model ", "hf", "org/model"),
        ("hf:s3://bucket/model", "hf", "s3://bucket/model"),
        ("openai:gpt@http://host:8000/v1", "openai", "gpt@http://host:8000/v1"),
        ("registry:ragtrail-citation@champion", "registry", "ragtrail-citation@champion"),
    ],
)
def test_parse_splits_at_the_first_colon_and_round_trips(text: str, kind: str, model: str) -> None:
    spec = ModelSpec.parse(text)
    assert (spec.kind, spec.model) == (kind, model)
    assert str(spec) == text.strip() and ModelSpec.parse(str(spec)) == spec


@pytest.mark.parametrize("text", ["gpt-4o", "local:model", "openai:", "hf:  ", ":model", ""])
def test_parse_refuses_what_settings_refuse(text: str) -> None:
    with pytest.raises(ModelSpecError, match="must be 'kind:model' with kind one of builtin, hf"):
        ModelSpec.parse(text)
    with pytest.raises(ValueError, match="kind:model"):
        check_llm_spec(text)


def test_any_kind_parses_when_kinds_is_none() -> None:
    scripted = ModelSpec.parse("scripted:tests.scripted_llm:backend", kinds=None)
    assert (scripted.kind, scripted.model) == ("scripted", "tests.scripted_llm:backend")
    assert ModelSpec.try_parse("scripted:m:f") == scripted.__class__("scripted", "m:f")
    assert ModelSpec.try_parse("no colon") is None and ModelSpec.try_parse("hf:") is None
    with pytest.raises(ModelSpecError, match=r"^LLM spec 'x' must be 'kind:model'$"):
        ModelSpec.parse("x", kinds=None)


def test_kinds_and_local_models() -> None:
    assert MODEL_KINDS == ("builtin", "hf", "openai", "vllm", "generator", "registry", "bundle")
    assert all(type(kind) is str for kind in MODEL_KINDS)
    local = {k for k in MODEL_KINDS if ModelSpec(k, "m").is_local}
    assert local == {ModelKind.BUILTIN, ModelKind.HF, ModelKind.REGISTRY}
    assert str(ModelSpec(ModelKind.REGISTRY, "ragtrail-citation@3")) == (
        "registry:ragtrail-citation@3"
    )
    assert check_llm_spec(" vllm:big/judge ") == "vllm:big/judge"


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        (
            "hf:MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli",
            "MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli",
        ),
        ("cross-encoder/nli-deberta-v3-small", "cross-encoder/nli-deberta-v3-small"),
        ("/models/nli", "/models/nli"),
        (" s3://bucket/models/nli", "s3://bucket/models/nli"),
        ("hf:s3://bucket/models/nli", "s3://bucket/models/nli"),
    ],
)
def test_nli_specs_are_hf_references(text: str, ref: str) -> None:
    assert ModelSpec.parse_nli(text) == ModelSpec(ModelKind.HF, ref)
    assert check_nli_spec(text) == text.strip()


@pytest.mark.parametrize("text", ["", "hf:", "builtin:nli", "openai:nli@http://x", "a b", "s3://"])
def test_nli_specs_refuse_what_is_not_a_reference(text: str) -> None:
    with pytest.raises(ModelSpecError, match="NLI model"):
        ModelSpec.parse_nli(text)
