"""CLI progress: bars only on a terminal and never with --json; --json prints JSON alone."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from ragtrail.cli import app, common
from ragtrail.progress import ProgressUpdate
from tests.scripted_llm import SPEC


def test_no_bar_off_a_terminal_or_with_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "console", Console(file=io.StringIO(), force_terminal=False))
    assert common._progress().disable
    monkeypatch.setattr(common, "console", Console(file=io.StringIO(), force_terminal=True))
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert not common._progress().disable
    assert common._progress(quiet=True).disable


def test_bars_show_counts_rate_and_cache_hits(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(common, "console", Console(file=out, force_terminal=True, width=120))
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    with common._progress() as progress:
        sink = common._bars(progress)
        sink(ProgressUpdate("model calls generate.question", 4, 10, cache_hits=2))
        sink(ProgressUpdate("model calls generate.question", 8, 12, cache_hits=2))
        progress.refresh()
        (task,) = progress.tasks
        assert (task.completed, task.total) == (8, 12)
    text = out.getvalue()
    assert "model calls generate.question (2 cached)" in text and "8/12" in text


def test_json_commands_print_only_json(tmp_path, sample_corpus) -> None:
    env = {"RAGTRAIL_HOME": str(tmp_path / "home"), "RAGTRAIL_GENERATION__LLM": SPEC}
    runner = CliRunner()
    ingested = runner.invoke(app, ["ingest", str(sample_corpus), "--json"], env=env)
    assert ingested.exit_code == 0, ingested.output
    assert json.loads(ingested.stdout)["chunks"] > 0  # the whole of stdout is one JSON document

    generated = runner.invoke(
        app, ["generate", "--per-label", "1", "--seed", "3", "--json"], env=env
    )
    assert generated.exit_code == 0, generated.output
    summary = json.loads(generated.stdout)
    assert summary["model_calls"] > 0 and summary["version"]
    assert "model calls" not in generated.stderr  # no bar off a terminal
