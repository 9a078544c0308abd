"""An approximate entailment judge from sentence embeddings, for when no NLI model is available.

The score of a (premise, hypothesis) pair is the highest cosine similarity between the hypothesis
and any one sentence of the premise: a hypothesis restating one sentence of its source scores
high. This measures topical closeness, not entailment: a negated or altered claim about the same
subject also scores high. The spec is therefore marked ``approximate`` and says so, and its
calibration decides whether it may ever gate anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ragtrail.judges.contract import JudgeInput, JudgeSpec, Verdict, judge_version
from ragtrail.judges.entailment import (
    EMBEDDING_JUDGE_NAME,
    check_threshold,
    entailment_spec,
    failed_verdict,
    input_problem,
    score_verdict,
    split_sentences,
)

BACKEND = "embedding-similarity"

DEFAULT_EMBEDDING_THRESHOLD = 0.75
"""Measured with all-MiniLM-L6-v2 on the HAGRID attribution pairs (``benchmarks/bench_entailment``,
BENCHMARKS.md "Entailment judges"): of 0.00-1.00 in steps of 0.01, the threshold with the best
balanced accuracy (0.710) on a seeded half of the queries. On the other half it agrees with the
human labels at Cohen's kappa 0.33 [0.27, 0.38] (n=1041). Other embedders need their own
measurement."""

DESCRIPTION = (
    "APPROXIMATION of entailment, not NLI: the highest cosine similarity between the hypothesis "
    "and one premise sentence, thresholded. It measures topical closeness, so contradicted or "
    "altered claims about the same subject can pass."
)

_SPLITTER_VERSION = "sentences-v1"
"""Names the premise splitting rule (:func:`~ragtrail.judges.entailment.split_sentences`)."""


class TextEncoder(Protocol):
    """What the judge needs of an embedder (``ragtrail.embed.embedder.Embedder`` fits)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """An (n, dim) array of L2-normalised rows, row i embedding ``texts[i]``."""
        ...


class EmbeddingEntailmentJudge:
    """Entailment approximated by max sentence-to-hypothesis cosine similarity.

    ``Verdict.score`` is that cosine (in [-1, 1]; a similarity, not a probability), and the
    verdict is SUPPORTED when it reaches ``threshold``. ``model_id`` names the embedder in the
    spec (default: the encoder's own ``model_id`` attribute).
    """

    def __init__(
        self,
        encoder: TextEncoder,
        *,
        threshold: float = DEFAULT_EMBEDDING_THRESHOLD,
        model_id: str | None = None,
    ) -> None:
        self._encoder = encoder
        self.threshold = check_threshold(threshold)
        model = model_id or getattr(encoder, "model_id", None)
        if not model:
            raise ValueError("the encoder has no model_id attribute: pass model_id explicitly")
        version = judge_version(
            backend=BACKEND, model=model, threshold=self.threshold, splitter=_SPLITTER_VERSION
        )
        self._spec = entailment_spec(
            name=EMBEDDING_JUDGE_NAME,
            version=version,
            backend=BACKEND,
            model=str(model),
            approximate=True,
            description=DESCRIPTION,
        )

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def scores(self, items: Sequence[JudgeInput]) -> list[float | None]:
        """The max-cosine score of each item (None where an input side is empty).

        Every distinct text (premise sentences and hypotheses together) is encoded once, in one
        call, so premises shared by many hypotheses cost nothing extra.
        """
        sentences = [split_sentences(item.premise) for item in items]
        texts: dict[str, int] = {}
        for item, parts in zip(items, sentences, strict=True):
            if input_problem(item) is None:
                for text in (*parts, item.hypothesis):
                    texts.setdefault(text, len(texts))
        vectors = self._encoder.encode(list(texts)) if texts else np.zeros((0, 0), np.float32)
        out: list[float | None] = []
        for item, parts in zip(items, sentences, strict=True):
            if input_problem(item) is not None or not parts:
                out.append(None)
                continue
            hypothesis = vectors[texts[item.hypothesis]]
            premise = vectors[[texts[p] for p in parts]]
            out.append(float(np.max(premise @ hypothesis)))
        return out

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        ref = self._spec.ref
        verdicts: list[Verdict] = []
        for item, score in zip(items, self.scores(items), strict=True):
            problem = input_problem(item)
            if problem is not None:
                verdicts.append(failed_verdict(ref, problem))
            elif score is None:
                verdicts.append(failed_verdict(ref, "the premise has no sentence"))
            else:
                verdicts.append(score_verdict(ref, score, self.threshold))
        return verdicts
