"""What the report and the CLI read of a set's citation evaluation: the mixture view, the per-query
rows the GX suite checks, the compact headline and the stored summary."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from ragtrail.artifact_keys import citations_key
from ragtrail.evaluate.citations.evaluator import ANSWERABLE, MixtureEvaluation
from ragtrail.records import QuestionLabel
from ragtrail.runtime import Runtime
from ragtrail.summaries.base import Figure
from ragtrail.summaries.citation_summary import (
    CitationHeadline,
    CitationSummary,
    MixtureAggregate,
    MixtureAnswer,
    MixtureCounts,
    MixtureView,
    RandomExpectation,
    ShownPassage,
    SkippedQuestion,
    UnanswerableRow,
)


def mixture_view(mix: MixtureEvaluation) -> MixtureView:
    """What the report reads of a mixture evaluation: the spec, aggregates, the unanswerable
    table, failure counts and the drill-down rows (numbered passages, answer, cited vs relevant)."""
    summary = mix.as_json()
    config = summary["config"]
    aggregates = [MixtureAggregate.from_json(a) for a in summary["aggregates"]]
    return MixtureView(
        spec=config["mixture_spec"],
        types=list(config["mixture_types"]),
        seed=config["seed"],
        baseline_repeats=config["baseline_repeats"],
        counts=MixtureCounts.from_json(summary["counts"]),
        failed=summary["counts"]["answers_failed"],
        skipped=[SkippedQuestion.from_json(s) for s in summary["skipped"]],
        random_expected={
            mixture_type: RandomExpectation.from_json(expected)
            for mixture_type, expected in summary["random_expected"].items()
        },
        aggregates=aggregates,
        unanswerable=_unanswerable(aggregates, config["mixture_types"]),
        queries=[_drill_down(q) for q in summary["queries"]],
    )


def _drill_down(query: Mapping[str, Any]) -> MixtureAnswer:
    """One drill-down row from the evaluation's JSON of a mixture (the model's scores only)."""
    answer = query["answer"]
    model = query["scores"]["model"]
    shown = len(query["passages"])
    numbers = answer.get("cited", [])
    return MixtureAnswer(
        qid=query["qid"],
        label=query["label"],
        mixture=query["mixture"],
        question=query["question"],
        relevant_source=query["relevant_source"],
        passages=[
            ShownPassage(kind=p["kind"], doc_id=p["doc_id"], chunk_id=p["chunk_id"], text=p["text"])
            for p in query["passages"]
        ],
        answer=answer.get("text", ""),
        cited=[k for k in numbers if 1 <= k <= shown],
        invalid=[k for k in numbers if not 1 <= k <= shown],
        relevant=query["relevant"],
        precision=model.get("citation_precision"),
        recall=model.get("citation_recall"),
        f1=model.get("citation_f1"),
        error=answer.get("error"),
        raw="\n---\n".join(answer.get("raw_texts", [])),
    )


def _unanswerable(
    aggregates: Sequence[MixtureAggregate], mixture_types: Iterable[str]
) -> list[UnanswerableRow]:
    """Per mixture type and system, the unanswerable questions' cited-anything and abstained
    aggregates (a pair that has neither is left out)."""
    rows = []
    for mixture_type in mixture_types:
        for system in ("model", "random"):
            by_metric = {
                a.metric: a
                for a in aggregates
                if a.label == QuestionLabel.UNANSWERABLE.value
                and a.mixture == mixture_type
                and a.system == system
            }
            if by_metric:
                rows.append(
                    UnanswerableRow(
                        mixture=mixture_type,
                        system=system,
                        cited_any=by_metric.get("cited_any"),
                        abstained=by_metric.get("abstained"),
                    )
                )
    return rows


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


def compact(summary: CitationSummary) -> CitationHeadline:
    """The set's headline: citation F1 of the model and of random citations per mixture type."""
    headline: dict[str, dict[str, Figure]] = {}
    for agg in summary.mixture.aggregates:
        if agg.metric == "citation_f1" and agg.label == ANSWERABLE:
            headline.setdefault(agg.mixture, {})[agg.system] = agg.figure
    return CitationHeadline(run_id=summary.run_id, answerer=summary.answerer, f1=headline)


def load_citations(rt: Runtime, run_id: str) -> CitationSummary | None:
    """The stored citation summary of a set's run (None when citations were not evaluated)."""
    key = citations_key(run_id)
    return (
        CitationSummary.from_json(rt.artifacts.get_bytes(key)) if rt.artifacts.exists(key) else None
    )
