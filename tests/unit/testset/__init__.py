"""Tests for ragtrail.testset; :func:`make_candidate` builds candidates for all of them."""

from __future__ import annotations

from typing import Any

from ragtrail.records import CandidateStatus, Context, QACandidate, sha256_text

CORPUS = "handbook"


def cid(name: str) -> str:
    """A realistic 64-hex candidate id derived from a short test name."""
    return sha256_text(f"candidate:{name}")


def make_candidate(
    name: str,
    *,
    doc: str = "people/leave.md",
    ordinal: int = 0,
    label: str = "fact_single",
    observed: str | bool | None = True,
    status: CandidateStatus = CandidateStatus.ACCEPTED,
    question: str | None = None,
    doc_hash: str = "d" * 64,
    corpus: str = CORPUS,
    snapshot: str = "s1",
    **extra: Any,
) -> QACandidate:
    """An accepted candidate grounded in chunk ``doc#ordinal``; ``observed=True`` means the
    observed label equals ``label``."""
    chunk_id = f"{doc}#{ordinal:04d}"
    text = f"Chunk {ordinal} of {doc}: staff get 27 days of leave."
    context = Context(
        corpus=corpus,
        snapshot_id=snapshot,
        doc_id=doc,
        doc_content_hash=doc_hash,
        chunk_id=chunk_id,
        chunk_hash=sha256_text(text),
        text=text,
        headings=("Leave", f"Part {ordinal}"),
    )
    kind = {"fact_single": "fact", "summary": "summary", "reasoning": "conclusion"}.get(
        label, "foreign"
    )
    fields: dict[str, Any] = {
        "candidate_id": cid(name),
        "context": context,
        "statement_kind": kind,
        "requested_label": label,
        "theme": "annual leave",
        "statement": f"Statement for {name}.",
        "question": question if question is not None else f"What does {name} say about leave?",
        "answer": "" if label == "unanswerable" else "27 days",
        "observed_label": label if observed is True else observed or None,
        "label_reason": "stated in one sentence",
        "critiques": {"groundedness": {"rating": 5, "evaluation": "fully grounded"}},
        "status": status,
        "raw_outputs": ['{"question": "..."}'],
        "generator": {"backend": "fake", "model": "tiny", "prompt_versions": {"qa": "v1"}},
    }
    fields.update(extra)
    return QACandidate(**fields)
