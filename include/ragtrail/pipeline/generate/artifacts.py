"""The files published with a test-set version: items (Parquet, JSONL) and the run summary."""

from __future__ import annotations

import io

from ragtrail.artifact_keys import generation_summary_key, testset_prefix
from ragtrail.runtime import Runtime
from ragtrail.summaries.generation_summary import GenerationSummary
from ragtrail.testset.export import to_frame, write_jsonl
from ragtrail.testset.store import TestSetStore


def write_artifacts(
    rt: Runtime, testsets: TestSetStore, version: str, summary: GenerationSummary
) -> str:
    """Write ``items.parquet``, ``items.jsonl`` and ``generation.json``; return the Parquet URI."""
    items = testsets.version_items(version)
    qids = testsets.version_qids(version)
    prefix = testset_prefix(summary.corpus, version)
    frame = to_frame(items, qids=qids)
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    uri = rt.artifacts.put_bytes(f"{prefix}/items.parquet", buf.getvalue())
    jsonl = rt.settings.home / "testsets" / version / "items.jsonl"
    write_jsonl(items, jsonl, qids=qids)
    rt.artifacts.put_file(f"{prefix}/items.jsonl", jsonl)
    rt.artifacts.put_bytes(
        generation_summary_key(summary.corpus, version), summary.dumps(indent=1).encode()
    )
    testsets.set_artifact_uri(version, uri)
    return uri


def load_generation_summary(rt: Runtime, corpus: str, version: str) -> GenerationSummary:
    """The stored ``generation.json`` of a version."""
    return GenerationSummary.from_json(
        rt.artifacts.get_bytes(generation_summary_key(corpus, version))
    )
