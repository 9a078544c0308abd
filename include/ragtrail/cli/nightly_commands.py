"""``ragtrail nightly`` (root level): the whole night, then one summary per evaluated set."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer

from ragtrail.cli.common import (
    AllowMassRemovalFlag,
    CorpusOpt,
    JsonFlag,
    console,
    emit,
    runtime_with_progress,
    step_progress,
)
from ragtrail.cli.render import print_best, value_ci
from ragtrail.summaries.base import Figure
from ragtrail.summaries.citation_summary import CitationHeadline
from ragtrail.summaries.drift_summary import DriftCheck
from ragtrail.summaries.sufficiency_summary import SufficiencyHeadline


# ``ragtrail nightly``: registered on the root app in ragtrail.cli.
def nightly(
    source: Annotated[
        str | None, typer.Option(help="Defaults to the shipped sample corpus.")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Copy the run's reports here.")] = None,
    corpus: CorpusOpt = "handbook",
    qa_set: Annotated[
        Path | None,
        typer.Option(help="Evaluate this QA set file instead of a generated test set."),
    ] = None,
    golden: Annotated[
        list[Path] | None,
        typer.Option(
            "--golden",
            help="Register this file (or every QA-set file in this folder) as a golden set of "
            "the corpus, besides its configured golden_sets (name: the file stem; repeatable). "
            "Every golden set of the corpus is evaluated.",
        ),
    ] = None,
    generate: Annotated[bool, typer.Option(help="Generate a test set with the LLM.")] = True,
    allow_mass_removal: AllowMassRemovalFlag = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print each LLM step's estimate (calls, cached share, tokens, cost, minutes, "
            "the n the budgets leave) from the run history and the cache; call no model, "
            "write nothing.",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Ingest -> GX -> golden sets -> test-set generation -> retrieval evaluation of every set
    -> reports."""
    from ragtrail.paths import sample_corpus_dir
    from ragtrail.pipeline.nightly import run_nightly

    if dry_run:
        _dry_run(corpus, qa_set, generate and qa_set is None, as_json)
        return

    with runtime_with_progress(as_json) as (rt, progress):
        result = run_nightly(
            rt,
            source=source or str(sample_corpus_dir()),
            corpus=corpus,
            qa_set=qa_set,
            golden=golden or (),
            progress=step_progress(progress),
            log=console.print,
            generate=generate and qa_set is None,
            allow_mass_removal=allow_mass_removal,
        )
    report_path = Path(result.report.report_path)
    if out is not None:
        target = out / result.run_id
        shutil.copytree(report_path.parent, target, dirs_exist_ok=True)
        report_path = target / report_path.name
    if as_json:
        emit({**result.to_json(), "report_path": str(report_path)})
        return
    for name, summary in result.sets.items():
        print_best(
            summary.best,
            title=f"{name}: {summary.qa_set_version} ({summary.n_questions} questions)",
            change=summary.change,
        )
        if summary.citations:
            console.print(_citation_line(summary.citations), highlight=False)
        if summary.sufficiency:
            console.print(_sufficiency_line(summary.sufficiency), highlight=False)
    if result.drift is not None:
        console.print(_drift_line(result.drift), highlight=False)
    for note in result.partial_steps:
        console.print(
            f"PARTIAL {note.step} {note.scope}: n={note.items_done} of {note.items_planned} "
            f"({note.reason})",
            highlight=False,
        )
    console.print(f"report:    {report_path}")
    console.print(f"data docs: {report_path.parent / 'data_docs' / 'index.html'}")
    console.print(f"corpus checks: {result.corpus_quality.data_docs_path}")


def _citation_line(cited: CitationHeadline) -> str:
    """Citation F1 of the answering model vs random per mixture type, in one line."""
    parts = [
        f"{mixture} {value_ci(systems.get('model'))} vs {value_ci(systems.get('random'))} "
        f"(n={_n(systems.get('model'))})"
        for mixture, systems in cited.f1.items()
    ]
    return f"citation F1 of {cited.answerer} vs random: " + "; ".join(parts)


