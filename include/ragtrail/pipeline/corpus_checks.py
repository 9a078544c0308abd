"""GX validations of an ingested corpus snapshot: documents, chunks and quarantine records.

Policy: fail-severity expectations stop the pipeline (the task fails and nothing downstream runs on a
broken corpus); warn-severity ones are listed in the report and Data Docs only.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd

from ragtrail import jsonsafe
from ragtrail.artifact_keys import corpus_quality_prefix
from ragtrail.runtime import Runtime
from ragtrail.summaries.quality_summary import CorpusQuality, ValidationResult


def corpus_frames(rt: Runtime, corpus: str, snapshot_id: str) -> dict[str, pd.DataFrame]:
    """Documents, chunks and quarantine rows of the corpus as DataFrames for validation."""
    docs = rt.store.get_documents(corpus)
    chunks = pd.DataFrame(
        [{**asdict(c), "headings": list(c.headings)} for c in rt.store.get_chunks(corpus)]
    )
    if chunks.empty:
        chunks = pd.DataFrame(columns=["chunk_id", "doc_id", "ordinal", "text", "n_tokens", "kind"])
    chars = chunks.groupby("doc_id")["text"].apply(lambda s: int(s.str.len().sum())).to_dict()
    documents = pd.DataFrame(
        [
            {
                "doc_id": d.doc_id,
                "title": d.title,
                "format": d.format,
                "content_hash": d.content_hash,
                "size_bytes": d.size_bytes,
                "n_chunks": d.n_chunks,
                "text_chars": chars.get(d.doc_id, 0),
            }
            for d in docs.values()
        ],
        columns=[
            "doc_id",
            "title",
            "format",
            "content_hash",
            "size_bytes",
            "n_chunks",
            "text_chars",
        ],
    )
    quarantine = pd.DataFrame(
        [
            {**asdict(q), "reason": q.reason.value}
            for q in rt.store.list_quarantine(corpus, snapshot_id)
        ],
        columns=["rel_path", "uri", "reason", "detail", "content_hash"],
    )
    return {"documents": documents, "chunks": chunks, "quarantine": quarantine}


def check_corpus_quality(
    rt: Runtime, corpus: str, snapshot_id: str, out_dir: Path | None = None
) -> CorpusQuality:
    """Validate the snapshot, build Data Docs, raise QualityGateError on a failed expectation."""
    from ragtrail.quality.runner import QualityRunner, enforce
    from ragtrail.quality.suites import (
        chunks_suite,
        documents_suite,
        prepare_chunks,
        quarantine_suite,
    )

    out = out_dir or rt.settings.home / "reports" / "corpus" / corpus / snapshot_id
    out.mkdir(parents=True, exist_ok=True)
    frames = corpus_frames(rt, corpus, snapshot_id)
    chunking = rt.settings.chunking
    runner = QualityRunner(out)
    results = [
        runner.validate(
            "documents", frames["documents"], documents_suite(rt.settings.max_file_bytes)
        ),
        runner.validate(
            "chunks",
            prepare_chunks(frames["chunks"]),
            chunks_suite(
                chunking.max_tokens, chunking.max_table_tokens, max_chars=chunking.char_limit
            ),
        ),
        runner.validate("quarantine", frames["quarantine"], quarantine_suite()),
    ]
    docs_index = runner.build_docs()
    validations = [r.as_dict() for r in results]
    # Kept with the snapshot so a report published later (another task, another worker) shows it.
    (out / "validations.json").write_text(jsonsafe.dumps(validations, "corpus validations"))
    uri = rt.artifacts.put_tree(corpus_quality_prefix(corpus, snapshot_id), out)
    summary = CorpusQuality(
        success=all(r.success for r in results),
        data_docs_path=str(docs_index),
        data_docs_uri=uri,
        validations=[ValidationResult.from_json(v) for v in validations],
    )
    enforce(results)
    return summary
