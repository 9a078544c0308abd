"""Which labelled reference a file holds, read as labelled pairs a judge can be trained on.

Entailment references come as the HAGRID CSV (grouped by its query id), a filled label queue
(grouped by its ``query_id`` column) or a JSONL of premise/hypothesis/label rows (grouped by
premise: rows that share a premise stay on one side of a split). Sufficiency references come as
a labelled JSONL (question/context/label, grouped by question) or a filled label queue. What a
QA set yields (the labeller's labels, the golden sufficiency kinds) needs the corpus, so the
pipeline builds those pairs.
"""

from __future__ import annotations

from pathlib import Path

from ragtrail.judges.label_queue import is_label_queue, read_label_queue
from ragtrail.judges.references import (
    EntailmentExample,
    hagrid_attribution_pairs,
    load_entailment_reference,
)
from ragtrail.judges.sufficiency_references import SufficiencyExample, load_sufficiency_reference
from ragtrail.judges.trained import TRAINED_KINDS, LabelledPair
from ragtrail.text import text_key


def entailment_pairs(path: Path | str) -> list[LabelledPair]:
    """The labelled (premise, hypothesis) pairs of an entailment reference, grouped by query."""
    kind = TRAINED_KINDS["entailment"]
    if is_label_queue(path, kind):
        return read_label_queue(path, kind).pairs
    if Path(path).suffix.lower() == ".csv":
        return [
            LabelledPair(
                e.source_id, e.source_id.split(":", 1)[0], e.premise, e.hypothesis, e.label
            )
            for e in hagrid_attribution_pairs(path)
        ]
    return [
        LabelledPair(e.source_id, text_key(e.premise), e.premise, e.hypothesis, e.label)
        for e in load_entailment_reference(path)
    ]


def entailment_examples(path: Path | str) -> list[EntailmentExample]:
    """An entailment reference in any of its forms, as the calibration reads it."""
    return [
        EntailmentExample(p.first, p.second, p.label, p.item_id) for p in entailment_pairs(path)
    ]


def sufficiency_pairs(path: Path | str) -> list[LabelledPair]:
    """The labelled (question, context) pairs of a sufficiency JSONL or a filled queue."""
    kind = TRAINED_KINDS["sufficiency"]
    if is_label_queue(path, kind):
        return read_label_queue(path, kind).pairs
    return sufficiency_example_pairs(load_sufficiency_reference(path))


def sufficiency_example_pairs(examples: list[SufficiencyExample]) -> list[LabelledPair]:
    """Sufficiency references as pairs grouped by question."""
    return [
        LabelledPair(e.example_id, text_key(e.question), e.question, e.context, e.label)
        for e in examples
    ]


__all__ = [
    "entailment_examples",
    "entailment_pairs",
    "sufficiency_example_pairs",
    "sufficiency_pairs",
]
