"""``ragtrail runs``: list runs, compare two of them, pin or unpin drift baselines."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ragtrail.cli.common import CorpusOpt, JsonFlag, console, emit, runtime
from ragtrail.cli.render import interval_text, num

runs_app = typer.Typer(
    help="List evaluation runs, compare two of them, pin a run as the drift baseline.",
    no_args_is_help=True,
)


@runs_app.command("list")
def runs_list(
    corpus: CorpusOpt = "handbook",
    limit: Annotated[int, typer.Option(min=1, help="At most this many runs.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List the corpus's runs, newest first, with their status, QA-set version and metric count.

    A run left running by a process that is gone (or silent for runs.stale_after_s) is marked
    abandoned first; why a run failed or was abandoned is printed below the table."""
    from ragtrail.pipeline.run_io import settle_runs
    from ragtrail.storage.runs_store import RunStore

    with runtime() as rt:
        settle_runs(rt)
        listed = RunStore(rt.engine).list_runs(corpus, limit=limit)
    if as_json:
        emit(
            [
                {
                    "run_id": item.run.run_id,
                    "kind": item.run.kind,
                    "status": item.run.status,
                    "status_detail": item.run.status_detail,
                    "created": item.run.started_at.isoformat(),
                    "qa_set_version": item.run.qa_set_version,
                    "snapshot_id": item.run.snapshot_id,
                    "evaluations": list(item.evaluations),
                    "n_metrics": item.n_metrics,
                    "n_query_values": item.n_query_values,
                }
                for item in listed
            ]
        )
        return
    table = Table("run", "kind", "status", "created", "QA set", "snapshot", "metrics")
    for item in listed:
        run = item.run
        table.add_row(
            run.run_id,
            run.kind,
            run.status,
            f"{run.started_at:%Y-%m-%d %H:%M:%S}",
            run.qa_set_version or "",
            run.snapshot_id or "",
            str(item.n_metrics),
        )
    Console().print(table)
    for item in listed:
        if item.run.status_detail:
            console.print(
                f"{item.run.run_id}: {item.run.status}: {item.run.status_detail}",
                highlight=False,
                soft_wrap=True,
            )


@runs_app.command("compare")
def runs_compare(
    run_a: Annotated[str, typer.Argument(help="The baseline run id (A).")],
    run_b: Annotated[str, typer.Argument(help="The run compared with it (B).")],
    resamples: Annotated[
        int, typer.Option(min=1, help="Bootstrap and permutation resamples.")
    ] = 9999,
    seed: Annotated[int, typer.Option(help="Seed of both resampling procedures.")] = 13,
    allow_incomplete: Annotated[
        bool,
        typer.Option(
            "--allow-incomplete",
            help="Compare a run that did not complete (running, failed or abandoned) anyway, "
            "flagged; without it such a run is refused (exit code 2).",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Paired per-question comparison of two complete runs on the same QA-set version.

    Per metric and facet: mean A, mean B, B - A with a paired bootstrap 95% CI, a sign-flip
    permutation p-value and Holm-corrected p-values across the facets of the metric.
    """
    from ragtrail.pipeline.compare import compare_stored_runs
    from ragtrail.pipeline.run_io import settle_runs

    with runtime() as rt:
        settle_runs(rt)
        comparison = compare_stored_runs(
            rt.engine,
            run_a,
            run_b,
            n_resamples=resamples,
            seed=seed,
            allow_incomplete=allow_incomplete,
        )
    for run_id, state in comparison.incomplete.items():
        console.print(
            f"[yellow]warning:[/yellow] run {run_id} did not complete: {state}; compared "
            "anyway (--allow-incomplete)",
            highlight=False,
            soft_wrap=True,
        )
    if as_json:
        emit(comparison.as_dict(), "comparison")
        return
    console.print(
        f"A = {run_a}, B = {run_b}; QA set {comparison.qa_set_version}; "
        f"{resamples} resamples, seed {seed}",
        highlight=False,
    )
    for (evaluation, metric), rows in comparison.by_metric().items():
        table = Table(
            "facet",
            "A",
            "B",
            "diff [95% CI]",
            "MDE",
            "p",
            "p_holm",
            "n",
            title=f"{evaluation}: {metric}",
        )
        for row in rows:
            s = row.stats
            table.add_row(
                ", ".join(f"{k}={v}" for k, v in row.facets.items()),
                num(s.mean_a),
                num(s.mean_b),
                num(s.diff, "+.3f") + interval_text(s.ci_low, s.ci_high, s.ci_method, "+.3f"),
                num(s.mde),
                num(s.p_value, ".4f"),
                num(row.p_holm, ".4f"),
                str(s.n),
            )
        Console().print(table)
    console.print(
        "MDE: the smallest difference each comparison detects with 80% power at its n "
        "(two-sided, alpha 0.05, from the spread of the paired differences); a difference "
        "smaller than it can hide in a comparison that finds nothing.",
        highlight=False,
        soft_wrap=True,
    )


@runs_app.command("pin")
def runs_pin(
    run: Annotated[str, typer.Argument(help="The finished run to pin.")],
    note: Annotated[str | None, typer.Option(help="Why this run is the baseline.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Pin RUN as the drift baseline of its corpus and QA-set version (replaces an older pin).

    A pinned baseline wins over the champion's and over the first run (`ragtrail drift check`).
    """
    from ragtrail.pipeline.run_io import settle_runs
    from ragtrail.storage.drift_store import DriftStore

    with runtime() as rt:
        settle_runs(rt)
        baseline = DriftStore(rt.engine).pin(run, note=note)
    if as_json:
        emit(baseline.as_dict())
        return
    console.print(
        f"pinned {run} as the baseline of {baseline.corpus} / {baseline.qa_set_version}",
        highlight=False,
    )


@runs_app.command("unpin")
def runs_unpin(
    run: Annotated[str, typer.Argument(help="The pinned run.")],
) -> None:
    """Remove RUN's pin; drift checks fall back to the champion's run, else the first run."""
    from ragtrail.storage.drift_store import DriftStore

    with runtime() as rt:
        removed = DriftStore(rt.engine).unpin(run)
    console.print(f"unpinned {run}" if removed else f"{run} was not pinned", highlight=False)


@runs_app.command("baselines")
def runs_baselines(corpus: CorpusOpt = "handbook", as_json: JsonFlag = False) -> None:
    """The pinned and champion baselines of the corpus, per QA-set version."""
    from ragtrail.storage.drift_store import DriftStore

    with runtime() as rt:
        baselines = DriftStore(rt.engine).baselines(corpus)
    if as_json:
        emit([b.as_dict() for b in baselines])
        return
    table = Table("QA set", "kind", "run", "model", "since", "note")
    for b in baselines:
        model = f"{b.model} v{b.model_version}" if b.model else ""
        table.add_row(
            b.qa_set_version,
            b.kind,
            b.run_id,
            model,
            f"{b.created_at:%Y-%m-%d %H:%M}",
            b.note or "",
        )
    Console().print(table)
