"""``ragtrail judge``: calibrate judges against human references and list which of them gate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ragtrail.cli.common import CorpusOpt, JsonFlag, console, emit, runtime
from ragtrail.cli.render import interval_text
from ragtrail.records import ENTAILMENT_JUDGES, SUFFICIENCY_RATERS, EntailmentJudgeName
from ragtrail.runtime import Runtime
from ragtrail.storage.judge_store import CalibrationRecord
from ragtrail.summaries.judge_summary import CalibrationView, JudgeGate

judge_app = typer.Typer(
    help="Judges: calibrate them against human references, see which gate.", no_args_is_help=True
)


def _calibration_view(rt: Runtime, record: CalibrationRecord) -> CalibrationView:
    """A stored calibration with the gate decision it leads to under the configured bars."""
    from ragtrail.judges.contract import JudgeSpec
    from ragtrail.pipeline.judges import gate_decision

    decision = gate_decision(rt, JudgeSpec.from_dict(record.spec), record)
    return CalibrationView(
        judge=record.judge,
        version=record.judge_version,
        reference=record.reference,
        created_at=str(record.created_at),
        metrics=record.metrics,
        details_uri=record.details_uri,
        decision=JudgeGate.from_json(decision.as_dict()),
    )


def _print_calibration(view: CalibrationView) -> None:
    """The gate decision, the confusion matrix and accuracy/precision/recall with their CIs."""
    decision = view.decision
    mode = "[green]gates[/green]" if decision.gates else "[yellow]advises only[/yellow]"
    console.print(f"{view.judge}@{view.version}: {mode} — {decision.reason}")
    confusion = view.confusion()
    if confusion:
        columns = list(next(iter(confusion.values())))
        table = Table("reference \\ judged", *columns, title="confusion matrix")
        for ref, row in confusion.items():
            table.add_row(ref, *(str(row.get(c, 0)) for c in columns))
        Console().print(table)
    for key in ("accuracy", "precision", "recall"):
        figure = view.figure(key)
        if figure is not None and figure.value is not None:
            ci = interval_text(figure.ci_low, figure.ci_high, figure.ci_method, ".3f")
            console.print(f"  {key}: {figure.value:.3f}{ci} n={figure.n}", highlight=False)


@judge_app.command("calibrate")
def judge_calibrate(
    name: Annotated[
        str,
        typer.Argument(
            help="A registered judge: labeller, critique.<criterion>, critiques (all eight), "
            f"{EntailmentJudgeName.CONFIGURED} (the configured one), "
            f"{', '.join(ENTAILMENT_JUDGES)}, the sufficiency raters "
            f"({', '.join(SUFFICIENCY_RATERS)}) or the correctness judge; an unknown name lists "
            "them all."
        ),
    ],
    reference: Annotated[
        Path,
        typer.Option(
            "--reference",
            help="Labeller, critiques, sufficiency raters and correctness: a QA set "
            "(JSONL/CSV/Parquet, golden-set schema). Entailment: a JSONL of "
            "premise/hypothesis/label rows, or the HAGRID CSV.",
        ),
    ],
    corpus: CorpusOpt = "handbook",
    per_label: Annotated[
        int | None, typer.Option(min=1, help="Labeller: items per label (default: setting).")
    ] = None,
    pairs: Annotated[
        int | None, typer.Option(min=1, help="Critiques: contrast pairs (default: setting).")
    ] = None,
    sample: Annotated[
        int | None, typer.Option(min=2, help="Entailment: a seeded sample of this many rows.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Measure a judge against labelled references and store the result with its version."""
    from ragtrail.judges.registry import CalibrationRequest
    from ragtrail.pipeline.registered_judges import calibrate_judge

    request = CalibrationRequest(reference, corpus, per_label=per_label, pairs=pairs, sample=sample)
    with runtime() as rt:
        records = calibrate_judge(rt, name, request)
        views = [_calibration_view(rt, r) for r in records]
    if as_json:
        emit([v.to_json() for v in views] if len(views) > 1 else views[0].to_json())
        return
    for view in views:
        _print_calibration(view)


@judge_app.command("list")
def judge_list(as_json: JsonFlag = False) -> None:
    """The configured judges, their latest calibration and whether they gate."""
    from ragtrail.pipeline.judges import gate_decisions
    from ragtrail.pipeline.registered_judges import listed_judges

    with runtime() as rt:
        judges, unavailable = listed_judges(rt)
        for name, reason in unavailable.items():
            console.print(f"[yellow]{name} judge unavailable:[/yellow] {reason}")
        decisions = gate_decisions(rt, judges)
    rows = [
        {"spec": j.spec.as_dict(), "decision": decisions[j.spec.name].as_dict()} for j in judges
    ]
    if as_json:
        emit(rows)
        return
    table = Table("judge", "version", "backend", "model", "this judge", "why")
    for row in rows:
        spec, decision = row["spec"], row["decision"]
        backend = spec["backend"] + (" (approximate)" if spec["approximate"] else "")
        mode = "gates" if decision["gates"] else "advises"
        table.add_row(
            spec["name"], spec["version"], backend, spec["model"], mode, decision["reason"]
        )
    Console().print(table)
