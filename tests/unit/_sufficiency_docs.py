"""Small hand-written sufficiency documents (``runs/<run>/sufficiency.json``) in the stored shape,
for the summary records' and the report's unit tests."""

from __future__ import annotations

from typing import Any


def rate(
    value: float | None, low: float | None = None, high: float | None = None, n: int = 0
) -> dict[str, Any]:
    """A Wilson proportion; an undefined one carries its reasons as the pipeline writes them."""
    out: dict[str, Any] = {"value": value, "ci_low": low, "ci_high": high, "n": n}
    if value is None:
        out["undefined"] = {k: "no scored answers" for k in ("value", "ci_low", "ci_high")}
    return out


def aggregate(metric: str, value: float, low: float, high: float, n: int) -> dict[str, Any]:
    return {"metric": metric, "facets": {}, "value": value, "ci_low": low, "ci_high": high, "n": n}


def _table_row(
    setting: str,
    sufficiency: str,
    counts: tuple[int, int, int],
    rates: list[dict[str, Any]],
    n_unscored: int = 0,
) -> dict[str, Any]:
    scored = sum(counts)
    return {
        "setting": setting,
        "sufficiency": sufficiency,
        "label": "all",
        "n": scored + n_unscored,
        "n_scored": scored,
        "n_unscored": n_unscored,
        "unscored_reasons": {"answer failed": n_unscored} if n_unscored else {},
        "counts": dict(zip(("correct", "abstain", "hallucinate"), counts, strict=True)),
        "correct": rates[0],
        "abstain": rates[1],
        "hallucinate": rates[2],
    }


def fitted_selective() -> dict[str, Any]:
    """A fitted policy with both curves, the areas and the operating point."""
    curve = [
        {"coverage": 0.5, "accuracy": 1.0, "threshold": 0.9, "n_kept": 1},
        {"coverage": 1.0, "accuracy": 0.5, "threshold": 0.42, "n_kept": 2},
    ]
    return {
        "status": "fitted",
        "reason": "",
        "features": ["sufficient", "p_true"],
        "n_rows": 6,
        "n_train": 3,
        "n_test": 3,
        "excluded": 0,
        "confidence_failed": {"p_true": 0},
        "confidence_source": "policy",
        "auc": {
            "confidence": aggregate("auc_confidence", 0.6, 0.4, 0.8, 3),
            "sufficiency_confidence": aggregate("auc_sufficiency_confidence", 0.75, 0.5, 1.0, 3),
            "gain": aggregate("auc_gain", 0.15, -0.1, 0.3, 3),
        },
        "curves": {"confidence": curve, "sufficiency_confidence": curve},
        "threshold": {
            "target_coverage": 0.8,
            "coverage": 1.0,
            "accuracy": 0.5,
            "threshold": 0.42,
            "n_kept": 2,
            "value": 0.42,
        },
        "policy_uri": "runs/r.golden/selective_policy.json",
        "undefined_reasons": {},
        "policy": {"features": ["sufficient", "p_true"], "intercept": -0.7, "class_weight": None},
    }


def undefined_selective(reason: str) -> dict[str, Any]:
    """No policy and no curve: the reason is all there is to show."""
    return {
        "status": "undefined",
        "reason": reason,
        "features": ["sufficient", "p_true"],
        "n_rows": 2,
        "n_train": 1,
        "n_test": 0,
        "excluded": 0,
        "confidence_failed": {},
        "confidence_source": None,
        "auc": {"confidence": None, "sufficiency_confidence": None, "gain": None},
        "curves": {},
        "threshold": None,
        "policy_uri": "runs/r.golden/selective_policy.json",
        "undefined_reasons": {"sufficiency+confidence": reason},
    }


