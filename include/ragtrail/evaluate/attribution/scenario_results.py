"""What the attributed-answer scenarios produce: each item's answer with its provenance, each
scenario's ranked passage lists scored with the IR metric registry, and the strict-JSON summary.

Retrieval runs hold rank-derived scores (n - position), so the registry ranks a scenario's passages
in the order the model saw them. Items without relevant ids (unanswerable ones) are left out of
the retrieval metrics, where every value would be 0 by definition, and listed as excluded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ragtrail.evaluate.attribution.cited_answers import AnswerRecord
from ragtrail.evaluate.attribution.subqueries import Subqueries
from ragtrail.evaluate.metrics import evaluate, parse_metric
from ragtrail.jsonsafe import JsonObject, mark_undefined
from ragtrail.stats.intervals import mean_interval

RETRIEVAL_METRICS: tuple[str, ...] = ("P@1", "recall@1", "P@10", "recall@10", "ndcg@10")
NO_RELEVANT_REASON = "no answerable item with known relevant passages"

Status = Literal["ok", "failed", "skipped"]
RankedRun = dict[str, dict[str, float]]


@dataclass(frozen=True)
class ScenarioAnswer:
    """One item's answer in one scenario, with what produced it.

    ``retrieval_queries`` are the texts searched (the question; the question and its sub-queries;
    GTR's answer sentences). ``raw`` holds the model's text of every attempt of the answering
    call (for GTR: of the closed-book call); ``note`` explains a skip or a partial input.
    """

    record: AnswerRecord
    status: Status
    cause: str | None = None
    error: str | None = None
    raw: tuple[str, ...] = ()
    retrieval_queries: tuple[str, ...] = ()
    note: str = ""

    def as_dict(self) -> JsonObject:
        rec = self.record
        return {
            "qid": rec.qid,
            "label": rec.label,
            "status": self.status,
            "cause": self.cause,
            "error": self.error,
            "note": self.note,
            "answer": rec.answer,
            "statements": [s.as_dict() for s in rec.cited_statements()],
            "passages": [p.docid for p in rec.passages],
            "relevant_docids": list(rec.relevant_docids or ()),
            "retrieval_queries": list(self.retrieval_queries),
            "raw": list(self.raw),
        }


@dataclass(frozen=True)
class RetrievalMetrics:
    """IR metrics of a scenario's passage lists: per query and macro (mean, CI, n)."""

    per_query: dict[str, dict[str, float]]
    macro: list[JsonObject]
    excluded: tuple[str, ...]

    def as_dict(self) -> JsonObject:
        return {
            "macro": self.macro,
            "per_query": self.per_query,
            "excluded_qids": list(self.excluded),
            "excluded_reason": "unanswerable or without known relevant passages",
        }


@dataclass
class ScenarioResult:
    """One scenario over every item: answers in item order, the ranked run, its metrics."""

    name: str
    answers: list[ScenarioAnswer]
    run: RankedRun | None
    retrieval: RetrievalMetrics | None
    retrieval_absent: str | None
    seconds: float

    @property
    def records(self) -> list[AnswerRecord]:
        """Every item's record, failed and skipped ones included (their answer is empty)."""
        return [a.record for a in self.answers]

    def count(self, status: Status) -> int:
        return sum(1 for a in self.answers if a.status == status)

    def as_dict(self) -> JsonObject:
        n = len(self.answers)
        out: JsonObject = {
            "scenario": self.name,
            "n": n,
            "n_ok": self.count("ok"),
            "n_failed": self.count("failed"),
            "n_skipped": self.count("skipped"),
            "seconds": self.seconds,
            "seconds_per_question": self.seconds / n if n else 0.0,
            "answers": [a.as_dict() for a in self.answers],
        }
        if self.retrieval is None:
            mark_undefined(out, "retrieval", self.retrieval_absent or NO_RELEVANT_REASON)
        else:
            out["retrieval"] = self.retrieval.as_dict()
        return out


@dataclass
class ScenarioRun:
    """Every requested scenario, the sub-queries written, and the settings used."""

    scenarios: dict[str, ScenarioResult]
    subqueries: dict[str, Subqueries]
    level: str
    settings: JsonObject = field(default_factory=dict)

    def as_json(self) -> JsonObject:
        """Strict-JSON summary (undefined values are null with a reason)."""
        return {
            "settings": self.settings,
            "level": self.level,
            "scenarios": {name: result.as_dict() for name, result in self.scenarios.items()},
            "subqueries": {qid: s.as_dict() for qid, s in self.subqueries.items()},
        }


# ------------------------------------------------------------------------ retrieval metrics


def ranked_run(answers: Sequence[ScenarioAnswer]) -> RankedRun:
    """Each answer's passages as a run: ``{docid: score}`` with rank-derived scores (n - position),
    so the metric registry ranks them in passage order; a repeated docid keeps its first rank."""
    run: RankedRun = {}
    for answer in answers:
        ids = list(dict.fromkeys(p.docid for p in answer.record.passages))
        run[answer.record.qid] = {docid: float(len(ids) - i) for i, docid in enumerate(ids)}
    return run


def retrieval_metrics(
    answers: Sequence[ScenarioAnswer],
    run: Mapping[str, Mapping[str, float]],
    bootstrap_samples: int,
    seed: int,
    metrics: Sequence[str] = RETRIEVAL_METRICS,
) -> RetrievalMetrics | None:
    """Per-query and macro values of ``metrics`` over the items with relevant ids (None when
    there is none); every item counts, an empty passage list scoring 0."""
    qrels = {
        a.record.qid: dict.fromkeys(a.record.relevant_docids or (), 1)
        for a in answers
        if a.record.relevant_docids
    }
    excluded = tuple(a.record.qid for a in answers if a.record.qid not in qrels)
    if not qrels:
        return None
    specs = [parse_metric(m) for m in metrics]
    per_query = evaluate(qrels, run, specs, complete=True)
    macro = []
    for m, spec in enumerate(specs):
        values = [per_query[qid][spec.id] for qid in per_query]
        row: JsonObject = {
            "metric": spec.id,
            "value": sum(values) / len(values),
            "n": len(values),
        }
        interval = mean_interval(values, n_resamples=bootstrap_samples, seed=seed + m)
        row["ci_method"] = interval.method.value
        if interval.defined:
            row["ci_low"], row["ci_high"] = interval.low, interval.high
        else:
            mark_undefined(row, "ci_low", interval.reason)
            mark_undefined(row, "ci_high", interval.reason)
        macro.append(row)
    return RetrievalMetrics(per_query, macro, excluded)
