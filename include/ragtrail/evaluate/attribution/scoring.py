"""Score answers brought from anywhere (a production system's log, a scenario run here) with the
attribution metrics of :mod:`ragtrail.evaluate.attribution.answer_metrics`.

The file format is JSONL, one answer per line::

    {"qid": "q1", "question": "...", "answer": "Paris is the capital [1].",
     "passages": [{"docid": "d7", "text": "..."}],          # what the model saw; [k] = k-th
     "relevant_docids": ["d7"],                              # optional
     "gold_answers": [{"text": "The capital is Paris [1].",  # optional
                       "attributable": true, "informative": true}],   # flags optional
     "gold_passages": [{"docid": "d7", "text": "..."}],      # optional
     "label": "fact_single"}                                 # optional

``[k]`` in ``answer`` names ``passages[k-1]`` and in a gold answer ``gold_passages[k-1]``; a number
with no such passage names nothing (in ``answer`` it is also counted as an invalid citation).
:func:`load_answers` validates every line and reports every problem at once, with line numbers
(:class:`AnswersFormatError`). :func:`score_answers` computes each metric whose inputs some record
carries, macro-averages with bootstrap intervals per facet set, and says which metrics it skipped
and why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ragtrail.evaluate.attribution.answer_metrics import (
    ALL_METRICS,
    AUTOAIS_CIT,
    CORRECTNESS_METRICS,
    ENTAILMENT_METRICS,
    OVERLAP_METRICS,
    RELEVANCE_METRICS,
    Score,
    citation_counts,
    has_inputs,
    judge_entailments,
    record_scores,
    scores_as_json,
    statements_of_record,
)
from ragtrail.evaluate.attribution.cited_answers import AnswerRecord, GoldAnswer, SourcePassage
from ragtrail.evaluate.contract import (
    Aggregate,
    BaseEvaluator,
    EvaluationResult,
    Facets,
    QueryValue,
    canonical_facets,
    facet_key,
    register_evaluator,
)
from ragtrail.input_files import json_type, jsonl_hint, parse_json, read_lines
from ragtrail.jsonsafe import JsonObject, check_finite, write_jsonl
from ragtrail.judges.contract import Judge, JudgeSpec
from ragtrail.records import INCLUSIVE
from ragtrail.stats.intervals import mean_interval

UNLABELLED = "unlabelled"

# ------------------------------------------------------------------------------------ loading


MAX_LISTED = 20
"""Problems shown in the message (all are in ``problems``): a file of garbage stays readable."""


class AnswersFormatError(ValueError):
    """An answers file has bad lines; the message lists every problem with its line number."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        listing = "\n".join(f"  {p}" for p in self.problems[:MAX_LISTED])
        if len(self.problems) > MAX_LISTED:
            listing += f"\n  (+{len(self.problems) - MAX_LISTED} more)"
        super().__init__(f"{source}: {len(self.problems)} problem(s):\n{listing}")


class _Strict(BaseModel):
    """Unknown fields are errors: a misspelt optional field would silently skip a metric."""

    model_config = ConfigDict(extra="forbid")


class PassageLine(_Strict):
    docid: str = Field(min_length=1)
    text: str = Field(min_length=1)


class GoldAnswerLine(_Strict):
    text: str
    attributable: bool | None = None
    informative: bool | None = None


class AnswerLine(_Strict):
    """One line of an answers file (see the module docstring)."""

    qid: str = Field(min_length=1)
    question: str
    answer: str
    passages: list[PassageLine]
    relevant_docids: list[str] | None = None
    gold_answers: list[GoldAnswerLine] | None = Field(None, min_length=1)
    gold_passages: list[PassageLine] | None = None
    label: str | None = None

    @field_validator("qid", mode="before")
    @classmethod
    def _integer_qid_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    def record(self) -> AnswerRecord:
        def passages(rows: list[PassageLine]) -> tuple[SourcePassage, ...]:
            return tuple(SourcePassage(p.docid, p.text) for p in rows)

        return AnswerRecord(
            qid=self.qid,
            question=self.question,
            answer=self.answer,
            passages=passages(self.passages),
            relevant_docids=None
            if self.relevant_docids is None
            else tuple(dict.fromkeys(self.relevant_docids)),
            gold_answers=None
            if self.gold_answers is None
            else tuple(
                GoldAnswer(g.text, g.attributable, g.informative) for g in self.gold_answers
            ),
            gold_passages=None if self.gold_passages is None else passages(self.gold_passages),
            label=self.label,
        )


