"""Bad input at the command line: one line naming the file (and line) on stderr, exit code 2, no
traceback unless ``--debug`` or ``RAGTRAIL_DEBUG=1``; the same for bad settings, from every
command that reads them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from ragtrail.cli import app

# Commands that need no corpus, no model and no network: each builds the settings first.
SETTINGS_COMMANDS = [
    ["runs", "list"],
    ["judge", "list"],
    ["qaset", "list"],
    ["testset", "list"],
    ["drift", "list"],
    ["corpus", "snapshots"],
    ["models", "list"],
    ["search", "leave"],
    ["eval", "answers", "{answers}", "--judge", "none"],
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh RAGTRAIL_HOME, the working directory without a ragtrail.yaml, no RAGTRAIL_*."""
    for name in list(os.environ):
        if name.upper().startswith("RAGTRAIL_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("RAGTRAIL_HOME", str(home))
    return home


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env=env)


def one_line_error(result: Result, *fragments: str) -> str:
    """Assert exit code 2 and a single ``error:`` line on stderr holding every fragment."""
    assert result.exit_code == 2, result.output
    message = result.stderr.strip()
    assert message.startswith("error: ") and "\n" not in message, message
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in message, message
    return message


def _answers(tmp_path: Path) -> Path:
    path = tmp_path / "answers.jsonl"
    path.write_text(json.dumps({"qid": "q", "question": "?", "answer": "", "passages": []}) + "\n")
    return path


@pytest.mark.parametrize("command", SETTINGS_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_invalid_yaml_is_one_line_from_every_command(
    home: Path, tmp_path: Path, command: list[str]
) -> None:
    (home / "ragtrail.yaml").write_text("retrieval:\n  text_weights: [0.1, 0.2\n")
    args = [a.format(answers=_answers(tmp_path)) for a in command]
    one_line_error(
        invoke(*args), f"{home}/ragtrail.yaml: invalid YAML at line 3, column 1: expected ','"
    )


@pytest.mark.parametrize("command", SETTINGS_COMMANDS[:3], ids=lambda c: " ".join(c[:2]))
def test_unknown_settings_are_refused_with_a_suggestion(
    home: Path, tmp_path: Path, command: list[str]
) -> None:
    (home / "ragtrail.yaml").write_text("retrieval:\n  txt_weights: [0.5]\n")
    one_line_error(
        invoke(*command),
        f"unknown setting retrieval.txt_weights in {home}/ragtrail.yaml; "
        "did you mean retrieval.text_weights?",
    )
    (home / "ragtrail.yaml").unlink()
    one_line_error(
        invoke(*command, env={"RAGTRAIL_CHUNKING__MAX_TOKNS": "100"}),
        "unknown setting RAGTRAIL_CHUNKING__MAX_TOKNS; did you mean RAGTRAIL_CHUNKING__MAX_TOKENS?",
    )
    one_line_error(
        invoke(*command, env={"RAGTRAIL_CHUNKING__MAX_TOKENS": "many"}),
        "invalid setting RAGTRAIL_CHUNKING__MAX_TOKENS='many': Input should be a valid integer",
    )


def test_register_generator_reads_its_settings_inside_the_error_guard(home: Path) -> None:
    (home / "ragtrail.yaml").write_text("- not a mapping\n")
    one_line_error(
        invoke("models", "register-generator", str(home)),
        "the top level must be a mapping of settings, not a list",
    )


def test_debug_prints_the_traceback_as_well(home: Path) -> None:
    (home / "ragtrail.yaml").write_text("seed: [\n")
    plain = invoke("runs", "list")
    one_line_error(plain, "invalid YAML")
    for result in (
        invoke("--debug", "runs", "list"),
        invoke("runs", "list", env={"RAGTRAIL_DEBUG": "1"}),
    ):
        assert result.exit_code == 2
        assert "Traceback (most recent call last)" in result.stderr
        assert "ragtrail.config_checks.ConfigError" in result.stderr
        assert result.stderr.strip().splitlines()[-1] == plain.stderr.strip()
    assert "Traceback" not in invoke("runs", "list", env={"RAGTRAIL_DEBUG": "0"}).stderr


def test_help_needs_no_settings(home: Path) -> None:
    (home / "ragtrail.yaml").write_text("seed: [\n")
    assert invoke("--help").exit_code == 0


# ------------------------------------------------------------------------------- input files


@pytest.mark.parametrize(
    ("line", "kind"), [("[1, 2]", "an array"), ('"x"', "a string"), ("null", "null")]
)
def test_a_qa_set_line_that_is_not_an_object(
    home: Path, tmp_path: Path, line: str, kind: str
) -> None:
    path = tmp_path / "qa.jsonl"
    path.write_text(line + "\n")
    one_line_error(
        invoke("judge", "calibrate", "labeller", "--reference", str(path)),
        f"{path}:1: expected a JSON object (one question per line), got {kind}",
    )


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("qa.csv", b"", "{path}: empty file, no header row"),
        ("qa.csv", b"qid,question,label,ground_doc_ids\n", "{path}: no questions"),
        ("qa.jsonl", "caf\xe9".encode("latin-1"), "{path}:1: not UTF-8 text (byte 0xe9"),
        ("qa.jsonl", b"\x00\x01\x02", "{path}: binary data (a NUL byte)"),
        ("qa.parquet", b"PAR1 but not really", "{path}: not a readable Parquet file"),
        ("missing.jsonl", None, "QA set not found: {path}"),
        ("folder.jsonl", "dir", "{path}: is a directory, not a file"),
    ],
)  # fmt: skip
def test_unreadable_qa_sets_name_the_file(
    home: Path, tmp_path: Path, name: str, data: bytes | str | None, expected: str
) -> None:
    path = tmp_path / name
    if data == "dir":
        path.mkdir()
    elif isinstance(data, bytes):
        path.write_bytes(data)
    one_line_error(
        invoke("judge", "calibrate", "labeller", "--reference", str(path)),
        expected.format(path=path),
    )