def sufficiency_document(selective: dict[str, Any] | None = None) -> dict[str, Any]:
    """A stored summary of two raters (one not calibrated), a two-row C/A/H table and one
    answered question; ``selective`` None: selective generation was not requested."""
    document: dict[str, Any] = {
        "run_id": "r.golden",
        "set_name": "golden",
        "corpus": "handbook",
        "snapshot_id": "s1",
        "qa_set": "golden:g1",
        "qa_set_version": "g1",
        "qa_set_name": "golden",
        "seed": 13,
        "answerer": "local:smollm2",
        "judge_model": "local:smollm2",
        "text_weight": 0.2,
        "text_weight_source": "default 0.2 (no retrieval run r.golden)",
        "items": 1,
        "settings": ["retrieved", "gold", "none"],
        "retrieval_k": 3,
        "raters": [
            {
                "name": "sufficiency.contains_answer",
                "judge": "sufficiency.contains_answer@j-1",
                "approximate": False,
                "description": "baseline",
                "calibration": {
                    "judge": "sufficiency.contains_answer@j-1",
                    "approximate": False,
                    "status": "calibrated",
                    "metric": "kappa",
                    "value": 0.5,
                    "ci_low": 0.1,
                    "ci_high": 0.9,
                    "n": 6,
                    "undefined": {},
                },
                "gate": {"mode": "gate", "gates": True},
                "per_setting": {
                    "retrieved": {
                        "n": 4,
                        "failed": 0,
                        "truncated": 0,
                        "share": rate(0.25, 0.05, 0.7, 4),
                    },
                    "gold": {
                        "n": 4,
                        "failed": 1,
                        "truncated": 2,
                        "share": rate(0.5, 0.15, 0.85, 3),
                    },
                },
            },
            {
                "name": "sufficiency.llm",
                "judge": "sufficiency.llm@j-2",
                "approximate": False,
                "description": "LLM",
                "calibration": {
                    "judge": "sufficiency.llm@j-2",
                    "approximate": False,
                    "status": "not calibrated",
                    "reason": "too few references",
                },
                "gate": {"mode": "advise", "gates": False},
                "per_setting": {},
            },
        ],
        "primary_rater": {"name": "sufficiency.contains_answer", "gates": True, "reason": "best"},
        "cah": {
            "correctness": {
                "judge": "correctness.llm@j-1",
                "corpus": "handbook",
                "status": "not calibrated",
                "reason": "no references",
                "gate": {"mode": "advise"},
            },
            "table": [
                _table_row(
                    "gold",
                    "sufficient",
                    (1, 0, 1),
                    [rate(0.5, 0.09, 0.91, 2), rate(0.0, 0.0, 0.66, 2), rate(0.5, 0.09, 0.91, 2)],
                    n_unscored=1,
                ),
                _table_row("none", "unrated", (0, 0, 0), [rate(None)] * 3),
            ],
            "aggregates": [
                {
                    "metric": "correct_rate",
                    "facets": {"label": "all", "setting": "gold", "sufficiency": "sufficient"},
                    "value": 0.5,
                    "ci_low": 0.09,
                    "ci_high": 0.91,
                    "n": 2,
                },
                {
                    "metric": "correct_rate",
                    "facets": {"label": "all", "setting": "none", "sufficiency": "unrated"},
                    "value": None,
                    "ci_low": None,
                    "ci_high": None,
                    "n": 0,
                    "undefined": {k: "no scored answers" for k in ("value", "ci_low", "ci_high")},
                },
            ],
            "counts": {
                "answers": 3,
                "scored": 2,
                "unscored": {"answer failed": 1},
                "decided_by": {"match": 1, "judge": 1},
            },
        },
        "selective": selective,
        "queries": [
            {
                "qid": "q1",
                "label": "fact_single",
                "setting": "gold",
                "question": "How <many>?",
                "passages": ["p <b>1</b>"],
                "sufficiency": "sufficient",
                "ratings": {"sufficiency.contains_answer": "sufficient", "sufficiency.llm": None},
                "gold": "27",
                "answer": "27 days",
                "abstained": False,
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
        "seconds": {"contexts": 0.1, "raters": 1.5},
        "model_calls": {"contexts": 0, "raters": 4},
    }
    if selective is None:
        document["undefined"] = {"selective": "selective generation was not requested"}
    return document