def _validation_problems(exc: ValidationError) -> list[str]:
    out = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        out.append(f"{where}: {error['msg']}")
    return out


def parse_answers(lines: Iterable[str], source: str = "answers") -> list[AnswerRecord]:
    """Records from JSONL lines; every problem of every line in one :class:`AnswersFormatError`.

    Blank lines are skipped; a qid used twice is an error naming both lines.
    """
    records: list[AnswerRecord] = []
    problems: list[str] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = parse_json(line)
        except ValueError as exc:
            problems.append(f"line {number}: not valid JSON ({exc}){jsonl_hint(line)}")
            continue
        if not isinstance(data, dict):
            problems.append(f"line {number}: expected a JSON object, got {json_type(data)}")
            continue
        try:
            parsed = AnswerLine.model_validate(data)
        except ValidationError as exc:
            problems.extend(f"line {number}: {p}" for p in _validation_problems(exc))
            continue
        if parsed.qid in first_line:
            problems.append(
                f"line {number}: qid {parsed.qid!r} already used on line {first_line[parsed.qid]}"
            )
            continue
        first_line[parsed.qid] = number
        records.append(parsed.record())
    if not records and not problems:
        problems.append("no answers (the file is empty)")
    if problems:
        raise AnswersFormatError(source, problems)
    return records


def load_answers(path: Path | str) -> list[AnswerRecord]:
    """Read and validate an answers JSONL file (see :func:`parse_answers`); a file that is not
    UTF-8 text, or has a line over :data:`ragtrail.input_files.MAX_LINE_BYTES`, is an
    :class:`~ragtrail.input_files.InputFileError` naming the file and the line."""
    return parse_answers(read_lines(path, "answers file"), str(path))


def record_as_json(record: AnswerRecord) -> JsonObject:
    """One record as a line of the answers format (the inverse of :func:`parse_answers`)."""

    def passages(rows: Sequence[SourcePassage]) -> list[dict[str, str]]:
        return [{"docid": p.docid, "text": p.text} for p in rows]

    out: JsonObject = {
        "qid": record.qid,
        "question": record.question,
        "answer": record.answer,
        "passages": passages(record.passages),
    }
    if record.relevant_docids is not None:
        out["relevant_docids"] = list(record.relevant_docids)
    if record.gold_answers is not None:
        out["gold_answers"] = [
            {"text": g.text, "attributable": g.attributable, "informative": g.informative}
            for g in record.gold_answers
        ]
    if record.gold_passages is not None:
        out["gold_passages"] = passages(record.gold_passages)
    if record.label is not None:
        out["label"] = record.label
    return out


def write_answers(records: Iterable[AnswerRecord], path: Path | str) -> int:
    """Write records as an answers JSONL file, atomically; returns how many were written."""
    return write_jsonl((record_as_json(r) for r in records), path, "answer")


# ---------------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class AttributionConfig:
    """``judge``: the entailment judge's ref (``name@version``), None when there is none."""

    judge: str | None = None
    bootstrap_samples: int = 1000
    seed: int = 13


@dataclass(frozen=True)
class AnswersInputs:
    """Records and each record's facets (same order)."""

    records: Sequence[AnswerRecord]
    facets: Sequence[Facets]


