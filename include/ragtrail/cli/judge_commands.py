"""``ragtrail judge``: calibrate judges against human references and list which of them gate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ragtrail.cli.common import CorpusOpt, JsonFlag, console, emit, runtime
from ragtrail.cli.render import interval_text
from ragtrail.jsonsafe import JsonObject
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


@judge_app.command("train")
def judge_train(
    kind: Annotated[
        str,
        typer.Argument(help="What the judge decides: entailment, sufficiency or labeller."),
    ],
    reference: Annotated[
        Path,
        typer.Option(
            "--reference",
            help="Entailment: the HAGRID CSV, a JSONL of premise/hypothesis/label rows or a "
            "filled label queue. Sufficiency: a labelled JSONL (question/context/label), a QA "
            "set or a filled label queue. Labeller: a QA set (golden-set schema) or a filled "
            "label queue.",
        ),
    ],
    corpus: CorpusOpt = "handbook",
    base: Annotated[
        str,
        typer.Option(
            help="The model the cross-encoder starts from: builtin:all-MiniLM-L6-v2 (bundled), "
            "a local path, an HF id or s3://."
        ),
    ] = "builtin:all-MiniLM-L6-v2",
    epochs: Annotated[int, typer.Option(min=1, max=100)] = 3,
    learning_rate: Annotated[float, typer.Option(min=1e-7, max=1.0)] = 5e-5,
    batch_size: Annotated[int, typer.Option(min=1, max=1024)] = 16,
    max_length: Annotated[int, typer.Option(min=16, max=4096, help="Tokens per pair.")] = 256,
    held_out: Annotated[
        float, typer.Option(min=0.05, max=0.95, help="Share of queries held out to measure on.")
    ] = 0.5,
    seed: Annotated[
        int | None, typer.Option(help="Split and training seed (default: setting).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Fine-tune a judge on your labels, measure it on held-out queries, register it.

    The first version becomes the champion the nightly uses where configured
    (entailment_fallback: entailment.trained, sufficiency raters: sufficiency.trained,
    judges.labeller: labeller.trained); a later one replaces it only when it agrees with the
    held-out labels better, paired on the items both never trained on.
    """
    from ragtrail.pipeline.judge_training import train_judge
    from ragtrail.train.judge_training import JudgeTrainingConfig

    with runtime() as rt:
        config = JudgeTrainingConfig(
            base_model=base,
            epochs=epochs,
            learning_rate=learning_rate,
            batch_size=batch_size,
            max_length=max_length,
            seed=rt.settings.seed if seed is None else seed,
            held_out_fraction=held_out,
        )
        report = train_judge(rt, kind, reference, corpus=corpus, config=config)
    if as_json:
        emit(report)
        return
    _print_training(report)


def _print_training(report: JsonObject) -> None:
    """The held-out calibration, the gate decision and whether the new version serves."""
    registered, training = report["registered"], report["training"]
    held_out, gate = report["held_out"], report["gate"]
    split = report["split"]
    console.print(
        f"{report['judge']['name']}@{report['judge']['version']}: "
        f"{registered['model']} v{registered['version']} is now [bold]{registered['alias']}"
        f"[/bold] — {report['comparison']['reason']}",
        soft_wrap=True,
    )
    console.print(
        f"  trained on {split['fit']['pairs']} pairs ({split['fit']['queries']} queries) in "
        f"{training['seconds']:.0f} s ({training['pairs_per_second']:.1f} pairs/s), threshold "
        f"{training['threshold']}; measured on {split['held_out']['pairs']} held-out pairs "
        f"({split['held_out']['queries']} queries)",
        highlight=False,
        soft_wrap=True,
    )
    for key in ("kappa", "accuracy", "balanced_accuracy"):
        figure = held_out[key]
        value = figure.get("value")
        if value is not None:
            ci = interval_text(
                figure.get("ci_low"), figure.get("ci_high"), figure.get("ci_method"), ".3f"
            )
            console.print(f"  {key}: {value:.3f}{ci} n={figure['n']}", highlight=False)
    mode = "[green]gates[/green]" if gate["gates"] else "[yellow]advises only[/yellow]"
    console.print(f"  this judge {mode}: {gate['reason']}", soft_wrap=True)


@judge_app.command("label-queue")
def judge_label_queue(
    kind: Annotated[
        str, typer.Argument(help="What the labels are for: entailment, sufficiency or labeller.")
    ],
    corpus: CorpusOpt = "handbook",
    n: Annotated[int, typer.Option("--n", min=1, max=100_000, help="Rows to label.")] = 20,
    pool: Annotated[
        int | None,
        typer.Option(min=1, help="Candidates judged to choose from (default: 5 x n)."),
    ] = None,
    judge: Annotated[
        list[str] | None,
        typer.Option("--judge", help="Another judge to ask (repeatable), e.g. entailment.llm."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Where to write the CSV (default: label-queue-KIND-CORPUS.csv)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Export the items where the judges disagree or are least sure, as a CSV to label.

    Fill the label column and hand the file back: `ragtrail judge train KIND --reference FILE`
    (rows left blank are skipped and counted).
    """
    from ragtrail.judges.label_queue import write_label_queue
    from ragtrail.pipeline.label_queue import label_queue

    target = out or Path(f"label-queue-{kind}-{corpus}.csv")
    with runtime() as rt:
        trained, rows = label_queue(rt, kind, corpus, n=n, pool=pool, judges=judge or ())
    write_label_queue(target, trained, rows)
    disagree = sum(r.why.startswith("judges disagree") for r in rows)
    summary = {
        "kind": trained.kind,
        "corpus": corpus,
        "path": str(target),
        "rows": len(rows),
        "judges_disagree": disagree,
        "judges": sorted({name for r in rows for name in r.verdicts}),
        "label_forms": list(trained.categories),
    }
    if as_json:
        emit(summary)
        return
    console.print(
        f"wrote {len(rows)} items to label to {target} ({disagree} where the judges disagree; "
        f"judges: {', '.join(summary['judges'])}). Fill the label column with one of "
        f"{', '.join(trained.categories)} and run `ragtrail judge train {trained.kind} "
        f"--reference {target}`.",
        soft_wrap=True,
    )