def _sufficiency_line(rated: SufficiencyHeadline) -> str:
    """Hallucination rate per answer setting and the selective policy's gain, in one line."""
    parts = [
        f"{setting} {value_ci(agg)} (n={_n(agg)})" for setting, agg in rated.hallucination.items()
    ]
    gain = rated.auc_gain
    tail = f"; selective AUC gain {value_ci(gain)}" if gain else ""
    return f"hallucination rate of {rated.answerer}: " + "; ".join(parts) + tail


def _n(figure: Figure | None) -> int:
    return (figure.n or 0) if figure else 0


def _drift_line(drift: DriftCheck) -> str:
    """The nightly's one drift line: per set, fired or not and against which baseline."""
    if drift.skipped:
        return f"drift: skipped ({drift.skipped})"
    parts = []
    for name, d in drift.sets.items():
        if d.baseline_run is None:
            parts.append(f"{name} no baseline")
            continue
        verdict = (
            "DRIFT in " + ", ".join(f"{r.evaluation}:{r.metric}" for r in d.drifted)
            if d.fired
            else "no drift"
            if d.largest_mde is None
            else f"no drift (the least sensitive cell could not have detected a drop smaller "
            f"than {d.largest_mde:.3f})"
        )
        parts.append(f"{name} {verdict} vs {d.baseline_run} ({d.baseline_kind})")
    return "drift: " + ("; ".join(parts) or "no run checked")


def _dry_run(corpus: str, qa_set: Path | None, generate: bool, as_json: bool) -> None:
    """``ragtrail nightly --dry-run``: the per-step estimate table (stderr) or JSON (stdout)."""
    from rich.table import Table

    from ragtrail.cli.common import runtime
    from ragtrail.pipeline.dry_run import estimate_night

    with runtime() as rt:
        night = estimate_night(
            rt, corpus=corpus, qa_set=str(qa_set) if qa_set else None, generate=generate
        )
    if as_json:
        emit(night.to_json())
        return
    table = Table(
        "step",
        "instance",
        "n asked",
        "n",
        "model calls",
        "cached",
        "tokens",
        "cost USD",
        "minutes",
        "MDE at n",
        "from",
        title=f"nightly dry run: {corpus} (no model called)",
    )
    for step in night.steps:
        row = step.to_json()
        table.add_row(
            str(row["step"]),
            str(row["scope"]),
            str(row["planned_items"]),
            f"{row['n']}" + (" (budget)" if step.reason else ""),
            f"{row['calls']:.0f}",
            f"{row['cached_share']:.0%}",
            f"{row['tokens']}",
            "unknown" if row["cost_usd"] is None else f"{row['cost_usd']:.4f}",
            f"{row['minutes']:.2f}",
            "–" if step.mde is None else f"{step.mde:.3f}",
            str(step.note or row["source"]),
        )
    console.print(table)
    console.print(
        "MDE at n: the smallest change in the step's primary metric a paired comparison of two "
        "nights on n questions detects (80% power), from the spread in the run history",
        highlight=False,
        soft_wrap=True,
    )
    for step in night.steps:
        if step.reason:
            console.print(f"bounded: {step.estimate.step} {step.estimate.scope}: {step.reason}")
    other = (
        f"{night.other_minutes:.2f} min ({night.other_source})"
        if night.other_minutes is not None
        else f"unknown ({night.other_source})"
    )
    console.print(f"other steps (ingest, retrieval, report): {other}", highlight=False)
    total = f"{night.minutes:.2f}" if night.minutes is not None else "unknown"
    console.print(
        f"night: {night.calls:.0f} model calls, {night.llm_minutes:.2f} min of LLM steps, "
        f"{total} min in all; assumed: {'; '.join(night.assumptions)}",
        highlight=False,
    )