@dataclass(frozen=True)
class AnswersScore:
    """An attribution evaluation: the contract's result plus what a reader needs beside it.

    ``records`` holds one strict-JSON dict per answer (qid, facets, metric values with
    ``undefined`` reasons, statement and citation counts); ``skipped`` metric -> why it was not
    computed for any record; ``undefined`` metric -> reason -> how many answers it left out.
    """

    result: EvaluationResult
    records: list[JsonObject]
    skipped: dict[str, str]
    undefined: dict[str, dict[str, int]]
    judge: JudgeSpec | None
    judged_pairs: int = 0
    failed_verdicts: int = 0
    judge_calls: int = 0
    citations: int = 0
    invalid_citations: int = 0
    failures: list[JsonObject] = field(default_factory=list)

    @property
    def judge_ref(self) -> str | None:
        return None if self.judge is None else self.judge.ref

    def aggregate(self, metric: str, facets: Facets | None = None) -> Aggregate:
        """The aggregate of ``metric`` for ``facets`` (default: the overall one)."""
        key = facet_key(facets if facets is not None else _overall_facets(self.result))
        for agg in self.result.aggregates:
            if agg.metric == metric and agg.facet_key == key:
                return agg
        raise KeyError(f"no aggregate of {metric!r} for {key}")

    def as_json(self) -> JsonObject:
        """Strict JSON: aggregates, per-answer metrics, skipped and undefined counts, judge."""
        return check_finite(
            {
                "evaluator": self.result.evaluator,
                "config": dict(self.result.config),
                "primary_metric": self.result.primary_metric,
                "judge": None if self.judge is None else self.judge.as_dict(),
                "judged_pairs": self.judged_pairs,
                "judge_calls": self.judge_calls,
                "failed_verdicts": self.failed_verdicts,
                "verdict_failures": self.failures,
                "answers": len(self.records),
                "citations": self.citations,
                "invalid_citations": self.invalid_citations,
                "aggregates": [a.as_dict() for a in self.result.aggregates],
                "skipped": self.skipped,
                "undefined": self.undefined,
                "records": self.records,
            },
            "answers score",
        )


def _overall_facets(result: EvaluationResult) -> Facets:
    """The facets of the widest group: label ``inclusive`` when labels are facets, else {}."""
    keys = {a.facet_key for a in result.aggregates}
    inclusive = facet_key({"label": INCLUSIVE})
    return {"label": INCLUSIVE} if inclusive in keys else {}


SKIP_REASONS: Mapping[tuple[str, ...], str] = {
    OVERLAP_METRICS: "citation overlap: no record has gold_answers with gold_passages",
    CORRECTNESS_METRICS: "correctness: no record has gold_answers",
    RELEVANCE_METRICS: "citation precision/recall: no record has relevant_docids",
}


def label_facets(records: Sequence[AnswerRecord]) -> Callable[[AnswerRecord], Facets]:
    """Default facets: ``{"label": ...}`` when some record is labelled (others "unlabelled"),
    else none."""
    if any(r.label for r in records):
        return lambda r: {"label": r.label or UNLABELLED}
    return lambda r: {}


