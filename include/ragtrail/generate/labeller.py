"""The LLM labeller of the question taxonomy (METHODS §1) and the agreement statistics for it.

:class:`LlmLabellerJudge` asks the model which of the four labels a (context, question) pair has;
the prompt lists the labels with their descriptions and the output model only admits those four
names, so anything else is a validation failure, never a guessed label. :func:`label_candidates`
runs it on candidates and applies the gate decision (judge-decided or requested labels).

:func:`fleiss_kappa` and :func:`agreement_vs_majority` measure how far labellers agree: the
method validates the LLM labeller against human annotators by comparing each annotator with the
majority vote of the others.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ragtrail.generate.judges import LABELLER, failed_verdict, llm_judge_spec
from ragtrail.generate.prompts import LABEL, LabelInput
from ragtrail.generate.steps import params_for
from ragtrail.judges.contract import (
    Judge,
    JudgeInput,
    JudgeRole,
    JudgeSpec,
    Verdict,
    VerdictType,
)
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.records import LABELS, CandidateStatus, LabelSource, QACandidate

__all__ = [
    "LABEL_STAGE",
    "Agreement",
    "LlmLabellerJudge",
    "agreement_vs_majority",
    "fleiss_kappa",
    "fleiss_kappa_from_counts",
    "label_candidates",
]

LABEL_STAGE = "generate.label"


class LlmLabellerJudge:
    """Which taxonomy label a (context, question) pair has, asked of an LLM (the ``label`` prompt).

    The output model only admits the four label names, so anything else is a failed verdict with
    its raw text, never a guessed label.
    """

    def __init__(
        self,
        client: LLMClient,
        params: GenerationParams | None = None,
        *,
        budgets: Mapping[str, int] | None = None,
    ) -> None:
        self._client = client
        self._params = params_for(LABEL.name, params, budgets)
        self._spec = llm_judge_spec(
            LABELLER,
            JudgeRole.LABELLER,
            client,
            LABEL,
            self._params,
            VerdictType.CATEGORY,
            categories=LABELS,
            description="LLM labeller of the question taxonomy (label prompt)",
        )

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        if not items:
            return []
        outs = self._client.run(
            LABEL,
            [LabelInput(context=i.context, question=i.question) for i in items],
            stage=LABEL_STAGE,
            params=self._params,
        )
        ref = self._spec.ref
        verdicts = []
        for out in outs:
            if out.ok and out.value is not None:
                verdicts.append(
                    Verdict(
                        judge=ref,
                        value=str(out.value.label_name),
                        reason=out.value.reason,
                        raw=tuple(out.raw_texts),
                    )
                )
            else:
                verdicts.append(failed_verdict(ref, out))
        return verdicts


def label_candidates(
    labeller: LLMClient | Judge,
    candidates: Sequence[QACandidate],
    params: GenerationParams | None = None,
    *,
    budgets: Mapping[str, int] | None = None,
    gates: bool = True,
) -> JudgeSpec:
    """Label every pending candidate with a question; returns the labeller's identity.

    ``labeller`` is a labeller judge (a trained one, :mod:`ragtrail.judges.trained`) or the
    client the LLM labeller asks (``Runtime.llm(ModelRole.LABELLER)`` in the pipeline), which
    may be a different model from the one that wrote the questions. Every labelled candidate
    records the judge (``label_judge``) and where its label comes from (``label_source``).

    ``gates``: whether the labeller's calibration lets it decide labels. If so, the observed
    label is the item's label (``label_source = "judge"``) and a failed call marks the candidate
    ``FAILED`` with ``failure_cause = "label_failed:<cause>"``. If not, the verdict only advises:
    it is stored (``observed_label``, ``label_reason``, raw outputs) but the item keeps its
    requested label (``label_source = "requested"``) and a failed call fails nothing.
    Already labelled candidates are left alone (a re-run is a no-op).
    """
    judge = (
        labeller
        if isinstance(labeller, Judge)
        else LlmLabellerJudge(labeller, params, budgets=budgets)
    )
    todo = [
        c
        for c in candidates
        if c.status is CandidateStatus.PENDING and c.question and c.observed_label is None
    ]
    verdicts = judge.judge([JudgeInput(context=c.context.text, question=c.question) for c in todo])
    source = LabelSource.JUDGE if gates else LabelSource.REQUESTED
    for cand, verdict in zip(todo, verdicts, strict=True):
        cand.raw_outputs.extend(verdict.raw)
        cand.label_judge = verdict.judge
        cand.label_source = source
        if verdict.ok:
            cand.observed_label = str(verdict.value)
            cand.label_reason = verdict.reason
        elif gates:
            cand.status = CandidateStatus.FAILED
            cand.failure_cause = f"label_failed:{verdict.error}"
        else:
            cand.label_reason = f"label_failed:{verdict.error}"
    return judge.spec


# --------------------------------------------------------------------------- agreement


def fleiss_kappa_from_counts(counts: Sequence[Sequence[int]]) -> float:
    """Fleiss' kappa from a subjects x categories matrix of rating counts.

    Every row must sum to the same number of raters n >= 2. Returns NaN when chance agreement is
    1 (every rating in one category), where kappa is undefined.
    """
    if not counts:
        raise ValueError("no subjects to compute agreement on")
    n_raters = sum(counts[0])
    if n_raters < 2:
        raise ValueError("Fleiss' kappa needs at least two ratings per subject")
    if any(sum(row) != n_raters for row in counts):
        raise ValueError("every subject must have the same number of ratings")
    if any(x < 0 for row in counts for x in row):
        raise ValueError("rating counts must be non-negative")
    n_subjects = len(counts)
    total = n_subjects * n_raters
    n_categories = len(counts[0])
    p_j = [sum(row[j] for row in counts) / total for j in range(n_categories)]
    p_i = [(sum(x * x for x in row) - n_raters) / (n_raters * (n_raters - 1)) for row in counts]
    p_bar = sum(p_i) / n_subjects
    p_e = sum(p * p for p in p_j)
    if math.isclose(p_e, 1.0):
        return math.nan
    return (p_bar - p_e) / (1.0 - p_e)


def fleiss_kappa(ratings: Sequence[Sequence[str]], categories: Sequence[str] = LABELS) -> float:
    """Fleiss' kappa of categorical ratings: ``ratings[i]`` = the labels subject i received.

    Each subject needs the same number (>= 2) of ratings; a rating outside ``categories`` is an
    error. Returns NaN when kappa is undefined (all ratings in one category).
    """
    index = {c: k for k, c in enumerate(categories)}
    counts: list[list[int]] = []
    for i, row in enumerate(ratings):
        tally = [0] * len(categories)
        for label in row:
            if label not in index:
                raise ValueError(f"subject {i}: rating {label!r} is not one of {list(categories)}")
            tally[index[label]] += 1
        counts.append(tally)
    return fleiss_kappa_from_counts(counts)


@dataclass(frozen=True)
class Agreement:
    """One annotator against the majority of the others.

    ``kappa`` is Fleiss' kappa of the two "raters" (annotator, majority) over ``n_items`` items;
    ``n_ties`` items were left out because the others' vote was tied.
    """

    annotator: int
    kappa: float
    n_items: int
    n_ties: int


def agreement_vs_majority(
    ratings: Sequence[Sequence[str]], categories: Sequence[str] = LABELS
) -> list[Agreement]:
    """For every annotator (column of ``ratings``), agreement with the majority of the others.

    ``ratings[i][a]`` is annotator a's label for item i (all items rated by all annotators, at
    least two annotators). The reference for annotator a on item i is the most frequent label
    among the other annotators; items where that vote is tied are skipped and counted. Kappa is
    NaN when no untied item remains or agreement is undefined.
    """
    if not ratings:
        raise ValueError("no items to compute agreement on")
    n_annotators = len(ratings[0])
    if n_annotators < 2:
        raise ValueError("agreement needs at least two annotators")
    if any(len(row) != n_annotators for row in ratings):
        raise ValueError("every item must be rated by every annotator")
    results: list[Agreement] = []
    for a in range(n_annotators):
        pairs: list[tuple[str, str]] = []
        ties = 0
        for row in ratings:
            others = Counter(label for b, label in enumerate(row) if b != a)
            ranked = others.most_common()
            if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
                ties += 1
                continue
            pairs.append((row[a], ranked[0][0]))
        kappa = fleiss_kappa(pairs, categories) if pairs else math.nan
        results.append(Agreement(annotator=a, kappa=kappa, n_items=len(pairs), n_ties=ties))
    return results
