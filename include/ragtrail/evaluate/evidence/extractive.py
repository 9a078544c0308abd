"""The model-free extractive baseline: the passage sentences closest to the question, in a budget.

It answers "does a trained extractor beat simply picking sentences?" at the same evidence length.
Sentences come from :func:`ragtrail.judges.entailment.split_sentences`; closeness is the cosine of
embeddings from any ``encode`` function (its vectors need not be normalised); length is
:func:`~ragtrail.evaluate.evidence.measures.token_count`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ragtrail.evaluate.evidence.measures import TOKEN_PATTERN, cosine, token_count
from ragtrail.judges.entailment import split_sentences

__all__ = ["extractive_evidence", "truncate_tokens"]


def truncate_tokens(text: str, budget_tokens: int) -> str:
    """The longest prefix of ``text`` holding at most ``budget_tokens`` tokens, cut after a whole
    token (tokens are whole words or single punctuation marks, so never inside a word)."""
    if budget_tokens < 1:
        return ""
    ends = [m.end() for m in TOKEN_PATTERN.finditer(text)]
    if len(ends) <= budget_tokens:
        return text.strip()
    return text[: ends[budget_tokens - 1]].strip()


def extractive_evidence(
    question: str,
    passages: Sequence[str],
    *,
    budget_tokens: int,
    encode: Callable[[list[str]], np.ndarray],
) -> str:
    """Sentences of ``passages`` by descending cosine to ``question`` while they fit the budget.

    A sentence that would overflow the budget is skipped and the next one tried; the chosen ones
    are joined by a space in their original passage order. When no whole sentence fits, the most
    similar one is cut to ``budget_tokens`` tokens. Equal cosines keep passage order; a sentence
    whose embedding has norm 0 ranks last. No sentence at all gives ``""``.
    """
    if budget_tokens < 1:
        raise ValueError(f"budget_tokens must be >= 1, got {budget_tokens}")
    sentences = [s for passage in passages for s in split_sentences(passage)]
    if not sentences:
        return ""
    vectors = np.asarray(encode([question, *sentences]), dtype=float)
    if vectors.ndim != 2 or vectors.shape[0] != len(sentences) + 1:
        raise ValueError(
            f"encode gave shape {vectors.shape} for {len(sentences) + 1} texts; "
            "expected one row per text"
        )
    query = vectors[0].tolist()
    similarity = [cosine(query, row.tolist()) for row in vectors[1:]]
    order = sorted(
        range(len(sentences)),
        key=lambda i: (similarity[i] is None, -(similarity[i] or 0.0)),
    )
    chosen: list[int] = []
    used = 0
    for i in order:
        size = token_count(sentences[i])
        if used + size <= budget_tokens:
            chosen.append(i)
            used += size
    if not chosen:
        return truncate_tokens(sentences[order[0]], budget_tokens)
    return " ".join(sentences[i] for i in sorted(chosen))
