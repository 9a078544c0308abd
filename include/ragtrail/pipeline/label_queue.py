"""``ragtrail judge label-queue KIND``: the items of a corpus a person's label would teach most.

Labels are expensive, so the queue offers the items where the judges of the kind disagree (or one
failed) first, then those some judge is least sure of. Candidates come from the corpus's latest
generated test set (run the nightly first):

* labeller: each generated question with the context it was written from;
* sufficiency: each question with the passages retrieval returns for it (the nightly's
  ``retrieved`` setting, ``sufficiency.retrieval_k`` passages);
* entailment: the sentence of each question's context that holds its answer (a claim) against
  each of the top two passages retrieval returns for the question (what a citation would cite).

A seeded pool (``pool``, default five times ``n``) is judged by every judge named (default: the
configured one, the trained champion when there is one, and for entailment the embedding judge);
model calls go through the cache. The chosen ``n`` rows are written as a label-queue CSV
(:mod:`ragtrail.judges.label_queue`) whose filled ``label`` column makes it a reference.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ragtrail.judges.contract import Judge, JudgeInput
from ragtrail.judges.embedding_entailment import BACKEND as EMBEDDING_BACKEND
from ragtrail.judges.entailment import split_sentences
from ragtrail.judges.label_queue import QueueRow
from ragtrail.judges.registry import JUDGES
from ragtrail.judges.trained import TrainedKind, closeness_to_threshold, trained_kind
from ragtrail.pipeline.champion_judges import NoTrainedJudgeError, trained_judge
from ragtrail.pipeline.judges import accepted_items, configured_entailment, labeller_name
from ragtrail.pipeline.passage_sources import DEFAULT_TEXT_WEIGHT, scenario_corpus
from ragtrail.pipeline.sufficiency import raters as _raters  # noqa: F401  (registers the raters)
from ragtrail.records import EntailmentJudgeName
from ragtrail.runtime import Runtime
from ragtrail.text import text_key

_BLOCK_START = re.compile(r"^\s*(?:[-*#>|]|\d+[.)])")
"""A line that starts a block of its own: a list item, heading, quote or table row."""
_SHORT_LINE = 60
"""A line shorter than this ends where it ends (a title); longer ones were wrapped."""


def _unwrap(text: str) -> str:
    """``text`` with each paragraph's wrapped lines joined into one."""
    lines = text.split("\n")
    out = lines[:1]
    for line in lines[1:]:
        previous = out[-1]
        if (
            line.strip()
            and previous.strip()
            and len(previous) >= _SHORT_LINE
            and not _BLOCK_START.match(line)
        ):
            out[-1] = f"{previous.rstrip()} {line.strip()}"
        else:
            out.append(line)
    return "\n".join(out)


class EmptyQueueError(ValueError):
    """The corpus offers no candidate of the kind (no generated test set yet)."""


@dataclass(frozen=True)
class Candidate:
    """One unlabelled item: what the judges read, and its ids."""

    item_id: str
    query_id: str
    judge_input: JudgeInput


def candidates(rt: Runtime, kind: TrainedKind, corpus: str) -> list[Candidate]:
    """Every candidate of ``kind`` the corpus's latest test set offers (see the module docs)."""
    items = [i for i in accepted_items(rt, corpus) if i.question]
    if not items:
        raise EmptyQueueError(
            f"corpus {corpus!r} has no generated test set yet: run `ragtrail nightly` (or the "
            "generate_testset DAG) first"
        )
    if kind.kind == "labeller":
        return [
            Candidate(
                f"testset:{i.candidate_id}",
                text_key(i.question),
                JudgeInput(context=i.context.text, question=i.question),
            )
            for i in items
        ]
    k = rt.settings.sufficiency.retrieval_k if kind.kind == "sufficiency" else 2
    found = scenario_corpus(rt, corpus).search([i.question for i in items], k, DEFAULT_TEXT_WEIGHT)
    out = []
    for item, passages in zip(items, found, strict=True):
        query = text_key(item.question)
        if kind.kind == "sufficiency":
            context = "\n\n".join(p.text for p in passages)
            judged = JudgeInput(question=item.question, context=context, answer=item.answer)
            out.append(Candidate(f"testset:{item.candidate_id}:retrieved", query, judged))
            continue
        claim = _claim(item.context.text, item.answer)
        for rank, passage in enumerate(passages, start=1):
            judged = JudgeInput(premise=passage.text, hypothesis=claim)
            out.append(Candidate(f"testset:{item.candidate_id}:p{rank}", query, judged))
    return out


