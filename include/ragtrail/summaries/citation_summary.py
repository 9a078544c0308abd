"""A QA set's citation evaluation: the answering model's citations on relevance mixtures against a
random baseline, and the attributed-answer scenarios."""

from __future__ import annotations

from ragtrail.summaries.base import Figure, Record


class CitationHeadline(Record):
    """What the night's result, the citation-metrics event and the CLI line carry of a set:
    citation F1 of the model and of random citations per mixture type (answerable questions)."""

    run_id: str
    answerer: str
    f1: dict[str, dict[str, Figure]]
    """mixture type -> system (``model``, ``random``) -> F1."""
