"""The embedding-similarity entailment fallback: hand-computed scores, then the real MiniLM."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from ragtrail.judges.contract import NOT_SUPPORTED, SUPPORTED, Judge, JudgeInput
from ragtrail.judges.embedding_entailment import (
    DEFAULT_EMBEDDING_THRESHOLD,
    EmbeddingEntailmentJudge,
)
from ragtrail.judges.entailment import split_sentences


class TableEncoder:
    """Maps each known text to a fixed unit vector (a lookup table, so scores are known)."""

    model_id = "table-v1"

    def __init__(self, table: dict[str, Sequence[float]]) -> None:
        self.table = {
            k: np.asarray(v, dtype=np.float32) / np.linalg.norm(v) for k, v in table.items()
        }
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.stack([self.table[t] for t in texts])


def test_split_sentences() -> None:
    assert split_sentences(
        'He said "yes." Then he left. 3 cats ran!  Why? no split. e.g. this'
    ) == [
        'He said "yes."',
        "Then he left.",
        "3 cats ran!",
        "Why? no split. e.g. this",
    ]
    assert split_sentences("Line one\n\nLine two. (Another one.) Fine") == [
        "Line one",
        "Line two.",
        "(Another one.)",
        "Fine",
    ]
    assert split_sentences("Version 2.5 is out.") == ["Version 2.5 is out."]
    assert split_sentences("  \n ") == []


def test_score_is_the_best_sentence_cosine() -> None:
    encoder = TableEncoder(
        {
            "Alpha one.": [1, 0, 0],
            "Beta two.": [0.6, 0.8, 0],
            "Gamma three.": [0, 0, 1],
            "H1": [0, 1, 0],
            "H2": [0, 0, 1],
        }
    )
    judge = EmbeddingEntailmentJudge(encoder, threshold=0.7)
    items = [
        JudgeInput(premise="Alpha one. Beta two.", hypothesis="H1"),  # max(0, 0.8) = 0.8
        JudgeInput(premise="Alpha one. Beta two.", hypothesis="H2"),  # max(0, 0) = 0
        JudgeInput(premise="", hypothesis="H1"),
        JudgeInput(premise="Gamma three.", hypothesis="H2"),  # 1.0
    ]
    verdicts = judge.judge(items)
    assert [v.value for v in verdicts] == [SUPPORTED, NOT_SUPPORTED, None, SUPPORTED]
    assert [v.score for v in verdicts] == pytest.approx([0.8, 0.0, None, 1.0], abs=1e-6)
    assert verdicts[2].error == "empty premise" and not verdicts[2].ok
    assert len(encoder.calls) == 1  # one encode call for the whole batch
    assert sorted(encoder.calls[0]) == sorted(
        ["Alpha one.", "Beta two.", "H1", "H2", "Gamma three."]
    )
    assert (
        EmbeddingEntailmentJudge(encoder, threshold=0.85).judge(items[:1])[0].value == NOT_SUPPORTED
    )


def test_spec_says_it_is_an_approximation() -> None:
    encoder = TableEncoder({})
    judge = EmbeddingEntailmentJudge(encoder)
    assert isinstance(judge, Judge)
    spec = judge.spec
    assert spec.name == "entailment.embedding" and spec.backend == "embedding-similarity"
    assert spec.approximate and "APPROXIMATION" in spec.description and spec.model == "table-v1"
    assert judge.threshold == DEFAULT_EMBEDDING_THRESHOLD
    assert EmbeddingEntailmentJudge(encoder, threshold=0.3).spec.version != spec.version
    assert EmbeddingEntailmentJudge(encoder, model_id="other").spec.version != spec.version
    assert judge.judge([]) == []
    with pytest.raises(ValueError, match="threshold"):
        EmbeddingEntailmentJudge(encoder, threshold=-0.1)
    with pytest.raises(ValueError, match="model_id"):
        EmbeddingEntailmentJudge(object())  # type: ignore[arg-type]


def test_real_embedder_on_hand_made_sentences(embedder) -> None:
    premise = (
        "The library opens at 9 am on weekdays. Parking next to the building is free on "
        "weekends. Books can be renewed twice online."
    )
    items = [
        JudgeInput(premise=premise, hypothesis="Parking by the library is free at weekends."),
        JudgeInput(premise=premise, hypothesis="The volcano erupted in 1883 and darkened the sky."),
        JudgeInput(
            premise=premise, hypothesis="Parking next to the building costs money on weekends."
        ),
    ]
    judge = EmbeddingEntailmentJudge(embedder)
    # The judge is named by the embedder's identity, backend and precision included.
    assert judge.spec.model == embedder.model_id
    assert judge.spec.model.startswith("sentence-transformers/all-MiniLM-L6-v2")
    related, unrelated, contradicted = judge.judge(items)
    sentences = split_sentences(premise)
    vectors = embedder.encode([*sentences, items[0].hypothesis])
    expected = float(np.max(vectors[:3] @ vectors[3]))
    assert related.score == pytest.approx(expected, abs=1e-5)
    assert int(np.argmax(vectors[:3] @ vectors[3])) == 1  # the parking sentence
    assert related.value == SUPPORTED and unrelated.value == NOT_SUPPORTED
    assert (unrelated.score or 0) < 0.2 < (related.score or 0)
    # the documented limit of the approximation: a contradicted claim on the same subject passes
    assert contradicted.value == SUPPORTED
