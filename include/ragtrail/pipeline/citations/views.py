"""What the report and the CLI read of a set's citation evaluation: the mixture view, the per-query
rows the GX suite checks, the compact headline and the stored summary."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from ragtrail.artifact_keys import citations_key
from ragtrail.evaluate.citations.evaluator import ANSWERABLE, MixtureEvaluation
from ragtrail.records import QuestionLabel
from ragtrail.runtime import Runtime
from ragtrail.summaries.base import Figure
from ragtrail.summaries.citation_summary import CitationHeadline


def mixture_view(mix: MixtureEvaluation) -> dict[str, Any]:
    """What the report reads of a mixture evaluation: the spec, aggregates, the unanswerable
    table, failure counts and the drill-down rows (numbered passages, answer, cited vs relevant)."""
    summary = mix.as_json()
    config = summary["config"]
    queries = []
    for q in summary["queries"]:
        answer = q["answer"]
        model = q["scores"]["model"]
        cited = [k for k in answer.get("cited", []) if 1 <= k <= len(q["passages"])]
        queries.append(
            {
                "qid": q["qid"],
                "label": q["label"],
                "mixture": q["mixture"],
                "question": q["question"],
                "relevant_source": q["relevant_source"],
                "passages": [
                    {
                        "kind": p["kind"],
                        "doc_id": p["doc_id"],
                        "chunk_id": p["chunk_id"],
                        "text": p["text"],
                    }
                    for p in q["passages"]
                ],
                "answer": answer.get("text", ""),
                "cited": cited,
                "invalid": [k for k in answer.get("cited", []) if not 1 <= k <= len(q["passages"])],
                "relevant": q["relevant"],
                "precision": model.get("citation_precision"),
                "recall": model.get("citation_recall"),
                "f1": model.get("citation_f1"),
                "error": answer.get("error"),
                "raw": "\n---\n".join(answer.get("raw_texts", [])),
            }
        )
    aggregates = summary["aggregates"]
    unanswerable = []
    for mixture_type in config["mixture_types"]:
        for system in ("model", "random"):
            rows = {
                a["metric"]: a
                for a in aggregates
                if a.get("label") == QuestionLabel.UNANSWERABLE.value
                and a.get("mixture") == mixture_type
                and a.get("system") == system
            }
            if rows:
                unanswerable.append(
                    {
                        "mixture": mixture_type,
                        "system": system,
                        "cited_any": rows.get("cited_any"),
                        "abstained": rows.get("abstained"),
                    }
                )
    return {
        "spec": config["mixture_spec"],
        "types": list(config["mixture_types"]),
        "seed": config["seed"],
        "baseline_repeats": config["baseline_repeats"],
        "counts": summary["counts"],
        "failed": summary["counts"]["answers_failed"],
        "skipped": summary["skipped"],
        "random_expected": summary["random_expected"],
        "aggregates": aggregates,
        "unanswerable": unanswerable,
        "queries": queries,
    }


def citation_queries_frame(mix: MixtureEvaluation) -> pd.DataFrame:
    """One row per (question, mixture type, system) with precision, recall and F1 (GX input)."""
    frame = mix.per_query
    if frame.empty:  # every item was skipped: an empty table the checks still read
        return pd.DataFrame(
            columns=["qid", "label", "mixture", "system", "precision", "recall", "f1"]
        )
    out = pd.DataFrame(
        {
            "qid": frame["qid"],
            "label": frame["label"],
            "mixture": frame["mixture"],
            "system": frame["system"],
            "precision": frame["citation_precision"],
            "recall": frame["citation_recall"],
            "f1": frame["citation_f1"],
        }
    )
    return out


def compact(summary: dict[str, Any]) -> CitationHeadline:
    """The set's headline: citation F1 of the model and of random citations per mixture type."""
    headline: dict[str, dict[str, Figure]] = {}
    for agg in summary["mixture"]["aggregates"]:
        if agg["metric"] == "citation_f1" and agg.get("label") == ANSWERABLE:
            headline.setdefault(agg["mixture"], {})[agg["system"]] = Figure(
                **{k: agg.get(k) for k in ("value", "ci_low", "ci_high", "n")}
            )
    return CitationHeadline(run_id=summary["run_id"], answerer=summary["answerer"], f1=headline)


def load_citations(rt: Runtime, run_id: str) -> dict[str, Any] | None:
    """The stored citation summary of a set's run (None when citations were not evaluated)."""
    key = citations_key(run_id)
    return json.loads(rt.artifacts.get_bytes(key)) if rt.artifacts.exists(key) else None
