"""What every entailment judge shares: names, input checks, thresholding and sentence splitting.

An entailment judge answers "does the premise support the hypothesis?" with a CATEGORY verdict
(:data:`~ragtrail.judges.contract.SUPPORTED` / :data:`~ragtrail.judges.contract.NOT_SUPPORTED`).
Backends that produce a continuous score (an NLI probability, a cosine similarity) keep it in
``Verdict.score`` and decide with ``score >= threshold``, so a calibration can study the
threshold without re-running the model. An input with an empty premise or hypothesis gets a
failed verdict (nothing to judge), never a guessed category.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from ragtrail.judges.contract import (
    ENTAILMENT_CATEGORIES,
    NOT_SUPPORTED,
    SUPPORTED,
    JudgeInput,
    JudgeRole,
    JudgeSpec,
    Verdict,
    VerdictType,
)
from ragtrail.records import EntailmentJudgeName

NLI_JUDGE_NAME = EntailmentJudgeName.NLI
EMBEDDING_JUDGE_NAME = EntailmentJudgeName.EMBEDDING
LLM_JUDGE_NAME = EntailmentJudgeName.LLM

DEFAULT_NLI_THRESHOLD = 0.5
"""An NLI model calls a pair entailed when P(entailment) reaches this (the argmax of two classes)."""


def check_threshold(threshold: float) -> float:
    """``threshold`` as a float; a value outside [0, 1] or not finite is a ValueError."""
    value = float(threshold)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"an entailment threshold must lie in [0, 1], got {threshold!r}")
    return value


def entailment_spec(**fields: Any) -> JudgeSpec:
    """The spec of an entailment judge: role ENTAILMENT, CATEGORY verdicts over the two classes;
    ``fields`` are the rest of :class:`JudgeSpec` (name, version, backend, model, ...)."""
    return JudgeSpec(
        role=JudgeRole.ENTAILMENT,
        verdict_type=VerdictType.CATEGORY,
        categories=ENTAILMENT_CATEGORIES,
        **fields,
    )


def input_problem(item: JudgeInput) -> str | None:
    """Why ``item`` cannot be judged for entailment (an empty side), or None when it can."""
    return item.blank("premise", "hypothesis")


def judge_nonempty(
    judge: str,
    items: Sequence[JudgeInput],
    judge_valid: Callable[[list[JudgeInput]], list[Verdict]],
    *,
    problem: Callable[[JudgeInput], str | None] = input_problem,
) -> list[Verdict]:
    """Verdicts for ``items`` in order: a failed verdict for each item ``problem`` finds fault
    with (default: an empty entailment side), and ``judge_valid`` (one call, same order) for the
    rest. Any judge whose inputs can be unjudgeable uses it with its own ``problem``."""
    verdicts: dict[int, Verdict] = {}
    valid: list[int] = []
    for i, item in enumerate(items):
        fault = problem(item)
        if fault is None:
            valid.append(i)
        else:
            verdicts[i] = failed_verdict(judge, fault)
    judged = judge_valid([items[i] for i in valid]) if valid else []
    if len(judged) != len(valid):
        raise RuntimeError(f"{judge}: {len(judged)} verdicts for {len(valid)} items")
    verdicts.update(zip(valid, judged, strict=True))
    return [verdicts[i] for i in range(len(items))]


def failed_verdict(judge: str, error: str, raw: Sequence[str] = ()) -> Verdict:
    """A verdict that carries no category: the cause and whatever the model returned."""
    return Verdict(judge=judge, value=None, error=error, raw=tuple(raw))


def score_verdict(judge: str, score: float, threshold: float, reason: str = "") -> Verdict:
    """SUPPORTED when ``score >= threshold``; a non-finite score is a failure, not a category."""
    value = float(score)
    if not math.isfinite(value):
        return failed_verdict(
            judge, f"the model produced a non-finite score ({value})", (repr(value),)
        )
    category = SUPPORTED if value >= threshold else NOT_SUPPORTED
    return Verdict(judge=judge, value=category, score=value, reason=reason)


_SENTENCE_BREAK = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(\[]?[A-Z0-9])|\s*\n\s*")
"""A sentence ends at ``.``/``!``/``?`` (closing quotes or brackets allowed) followed by space and
an upper-case letter or digit, or at a line break."""


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, stripped, empty pieces dropped.

    A plain rule-based splitter (``ragtrail.text`` has none, and the embedding judge only needs
    rough units): abbreviations followed by a capital ("Dr. Smith") are split too.
    """
    return [piece.strip() for piece in _SENTENCE_BREAK.split(text) if piece and piece.strip()]
