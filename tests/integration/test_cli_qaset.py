"""``ragtrail qaset add`` / ``qaset list`` as a user runs them (typer's CliRunner, real stores)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragtrail.cli import app
from ragtrail.paths import sample_qa_set

CORPUS = "hb"


ENV_VARS = ("RAGTRAIL_CONFIG", "RAGTRAIL_DATABASE_URL", "RAGTRAIL_ARTIFACT_URI")


@pytest.fixture(scope="module")
def ingested_home(tmp_path_factory: pytest.TempPathFactory, sample_corpus: Path) -> Path:
    """A RAGTRAIL_HOME in which the sample corpus is ingested as ``hb`` (once per module)."""
    home = tmp_path_factory.mktemp("qaset") / "home"
    with pytest.MonkeyPatch.context() as mp:
        for var in ENV_VARS:
            mp.delenv(var, raising=False)
        mp.setenv("RAGTRAIL_HOME", str(home))
        result = CliRunner().invoke(app, ["ingest", str(sample_corpus), "--corpus", CORPUS])
    assert result.exit_code == 0, result.output
    return home


@pytest.fixture
def cli(ingested_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A runner on a private copy of the ingested home."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    shutil.copytree(ingested_home, home)
    monkeypatch.setenv("RAGTRAIL_HOME", str(home))
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps at the terminal width
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def test_add_list_and_readd_the_sample_set(cli: CliRunner, tmp_path: Path) -> None:
    args = ["qaset", "add", str(sample_qa_set()), "--corpus", CORPUS, "--name", "handbook-sample"]
    added = cli.invoke(app, [*args, "--json"])
    assert added.exit_code == 0, added.output
    first = json.loads(added.stdout)
    assert first["created"] is True and first["n_items"] == 65
    assert first["version"].startswith("gs-")
    assert all(first["questions_per_label"][label] > 0 for label in first["questions_per_label"])
    assert sum(first["questions_per_label"].values()) == 65
    assert first["quality"]["success"] is True and first["quality"]["name"].startswith("golden")
    stored = Path(first["quality_uri"].removeprefix("file://"))
    assert stored.is_file() and json.loads(stored.read_text()) == first["quality"]
    key = f"golden/{CORPUS}/handbook-sample/{first['version']}/quality.json"
    assert str(stored).endswith(key)

    again = cli.invoke(app, args)  # human output
    assert again.exit_code == 0, again.output
    assert f"unchanged, already registered as {first['version']}" in again.stderr
    assert "quality (golden_set.handbook-sample): passed" in again.stderr

    listed = json.loads(cli.invoke(app, ["qaset", "list", "--corpus", CORPUS, "--json"]).stdout)
    assert [(v["name"], v["version"], v["latest"]) for v in listed] == [
        ("handbook-sample", first["version"], True)
    ]
    table = cli.invoke(app, ["qaset", "list", "--corpus", CORPUS])
    assert table.exit_code == 0
    assert "handbook-sample" in table.stdout and first["version"] in table.stdout
    assert "fact_single 19, summary 16, reasoning 16, unanswerable 14" in table.stdout


def test_a_set_with_unknown_documents_is_refused_with_row_numbers(
    cli: CliRunner, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    rows = [
        {"qid": "a", "question": "Q?", "label": "summary", "answer": "x",
         "ground_doc_ids": ["people/leave-policy.md"]},
        {"qid": "b", "question": "R?", "label": "summary", "answer": "y",
         "ground_doc_ids": ["people/no-such-page.md"]},
    ]  # fmt: skip
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = cli.invoke(app, ["qaset", "add", str(bad), "--corpus", CORPUS, "--name", "bad"])
    assert result.exit_code == 2
    assert "row 2: unknown document 'people/no-such-page.md'" in result.stderr
    listed = cli.invoke(app, ["qaset", "list", "--corpus", CORPUS, "--json"])
    assert json.loads(listed.stdout) == []


def test_an_unknown_corpus_is_a_clear_error(cli: CliRunner) -> None:
    args = ["qaset", "add", str(sample_qa_set()), "--corpus", "nope", "--name", "x"]
    result = cli.invoke(app, args)
    assert result.exit_code == 2
    assert "corpus 'nope' has no complete snapshot" in result.stderr
