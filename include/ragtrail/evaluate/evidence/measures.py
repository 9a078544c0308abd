"""Model-free measures of one piece of evidence: its length, compression, helpfulness and the
cosine behind conciseness (METHODS §10, SEER).

Lengths are counted with one regex tokeniser rather than a model's tokenizer, so that the same
text has the same length whichever extractor, generator or embedder a night uses, and compression
ratios stay comparable across models and runs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")
"""A token: a run of word characters (any script) or one punctuation mark."""

__all__ = ["TOKEN_PATTERN", "compression", "cosine", "helpfulness", "token_count"]


def token_count(text: str) -> int:
    """Number of tokens of ``text`` under :data:`TOKEN_PATTERN` (``"l'été."`` -> 4).

    Model-free on purpose: every extractor and model is measured with the same ruler.
    """
    return len(TOKEN_PATTERN.findall(text))


def compression(passage_tokens: int, evidence_tokens: int) -> float | None:
    """How many times shorter the evidence is than the passages (``passage / evidence``).

    None when the evidence is empty (the ratio is undefined; the caller records why).
    """
    if passage_tokens < 0 or evidence_tokens < 0:
        raise ValueError(
            f"token counts must be >= 0, got passage={passage_tokens}, evidence={evidence_tokens}"
        )
    if evidence_tokens == 0:
        return None
    return passage_tokens / evidence_tokens


def helpfulness(logp_with: float, logp_without: float) -> float:
    """SEER's helpfulness ``sigmoid(log p(a | q + e) - log p(a | q))`` in (0, 1) (0.5: no help).

    Computed in the form that never overflows, so a log-prob gap of +-1000 gives 1.0 or 0.0.
    """
    if not (math.isfinite(logp_with) and math.isfinite(logp_without)):
        raise ValueError(f"log-probs must be finite, got {logp_with!r} and {logp_without!r}")
    x = logp_with - logp_without  # may reach +-inf for huge inputs; both branches handle it
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def cosine(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Cosine similarity of two vectors, clipped to [-1, 1]; None when either norm is 0."""
    if len(a) != len(b):
        raise ValueError(f"vectors of different lengths: {len(a)} and {len(b)}")
    x = [float(v) for v in a]
    y = [float(v) for v in b]
    if not all(math.isfinite(v) for v in (*x, *y)):
        raise ValueError("vectors must be finite")
    norm_a, norm_b = math.hypot(*x), math.hypot(*y)
    if norm_a == 0.0 or norm_b == 0.0:
        return None
    dot = math.fsum(u * v for u, v in zip(x, y, strict=True))
    return max(-1.0, min(1.0, dot / norm_a / norm_b))
