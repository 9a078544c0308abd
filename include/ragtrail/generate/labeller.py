"""The LLM labeller of the question taxonomy (METHODS §1) and the agreement statistics for it.

:func:`label_candidates` asks the model which of the four labels a (context, question) pair has;
the prompt lists the labels with their descriptions and the output model only admits those four
names, so anything else is a validation failure, never a guessed label.

:func:`fleiss_kappa` and :func:`agreement_vs_majority` measure how far labellers agree: the
method validates the LLM labeller against human annotators by comparing each annotator with the
majority vote of the others.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ragtrail.generate.prompts import LABEL, LabelInput
from ragtrail.generate.steps import failure_from_outcome, params_for
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.records import LABELS, CandidateStatus, QACandidate

__all__ = [
    "LABEL_STAGE",
    "Agreement",
    "agreement_vs_majority",
    "fleiss_kappa",
    "fleiss_kappa_from_counts",
    "label_candidates",
]

LABEL_STAGE = "generate.label"


def label_candidates(
    client: LLMClient,
    candidates: Sequence[QACandidate],
    params: GenerationParams | None = None,
    *,
    budgets: Mapping[str, int] | None = None,
) -> None:
    """Fill ``observed_label`` and ``label_reason`` of every pending candidate with a question.

    ``client`` is the labeller's (``Runtime.llm(ModelRole.LABELLER)`` in the pipeline), which
    may be a different model from the one that wrote the questions.

    One batched stage. A failed call (unparsable output, a label outside the taxonomy...) marks
    the candidate ``FAILED`` with ``failure_cause = "label_failed:<cause>"`` and keeps every raw
    output in ``raw_outputs``. Already labelled candidates are left alone (a re-run is a no-op).
    """
    todo = [
        c
        for c in candidates
        if c.status is CandidateStatus.PENDING and c.question and c.observed_label is None
    ]
    if not todo:
        return
    outs = client.run(
        LABEL,
        [LabelInput(context=c.context.text, question=c.question) for c in todo],
        stage=LABEL_STAGE,
        params=params_for(LABEL.name, params, budgets),
    )
    for cand, out in zip(todo, outs, strict=True):
        cand.raw_outputs.extend(out.raw_texts)
        if out.ok and out.value is not None:
            cand.observed_label = out.value.label_name
            cand.label_reason = out.value.reason
        else:
            cand.status = CandidateStatus.FAILED
            cand.failure_cause = f"label_failed:{failure_from_outcome(out).cause}"


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
