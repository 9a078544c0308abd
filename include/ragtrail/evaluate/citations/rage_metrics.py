"""Citation precision, recall and F1 of one answer against known relevance (METHODS §6, RAGE).

Definitions (``cited`` = the distinct passage numbers the answer cites, ``relevant`` = the
relevant passage numbers of its mixture, ``n`` = passages in the mixture):

* **precision** = |cited ∩ relevant| / |cited|. Each passage counts once however many sentences
  cite it. Numbers outside 1..n (invalid citations) stay in the denominator: a citation of a
  passage that does not exist is a wrong citation. They are also reported on their own as the
  **invalid-citation rate** = invalid / |cited|.
* **recall** = |cited ∩ relevant| / |relevant|.
* **F1** = 2PR / (P + R), 0 when P + R = 0.

Undefined values are None with a reason, never NaN:

* no citation at all: precision is undefined ("no citations"), recall is 0 and F1 is 0 (the
  limit of the harmonic mean when recall is 0), so an answer that cites nothing is penalised in
  F1 and recall, and does not enter the precision average. The invalid-citation rate is undefined
  for the same reason.
* no relevant passage (unanswerable mixtures): recall and F1 are undefined; such items are scored
  by ``cited_any`` (share that cite anything) and ``abstained`` (share with no sentence at all).
  Their precision is the formula's value (0 whenever they cite), but the aggregates over answerable
  labels never include them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ragtrail.jsonsafe import JsonObject

NO_CITATIONS = "no citations"
NO_RELEVANT = "no relevant passage in the mixture"


@dataclass(frozen=True)
class CitationScores:
    """Per-answer citation metrics; ``undefined`` maps the metric id (as in :meth:`as_dict`) of
    each None value to its reason."""

    precision: float | None
    recall: float | None
    f1: float | None
    distinct_citations: int
    invalid_citations: int
    invalid_citation_rate: float | None
    cited_any: bool
    undefined: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> JsonObject:
        out: JsonObject = {
            "citation_precision": self.precision,
            "citation_recall": self.recall,
            "citation_f1": self.f1,
            "distinct_citations": self.distinct_citations,
            "invalid_citations": self.invalid_citations,
            "invalid_citation_rate": self.invalid_citation_rate,
            "cited_any": self.cited_any,
        }
        if self.undefined:
            out["undefined"] = dict(self.undefined)
        return out


def f1_score(precision: float | None, recall: float | None) -> float | None:
    """Harmonic mean; 0 when recall is 0 (whatever precision is), None when either is missing."""
    if recall is None:
        return None
    if recall == 0.0:
        return 0.0
    if precision is None:
        return None
    total = precision + recall
    return 0.0 if total == 0 else 2 * precision * recall / total


def score_citations(
    cited: Iterable[int], relevant: Iterable[int], n_passages: int
) -> CitationScores:
    """Scores of one answer citing ``cited`` (duplicates ignored) in an ``n_passages`` mixture
    whose relevant numbers are ``relevant`` (see the module docstring)."""
    numbers = set(cited)
    relevant_set = set(relevant)
    if any(k < 1 or k > n_passages for k in relevant_set):
        raise ValueError(f"relevant numbers {sorted(relevant_set)} outside 1..{n_passages}")
    undefined: dict[str, str] = {}
    hits = len(numbers & relevant_set)
    invalid = sum(1 for k in numbers if not 1 <= k <= n_passages)
    precision = hits / len(numbers) if numbers else None
    invalid_rate = invalid / len(numbers) if numbers else None
    if not numbers:
        undefined["citation_precision"] = NO_CITATIONS
        undefined["invalid_citation_rate"] = NO_CITATIONS
    recall = hits / len(relevant_set) if relevant_set else None
    if not relevant_set:
        undefined["citation_recall"] = NO_RELEVANT
        undefined["citation_f1"] = NO_RELEVANT
    return CitationScores(
        precision=precision,
        recall=recall,
        f1=f1_score(precision, recall),
        distinct_citations=len(numbers),
        invalid_citations=invalid,
        invalid_citation_rate=invalid_rate,
        cited_any=bool(numbers),
        undefined=undefined,
    )
