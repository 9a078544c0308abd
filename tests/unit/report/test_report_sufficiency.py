"""The sufficiency report sections render a stored summary: every rate with its interval and n,
undefined figures as "–" with their reason, the coverage plot only when a curve exists."""

from __future__ import annotations

import re
from pathlib import Path

from ragtrail.report.sufficiency_sections import sufficiency_sections


def _rate(value: float | None, low: float | None = None, high: float | None = None, n: int = 0):
    return {"value": value, "ci_low": low, "ci_high": high, "n": n}


def _summary(selective: dict | None) -> dict:
    summary = {
        "run_id": "r.golden",
        "answerer": "local:smollm2",
        "retrieval_k": 3,
        "text_weight": 0.2,
        "settings": ["retrieved", "gold", "none"],
        "primary_rater": {"name": "sufficiency.contains_answer", "gates": True, "reason": "best"},
        "raters": [
            {
                "name": "sufficiency.contains_answer",
                "approximate": False,
                "calibration": {
                    "metric": "kappa",
                    "value": 0.5,
                    "ci_low": 0.1,
                    "ci_high": 0.9,
                    "n": 6,
                },
                "gate": {"mode": "gate"},
                "per_setting": {
                    "retrieved": {
                        "n": 4,
                        "failed": 0,
                        "truncated": 0,
                        "share": _rate(0.25, 0.05, 0.7, 4),
                    },
                    "gold": {
                        "n": 4,
                        "failed": 1,
                        "truncated": 2,
                        "share": _rate(0.5, 0.15, 0.85, 3),
                    },
                },
            },
            {
                "name": "sufficiency.llm",
                "approximate": False,
                "calibration": {"status": "not calibrated", "reason": "too few references"},
                "gate": {"mode": "advise"},
                "per_setting": {},
            },
        ],
        "cah": {
            "correctness": {
                "judge": "correctness.llm@j-1",
                "metric": "kappa",
                "value": None,
                "reason": "no references",
                "gate": {"mode": "advise"},
            },
            "counts": {"unscored": {"answer failed": 1}},
            "table": [
                {
                    "setting": "gold",
                    "sufficiency": "sufficient",
                    "label": "all",
                    "n_scored": 2,
                    "n_unscored": 1,
                    "correct": _rate(0.5, 0.09, 0.91, 2),
                    "abstain": _rate(0.0, 0.0, 0.66, 2),
                    "hallucinate": _rate(0.5, 0.09, 0.91, 2),
                },
                {
                    "setting": "none",
                    "sufficiency": "unrated",
                    "label": "all",
                    "n_scored": 0,
                    "n_unscored": 0,
                    "correct": _rate(None),
                    "abstain": _rate(None),
                    "hallucinate": _rate(None),
                },
            ],
        },
        "queries": [
            {
                "qid": "q1",
                "label": "fact_single",
                "setting": "gold",
                "question": "How <many>?",
                "passages": ["p <b>1</b>"],
                "sufficiency": "sufficient",
                "ratings": {"x": "sufficient"},
                "gold": "27",
                "answer": "27 days",
                "error": None,
                "raw": "",
                "outcome": "correct",
                "decided_by": "match",
                "unscored_reason": None,
                "p_true": 1.0,
                "p_correct": None,
                "policy_score": 0.7,
            },
        ],
    }
    if selective is None:
        summary["undefined"] = {"selective": "selective generation was not requested"}
    else:
        summary["selective"] = selective
    return summary


def _html(sections) -> str:
    return "\n".join(s.title + s.html for s in sections)


def test_rater_and_cah_tables_show_intervals_and_reasons(tmp_path: Path) -> None:
    html = _html(sufficiency_sections(_summary(None), tmp_path))
    assert "sufficiency.contains_answer ★" in html
    assert "kappa 0.50 [0.10, 0.90] (n=6)" in html
    assert "0.25 [0.05, 0.70] (n=4)" in html and "0.50 [0.15, 0.85] (n=3)" in html
    assert "too few references" in html
    assert "0.50 [0.09, 0.91]" in html
    assert "answer failed (1)" in html
    assert not re.search(r"\bnan\b", html, re.I)
    assert "selective generation was not requested" in html
    # corpus and model text is escaped in the drill-down
    assert "How &lt;many&gt;?" in html and "p &lt;b&gt;1&lt;/b&gt;" in html


def test_coverage_plot_is_drawn_for_a_fitted_policy(tmp_path: Path) -> None:
    curve = [{"coverage": 0.5, "accuracy": 1.0}, {"coverage": 1.0, "accuracy": 0.5}]
    selective = {
        "status": "fitted",
        "features": ["sufficient", "p_true"],
        "n_train": 3,
        "n_test": 3,
        "excluded": 0,
        "confidence_source": "policy",
        "auc": {
            "confidence": _rate(0.6, 0.4, 0.8, 3),
            "sufficiency_confidence": _rate(0.75, 0.5, 1.0, 3),
            "gain": _rate(0.15, -0.1, 0.3, 3),
        },
        "curves": {"confidence": curve, "sufficiency_confidence": curve},
        "threshold": {"target_coverage": 0.8, "value": 0.42},
    }
    html = _html(sufficiency_sections(_summary(selective), tmp_path, ".golden"))
    assert (tmp_path / "selective_coverage.golden.png").stat().st_size > 0
    assert "0.15 [-0.10, 0.30]" in html and "n=3" in html
    assert "0.420" in html


def test_an_undefined_policy_says_why(tmp_path: Path) -> None:
    selective = {"status": "undefined", "reason": "the training answers hold one class"}
    html = _html(sufficiency_sections(_summary(selective), tmp_path))
    assert "the training answers hold one class" in html
    assert not list(tmp_path.glob("*.png"))