@register_evaluator
class AnswersEvaluator(BaseEvaluator[AttributionConfig, AnswersInputs]):
    """Attribution metrics of answers (METHODS §8), macro-averaged per facet set.

    Groups: each distinct facet set; when facets carry ``label``, also the same facets with
    label ``inclusive`` (every label together), as the retrieval evaluation does.
    """

    name = "attribution"
    primary_metric = AUTOAIS_CIT
    greater_is_better = True

    def __init__(self, config: AttributionConfig, judge: Judge | None = None) -> None:
        super().__init__(config)
        ref = None if judge is None else judge.spec.ref
        if config.judge != ref:
            raise ValueError(f"config.judge is {config.judge!r} but the judge given is {ref!r}")
        if config.bootstrap_samples < 0:
            raise ValueError(f"bootstrap_samples must be >= 0, got {config.bootstrap_samples}")
        self.judge = judge

    def evaluate(self, inputs: AnswersInputs) -> EvaluationResult:
        return self.score(inputs).result

    def score(self, inputs: AnswersInputs) -> AnswersScore:
        records = list(inputs.records)
        facets = [canonical_facets(f) for f in inputs.facets]
        if len(facets) != len(records):
            raise ValueError(f"{len(records)} records but {len(facets)} facet sets")
        skipped = self._skipped(records)
        metrics = [m for m in ALL_METRICS if m not in skipped]
        table = judge_entailments(records, self.judge) if self.judge is not None else None
        per_record = [record_scores(r, table) for r in records]

        queries = [
            QueryValue(r.qid, f, m, scores[m].value, scores[m].reason)
            for r, f, scores in zip(records, facets, per_record, strict=True)
            for m in metrics
        ]
        aggregates = self._aggregates(metrics, facets, per_record)
        undefined: dict[str, Counter[str]] = {m: Counter() for m in metrics}
        for scores in per_record:
            for m in metrics:
                if scores[m].reason is not None:
                    undefined[m][scores[m].reason] += 1
        counts = [citation_counts(r) for r in records]
        failures = table.failures() if table is not None else {}
        return AnswersScore(
            result=self.result(queries, aggregates),
            records=[
                {
                    "qid": r.qid,
                    "facets": f,
                    "statements": len(statements_of_record(r)),
                    "citations": total,
                    "invalid_citations": invalid,
                    **scores_as_json({m: scores[m] for m in metrics}),
                }
                for r, f, scores, (total, invalid) in zip(
                    records, facets, per_record, counts, strict=True
                )
            ],
            skipped=skipped,
            undefined={m: dict(c) for m, c in undefined.items() if c},
            judge=None if self.judge is None else self.judge.spec,
            judged_pairs=0 if table is None else table.judged,
            failed_verdicts=len(failures),
            judge_calls=0 if table is None else table.calls,
            citations=sum(total for total, _ in counts),
            invalid_citations=sum(invalid for _, invalid in counts),
            failures=[
                {"premise": p, "hypothesis": h, **v.as_dict()} for (p, h), v in failures.items()
            ],
        )

    def _skipped(self, records: Sequence[AnswerRecord]) -> dict[str, str]:
        skipped: dict[str, str] = {}
        if self.judge is None:
            for m in ENTAILMENT_METRICS:
                skipped[m] = "entailment metrics: no entailment judge configured"
        for family, reason in SKIP_REASONS.items():
            if not any(has_inputs(family[0], r) for r in records):
                skipped.update(dict.fromkeys(family, reason))
        return skipped

    def _aggregates(
        self,
        metrics: Sequence[str],
        facets: Sequence[JsonObject],
        per_record: Sequence[Mapping[str, Score]],
    ) -> list[Aggregate]:
        groups: dict[str, tuple[JsonObject, list[int]]] = {}
        for i, f in enumerate(facets):
            keys = [f] + ([{**f, "label": INCLUSIVE}] if "label" in f else [])
            for group in keys:
                groups.setdefault(facet_key(group), (group, []))[1].append(i)
        out = []
        for g, (group, members) in enumerate(groups.values()):
            for m, metric in enumerate(metrics):
                values = [v for i in members if (v := per_record[i][metric].value) is not None]
                out.append(self._aggregate(metric, group, values, len(members), 1000 * g + m))
        return out

    def _aggregate(
        self, metric: str, group: Facets, values: list[float], members: int, cell: int
    ) -> Aggregate:
        if not values:
            reason = f"no answer of the {members} in this group has a defined {metric}"
            return Aggregate.of(
                metric,
                group,
                value=None,
                ci_low=None,
                ci_high=None,
                n=0,
                reasons={"value": reason, "ci_low": reason, "ci_high": reason},
            )
        seed = self.config.seed + cell  # a distinct, reproducible seed per cell
        interval = mean_interval(values, n_resamples=self.config.bootstrap_samples, seed=seed)
        return Aggregate.estimated(metric, group, value=fmean(values), interval=interval)


def score_answers(
    records: Sequence[AnswerRecord],
    judge: Judge | None,
    *,
    facets_of: Callable[[AnswerRecord], Facets] | None = None,
    bootstrap_samples: int = 1000,
    seed: int = 13,
) -> AnswersScore:
    """Every attribution metric whose inputs the records carry (entailment ones need ``judge``).

    ``facets_of`` gives each record's facets (e.g. ``{"scenario": ..., "label": ...}``); the
    default is the record's label when any record has one (:func:`label_facets`).
    """
    config = AttributionConfig(
        judge=None if judge is None else judge.spec.ref,
        bootstrap_samples=bootstrap_samples,
        seed=seed,
    )
    facets_of = facets_of or label_facets(records)
    evaluator = AnswersEvaluator(config, judge)
    return evaluator.score(AnswersInputs(records, [facets_of(r) for r in records]))
