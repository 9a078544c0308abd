"""``ragtrail eval evidence`` without models: the strict ``--noise`` parser (a bad list is exit
code 2 before anything runs) and the table printed from a hand-built summary."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from typer.testing import CliRunner

from ragtrail.cli import app, eval_commands
from ragtrail.cli.eval_commands import _print_evidence, parse_noise
from tests.unit._evidence_docs import evidence_summary


@pytest.mark.parametrize(
    ("text", "ratios"),
    [
        (None, None),
        ("0,1,2,4", [0.0, 1.0, 2.0, 4.0]),
        (" 0.5 , 10 ", [0.5, 10.0]),
        ("3", [3.0]),
    ],
)
def test_noise_lists_parse(text: str | None, ratios: list[float] | None) -> None:
    assert parse_noise(text) == ratios


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "'' is not a number"),
        ("1,,2", "'' is not a number"),
        ("1;2", "'1;2' is not a number"),
        ("one", "'one' is not a number"),
        ("-1", "outside [0, 10]"),
        ("11", "outside [0, 10]"),
        ("nan", "outside [0, 10]"),
        ("inf", "outside [0, 10]"),
        ("1,2,1", "listed twice"),
    ],
)
def test_bad_noise_lists_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="--noise") as caught:
        parse_noise(text)
    assert message in str(caught.value)


def test_a_bad_noise_option_exits_2_before_running() -> None:
    result = CliRunner().invoke(app, ["eval", "evidence", "--noise", "1,x", "--json"])
    assert result.exit_code == 2
    assert "'x' is not a number" in result.output
    assert "Traceback" not in result.output  # a user error: one line, nothing ran


def test_printer_shows_models_judges_figures_and_reasons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.StringIO()
    monkeypatch.setattr(eval_commands, "console", Console(file=out, width=300))
    _print_evidence(evidence_summary(), "file:///runs/evidence-1/evidence.json")
    text = out.getvalue()
    assert "extractor registry:extractor@3 (registered champion)" in text
    assert "base hf:Qwen/Qwen2.5-0.5B-Instruct" in text and "scorer hf:scorer-lm" in text
    assert "faithfulness judge nli:deberta@1: gates; kappa 0.72 [0.55, 0.86] (n=40)" in text
    assert "correctness judge llm:judge@2: advises only; too few references" in text
    assert "0.75 [0.30, 0.95]" in text and "9.25 [4.00, 20.00]" in text
    assert "0.25 [-0.25, 0.50]" in text
    assert "undefined (the scorer failed): helpfulness of base@0" in text
    assert "stored: file:///runs/evidence-1/evidence.json (run evidence-1)" in text
    lines = [line for line in text.splitlines() if "│" in line]
    methods = [line.split("│")[1].strip() for line in lines]  # the header uses ┃
    assert methods == ["extractor", "extractor", "base", "extractive", "full", "full", "none"]
