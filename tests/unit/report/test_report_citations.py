"""Citation report sections from a stored summary: CIs and n shown, undefined as "–", never nan."""

from __future__ import annotations

import re
from pathlib import Path

from ragtrail.report.citation_sections import citation_sections
from ragtrail.summaries.citation_summary import CitationSummary

NO_VALUE = "no query of this group has a defined value"


def _agg(system: str, mixture: str, label: str, metric: str, value, n: int = 3) -> dict:
    low = None if value is None else max(0.0, value - 0.1)
    high = None if value is None else min(1.0, value + 0.1)
    undefined = {k: NO_VALUE for k in ("value", "ci_low", "ci_high")} if value is None else {}
    return {
        "metric": metric,
        "label": label,
        "mixture": mixture,
        "system": system,
        "value": value,
        "ci_low": low,
        "ci_high": high,
        "n": n,
        **({"undefined": undefined} if undefined else {}),
    }


SUMMARY = {
    "run_id": "night-1.golden",
    "set_name": "golden",
    "corpus": "hb",
    "snapshot_id": "s1",
    "qa_set": "golden:gs-1",
    "qa_set_version": "gs-1",
    "qa_set_name": "golden",
    "answerer": "tiny-model",
    "text_weight": 0.5,
    "text_weight_source": "default 0.5 (no retrieval run night-1.golden)",
    "mixture": {
        "spec": "1-3/3/3",
        "types": ["all"],
        "seed": 7,
        "baseline_repeats": 200,
        "counts": {
            "mixtures": 4,
            "skipped_items": 0,
            "answers_ok": 3,
            "answers_failed": 1,
            "abstained": 0,
        },
        "failed": 1,
        "skipped": [],
        "random_expected": {
            "all": {
                "citation_precision": 0.2,
                "citation_recall": 0.4,
                "citation_f1": 0.25,
                "n": 3,
            }
        },
        "aggregates": [
            _agg("model", "all", "answerable", "citation_f1", 0.5),
            _agg("random", "all", "answerable", "citation_f1", 0.23),
            _agg("model", "all", "answerable", "citation_precision", None, 0),
        ],
        "unanswerable": [
            {
                "mixture": "all",
                "system": "model",
                "cited_any": _agg("model", "all", "unanswerable", "cited_any", 1.0, 1),
                "abstained": _agg("model", "all", "unanswerable", "abstained", 0.0, 1),
            },
            {"mixture": "all", "system": "random", "cited_any": None, "abstained": None},
        ],
        "queries": [
            {
                "qid": "q1",
                "label": "summary",
                "mixture": "all",
                "question": "Who <b>signs</b>?",
                "relevant_source": "ground_chunks",
                "passages": [
                    {
                        "kind": "relevant",
                        "doc_id": "d1",
                        "chunk_id": "d1#0",
                        "text": "Alice signs.",
                    },
                    {"kind": "irrelevant", "doc_id": "d2", "chunk_id": "d2#3", "text": "Bob eats."},
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
                "relevant_source": "ground_chunks",
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
            "gates": False,
            "reason": "no calibration",
            "metric": None,
            "n": None,
            "bar": {"role_or_judge": "entailment", "metric": "kappa", "minimum": 0.4},
            "value": None,
            "undefined": {
                "value": "no calibration",
                "ci_low": "no calibration",
                "ci_high": "no calibration",
                "n": "no calibration",
            },
            "ci_low": None,
            "ci_high": None,
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
                "n": 1,
                "ci_low": 1.0,
                "ci_high": 1.0,
            }
        ],
        "counts": {
            "G": {"n": 1, "n_ok": 1, "n_failed": 0, "n_skipped": 0},
            "RTG-gold": {"n": 1, "n_ok": 1, "n_failed": 0, "n_skipped": 0},
        },
        "seconds_per_question": {"G": 0.5, "RTG-gold": 1.5},
        "skipped": {
            "bleu": "correctness: no record has gold_answers",
            "rouge_l_f1": "correctness: no record has gold_answers",
        },
        "failed_verdicts": 0,
        "details": {"level": "chunk", "scenarios": {}},
    },
}


def test_the_summary_document_round_trips() -> None:
    assert CitationSummary.from_json(SUMMARY).to_json() == SUMMARY


def test_sections_show_model_vs_random_with_intervals_and_no_nan(tmp_path: Path) -> None:
    sections = citation_sections(CitationSummary.from_json(SUMMARY), tmp_path, ".golden")
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


def test_a_set_without_scenarios_has_no_scenario_sections(tmp_path: Path) -> None:
    doc = {**SUMMARY, "scenarios": None, "undefined": {"scenarios": "no scenario requested"}}
    sections = citation_sections(CitationSummary.from_json(doc), tmp_path)
    titles = [s.title for s in sections]
    assert not [t for t in titles if t.startswith("Attributed answers")]
    assert titles[0] == "Citations: model vs random per mixture type and label"
    assert titles[-1] == "Citations: per-query drill-down"
    assert (tmp_path / "citation_f1.png").is_file()
