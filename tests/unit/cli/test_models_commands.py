"""``ragtrail models list|show|promote|rollback``: JSON outputs, tables and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragtrail.cli import app
from ragtrail.config import Settings
from ragtrail.models.mlflow_registry import MlflowModelRegistry
from ragtrail.models.registry import CHAMPION
from tests.unit.models.test_model_registry import make_bundle

NAME = "ragtrail-citation"


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MlflowModelRegistry:
    """Two versions of the citation model in the registry of ``$RAGTRAIL_HOME`` (defaults)."""
    home = tmp_path / "home"
    monkeypatch.setenv("RAGTRAIL_HOME", str(home))
    monkeypatch.delenv("RAGTRAIL_REGISTRY__TRACKING_URI", raising=False)
    monkeypatch.setenv("USER", "tester")
    registry = MlflowModelRegistry.from_settings(Settings(home=home))
    registry.register_bundle(NAME, make_bundle(tmp_path, "a"))
    registry.register_bundle(NAME, make_bundle(tmp_path, "b"))
    return registry


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["models", *args])
    return result.exit_code, result.stdout, result.stderr


def test_promote_show_list_rollback_as_json(registry: MlflowModelRegistry) -> None:
    code, out, _ = run("promote", NAME, "1", "--reason", "bootstrap", "--json")
    assert code == 0, out
    assert json.loads(out) | {"at": None} == {
        "at": None, "name": NAME, "alias": CHAMPION, "action": "promote", "version": 1,
        "previous": None, "actor": "tester", "reason": "bootstrap",
    }  # fmt: skip
    code, out, _ = run(
        "promote", NAME, "2", "--reason", "better on seemingly", "--actor", "ana", "--json"
    )
    assert code == 0 and json.loads(out)["previous"] == 1

    code, out, _ = run("list", "--json")
    assert code == 0
    [model] = json.loads(out)
    assert (model["name"], model["aliases"], model["n_versions"]) == (NAME, {CHAMPION: 2}, 2)

    code, out, _ = run("list", NAME, "--json")
    assert [(v["version"], v["aliases"], v["status"]) for v in json.loads(out)] == [
        (2, [CHAMPION], "champion"),
        (1, [], "retired"),
    ]

    code, out, _ = run("show", NAME, "champion", "--json")
    shown = json.loads(out)
    assert shown["version"] == 2 and shown["lineage"]["seeds"] == {"training": 13}
    [gate] = shown["gate_decisions"]
    assert gate["promote"] and gate["reason"] == "manual promotion by ana: better on seemingly"
    assert gate["decision"] == {"manual_override": True, "actor": "ana", "previous_champion": 1}
    assert [e["action"] for e in shown["alias_events"]] == ["promote"]

    code, out, _ = run("rollback", NAME, "--reason", "too long", "--json")
    assert code == 0 and (json.loads(out)["version"], json.loads(out)["previous"]) == (1, 2)
    assert registry.get_version(NAME, CHAMPION).version == 1

    code, _, err = run("rollback", NAME, "--reason", "again")
    assert code == 2 and "first champion" in err


def test_tables_and_errors(registry: MlflowModelRegistry) -> None:
    code, out, _ = run("list")
    assert code == 0 and NAME in out
    code, out, _ = run("show", NAME, "1")
    assert code == 0 and f"{NAME} v1" in out and '"training": 13' in out
    code, _, err = run("show", NAME, "champion")
    assert code == 2 and "has no alias 'champion'" in err
    code, _, err = run("show", "missing-model")
    assert code == 2 and "no registered model 'missing-model'" in err
    code, _, err = run("promote", NAME, "7", "--reason", "x")
    assert code == 2 and "has no version 7" in err
    code, _, err = run("rollback", NAME, "--reason", "x")
    assert code == 2 and "no champion to roll back" in err
