"""``ragtrail eval answers`` as a user runs it (subprocesses, a fresh RAGTRAIL_HOME).

The entailment judge is the configured fallback, the approximate embedding judge on the bundled
all-MiniLM-L6-v2: answer sentences that repeat a passage sentence word for word score a cosine
of 1 (supported), unrelated ones far below its 0.75 threshold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "ragtrail.cli"]
LEAVE = "Staff get 27 days of annual leave."
OFFICE = "The office closes at noon on Fridays."
PASSAGES = [{"docid": "d1", "text": LEAVE}, {"docid": "d2", "text": OFFICE}]
ANSWERS = [
    {
        "qid": "q1",
        "question": "How much leave do staff get, and when does the office close?",
        "answer": "Staff get 27 days of annual leave [1]. The office closes at noon on Fridays [2].",
        "passages": PASSAGES,
        "relevant_docids": ["d1", "d2"],
        "gold_answers": [{"text": "Staff get 27 days of annual leave [1].", "attributable": True}],
        "gold_passages": [{"docid": "d1", "text": LEAVE}],
        "label": "policy",
    },
    {
        "qid": "q2",
        "question": "When are laptops replaced?",
        "answer": "Laptops are replaced every year [1].",
        "passages": PASSAGES,
        "relevant_docids": ["d2"],
        "label": "policy",
    },
    {"qid": "q3", "question": "Who is the CEO?", "answer": "", "passages": PASSAGES, "label": "it"},
]


def run(args: list[str], home: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAGTRAIL_HOME": str(home)}
    return subprocess.run([*CLI, *args], env=env, check=check, capture_output=True, text=True)


def strict_json(text: str) -> dict:
    def refuse(constant: str) -> None:
        raise AssertionError(f"non-strict JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def answers_file(tmp_path: Path) -> Path:
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps(a) + "\n" for a in ANSWERS))
    return path


def overall(data: dict, metric: str) -> dict:
    (row,) = [
        a
        for a in data["aggregates"]
        if a["metric"] == metric and a["facets"] == {"label": "inclusive"}
    ]
    return row


def test_json_scores_with_the_configured_judge(answers_file: Path, tmp_path: Path) -> None:
    args = ["eval", "answers", str(answers_file), "--json", "--bootstrap-samples", "200"]
    data = strict_json(run(args, tmp_path / "home").stdout)
    assert data["judge"]["name"] == "entailment.embedding" and data["judge"]["approximate"]
    assert data["judge_decision"]["mode"] == "advise"  # never calibrated in this home
    assert data["answers"] == 3 and data["failed_verdicts"] == 0 and data["judge_calls"] == 1
    cit = overall(data, "autoais_cit")  # q1 1.0, q2 0.0, q3 abstains (undefined)
    assert (cit["value"], cit["n"]) == (0.5, 2) and 0.0 <= cit["ci_low"] <= cit["ci_high"] <= 1.0
    precision = overall(data, "citation_precision")  # q1 2/2, q2 cites d1 (not relevant)
    assert (precision["value"], precision["n"]) == (0.5, 2)
    assert overall(data, "overlap_recall")["n"] == 1 and data["skipped"] == {}
    q3 = next(r for r in data["records"] if r["qid"] == "q3")
    assert q3["autoais_cit"] is None and "no statement" in q3["undefined"]["autoais_cit"]
    labels = {json.dumps(a["facets"]) for a in data["aggregates"]}
    assert labels == {'{"label": "inclusive"}', '{"label": "it"}', '{"label": "policy"}'}


def test_table_names_the_judge_and_the_skipped_metrics(answers_file: Path, tmp_path: Path) -> None:
    shown = run(["eval", "answers", str(answers_file)], tmp_path / "home")
    assert "autoais_cit" in shown.stdout and "95% CI" in shown.stdout
    assert "label=policy" in shown.stdout
    assert "entailment.embedding@j-" in shown.stderr and "APPROXIMATE" in shown.stderr
    assert "advises only" in shown.stderr
    without = run(["eval", "answers", str(answers_file), "--judge", "none"], tmp_path / "home")
    assert (
        "skipped autoais_cit, autoais_pssg, alce_citation_recall, alce_citation_precision: "
        "entailment metrics: no entailment judge configured"
    ) in without.stderr
    as_json = strict_json(
        run(
            ["eval", "answers", str(answers_file), "--judge", "none", "--json"], tmp_path / "h"
        ).stdout
    )
    assert as_json["judge"] is None and as_json["judge_decision"] is None
    assert set(as_json["skipped"]) == {
        "autoais_cit",
        "autoais_pssg",
        "alce_citation_recall",
        "alce_citation_precision",
    }


def test_invalid_input_exits_2_listing_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        "{oops\n"
        + json.dumps({**ANSWERS[0], "answer": None})
        + "\n\n"
        + json.dumps(ANSWERS[2])
        + "\n"
        + json.dumps(ANSWERS[2])
        + "\n"
    )
    result = run(["eval", "answers", str(bad), "--judge", "none"], tmp_path / "home", check=False)
    assert result.returncode == 2 and result.stdout == ""
    assert "3 problem(s)" in result.stderr
    for expected in ("line 1: not valid JSON", "line 2: answer", "line 5: qid 'q3' already used"):
        assert expected in result.stderr


def test_an_unknown_judge_exits_2(answers_file: Path, tmp_path: Path) -> None:
    result = run(
        ["eval", "answers", str(answers_file), "--judge", "entailment.magic"],
        tmp_path / "home",
        check=False,
    )
    assert result.returncode == 2 and "unknown entailment judge" in result.stderr
