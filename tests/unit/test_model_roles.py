"""Models per role: settings (defaults, env, YAML, validation) and the runtime's clients per spec.

The runtime tests build OpenAI-compatible backends, which open no connection until they generate,
so real backend loading is exercised without a model or a server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ragtrail.config import ModelRole, load_settings
from ragtrail.config_checks import ConfigError
from ragtrail.report.testset_sections import llm_models_line
from ragtrail.runtime import Runtime
from tests.unit.generate import routed_backend

GEN = "openai:writer@http://127.0.0.1:9/v1"
JUDGE = "openai:judge@http://127.0.0.1:9/v1"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ragtrail.yaml or RAGTRAIL_* variable from the surroundings."""
    monkeypatch.chdir(tmp_path)
    for name in ("RAGTRAIL_CONFIG", "RAGTRAIL_HOME", "RAGTRAIL_NLI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    for role in ModelRole:
        monkeypatch.delenv(f"RAGTRAIL_MODELS__{role.upper()}", raising=False)


def test_every_role_defaults_to_the_generation_model(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "h", generation={"llm": GEN})
    assert [settings.model_for(role) for role in ModelRole] == [GEN] * len(ModelRole)
    assert settings.model_for("labeller") == GEN
    assert settings.nli_model is None


def test_roles_from_env_and_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "ragtrail.yaml"
    config.write_text(
        f"generation:\n  llm: {GEN}\n"
        "models:\n  critic: hf:some/critic\n  labeller: hf:yaml/labeller\n"
        "nli_model: hf:cross-encoder/nli-deberta-v3-small\n"
    )
    monkeypatch.setenv("RAGTRAIL_CONFIG", str(config))
    monkeypatch.setenv("RAGTRAIL_MODELS__LABELLER", JUDGE)
    monkeypatch.setenv("RAGTRAIL_MODELS__JUDGE", " vllm:big/judge ")
    settings = load_settings(home=tmp_path / "h")
    assert {role: settings.model_for(role) for role in ModelRole} == {
        ModelRole.GENERATOR: GEN,
        ModelRole.LABELLER: JUDGE,  # the environment wins over the file
        ModelRole.CRITIC: "hf:some/critic",
        ModelRole.ANSWERER: GEN,
        ModelRole.JUDGE: "vllm:big/judge",
        ModelRole.EXTRACTOR: GEN,
    }
    assert settings.nli_model == "hf:cross-encoder/nli-deberta-v3-small"


@pytest.mark.parametrize("spec", ["gpt-4o", "local:model", "openai:", "hf:  "])
def test_a_role_refuses_a_malformed_llm_spec(tmp_path: Path, spec: str) -> None:
    with pytest.raises(ConfigError, match=r"invalid setting models\.critic: LLM spec"):
        load_settings(home=tmp_path / "h", models={"critic": spec})


@pytest.mark.parametrize(
    "spec",
    [
        "hf:MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli",
        "cross-encoder/nli-deberta-v3-small",
        "/models/nli",
        "s3://bucket/models/nli",
        "hf:s3://bucket/models/nli",
    ],
)
def test_nli_model_accepts_references(tmp_path: Path, spec: str) -> None:
    assert load_settings(home=tmp_path / "h", nli_model=spec).nli_model == spec


@pytest.mark.parametrize("spec", ["", "hf:", "builtin:nli", "openai:nli@http://x", "a b", "s3://"])
def test_nli_model_refuses_what_is_not_a_reference(tmp_path: Path, spec: str) -> None:
    with pytest.raises(ConfigError, match=r"invalid setting nli_model: NLI model"):
        load_settings(home=tmp_path / "h", nli_model=spec)


def _runtime(tmp_path: Path, **models: str) -> Runtime:
    return Runtime(load_settings(home=tmp_path / "h", generation={"llm": GEN}, models=models))


def test_roles_with_one_spec_share_one_loaded_backend(tmp_path: Path) -> None:
    rt = _runtime(tmp_path, labeller=JUDGE, critic=JUDGE)
    try:
        labeller, critic = rt.llm(ModelRole.LABELLER), rt.llm(ModelRole.CRITIC)
        generator, answerer = rt.llm(ModelRole.GENERATOR), rt.llm(ModelRole.ANSWERER)
        assert labeller is critic and labeller.backend is critic.backend
        assert generator is answerer
        assert generator.backend is not labeller.backend
        assert (generator.backend.model_id, labeller.backend.model_id) == ("writer", "judge")
        assert rt.llm(ModelRole.LABELLER) is labeller  # built once
        assert generator.cache is labeller.cache is rt.llm_cache
        assert generator.usage is labeller.usage is rt.llm_usage
        assert generator.max_attempts == rt.settings.generation.max_attempts
    finally:
        rt.close()


def test_backends_name_each_distinct_model_once(tmp_path: Path) -> None:
    one = _runtime(tmp_path / "one")
    two = _runtime(tmp_path / "two", labeller=JUDGE, judge=JUDGE)
    try:
        assert one.llm_models() == {"llm": GEN}
        assert one.backends()["llm"] == GEN
        assert two.llm_models() == {
            "llm (generator, critic, answerer, extractor)": GEN,
            "llm (labeller, judge)": JUDGE,
        }
        assert "llm" not in two.backends()
        assert llm_models_line(two.backends()) == (
            f"{GEN} (generator, critic, answerer, extractor); {JUDGE} (labeller, judge)"
        )
        assert llm_models_line(one.backends()) == GEN
    finally:
        one.close()
        two.close()


def test_installed_backends_serve_their_specs_with_a_fresh_meter(tmp_path: Path) -> None:
    rt = _runtime(tmp_path, labeller=JUDGE)
    try:
        first = rt.llm_usage
        first.record("s", "b", "m", calls=1)
        writer, judge = routed_backend(model_id="w"), routed_backend(model_id="j")
        rt.use_llm_backends({GEN: writer, JUDGE: judge})
        assert rt.llm(ModelRole.GENERATOR).backend is writer
        assert rt.llm(ModelRole.LABELLER).backend is judge
        assert rt.llm_usage is not first and rt.llm_usage.totals().calls == 0
        assert rt.llm(ModelRole.CRITIC).usage is rt.llm_usage
    finally:
        rt.close()
