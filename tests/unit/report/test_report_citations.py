"""Citation report sections from a stored summary: CIs and n shown, undefined as "–", never nan."""

from __future__ import annotations

import re
from pathlib import Path

from ragtrail.report.citation_sections import citation_sections


def _agg(system: str, mixture: str, label: str, metric: str, value, n: int = 3) -> dict:
    low = None if value is None else max(0.0, value - 0.1)
    high = None if value is None else min(1.0, value + 0.1)
    return {
        "system": system,
        "mixture": mixture,
        "label": label,
        "metric": metric,
        "value": value,
        "ci_low": low,
        "ci_high": high,
        "n": n,
    }


SUMMARY = {
    "answerer": "tiny-model",
    "mixture": {
        "spec": "1-3/3/3",
        "types": ["all"],
        "seed": 7,
        "baseline_repeats": 200,
        "failed": 1,
        "counts": {"answers_ok": 3, "abstained": 0},
        "aggregates": [
            _agg("model", "all", "answerable", "citation_f1", 0.5),
            _agg("random", "all", "answerable", "citation_f1", 0.23),
            _agg("model", "all", "answerable", "citation_precision", None, 0),
        ],
        "unanswerable": [
            {
                "mixture": "all",
                "system": "model",
                "cited_any": _agg("model", "all", "u", "c", 1.0, 1),
                "abstained": _agg("model", "all", "u", "a", 0.0, 1),
            },
            {"mixture": "all", "system": "random", "cited_any": None, "abstained": None},
        ],
        "queries": [
            {
                "qid": "q1",
                "label": "summary",
                "mixture": "all",
                "question": "Who <b>signs</b>?",
                "passages": [
                    {"kind": "relevant", "doc_id": "d1", "text": "Alice signs."},
                    {"kind": "irrelevant", "doc_id": "d2", "text": "Bob eats."},
                ],
                "answer": "Alice signs [1].",
                "cited": [1],
                "invalid": [],
                "relevant": [1],
                "precision": 1.0,
                "recall": 1.0,
                "f1": 1.0,
                "error": None,
                "raw": "",
            },
            {
                "qid": "q2",
                "label": "summary",
                "mixture": "all",
                "question": "Why?",
                "passages": [],
                "answer": "",
                "cited": [],
                "invalid": [],
                "relevant": [],
                "precision": None,
                "recall": None,
                "f1": None,
                "error": "parse_error: bad",
                "raw": "{not json",
            },
        ],
    },
    "scenarios": {
        "names": ["G", "RTG-gold"],
        "items": 1,
        "judge": {
            "judge": "entailment.embedding@j-1",
            "mode": "advise",
            "reason": "no calibration",
        },
        "aggregates": [
            {
                "scenario": "G",
                "metric": "autoais_cit",
                "value": 0.0,
                "ci_low": 0.0,
                "ci_high": 0.0,
                "n": 1,
            },
            {
                "scenario": "RTG-gold",
                "metric": "autoais_cit",
                "value": 1.0,
                "ci_low": 1.0,
                "ci_high": 1.0,
                "n": 1,
            },
        ],
        "retrieval": [
            {
                "scenario": "RTG-gold",
                "metric": "P@1",
                "value": 1.0,
                "ci_low": 1.0,
                "ci_high": 1.0,
                "n": 1,
            }
        ],
        "skipped": {
            "bleu": "correctness: no record has gold_answers",
            "rouge_l_f1": "correctness: no record has gold_answers",
        },
    },
}


def test_sections_show_model_vs_random_with_intervals_and_no_nan(tmp_path: Path) -> None:
    sections = citation_sections(SUMMARY, tmp_path, ".golden")
    titles = [s.title for s in sections]
    assert titles == [
        "Citations: model vs random per mixture type and label",
        "Citations: F1, model vs random",
        "Citations: precision vs recall per query",
        "Citations: questions the passages cannot answer",
        "Attributed answers: scenarios",
        "Attributed answers: retrieval of the scenarios' passages",
        "Citations: per-query drill-down",
    ]
    html = "\n".join(s.html for s in sections)
    assert "0.50 [0.40, 0.60]" in html and "0.23 [0.13, 0.33]" in html
    assert "tiny-model" in html and "1 answer(s) failed" in html
    assert not re.search(r"\bnan\b", html, re.IGNORECASE)
    assert (tmp_path / "citation_f1.golden.png").is_file()
    assert (tmp_path / "citation_precision_recall.golden.png").is_file()
    # the random system has no unanswerable figures: no empty row
    unanswerable = sections[3].html
    assert unanswerable.count("<tr>") == 2  # header + the model row
    # only columns some scenario has; one reason for the two correctness metrics
    assert "AutoAIS cit" in sections[4].html and "NLI recall" not in sections[4].html
    assert "correctness: no record has gold_answers (bleu, rouge_l_f1)" in sections[4].html
    assert "entailment.embedding@j-1" in sections[4].html
    # the drill-down escapes corpus text and shows failures with their raw text
    drill = sections[-1].html
    assert "Who &lt;b&gt;signs&lt;/b&gt;?" in drill and "<b>[1]</b>" in drill
    assert "parse_error: bad" in drill and "{not json" in drill
