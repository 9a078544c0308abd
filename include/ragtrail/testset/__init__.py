"""Versioned, lineage-tracked RAG test sets: candidate storage, dedup, quotas and export.

* :mod:`ragtrail.testset.store` — :class:`TestSetStore`: candidates with their lineage, retirement
  when documents change, immutable content-addressed QA set versions.
* :mod:`ragtrail.testset.dedup` — near-duplicate questions (word n-gram Jaccard + embedding cosine).
* :mod:`ragtrail.testset.quotas` — per-label quotas with a per-document cap.
* :mod:`ragtrail.testset.export` — JSONL / CSV / Parquet (loadable by the evaluator) and BEIR.
"""

from __future__ import annotations

from ragtrail.testset.dedup import Duplicate, find_duplicates, normalize_question
from ragtrail.testset.export import (
    to_frame,
    write_beir,
    write_csv,
    write_jsonl,
    write_parquet,
)
from ragtrail.testset.quotas import Leftover, QuotaResult, select_with_quotas
from ragtrail.testset.store import TestSetStore, qid_for, version_id_for

__all__ = [
    "Duplicate",
    "Leftover",
    "QuotaResult",
    "TestSetStore",
    "find_duplicates",
    "normalize_question",
    "qid_for",
    "select_with_quotas",
    "to_frame",
    "version_id_for",
    "write_beir",
    "write_csv",
    "write_jsonl",
    "write_parquet",
]
