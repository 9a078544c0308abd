"""QA sets: ``generate`` (root level) and ``testset list|export`` for generated test sets,
``qaset add|list`` for golden (human-written) ones."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ragtrail.cli.common import CorpusOpt, JsonFlag, console, emit, runtime, runtime_with_progress
from ragtrail.summaries.quality_summary import ValidationResult

qaset_app = typer.Typer(
    help="Register and list golden (human-written) QA sets.", no_args_is_help=True
)
testset_app = typer.Typer(help="Inspect and export test-set versions.", no_args_is_help=True)


# ``ragtrail generate``: registered on the root app in ragtrail.cli.
def generate(
    corpus: CorpusOpt = "handbook",
    per_label: Annotated[int | None, typer.Option(min=1, help="Target items per label.")] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    label: Annotated[
        list[str] | None, typer.Option("--label", help="Regenerate only these labels.")
    ] = None,
    doc: Annotated[
        list[str] | None, typer.Option("--doc", help="Regenerate only from these documents.")
    ] = None,
    run_id: Annotated[str | None, typer.Option()] = None,
    as_json: JsonFlag = False,
) -> None:
    """Generate a balanced, critiqued test set from the corpus (a new immutable version)."""
    from ragtrail.pipeline.generate import GenerationRequest, generate_testset
    from ragtrail.storage.db import utcnow

    request = GenerationRequest(
        corpus=corpus,
        run_id=run_id or f"generate-{utcnow():%Y%m%dT%H%M%S}",
        per_label=per_label,
        seed=seed,
        labels=tuple(label or ()),
        doc_ids=tuple(doc or ()),
    )
    with runtime_with_progress(as_json) as (rt, _):
        summary = generate_testset(rt, request)
    if as_json:
        keys = ("version", "accepted", "targets", "model_calls", "cache_hits", "funnel", "retired")
        document = summary.to_json()
        emit({k: document[k] for k in keys} | {"artifact_uri": summary.artifact_uri})
        return
    console.print(
        f"version {summary.version}: accepted {summary.accepted} (targets "
        f"{summary.targets}); model calls {summary.model_calls}, cache hits "
        f"{summary.cache_hits}"
    )


@testset_app.command("list")
def testset_list(corpus: CorpusOpt = "handbook", as_json: JsonFlag = False) -> None:
    """List test-set versions, newest first."""
    from ragtrail.testset.store import TestSetStore

    with runtime() as rt:
        rows = TestSetStore(rt.engine).list_versions(corpus)
    if as_json:
        emit(rows)
        return
    table = Table("version", "created", "snapshot", "items", "parent")
    for r in rows:
        table.add_row(
            r["version"],
            str(r["created_at"])[:19],
            r["snapshot_id"],
            str(r["n_items"]),
            r["parent_version"] or "",
        )
    Console().print(table)


@testset_app.command("export")
def testset_export(
    version: Annotated[str, typer.Argument(help="A version id from `ragtrail testset list`.")],
    format: Annotated[str, typer.Option("--format", help="jsonl, csv, parquet or beir")] = "jsonl",
    out: Annotated[Path | None, typer.Option(help="File (or folder for beir).")] = None,
) -> None:
    """Export a version for evaluation elsewhere (BEIR: corpus/queries/qrels)."""
    from ragtrail.testset import export
    from ragtrail.testset.store import TestSetStore

    writers = {
        "jsonl": export.write_jsonl,
        "csv": export.write_csv,
        "parquet": export.write_parquet,
    }
    if format not in {*writers, "beir"}:
        raise typer.BadParameter("use jsonl, csv, parquet or beir", param_hint="--format")
    with runtime() as rt:
        store = TestSetStore(rt.engine)
        if store.get_version(version) is None:
            raise typer.BadParameter(f"unknown version {version!r}", param_hint="VERSION")
        items, qids = store.version_items(version), store.version_qids(version)
        target = out or Path(f"{version}.{format}" if format != "beir" else version)
        if format == "beir":
            corpus = items[0].context.corpus if items else ""
            chunks = {
                c.chunk_id: (" > ".join(c.headings), c.text) for c in rt.store.get_chunks(corpus)
            }
            export.write_beir(items, chunks, target, qids=qids)
        else:
            writers[format](items, target, qids=qids)
    console.print(f"wrote {len(items)} items to {target}")


@qaset_app.command("add")
def qaset_add(
    file: Annotated[Path, typer.Argument(help="JSONL, CSV or Parquet QA set.", dir_okay=False)],
    name: Annotated[str, typer.Option("--name", help="Golden set name (lowercase slug).")],
    corpus: CorpusOpt = "handbook",
    as_json: JsonFlag = False,
) -> None:
    """Register FILE as a golden QA set of the corpus (a new version when its content changed).

    Every row and every ground document is checked against the corpus's latest snapshot first;
    the Great Expectations result is stored beside the version.
    """
    from ragtrail.pipeline.golden import register_golden_set

    with runtime() as rt:
        added = register_golden_set(rt, file, corpus=corpus, name=name)
    if as_json:
        emit(added.to_json())
        return
    state = "added new version" if added.created else "unchanged, already registered as"
    console.print(
        f"golden set {added.name} ({corpus}): {state} {added.version} — "
        f"{added.n_items} questions ({_label_counts(added.questions_per_label)})",
        highlight=False,
    )
    _print_quality(added.quality)
    console.print(f"quality result: {added.quality_uri}", highlight=False)


@qaset_app.command("list")
def qaset_list(corpus: CorpusOpt = "handbook", as_json: JsonFlag = False) -> None:
    """List the corpus's golden QA set versions, most recently added first."""
    from ragtrail.testset.golden import GoldenSetStore

    with runtime() as rt:
        store = GoldenSetStore(rt.engine)
        versions = store.versions(corpus)
        latest = {v.version for v in store.latest(corpus)}
    if as_json:
        emit([{**v.as_dict(), "latest": v.version in latest} for v in versions])
        return
    table = Table("name", "version", "n", "per label", "created", "source", title=corpus)
    for v in versions:
        table.add_row(
            v.name,
            v.version + (" (latest)" if v.version in latest else ""),
            str(v.n_items),
            _label_counts(v.questions_per_label),
            f"{v.created_at:%Y-%m-%d %H:%M:%S}",
            v.source,
        )
    Console().print(table)


def _label_counts(counts: dict[str, int]) -> str:
    """Questions per label, e.g. "fact_single 3, summary 2" (labels without questions left out)."""
    return ", ".join(f"{label} {n}" for label, n in counts.items() if n)


def _print_quality(quality: ValidationResult) -> None:
    """The Great Expectations verdict of a registered set, then its failures and warnings."""
    console.print(
        f"quality ({quality.name}): {quality.verdict}, "
        f"{quality.met}/{quality.evaluated} expectations met",
        highlight=False,
    )
    for line in (*quality.failures, *quality.warnings):
        console.print(f"  {line}", highlight=False)
