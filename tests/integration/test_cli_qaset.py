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


@pytest.mark.parametrize(
    ("line", "kind"),
    [("[1, 2]", "an array"), ('"x"', "a string"), ("null", "null"), ("42", "a number")],
)
def test_a_line_that_is_not_an_object_is_one_line_naming_it(
    cli: CliRunner, tmp_path: Path, line: str, kind: str
) -> None:
    """Both readers of QA-set files (golden registration, ``eval retrieval --qa-set``)."""
    good = json.loads(sample_qa_set().read_text(encoding="utf-8").splitlines()[0])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(good) + "\n" + line + "\n")
    expected = f"error: {bad}:2: expected a JSON object (one question per line), got {kind}"
    for args in (
        ["qaset", "add", str(bad), "--corpus", CORPUS, "--name", "bad"],
        ["eval", "retrieval", "--corpus", CORPUS, "--qa-set", str(bad), "--no-report"],
    ):
        result = cli.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert result.stderr.strip() == expected
        assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_bom_and_malformed_files_in_qaset_add(cli: CliRunner, tmp_path: Path) -> None:
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + sample_qa_set().read_bytes())
    added = cli.invoke(app, ["qaset", "add", str(bom), "--corpus", CORPUS, "--name", "bom"])
    assert added.exit_code == 0, added.output
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    types = tmp_path / "types.jsonl"
    types.write_text(
        json.dumps({"qid": "a", "question": "Q?", "label": "summary", "ground_doc_ids": 5}) + "\n"
    )
    for path, expected in (
        (empty, f"error: {empty}: empty file, no header row"),
        (types, f"error: {types}: 1 invalid rows: row 1: ground_doc_ids must be a list of ids"),
    ):
        result = cli.invoke(app, ["qaset", "add", str(path), "--corpus", CORPUS, "--name", "x"])
        assert result.exit_code == 2 and result.stderr.startswith(expected), result.output
        assert "\n" not in result.stderr.strip()