def _claim(context: str, answer: str) -> str:
    """The sentence of ``context`` that holds ``answer`` (else its first sentence); lines a
    sentence was wrapped over are joined first (a blank line still ends a paragraph)."""
    unwrapped = _unwrap(context)
    sentences = split_sentences(unwrapped) or [unwrapped]
    needle = text_key(answer)
    holding = [s for s in sentences if needle and needle in text_key(s)]
    return (holding or sentences)[0]


def default_judges(rt: Runtime, kind: TrainedKind) -> list[str]:
    """The configured judge of the kind, the embedding judge for entailment, and the trained
    champion (when ``ragtrail judge train`` made one)."""
    if kind.kind == "entailment":
        names = [configured_entailment(rt), EntailmentJudgeName.EMBEDDING.value]
    elif kind.kind == "sufficiency":
        names = [rt.settings.sufficiency.raters[0]]
    else:
        names = [labeller_name(rt)]
    try:
        trained_judge(rt, kind.judge_name)
        names.append(kind.judge_name)
    except NoTrainedJudgeError:
        pass
    return list(dict.fromkeys(names))


def uncertainty(
    judge: Judge, items: Sequence[JudgeInput], scores: Sequence[float | None]
) -> list[float | None]:
    """How unsure ``judge`` is of each item in [0, 1] (1: on its decision boundary), where it
    can say: a trained judge from its probabilities, a thresholded judge from its score's
    distance to the threshold; None for a judge that only names a category."""
    own = getattr(judge, "uncertainty", None)
    if callable(own):
        return list(own(items))
    threshold = getattr(judge, "threshold", None)
    if not isinstance(threshold, float):
        return [None] * len(items)
    lowest = -1.0 if judge.spec.backend == EMBEDDING_BACKEND else 0.0  # cosine or P
    return [
        None if score is None else closeness_to_threshold(score, threshold, lowest)
        for score in scores
    ]


def label_queue(
    rt: Runtime,
    kind_name: str,
    corpus: str,
    *,
    n: int,
    pool: int | None = None,
    judges: Sequence[str] = (),
) -> tuple[TrainedKind, list[QueueRow]]:
    """The ``n`` candidates a label helps most, ranked (see the module docstring)."""
    kind = trained_kind(kind_name)
    found = candidates(rt, kind, corpus)
    size = min(len(found), pool or 5 * n)
    drawn = random.Random(rt.settings.seed).sample(found, size)
    names = list(dict.fromkeys([*default_judges(rt, kind), *judges]))
    inputs = [c.judge_input for c in drawn]
    values: dict[str, list[str]] = {}
    unsure: dict[str, list[float | None]] = {}
    for name in names:
        judge = JUDGES.build(rt, name, role=kind.role)
        verdicts = judge.judge(inputs)
        values[name] = [str(v.value) if v.ok else f"failed: {v.error}" for v in verdicts]
        unsure[name] = uncertainty(judge, inputs, [v.score for v in verdicts])
    ranked: list[tuple[bool, float, str, QueueRow]] = []
    for i, cand in enumerate(drawn):
        said = {name: values[name][i] for name in names}
        decided = {v for v in said.values() if not v.startswith("failed")}
        failed = len(decided) == 0 or any(v.startswith("failed") for v in said.values())
        doubt = max((u[i] for u in unsure.values() if u[i] is not None), default=0.0)
        verdicts = ", ".join(f"{k}={v}" for k, v in said.items())
        if len(decided) > 1:
            why = f"judges disagree: {verdicts}"
        elif failed:
            why = f"a judge failed: {verdicts}"
        else:
            why = f"judges agree; uncertainty {doubt:.2f}"
        first, second = (getattr(cand.judge_input, f) for f in kind.fields)
        row = QueueRow(cand.item_id, cand.query_id, first, second, why, doubt, said)
        ranked.append((len(decided) > 1 or failed, doubt, cand.item_id, row))
    ranked.sort(key=lambda r: (not r[0], -r[1], r[2]))
    rows = [r[3] for r in ranked]
    return kind, rows[:n]


__all__ = [
    "Candidate",
    "EmptyQueueError",
    "candidates",
    "default_judges",
    "label_queue",
    "uncertainty",
]
