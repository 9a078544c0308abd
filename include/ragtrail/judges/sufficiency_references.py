"""Labelled (question, context) pairs that sufficiency raters are calibrated on.

Two sources. Golden QA items give three kinds of reference by construction
(:func:`golden_sufficiency_examples`): an answerable item with its ground context is
*sufficient* (``"ground"``); an unanswerable item with its ground context, which is on topic but
does not answer it, is *insufficient* (``"unanswerable"``); an answerable item shown only passages
of other documents is *insufficient* (``"irrelevant"``). A user may add a labelled JSONL
(:func:`load_sufficiency_reference`, kind ``"file"``): one object per line with ``question`` and
``context`` (non-empty strings), ``label`` (``"sufficient"``/``"insufficient"``, ``1``/``0`` or
``true``/``false``) and optional ``answer`` (the gold answer, ``""`` when none) and ``id``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.references import check_reference_row, read_reference_jsonl
from ragtrail.judges.sufficiency_raters import INSUFFICIENT, SUFFICIENCY_CATEGORIES, SUFFICIENT
from ragtrail.records import QAItem, QuestionLabel

ExampleKind = Literal["ground", "unanswerable", "irrelevant", "file"]
GOLDEN_KINDS: tuple[ExampleKind, ...] = ("ground", "unanswerable", "irrelevant")


@dataclass(frozen=True)
class SufficiencyExample:
    """One reference: is ``context`` sufficient for ``question`` (``label``, a category)."""

    example_id: str
    question: str
    context: str
    answer: str
    label: str
    kind: ExampleKind

    def __post_init__(self) -> None:
        if self.label not in SUFFICIENCY_CATEGORIES:
            raise ValueError(f"label must be one of {SUFFICIENCY_CATEGORIES}, got {self.label!r}")


# ------------------------------------------------------------------------------ user JSONL


def parse_sufficiency_label(value: Any) -> str:
    """A reference label as a category; ValueError naming the accepted forms otherwise."""
    if isinstance(value, bool):
        return SUFFICIENT if value else INSUFFICIENT
    if isinstance(value, int) and value in (0, 1):
        return SUFFICIENT if value == 1 else INSUFFICIENT
    if isinstance(value, str) and value.strip().lower() in SUFFICIENCY_CATEGORIES:
        return value.strip().lower()
    raise ValueError(
        f"label {value!r} is not one of 1/0, true/false, {SUFFICIENT!r}/{INSUFFICIENT!r}"
    )


def load_sufficiency_reference(path: Path | str) -> list[SufficiencyExample]:
    """Read a labelled JSONL (question, context, label[, answer, id]); every bad line is reported
    at once (:func:`~ragtrail.judges.references.read_reference_jsonl`)."""
    return read_reference_jsonl(path, _example_from_row, lambda e: e.example_id, "id")


def _example_from_row(row: JsonObject, default_id: str) -> SufficiencyExample:
    """One example from one JSONL object; a ValueError lists everything wrong with it."""
    errors, label, example_id = check_reference_row(
        row, texts=("question", "context"), parse=parse_sufficiency_label, id_key="id",
        default_id=default_id,
    )  # fmt: skip
    answer = row.get("answer", "")
    if not isinstance(answer, str):
        errors.append(f"answer must be a string (got {answer!r:.40})")
    if errors:
        raise ValueError("; ".join(errors))
    assert label is not None
    return SufficiencyExample(example_id, row["question"], row["context"], answer, label, "file")


# --------------------------------------------------------------------------- golden items


def is_answerable(item: QAItem) -> bool:
    """An item with a gold answer whose label is not unanswerable."""
    return item.label != QuestionLabel.UNANSWERABLE and bool(item.answer.strip())


def _draw(
    pool: Sequence[QAItem], contexts: Mapping[str, str], per_kind: int, rng: random.Random
) -> list[QAItem]:
    """Up to ``per_kind`` items of ``pool`` that have a context, in a seeded random order.

    The pool is walked in shuffled order and membership in ``contexts`` is asked only until
    enough are found, so a lazily computed mapping computes few contexts.
    """
    order = list(pool)
    rng.shuffle(order)
    chosen: list[QAItem] = []
    for item in order:
        if len(chosen) == per_kind:
            break
        if item.qid in contexts:
            chosen.append(item)
    return chosen


def golden_sufficiency_examples(
    items: Sequence[QAItem],
    ground_contexts: Mapping[str, str],
    irrelevant_contexts: Mapping[str, str],
    *,
    per_kind: int,
    seed: int,
) -> list[SufficiencyExample]:
    """Up to ``per_kind`` references of each golden kind, drawn with ``seed``.

    ``ground_contexts`` / ``irrelevant_contexts`` map a qid to its ground context / to passages
    of other documents (items missing from a mapping are skipped). Kinds come in
    :data:`GOLDEN_KINDS` order; within a kind, in the draw's order (the same for a given
    ``seed`` and ``items``). An unanswerable item carries no gold answer (``answer=""``).
    """
    if per_kind < 0:
        raise ValueError(f"per_kind must be >= 0, got {per_kind}")
    answerable = [i for i in items if is_answerable(i)]
    unanswerable = [i for i in items if i.label == QuestionLabel.UNANSWERABLE]
    plan: list[tuple[ExampleKind, Sequence[QAItem], Mapping[str, str], str]] = [
        ("ground", answerable, ground_contexts, SUFFICIENT),
        ("unanswerable", unanswerable, ground_contexts, INSUFFICIENT),
        ("irrelevant", answerable, irrelevant_contexts, INSUFFICIENT),
    ]
    examples: list[SufficiencyExample] = []
    for kind, pool, contexts, label in plan:
        rng = random.Random(f"{seed}:{kind}")
        for item in _draw(pool, contexts, per_kind, rng):
            examples.append(
                SufficiencyExample(
                    example_id=f"{kind}:{item.qid}",
                    question=item.question,
                    context=contexts[item.qid],
                    answer=item.answer if kind != "unanswerable" else "",
                    label=label,
                    kind=kind,
                )
            )
    return examples
