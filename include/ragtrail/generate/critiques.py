"""Critique filters (METHODS §3): eight 1-5 ratings per candidate, then per-criterion thresholds.

:data:`CRITERIA` holds, per criterion, its prompt, the candidate fields it reads and its default
threshold. :func:`critique_candidates` runs each criterion as one batched stage and stores
``{"rating": int, "evaluation": str}`` (or ``{"rating": None, "error": cause, "raw": [...]}``) in
``candidate.critiques[name]``; :func:`apply_thresholds` then fails or rejects candidates and keeps
every rating, so reports can show the score distribution of rejected items too.

A rating only ever comes from the ``rating`` field of the parsed JSON, validated to 1-5 (a value
outside is a failed call, never clamped); text inside a context that asks for a rating, or any
other key in the reply, has no path into a candidate.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pydantic import BaseModel

from ragtrail.generate.judges import critique_judge_name, failed_verdict, llm_judge_spec
from ragtrail.generate.prompts import CRITIQUE_NAMES, CRITIQUE_PROMPTS, CritiqueOutput
from ragtrail.generate.steps import params_for
from ragtrail.judges.contract import JudgeInput, JudgeRole, JudgeSpec, Verdict, VerdictType
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.llm.prompts import Prompt
from ragtrail.llm.together import together
from ragtrail.records import (
    REJECT_REASONS_SEPARATOR,
    CandidateStatus,
    QACandidate,
    QuestionLabel,
    RejectKind,
    format_reject_reason,
)

__all__ = [
    "ALL",
    "CRITERIA",
    "DEFAULT_THRESHOLD",
    "Criterion",
    "LlmCritiqueJudge",
    "apply_thresholds",
    "critique_candidates",
    "resolve_thresholds",
]

DEFAULT_THRESHOLD = 3
"""A candidate passes a criterion with a rating >= this, unless the criterion says otherwise."""

_FIELDS = ("context", "question", "answer")


@dataclass(frozen=True)
class Criterion:
    """One critique: its prompt, the candidate fields it reads and its default thresholds.

    ``label_thresholds`` overrides ``threshold`` for candidates of a given label;
    ``skip_labels`` lists labels for which the criterion makes no sense (an unanswerable question
    is by design not grounded in its context), and the criterion is not run for them.
    """

    name: str
    prompt: Prompt[Any, CritiqueOutput]
    needs: tuple[str, ...]
    threshold: int = DEFAULT_THRESHOLD
    label_thresholds: Mapping[str, int] = field(default_factory=dict)
    skip_labels: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if set(self.needs) - set(_FIELDS):
            raise ValueError(f"{self.name}: needs must be among {_FIELDS}")
        if set(self.needs) != set(self.prompt.input_model.model_fields):
            raise ValueError(f"{self.name}: needs {self.needs} do not match the prompt's input")

    def applies_to(self, candidate: QACandidate) -> bool:
        """Whether the criterion is run for this candidate (its fields are there, label fits)."""
        if candidate.effective_label in self.skip_labels:
            return False
        return all(_field(candidate, f) for f in self.needs)

    def default_threshold(self, label: str) -> int:
        return int(self.label_thresholds.get(label, self.threshold))


def _field(candidate: QACandidate, name: str) -> str:
    return candidate.context.text if name == "context" else str(getattr(candidate, name))


_NOT_GROUNDED = frozenset({QuestionLabel.UNANSWERABLE})

CRITERIA: dict[str, Criterion] = {
    "q_to_c_groundedness": Criterion(
        "q_to_c_groundedness",
        CRITIQUE_PROMPTS["q_to_c_groundedness"],
        ("context", "question"),
        # Summary and reasoning questions legitimately rate lower here (METHODS §3).
        label_thresholds={QuestionLabel.SUMMARY: 2, QuestionLabel.REASONING: 2},
        skip_labels=_NOT_GROUNDED,
    ),
    "a_to_c_groundedness": Criterion(
        "a_to_c_groundedness",
        CRITIQUE_PROMPTS["a_to_c_groundedness"],
        ("context", "answer"),
        skip_labels=_NOT_GROUNDED,
    ),
    "q_feasibility": Criterion(
        "q_feasibility",
        CRITIQUE_PROMPTS["q_feasibility"],
        ("context", "question"),
        skip_labels=_NOT_GROUNDED,
    ),
    "stand_alone": Criterion("stand_alone", CRITIQUE_PROMPTS["stand_alone"], ("question",)),
    "q_usefulness": Criterion("q_usefulness", CRITIQUE_PROMPTS["q_usefulness"], ("question",)),
    "c_usefulness": Criterion("c_usefulness", CRITIQUE_PROMPTS["c_usefulness"], ("context",)),
    "c_clarity": Criterion("c_clarity", CRITIQUE_PROMPTS["c_clarity"], ("context",)),
    "qa_tautology": Criterion(
        "qa_tautology",
        CRITIQUE_PROMPTS["qa_tautology"],
        ("question", "answer"),
        skip_labels=_NOT_GROUNDED,
    ),
}
"""Criterion name -> :class:`Criterion`, in report order."""

assert tuple(CRITERIA) == CRITIQUE_NAMES

ALL: tuple[str, ...] = tuple(CRITERIA)


def _stage(name: str) -> str:
    return f"critique.{name}"


class LlmCritiqueJudge:
    """A 1-5 rating of one critique criterion, asked of an LLM (that criterion's prompt).

    Only the fields the criterion reads are sent; identical inputs (e.g. one context shared by
    many questions for ``c_clarity``) are sent once and share the verdict.
    """

    def __init__(
        self,
        criterion: str,
        client: LLMClient,
        params: GenerationParams | None = None,
        *,
        budgets: Mapping[str, int] | None = None,
    ) -> None:
        if criterion not in CRITERIA:
            raise KeyError(f"unknown criterion {criterion!r}; known: {list(CRITERIA)}")
        self.criterion = CRITERIA[criterion]
        self._client = client
        self._params = params_for(self.criterion.prompt.name, params, budgets)
        self._spec = llm_judge_spec(
            critique_judge_name(criterion),
            JudgeRole.CRITIQUE,
            client,
            self.criterion.prompt,
            self._params,
            VerdictType.RATING,
            description=f"LLM 1-5 rating of {criterion}",
        )

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        if not items:
            return []
        crit = self.criterion
        inputs: dict[str, BaseModel] = {}
        keys: list[str] = []
        for item in items:
            inp = crit.prompt.input_model(**{f: getattr(item, f) for f in crit.needs})
            key = inp.model_dump_json()
            inputs.setdefault(key, inp)
            keys.append(key)
        unique = list(inputs)
        outs = self._client.run(
            crit.prompt, [inputs[k] for k in unique], stage=_stage(crit.name), params=self._params
        )
        ref = self._spec.ref
        by_key: dict[str, Verdict] = {}
        for key, out in zip(unique, outs, strict=True):
            if out.ok and out.value is not None:
                by_key[key] = Verdict(
                    judge=ref, value=int(out.value.rating), reason=out.value.evaluation
                )
            else:
                by_key[key] = failed_verdict(ref, out)
        return [by_key[k] for k in keys]


def critique_candidates(
    client: LLMClient,
    candidates: Sequence[QACandidate],
    params: GenerationParams | None = None,
    criteria: Sequence[str] = ALL,
    *,
    budgets: Mapping[str, int] | None = None,
) -> dict[str, JudgeSpec]:
    """Rate every pending candidate on each criterion; one batched stage per criterion, all
    criteria at once on a concurrent backend (:func:`ragtrail.llm.together.together`).

    ``client`` is the critic's (``Runtime.llm(ModelRole.CRITIC)`` in the pipeline), which may be
    a different model from the one that wrote the questions. Returns the judge of each criterion
    run; every stored entry names its judge (``"judge": "name@version"``).

    Only criteria that apply (see :meth:`Criterion.applies_to`) are run, and only where no rating
    is stored yet (a failed entry is retried).
    """
    unknown = [n for n in criteria if n not in CRITERIA]
    if unknown:
        raise KeyError(f"unknown criteria {unknown}; known: {list(CRITERIA)}")
    specs: dict[str, JudgeSpec] = {}
    work: list[tuple[str, list[QACandidate], LlmCritiqueJudge]] = []
    for name in criteria:
        crit = CRITERIA[name]
        judge = LlmCritiqueJudge(name, client, params, budgets=budgets)
        specs[name] = judge.spec
        todo = [
            c
            for c in candidates
            if c.status is CandidateStatus.PENDING
            and crit.applies_to(c)
            and c.critiques.get(name, {}).get("rating") is None
        ]
        work.append((name, todo, judge))
    # The criteria are independent: an HTTP endpoint gets all of them at once.
    results = together(
        [partial(judge.judge, [_judge_input(c) for c in todo]) for _, todo, judge in work],
        concurrent=client.concurrent,
    )
    for (name, todo, _), verdicts in zip(work, results, strict=True):
        for cand, verdict in zip(todo, verdicts, strict=True):
            if verdict.ok:
                cand.critiques[name] = {
                    "rating": int(verdict.value),  # type: ignore[arg-type]
                    "evaluation": verdict.reason,
                    "judge": verdict.judge,
                }
            else:
                cand.critiques[name] = {
                    "rating": None,
                    "error": verdict.error,
                    "raw": list(verdict.raw),
                    "judge": verdict.judge,
                }
    return specs


def _judge_input(candidate: QACandidate) -> JudgeInput:
    return JudgeInput(
        context=candidate.context.text, question=candidate.question, answer=candidate.answer
    )


def resolve_thresholds(thresholds: Mapping[str, int] | None) -> dict[str, int]:
    """Validate threshold overrides: keys ``"<criterion>"`` or ``"<criterion>:<label>"``, 1-5."""
    out: dict[str, int] = {}
    for key, value in (thresholds or {}).items():
        name = key.split(":", 1)[0]
        if name not in CRITERIA:
            raise KeyError(f"threshold for unknown criterion {name!r}; known: {list(CRITERIA)}")
        if isinstance(value, bool) or not 1 <= int(value) <= 5:
            raise ValueError(f"threshold {key}={value!r} must be an integer from 1 to 5")
        out[key] = int(value)
    return out


def threshold_for(name: str, label: str, overrides: Mapping[str, int]) -> int:
    """The threshold of criterion ``name`` for a candidate of ``label``.

    Precedence: an override for ``name:label``, an override for ``name`` (which replaces the
    criterion's per-label defaults too), then the criterion's own defaults.
    """
    if f"{name}:{label}" in overrides:
        return overrides[f"{name}:{label}"]
    if name in overrides:
        return overrides[name]
    return CRITERIA[name].default_threshold(label)


def apply_thresholds(
    candidates: Sequence[QACandidate],
    thresholds: Mapping[str, int] | None = None,
    gating: Collection[str] | None = None,
) -> None:
    """Fail or reject pending candidates on their stored critiques; ratings are kept.

    Only criteria in ``gating`` (default: all) decide anything — the others are advisory: their
    ratings and failed calls stay recorded on the candidate but reject nothing. For the gating
    criteria:

    * any failed critique call -> ``FAILED``, ``failure_cause = "critique_failed:<name>[,...]"``
      (the raw outputs are appended to ``raw_outputs``);
    * else any rating below its threshold -> ``REJECTED`` with ``reject_reason`` listing every
      failing criterion as ``critique:<name>=<rating><<threshold>`` joined by ``"; "``;
    * else the candidate stays ``PENDING`` for the caller's quota logic.

    ``thresholds`` overrides the defaults (a rating >= 3, and >= 2 for q_to_c_groundedness of
    summary and reasoning questions): ``{"stand_alone": 4, "q_to_c_groundedness:summary": 3}``.
    """
    overrides = resolve_thresholds(thresholds)
    deciding = set(CRITERIA if gating is None else gating)
    for cand in candidates:
        if cand.status is not CandidateStatus.PENDING:
            continue
        label = cand.effective_label  # thresholds follow the label the item stands for
        failed: list[str] = []
        below: list[str] = []
        for name in CRITERIA:
            entry = cand.critiques.get(name)
            if entry is None or name not in deciding:
                continue
            rating = entry.get("rating")
            if rating is None:
                failed.append(name)
                cand.raw_outputs.extend(entry.get("raw", []))
                continue
            limit = threshold_for(name, label, overrides)
            if rating < limit:
                below.append(format_reject_reason(RejectKind.CRITIQUE, f"{name}={rating}<{limit}"))
        if failed:
            cand.status = CandidateStatus.FAILED
            cand.failure_cause = "critique_failed:" + ",".join(failed)
        elif below:
            cand.status = CandidateStatus.REJECTED
            cand.reject_reason = REJECT_REASONS_SEPARATOR.join(below)
