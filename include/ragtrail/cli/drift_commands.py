"""``ragtrail drift``: check runs against their baselines and list the stored decisions."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ragtrail.cli.common import CorpusOpt, JsonFlag, console, emit, runtime
from ragtrail.cli.render import interval_text, num
from ragtrail.summaries.drift_summary import DriftDecision, DriftEvidence

drift_app = typer.Typer(
    help="Drift of nightly runs against their baselines (pinned, champion or first).",
    no_args_is_help=True,
)


@drift_app.command("check")
def drift_check(
    corpus: CorpusOpt = "handbook",
    run: Annotated[
        str | None,
        typer.Option(
            "--run",
            help="A run, or a night's run id (all its QA sets); default: the newest night.",
        ),
    ] = None,
    fail_on_drift: Annotated[
        bool, typer.Option("--fail-on-drift", help="Exit with code 1 when a decision fires.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Check runs against their baselines, store and print each decision with its evidence.

    Drift = a primary metric worse by more than its threshold (drift.thresholds) with a
    Holm-corrected p-value below drift.alpha. Corpus changes and retired QA items are shown but
    never fire. Checking the same run against the same baseline again replaces its decision.
    Exit code 0 whatever the decision (1 with --fail-on-drift when one fires; 2 on bad input,
    or when a run to check did not complete: running, failed or abandoned).
    """
    from ragtrail.pipeline.drift.step import check_runs, runs_to_check
    from ragtrail.pipeline.run_io import settle_runs

    with runtime() as rt:
        settle_runs(rt)
        run_ids = runs_to_check(rt.engine, corpus, run)
        decisions = check_runs(rt.engine, run_ids, rt.settings.drift, corpus=corpus)
    if as_json:
        emit([d.to_json() for d in decisions], "drift decisions")
    else:
        for decision in decisions:
            _print_decision(decision)
    if fail_on_drift and any(d.fired for d in decisions):
        raise typer.Exit(1)


@drift_app.command("list")
def drift_list(
    corpus: CorpusOpt = "handbook",
    limit: Annotated[int, typer.Option(min=1, help="At most this many decisions.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """Stored drift decisions of the corpus, newest first."""
    from ragtrail.storage.drift_store import DriftStore

    with runtime() as rt:
        decisions = DriftStore(rt.engine).decisions(corpus=corpus, limit=limit)
    if as_json:
        emit([d.to_json() for d in decisions], "drift decisions")
        return
    table = Table("decision", "run", "baseline", "status", "fired", "drifted", "at")
    for d in decisions:
        baseline = f"{d.baseline_run_id} ({d.baseline_kind})" if d.baseline_run_id else ""
        table.add_row(
            d.decision_id,
            d.run_id,
            baseline,
            d.status,
            "yes" if d.fired else "no",
            str(len(d.evidence.drifted)),
            f"{d.created_at:%Y-%m-%d %H:%M}",
        )
    Console().print(table)


def _print_decision(decision: DriftDecision) -> None:
    """One decision: verdict, baseline, corpus and QA-set changes, then the evidence table."""
    evidence = decision.evidence
    verdict = "[red]DRIFT[/red]" if decision.fired else "no drift"
    if decision.baseline_run_id is None:
        console.print(f"{decision.run_id}: no baseline ({decision.status})", highlight=False)
        return
    console.print(
        f"{decision.run_id} vs {decision.baseline_run_id} ({decision.baseline_kind}): {verdict} "
        f"[{decision.status}, {evidence.n_tested} cells tested, "
        f"decision {decision.decision_id}]",
        highlight=False,
    )
    console.print(_corpus_drift_line(evidence), highlight=False)
    if evidence.undefined.get("rows"):
        console.print(f"  not compared: {evidence.undefined['rows']}", highlight=False)
    table = Table(
        "metric",
        "facets",
        "baseline",
        "current",
        "diff [95% CI]",
        "p",
        "p_holm",
        "threshold",
        "MDE",
        "direction",
        "drift",
    )
    for row in evidence.rows:
        ci = interval_text(row.ci_low, row.ci_high, row.ci_method, "+.3f")
        table.add_row(
            f"{row.evaluation}:{row.metric}",
            row.facets_text,
            num(row.baseline),
            num(row.current),
            num(row.diff, "+.3f") + ci,
            num(row.p_value, ".4f"),
            num(row.p_holm, ".4f") if row.tested else "untested",
            f"{row.threshold:.3f}",
            num(row.mde),
            row.direction or "",
            "yes" if row.drifted else "",
        )
    Console().print(table)
    for row in evidence.rows:
        if not row.drifted:
            console.print(f"  {row.name}: {row.detect_text}", highlight=False, soft_wrap=True)


def _corpus_drift_line(evidence: DriftEvidence) -> str:
    """Corpus changes since the baseline's snapshot and retired items of the QA set."""
    drift = evidence.corpus_drift
    corpus = (
        "corpus drift undefined"
        if drift is None
        else f"corpus since baseline: +{drift.added} added, {drift.updated} updated, "
        f"-{drift.removed} removed of {drift.n_baseline} "
        f"(changed {num(drift.changed_share, '.0%')})"
    )
    qa = evidence.qa_set
    retired = (
        "retirement unknown"
        if qa.retired is None
        else f"{qa.n_retired} of {qa.n_items} QA items retired"
    )
    return f"  {corpus}; {retired}"
