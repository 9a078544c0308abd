"""Corpus commands: ``ingest`` and ``search`` (root level), ``corpus quarantine|snapshots``."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ragtrail.cli.common import (
    AllowMassRemovalFlag,
    CorpusOpt,
    JsonFlag,
    console,
    emit,
    progress_factory,
    runtime,
    runtime_with_progress,
)

corpus_app = typer.Typer(help="Inspect ingested corpora.", no_args_is_help=True)


# ``ragtrail ingest``: registered on the root app in ragtrail.cli.
def ingest(
    source: Annotated[str, typer.Argument(help="A folder or an s3://bucket/prefix.")],
    corpus: CorpusOpt = "handbook",
    shard_size: Annotated[int, typer.Option(min=1)] = 25,
    allow_mass_removal: AllowMassRemovalFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Ingest SOURCE into the corpus index (incremental: unchanged documents are skipped).

    Refused with exit code 2, before anything changes: removing more than
    ingest.max_removal_share of the corpus (or all of it) without --allow-mass-removal, and a
    second ingest of a corpus while one runs.
    """
    from ragtrail.pipeline.ingest import ingest as run_ingest

    with runtime_with_progress(as_json) as (rt, progress):
        summary = run_ingest(
            rt,
            source,
            corpus,
            shard_size=shard_size,
            progress_factory=progress_factory(progress, "parsing and embedding"),
            allow_mass_removal=allow_mass_removal,
        )
    keys = ("added", "updated", "unchanged", "removed", "quarantined", "chunks", "snapshot")
    data = {k: getattr(summary, k) for k in keys}
    if as_json:
        emit({**data, "documents": summary.documents, "manifest_uri": summary.manifest_uri})
    else:
        console.print(" ".join(f"{k}={v}" for k, v in data.items()))


# ``ragtrail search``: registered on the root app in ragtrail.cli.
def search(
    query: Annotated[str, typer.Argument(help="The query text.")],
    corpus: CorpusOpt = "handbook",
    text_weight: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.5,
    k: Annotated[int, typer.Option("-k", min=1, max=1000)] = 5,
    as_json: JsonFlag = False,
) -> None:
    """Hybrid search: text weight 0 = dense only, 1 = BM25 only."""
    from ragtrail.index.base import fetch_candidates
    from ragtrail.index.fusion import fuse

    with runtime() as rt:
        if rt.store.latest_snapshot(corpus) is None:
            raise typer.BadParameter(
                f"corpus {corpus!r} has not been ingested", param_hint="--corpus"
            )
        vector = rt.embedder.encode([query])[0]
        depth = max(k, rt.settings.retrieval.candidates_per_modality)
        hits = fuse(fetch_candidates(rt.index(corpus), query, vector, depth), text_weight, k)
    if as_json:
        emit([{"rank": i + 1, **hit.__dict__} for i, hit in enumerate(hits)])
        return
    table = Table("rank", "score", "chunk", "text")
    for i, hit in enumerate(hits, 1):
        table.add_row(str(i), f"{hit.score:.3f}", hit.chunk_id, hit.text[:100].replace("\n", " "))
    Console().print(table)


@corpus_app.command("quarantine")
def corpus_quarantine(corpus: CorpusOpt = "handbook", as_json: JsonFlag = False) -> None:
    """List the files the latest ingest refused, with the reason."""
    with runtime() as rt:
        rows = rt.store.list_quarantine(corpus)
    if as_json:
        emit([asdict(row) for row in rows])
        return
    table = Table("path", "reason", "detail")
    for row in rows:
        table.add_row(row.rel_path, row.reason, row.detail[:120])
    Console().print(table)


@corpus_app.command("snapshots")
def corpus_snapshots(corpus: CorpusOpt = "handbook", as_json: JsonFlag = False) -> None:
    """List the corpus snapshots with their diff counts."""
    with runtime() as rt:
        rows = rt.store.list_snapshots(corpus)
    if as_json:
        emit([asdict(row) for row in rows])
        return
    table = Table("snapshot", "status", "added", "updated", "unchanged", "removed", "quarantined")
    for r in rows:
        table.add_row(
            r.snapshot_id,
            r.status,
            *(
                str(getattr(r, k))
                for k in ("added", "updated", "unchanged", "removed", "quarantined")
            ),
        )
    Console().print(table)