def test_an_unreadable_entailment_reference_is_one_line(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "ref.jsonl"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    result = invoke("judge", "calibrate", "entailment.embedding", "--reference", str(path))
    assert result.exit_code == 2 and "Traceback" not in result.output
    # the judge's model loads first and may draw a progress bar; the error is the last line
    last = result.stderr.strip().splitlines()[-1]
    assert last == f"error: {path}: binary data (a NUL byte), expected a UTF-8 text file"


def test_answers_files(home: Path, tmp_path: Path) -> None:
    answers = _answers(tmp_path)
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + answers.read_bytes())
    ok = invoke("eval", "answers", str(bom), "--judge", "none", "--bootstrap-samples", "0")
    assert ok.exit_code == 0, ok.output
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(answers.read_bytes() + '{"question": "é"}\n'.encode("latin-1"))
    one_line_error(
        invoke("eval", "answers", str(latin), "--judge", "none"), f"{latin}:2: not UTF-8 text"
    )
    objects = tmp_path / "objects.jsonl"
    objects.write_text("[1, 2]\n")
    result = invoke("eval", "answers", str(objects), "--judge", "none")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.splitlines() == [
        f"error: {objects}: 1 problem(s):",
        "  line 1: expected a JSON object, got an array",
    ]


def test_trec_files(home: Path, tmp_path: Path) -> None:
    qrels, run = tmp_path / "qrels", tmp_path / "run"
    qrels.write_bytes(b"\xef\xbb\xbfq1 0 d1 1\n")
    run.write_bytes(b"\xef\xbb\xbfq1 Q0 d1 1 2.0 t\n")
    ok = invoke("eval", "trec", str(qrels), str(run), "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["recall@5"] == 1.0
    run.write_bytes(b"q1 Q0 d1 1 2.0 t\nq1 Q0 d\xe9 2 1.0 t\n")
    one_line_error(invoke("eval", "trec", str(qrels), str(run)), f"{run}:2: not UTF-8 text")
