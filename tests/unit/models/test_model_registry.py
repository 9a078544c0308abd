"""The MLflow model registry on SQLite and PostgreSQL backend stores, local and S3 artifacts."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragtrail.models.bundle import write_bundle
from ragtrail.models.bundle_store import MANIFEST
from ragtrail.models.mlflow_registry import MlflowModelRegistry
from ragtrail.models.registry import (
    CHALLENGER,
    CHAMPION,
    BundleIntegrityError,
    ModelRegistry,
    RegistryError,
    parse_model_ref,
    promote,
    rollback,
    settle_challenger,
)
from ragtrail.storage.artifacts import LocalArtifactStore, S3ArtifactStore
from tests.unit.conftest import fresh_pg_schema

NAME = "ragtrail-citation"
LINEAGE = {
    "base_model": "tiny",
    "training_data": {"version": "qa-v3", "split": {"train": ["q1", "q2"], "held_out": ["q3"]}},
    "configuration": {"lora_r": 8, "lr": 0.0002},
    "seeds": {"training": 13},
    "training_metrics": {"sft_loss_last": 1.25, "rl_reward_mean": 0.5},
    "stages": {
        "rl": {
            "steps": 2,
            "history": [
                {"step": 1, "reward": 0.25, "kl": 0.0, "status/ok": 3},
                {"step": 2, "reward": 0.5, "kl": 0.125, "status/ok": 4},
            ],
        }
    },
}


def make_bundle(root: Path, marker: str, *, kind: str = "citation_answerer") -> Path:
    adapter = root / f"adapter-{marker}"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"marker": marker}))
    (adapter / "adapter_model.safetensors").write_bytes(marker.encode() * 100)
    out = root / f"bundle-{marker}"
    write_bundle(out, kind=kind, base_model="tiny", adapters={"sft": adapter}, lineage=LINEAGE)
    return out


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def tracking_uri(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh MLflow backend store: a SQLite file, or a PostgreSQL schema dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry' / 'mlflow.db'}"
        return
    with fresh_pg_schema("rt_mlflow") as url:
        yield url


@pytest.fixture
def registry(tracking_uri: str, tmp_path: Path) -> MlflowModelRegistry:
    return MlflowModelRegistry(
        tracking_uri, LocalArtifactStore(tmp_path / "artifacts"), cache_dir=tmp_path / "cache"
    )


def test_register_promote_rollback_history(registry: MlflowModelRegistry, tmp_path: Path) -> None:
    assert isinstance(registry, ModelRegistry)
    v1 = registry.register_bundle(
        NAME, make_bundle(tmp_path, "a"), lineage={"evaluation_metrics": {"citation_f1": 0.31}}
    )
    assert (v1.version, v1.kind, v1.status, v1.aliases) == (
        1,
        "citation_answerer",
        "registered",
        (),
    )
    assert v1.lineage is not None
    assert v1.lineage["training_data"]["split"]["held_out"] == ["q3"]
    assert v1.lineage["evaluation_metrics"] == {"citation_f1": 0.31}
    assert v1.tags["lineage.seeds.training"] == "13"
    assert v1.tags["lineage.training_data.split.train"] == '["q1", "q2"]'
    assert len(v1.digest) == 64 and v1.base_model == "tiny"
    run = registry.client.get_run(v1.run_id)
    assert run.data.metrics["training_metrics.sft_loss_last"] == 1.25
    assert run.data.metrics["evaluation_metrics.citation_f1"] == 0.31
    assert run.data.params["configuration.lora_r"] == "8"
    # a stage's per-iteration log becomes metric histories of the version's run
    history = registry.client.get_metric_history(v1.run_id, "stages.rl.reward")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
        (1, 0.25),
        (2, 0.5),
    ]
    assert len(registry.client.get_metric_history(v1.run_id, "stages.rl.status/ok")) == 2

    v2 = registry.register_bundle(NAME, make_bundle(tmp_path, "b"))
    assert v2.version == 2 and v2.digest != v1.digest

    promote(registry, NAME, 1, actor="ci", reason="first model beat random")
    registry.set_alias(NAME, CHALLENGER, 2, actor="ci", reason="retrained")
    assert registry.get_version(NAME, CHAMPION).version == 1
    assert registry.get_version(NAME, "challenger").version == 2
    event = promote(registry, NAME, 2, actor="ci", reason="gate passed")
    assert (event.version, event.previous) == (2, 1)
    models = registry.list_models()
    assert [(m.name, m.aliases, m.n_versions, m.latest_version) for m in models] == [
        (NAME, {CHAMPION: 2}, 2, 2)  # the promoted challenger lost its challenger alias
    ]
    listed = registry.list_versions(NAME)
    assert [(v.version, v.aliases, v.status) for v in listed] == [
        (2, (CHAMPION,), "champion"),
        (1, (), "retired"),
    ]
    assert listed[0].tags["ragtrail.previous_champion"] == "1"

    back = rollback(registry, NAME, actor="oncall", reason="answers too long")
    assert (back.version, back.previous, back.action) == (1, 2, "rollback")
    assert registry.get_version(NAME, CHAMPION).version == 1
    assert registry.get_version(NAME, 2).status == "rolled_back"
    with pytest.raises(RegistryError, match="first champion"):
        rollback(registry, NAME, actor="oncall", reason="again")

    history = [(e.action, e.alias, e.previous, e.version) for e in registry.alias_history(NAME)]
    assert history == [
        ("promote", CHAMPION, None, 1),
        ("set", CHALLENGER, None, 2),
        ("promote", CHAMPION, 1, 2),
        ("delete", CHALLENGER, 2, None),
        ("rollback", CHAMPION, 2, 1),
    ]
    assert registry.alias_history(NAME)[-1].actor == "oncall"


def test_same_bundle_is_stored_once(registry: MlflowModelRegistry, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, "a")
    v1 = registry.register_bundle(NAME, bundle)
    v2 = registry.register_bundle(NAME, bundle)
    assert (v1.digest, v1.source) == (v2.digest, v2.source) and v2.version == 2
    keys = registry.artifacts.list(f"registry/{NAME}/bundles")
    assert sum(k.endswith(MANIFEST) for k in keys) == 1


def test_download_is_cached_and_checked(registry: MlflowModelRegistry, tmp_path: Path) -> None:
    registry.register_bundle(NAME, make_bundle(tmp_path, "a"))
    registry.set_alias(NAME, CHAMPION, 1, actor="t", reason="t")
    version, path = registry.download_bundle(NAME, "champion")
    assert path.name == f"v1-{version.digest[:16]}"
    weights = path / "adapters" / "sft" / "adapter_model.safetensors"
    assert weights.read_bytes() == b"a" * 100
    # a damaged cache is replaced by a fresh, verified copy
    weights.write_bytes(b"tampered")
    _, again = registry.download_bundle(NAME, 1)
    assert again == path and weights.read_bytes() == b"a" * 100
    # a damaged stored bundle is refused, naming the file
    stored = Path(version.source) / "adapters" / "sft" / "adapter_model.safetensors"
    stored.write_bytes(b"evil")
    weights.write_bytes(b"tampered")
    with pytest.raises(BundleIntegrityError, match=r"adapter_model\.safetensors: content differs"):
        registry.download_bundle(NAME, 1)


def test_gate_decisions_are_kept_with_the_version(
    registry: MlflowModelRegistry, tmp_path: Path
) -> None:
    registry.register_bundle(NAME, make_bundle(tmp_path, "a"), description="SFT+RL, 40 steps")
    decision = {"promote": False, "checks": [{"metric": "citation_f1", "diff": None}]}
    registry.record_gate_decision(NAME, 1, decision, promote=False, reason="CI reaches zero")
    registry.record_gate_decision(NAME, 1, decision, promote=True, reason="manual override")
    gates = registry.gate_decisions(NAME, 1)
    assert [(g["promote"], g["reason"]) for g in gates] == [
        (False, "CI reaches zero"),
        (True, "manual override"),
    ]
    assert gates[0]["decision"] == decision
    version = registry.get_version(NAME, 1)
    assert version.tags["ragtrail.gate.decision"] == "promote"
    assert version.description.startswith("SFT+RL, 40 steps\n[gate ")
    assert "reject: CI reaches zero" in version.description


def test_clear_errors(registry: MlflowModelRegistry, tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="no registered model 'nope'"):
        registry.get_version("nope", 1)
    registry.register_bundle(NAME, make_bundle(tmp_path, "a"))
    with pytest.raises(RegistryError, match="has no alias 'champion' \\(aliases: none\\)"):
        registry.get_version(NAME, CHAMPION)
    with pytest.raises(RegistryError, match="has no version 9"):
        registry.get_version(NAME, 9)
    with pytest.raises(RegistryError, match="has no version 9"):
        registry.set_alias(NAME, CHAMPION, 9, actor="t", reason="t")
    with pytest.raises(RegistryError, match="no champion to roll back"):
        rollback(registry, NAME, actor="t", reason="t")
    with pytest.raises(RegistryError, match="'generator' model"):
        registry.register_bundle(NAME, make_bundle(tmp_path, "g", kind="generator"))
    with pytest.raises(RegistryError, match="not a model bundle"):
        registry.register_bundle(NAME, tmp_path)
    promote(registry, NAME, 1, actor="t", reason="t")
    with pytest.raises(RegistryError, match="already the champion"):
        promote(registry, NAME, 1, actor="t", reason="t")


def test_settle_challenger_applies_the_gate(registry: MlflowModelRegistry, tmp_path: Path) -> None:
    registry.register_bundle(NAME, make_bundle(tmp_path, "a"))
    registry.register_bundle(NAME, make_bundle(tmp_path, "b"))
    first = settle_challenger(
        registry, NAME, 1, promote_it=True, reason="beats random", decision={"promote": True}
    )
    assert (first.alias, first.version, first.actor) == (CHAMPION, 1, "promotion-gate")
    kept = settle_challenger(
        registry, NAME, 2, promote_it=False, reason="CI reaches zero", decision={"promote": False}
    )
    assert (kept.alias, kept.version) == (CHALLENGER, 2)
    assert registry.get_version(NAME, CHAMPION).version == 1
    challenger = registry.get_version(NAME, CHALLENGER)
    assert challenger.status == "challenger"
    assert challenger.tags["ragtrail.gate.reason"] == "CI reaches zero"
    assert [g["promote"] for g in registry.gate_decisions(NAME, 2)] == [False]
    registry.register_bundle(NAME, make_bundle(tmp_path, "c"))
    settle_challenger(registry, NAME, 3, promote_it=False, reason="worse", decision={})
    assert [(v.version, v.aliases, v.status) for v in registry.list_versions(NAME)] == [
        (3, (CHALLENGER,), "challenger"),
        (2, (), "rejected"),
        (1, (CHAMPION,), "champion"),
    ]


def test_settings_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragtrail.config import load_settings

    monkeypatch.setenv("RAGTRAIL_HOME", str(tmp_path / "home"))
    for var in ("TRACKING_URI", "ARTIFACT_URI", "CACHE_DIR", "CITATION_MODEL_NAME"):
        monkeypatch.delenv(f"RAGTRAIL_REGISTRY__{var}", raising=False)
    defaults = load_settings()
    assert (
        defaults.resolved_registry_uri
        == f"sqlite:///{tmp_path / 'home' / 'registry' / 'mlflow.db'}"
    )
    assert defaults.resolved_registry_artifact_uri == defaults.resolved_artifact_uri
    assert defaults.registry.citation_model_name == "ragtrail-citation"
    assert defaults.registry.generator_model_name == "ragtrail-generator"
    monkeypatch.setenv("RAGTRAIL_REGISTRY__TRACKING_URI", "postgresql+psycopg://u@db/mlflow")
    monkeypatch.setenv("RAGTRAIL_REGISTRY__CITATION_MODEL_NAME", "cite-v2")
    monkeypatch.setenv("RAGTRAIL_PROMOTION__MAX_ANSWER_WORDS_INCREASE", "3")
    monkeypatch.setenv("RAGTRAIL_MODELS__ANSWERER", "registry:cite-v2@challenger")
    settings = load_settings()
    assert settings.resolved_registry_uri == "postgresql+psycopg://u@db/mlflow"
    assert settings.registry.citation_model_name == "cite-v2"
    assert settings.promotion.max_answer_words_increase == 3.0
    assert settings.model_for("answerer") == "registry:cite-v2@challenger"


def test_parse_model_ref() -> None:
    assert parse_model_ref("m") == ("m", CHAMPION)
    assert parse_model_ref("m@challenger") == ("m", CHALLENGER)
    assert parse_model_ref("m@3") == ("m", 3)
    assert parse_model_ref("m@v12") == ("m", 12)
    for bad in ("m@", "@x", "m@0", "m@bad alias", "bad name@champion"):
        with pytest.raises(RegistryError):
            parse_model_ref(bad)


# ---------------------------------------------------------------------------- S3 artifacts


@pytest.fixture
def s3_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3ArtifactStore]:
    endpoint = os.environ.get("RAGTRAIL_TEST_S3_ENDPOINT")
    if not endpoint:
        pytest.skip("moto_server not configured: set RAGTRAIL_TEST_S3_ENDPOINT")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    bucket = f"rt-registry-{uuid.uuid4().hex[:10]}"
    store = S3ArtifactStore(bucket, "team/ragtrail", endpoint_url=endpoint)
    store.client.create_bucket(Bucket=bucket)
    yield store
    for page in store.client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            store.client.delete_object(Bucket=bucket, Key=obj["Key"])
    store.client.delete_bucket(Bucket=bucket)


def test_s3_artifacts(s3_store: S3ArtifactStore, tmp_path: Path) -> None:
    endpoint = os.environ["RAGTRAIL_TEST_S3_ENDPOINT"]
    registry = MlflowModelRegistry(
        f"sqlite:///{tmp_path / 'mlflow.db'}",
        s3_store,
        cache_dir=tmp_path / "cache",
        s3_endpoint_url=endpoint,
    )
    version = registry.register_bundle(NAME, make_bundle(tmp_path, "s"))
    assert (
        version.source
        == f"s3://{s3_store.bucket}/team/ragtrail/registry/{NAME}/bundles/{version.digest}"
    )
    assert version.lineage is not None and version.lineage["seeds"] == {"training": 13}
    registry.record_gate_decision(NAME, 1, {"x": 1}, promote=True, reason="ok")
    assert registry.gate_decisions(NAME, 1)[0]["decision"] == {"x": 1}
    _, path = registry.download_bundle(NAME, 1)
    assert (path / "adapters" / "sft" / "adapter_model.safetensors").read_bytes() == b"s" * 100
    assert json.loads((path / "bundle.json").read_text())["kind"] == "citation_answerer"


def test_a_sqlite_registry_never_written_is_read_without_mlflow(tmp_path: Path) -> None:
    """Reading a SQLite registry whose file does not exist answers "no models" without making
    an MLflow client (a night that only asks for a champion stays MLflow-free); the first
    registration creates the file, and reads then go through MLflow."""
    db = tmp_path / "registry" / "mlflow.db"
    registry = MlflowModelRegistry(
        f"sqlite:///{db}", LocalArtifactStore(tmp_path / "artifacts"), cache_dir=tmp_path / "c"
    )
    assert registry.list_models() == []
    with pytest.raises(RegistryError, match="no registered model"):
        registry.list_versions(NAME)
    with pytest.raises(RegistryError, match="no registered model"):
        registry.get_version(NAME, CHAMPION)
    assert "client" not in registry.__dict__ and not db.exists()

    registry.register_bundle(NAME, make_bundle(tmp_path, "a"))
    assert db.exists() and [m.name for m in registry.list_models()] == [NAME]
    assert [v.version for v in registry.list_versions(NAME)] == [1]
