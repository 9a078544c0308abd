"""The ``ragtrail`` command line. Thin: parses arguments, calls the library, prints results."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from ragtrail.progress import ProgressUpdate
from ragtrail.runtime import Runtime

app = typer.Typer(help="ragtrail: keeps RAG systems honest every night.", no_args_is_help=True)
eval_app = typer.Typer(help="Evaluate retrieval and answers.", no_args_is_help=True)
corpus_app = typer.Typer(help="Inspect ingested corpora.", no_args_is_help=True)
testset_app = typer.Typer(help="Inspect and export test-set versions.", no_args_is_help=True)
runs_app = typer.Typer(
    help="List evaluation runs, compare two of them, pin a run as the drift baseline.",
    no_args_is_help=True,
)
qaset_app = typer.Typer(
    help="Register and list golden (human-written) QA sets.", no_args_is_help=True
)
app.add_typer(eval_app, name="eval")
app.add_typer(corpus_app, name="corpus")
app.add_typer(testset_app, name="testset")
judge_app = typer.Typer(
    help="Judges: calibrate them against human references, see which gate.", no_args_is_help=True
)
app.add_typer(runs_app, name="runs")
app.add_typer(judge_app, name="judge")
app.add_typer(qaset_app, name="qaset")
drift_app = typer.Typer(
    help="Drift of nightly runs against their baselines (pinned, champion or first).",
    no_args_is_help=True,
)
app.add_typer(drift_app, name="drift")
console = Console(stderr=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout.")]
CorpusOpt = Annotated[str, typer.Option("--corpus", help="Corpus name.")]


def _emit(data: Any, what: str = "output") -> None:
    """``data`` as strict JSON on stdout: a NaN or infinity anywhere fails, naming its path."""
    from ragtrail import jsonsafe

    sys.stdout.write(jsonsafe.dumps(data, what, indent=2) + "\n")


@contextmanager
def _user_errors() -> Iterator[None]:
    """Errors caused by input (files, names, parameters) end in one clear line and exit code 2."""
    from ragtrail.embed.embedder import ModelLoadError
    from ragtrail.ingest.sources import SourceError

    try:
        yield
    except (ValueError, FileNotFoundError, SourceError, ModelLoadError) as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from exc


@contextmanager
def _runtime() -> Iterator[Runtime]:
    with _user_errors():
        rt = Runtime()
        try:
            yield rt
        finally:
            rt.close()


def _progress_factory(progress: Progress, label: str) -> Callable[[int], Callable[[int], None]]:
    def factory(total: int) -> Callable[[int], None]:
        task = progress.add_task(label, total=total)
        return lambda n: progress.advance(task, n)

    return factory


def _step_progress(progress: Progress) -> Callable[[str, int, int], None]:
    """A bar per mapped step of the night (shards done / shards planned)."""
    bars: dict[str, Any] = {}

    def advance(step: str, done: int, total: int) -> None:
        if step not in bars:
            bars[step] = progress.add_task(f"{step} shards", total=total)
        progress.update(bars[step], completed=done)

    return advance


class _RateColumn(ProgressColumn):
    """Units per second of a task ("2.1/s"), blank until rich has measured a speed."""

    def render(self, task: Task) -> Text:
        return Text(
            "" if task.speed is None else f"{task.speed:.1f}/s", style="progress.data.speed"
        )


def _progress(quiet: bool = False) -> Progress:
    """The bars of long steps (on stderr). Disabled with ``quiet`` (``--json``) or when stdout
    or stderr is not a terminal, so piped and scripted runs get their output and nothing else."""
    shown = not quiet and console.is_terminal and sys.stdout.isatty()
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeRemainingColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not shown,
    )


def _bars(progress: Progress) -> Callable[[ProgressUpdate], None]:
    """A :class:`ragtrail.progress.ProgressSink` drawing one bar per task (model calls of each
    stage, retrieval queries, generation shards), cache hits in the description."""
    bars: dict[str, Any] = {}

    def update(u: ProgressUpdate) -> None:
        if u.task not in bars:
            bars[u.task] = progress.add_task(u.task, total=u.total)
        hits = f" ({u.cache_hits} cached)" if u.cache_hits else ""
        progress.update(
            bars[u.task], completed=u.done, total=u.total, description=f"{u.task}{hits}"
        )

    return update


@contextmanager
def _runtime_with_progress(quiet: bool) -> Iterator[tuple[Runtime, Progress]]:
    """A runtime whose long steps draw bars (see :func:`_progress`) instead of log lines."""
    with _runtime() as rt, _progress(quiet) as progress:
        if not progress.disable:
            rt.progress = _bars(progress)
        yield rt, progress


@app.command()
def ingest(
    source: Annotated[str, typer.Argument(help="A folder or an s3://bucket/prefix.")],
    corpus: CorpusOpt = "handbook",
    shard_size: Annotated[int, typer.Option(min=1)] = 25,
    as_json: JsonFlag = False,
) -> None:
    """Ingest SOURCE into the corpus index (incremental: unchanged documents are skipped)."""
    from ragtrail.pipeline.ingest import ingest as run_ingest

    with _runtime_with_progress(as_json) as (rt, progress):
        summary = run_ingest(
            rt,
            source,
            corpus,
            shard_size=shard_size,
            progress_factory=_progress_factory(progress, "parsing and embedding"),
        )
    keys = ("added", "updated", "unchanged", "removed", "quarantined", "chunks", "snapshot")
    data = {k: getattr(summary, k) for k in keys}
    if as_json:
        _emit({**data, "documents": summary.documents, "manifest_uri": summary.manifest_uri})
    else:
        console.print(" ".join(f"{k}={v}" for k, v in data.items()))


@app.command()
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

    with _runtime() as rt:
        if rt.store.latest_snapshot(corpus) is None:
            raise typer.BadParameter(
                f"corpus {corpus!r} has not been ingested", param_hint="--corpus"
            )
        vector = rt.embedder.encode([query])[0]
        depth = max(k, rt.settings.retrieval.candidates_per_modality)
        hits = fuse(fetch_candidates(rt.index(corpus), query, vector, depth), text_weight, k)
    if as_json:
        _emit([{"rank": i + 1, **hit.__dict__} for i, hit in enumerate(hits)])
        return
    table = Table("rank", "score", "chunk", "text")
    for i, hit in enumerate(hits, 1):
        table.add_row(str(i), f"{hit.score:.3f}", hit.chunk_id, hit.text[:100].replace("\n", " "))
    Console().print(table)


@eval_app.command("trec")
def eval_trec(
    qrels: Annotated[Path, typer.Argument(exists=True, dir_okay=False)],
    run: Annotated[Path, typer.Argument(exists=True, dir_okay=False)],
    as_json: JsonFlag = False,
) -> None:
    """Score a trec_eval-format run against qrels (same conventions as trec_eval)."""
    from ragtrail.evaluate.metrics import aggregate, evaluate
    from ragtrail.evaluate.trec import read_qrels, read_run

    names = ["recall@5", "recall@10", "mrr", "ndcg@10", "P@5", "map"]
    with _user_errors():
        scores = aggregate(evaluate(read_qrels(qrels), read_run(run), names))
    if as_json:
        _emit(scores)
    else:
        for name in names:
            console.print(f"{name:<10} {scores[name]:.4f}")


@eval_app.command("retrieval")
def eval_retrieval(
    corpus: CorpusOpt = "handbook",
    qa_set: Annotated[Path | None, typer.Option(help="JSONL, CSV or Parquet QA set.")] = None,
    text_weight: Annotated[
        list[float] | None, typer.Option("--text-weight", help="Repeat to set the scan.")
    ] = None,
    run_id: Annotated[str | None, typer.Option()] = None,
    report: Annotated[
        bool, typer.Option(help="Also build GX Data Docs and the HTML report.")
    ] = True,
    as_json: JsonFlag = False,
) -> None:
    """Recall@k, MRR, nDCG and P@5 per label for every text weight, with bootstrap CIs."""
    from ragtrail.pipeline.evaluate import evaluate_retrieval, publish_retrieval_report
    from ragtrail.storage.db import utcnow

    run_id = run_id or f"eval-{utcnow():%Y%m%dT%H%M%S}"
    with _runtime_with_progress(as_json) as (rt, _):
        result = evaluate_retrieval(
            rt, corpus, run_id=run_id, qa_set=qa_set, text_weights=text_weight
        )
        if report:
            result["report"] = publish_retrieval_report(rt, run_id)
    if as_json:
        _emit(result)
        return
    _print_best(result["best"])
    if report:
        console.print(f"report: {result['report']['report_path']}")


@eval_app.command("citations")
def eval_citations(
    corpus: CorpusOpt = "handbook",
    qa_set: Annotated[
        str | None,
        typer.Option(help="QA set file, golden:<version> or testset:<version>; default sample."),
    ] = None,
    mixture: Annotated[
        str | None, typer.Option(help="relevant min-max / irrelevant / seemingly, e.g. 1-3/3/3")
    ] = None,
    scenario: Annotated[
        list[str] | None,
        typer.Option(
            "--scenario",
            help="Repeat: G, RTG-vanilla, RTG-query-gen, GTR, RTG-gold; "
            "'none' runs no scenario. Default: citations.scenarios.",
        ),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed of every draw; default settings.seed.")
    ] = None,
    items: Annotated[
        int | None, typer.Option(help="Questions for the mixtures (0 = all); default setting.")
    ] = None,
    scenario_items: Annotated[
        int | None, typer.Option(help="Questions for the scenarios (0 = all).")
    ] = None,
    run_id: Annotated[str | None, typer.Option()] = None,
    as_json: JsonFlag = False,
) -> None:
    """Citation quality of the answering model: relevance mixtures (model vs random citations,
    per mixture type and label, with CIs) and attributed-answer scenarios."""
    from ragtrail.pipeline.citations import evaluate_citations, load_citations
    from ragtrail.storage.db import utcnow

    scenarios = None if scenario is None else [s for s in scenario if s.lower() != "none"]
    run_id = run_id or f"citations-{utcnow():%Y%m%dT%H%M%S}"
    with _runtime_with_progress(as_json) as (rt, _):
        result = evaluate_citations(
            rt,
            corpus,
            run_id=run_id,
            qa_set=qa_set,
            mixture=mixture,
            scenarios=scenarios,
            seed=seed,
            max_items=items,
            scenario_items=scenario_items,
        )
        summary = load_citations(rt, run_id)
    if as_json:
        _emit(summary)
        return
    assert summary is not None
    _print_citations(summary)
    console.print(f"stored: {result['citations_uri']} (run {run_id})", highlight=False)


QaSetOpt = Annotated[
    str | None,
    typer.Option(help="QA set file, golden:<version> or testset:<version>; default sample."),
]


def _run_sufficiency(
    corpus: str,
    qa_set: str | None,
    rater: list[str] | None,
    items: int | None,
    seed: int | None,
    run_id: str | None,
    *,
    selective: bool,
    as_json: bool,
) -> dict[str, Any]:
    from ragtrail.pipeline.sufficiency import evaluate_sufficiency, load_sufficiency
    from ragtrail.storage.db import utcnow

    prefix = "selective" if selective else "sufficiency"
    run_id = run_id or f"{prefix}-{utcnow():%Y%m%dT%H%M%S}"
    with _runtime_with_progress(as_json) as (rt, _):
        result = evaluate_sufficiency(
            rt,
            corpus,
            run_id=run_id,
            qa_set=qa_set,
            raters=rater or None,
            max_items=items,
            seed=seed,
            selective=selective,
        )
        summary = load_sufficiency(rt, run_id)
    assert summary is not None
    summary["stored"] = result["sufficiency_uri"]
    return summary


RaterOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--rater",
        help="Repeat: sufficiency.llm, sufficiency.llm_1shot, sufficiency.chunked, "
        "sufficiency.contains_answer, sufficiency.entailment. Default: sufficiency.raters.",
    ),
]
ItemsOpt = Annotated[int | None, typer.Option(help="Questions to rate (0 = all); default setting.")]
SeedOpt = Annotated[int | None, typer.Option(help="Seed of every draw; default settings.seed.")]


@eval_app.command("sufficiency")
def eval_sufficiency(
    corpus: CorpusOpt = "handbook",
    qa_set: QaSetOpt = None,
    rater: RaterOpt = None,
    items: ItemsOpt = None,
    seed: SeedOpt = None,
    run_id: Annotated[str | None, typer.Option()] = None,
    as_json: JsonFlag = False,
) -> None:
    """Is the context sufficient? Every rater (with its measured agreement) on the retrieved and
    gold contexts, and the answers classified Correct / Abstain / Hallucinate per setting."""
    summary = _run_sufficiency(
        corpus, qa_set, rater, items, seed, run_id, selective=False, as_json=as_json
    )
    if as_json:
        _emit(summary)
        return
    _print_sufficiency(summary)


@eval_app.command("selective")
def eval_selective(
    corpus: CorpusOpt = "handbook",
    qa_set: QaSetOpt = None,
    rater: RaterOpt = None,
    items: ItemsOpt = None,
    seed: SeedOpt = None,
    run_id: Annotated[str | None, typer.Option()] = None,
    as_json: JsonFlag = False,
) -> None:
    """Selective generation: the model's confidence (P(True), P(Correct)) plus sufficiency in a
    logistic-regression abstention policy, compared with confidence alone on held-out questions."""
    summary = _run_sufficiency(
        corpus, qa_set, rater, items, seed, run_id, selective=True, as_json=as_json
    )
    if as_json:
        _emit(summary)
        return
    _print_sufficiency(summary)
    _print_selective(summary)


def _print_sufficiency(summary: dict[str, Any]) -> None:
    raters = Table(title=f"sufficiency raters ({summary['items']} questions)")
    for col in ("rater", "agreement", "mode", "sufficient share"):
        raters.add_column(col)
    for r in summary["raters"]:
        cal = r.get("calibration") or {}
        shares = ", ".join(
            f"{s} {_value_ci(v.get('share'))}" for s, v in r.get("per_setting", {}).items()
        )
        agreement = (
            f"{cal.get('metric')} {_value_ci(cal)} (n={cal.get('n')})"
            if cal.get("value") is not None
            else cal.get("reason") or cal.get("status", "")
        )
        star = " *" if r["name"] == summary["primary_rater"]["name"] else ""
        raters.add_row(r["name"] + star, agreement, (r.get("gate") or {}).get("mode", ""), shares)
    console.print(raters)
    console.print(f"* stratifies C/A/H: {summary['primary_rater']['reason']}", highlight=False)
    table = Table(title=f"Correct / Abstain / Hallucinate of {summary.get('answerer')}")
    for col in ("setting", "context", "label", "correct", "abstain", "hallucinate", "n"):
        table.add_column(col)
    for row in summary["cah"]["table"]:
        table.add_row(
            row["setting"],
            row["sufficiency"],
            row["label"],
            *(_value_ci(row.get(o)) for o in ("correct", "abstain", "hallucinate")),
            str(row.get("n_scored", 0)),
        )
    console.print(table)
    console.print(f"stored: {summary['stored']} (run {summary['run_id']})", highlight=False)


def _print_selective(summary: dict[str, Any]) -> None:
    selective = summary.get("selective") or {}
    if selective.get("status") != "fitted":
        reason = selective.get("reason") or summary.get("undefined", {}).get("selective")
        console.print(f"selective generation: no policy ({reason})", highlight=False)
        return
    auc = selective["auc"]
    console.print(
        f"area under the coverage curve: confidence alone {_value_ci(auc.get('confidence'))}, "
        f"sufficiency + confidence {_value_ci(auc.get('sufficiency_confidence'))}, "
        f"difference {_value_ci(auc.get('gain'))} (n={auc.get('gain', {}).get('n')}); "
        f"policy: {selective.get('policy_uri')}",
        highlight=False,
    )


def _value_ci(agg: dict[str, Any] | None) -> str:
    if not agg or agg.get("value") is None:
        return "undefined"
    low, high = agg.get("ci_low"), agg.get("ci_high")
    ci = f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
    return f"{agg['value']:.2f}{ci}"


def _citation_line(cited: dict[str, Any]) -> str:
    """Citation F1 of the answering model vs random per mixture type, in one line."""
    parts = [
        f"{mixture} {_value_ci(systems.get('model'))} vs {_value_ci(systems.get('random'))} "
        f"(n={(systems.get('model') or {}).get('n', 0)})"
        for mixture, systems in cited["f1"].items()
    ]
    return f"citation F1 of {cited['answerer']} vs random: " + "; ".join(parts)


def _sufficiency_line(rated: dict[str, Any]) -> str:
    """Hallucination rate per answer setting and the selective policy's gain, in one line."""
    parts = [
        f"{setting} {_value_ci(agg)} (n={(agg or {}).get('n', 0)})"
        for setting, agg in rated["hallucination"].items()
    ]
    gain = rated.get("auc_gain")
    tail = f"; selective AUC gain {_value_ci(gain)}" if gain else ""
    return f"hallucination rate of {rated['answerer']}: " + "; ".join(parts) + tail


def _print_citations(summary: dict[str, Any]) -> None:
    """Model vs random per mixture type and label, then the scenario table."""
    mixture = summary["mixture"]
    by = {(a["system"], a["mixture"], a["label"], a["metric"]): a for a in mixture["aggregates"]}
    table = Table(
        "mixture",
        "label",
        "model F1",
        "random F1",
        "model P",
        "model R",
        "n",
        title=f"Citations of {summary['answerer']} on mixtures {mixture['spec']}",
    )
    for mix in mixture["types"]:
        labels = sorted({a["label"] for a in mixture["aggregates"] if a["mixture"] == mix})
        for label in labels:
            f1 = by.get(("model", mix, label, "citation_f1"))
            if f1 is None:
                continue
            table.add_row(
                mix,
                label,
                _value_ci(f1),
                _value_ci(by.get(("random", mix, label, "citation_f1"))),
                _value_ci(by.get(("model", mix, label, "citation_precision"))),
                _value_ci(by.get(("model", mix, label, "citation_recall"))),
                str(f1.get("n", 0)),
            )
    Console().print(table)
    console.print(
        f"answers: {mixture['counts']['answers_ok']} ok, {mixture['failed']} failed, "
        f"{mixture['counts']['abstained']} abstained",
        highlight=False,
    )
    scenarios = summary.get("scenarios")
    if not scenarios:
        return
    metrics = (
        "autoais_cit",
        "autoais_pssg",
        "alce_citation_recall",
        "alce_citation_precision",
        "citation_precision",
        "citation_recall",
    )
    by_s = {(a["scenario"], a["metric"]): a for a in scenarios["aggregates"]}
    table = Table("scenario", *metrics, title="Attributed-answer scenarios")
    for name in scenarios["names"]:
        table.add_row(name, *(_value_ci(by_s.get((name, m))) for m in metrics))
    Console().print(table)
    judge = scenarios["judge"]
    console.print(
        f"entailment judge {judge.get('judge')}: {judge.get('mode')} ({judge.get('reason') or 'calibrated'})",
        highlight=False,
    )


def _num(value: float | None, spec: str = ".3f", suffix: str = "") -> str:
    """A number, or "undefined" for null (the reason is in the record's ``undefined``)."""
    return "undefined" if value is None else f"{value:{spec}}{suffix}"


def _print_best(
    best: list[dict[str, Any]],
    *,
    title: str | None = None,
    change: dict[str, Any] | None = None,
) -> None:
    """The best-strategy table; with ``change``, each label's change since the previous run."""
    changes = {row["label"]: row for row in (change or {}).get("rows") or []}
    columns = ["label", "n", "dense", "lexical", "best R@5", "best weight", "gap"]
    table = Table(*columns, *(["change vs previous [95% CI]"] if changes else []), title=title)
    reasons: dict[str, str] = {}
    for row in best:
        gap = row["gap_to_best"]
        cells = [
            row["label"],
            str(row["n_questions"]),
            _num(row["dense"]),
            _num(row["lexical"]),
            _num(row["best_recall"]),
            _num(row["best_weight"], "g"),
            _num(None if gap is None else 100 * gap, ".1f", "%"),
        ]
        if changes:
            cells.append(_change_cell(changes.get(row["label"])))
        table.add_row(*cells)
        reasons.update(row.get("undefined") or {})
    Console().print(table)
    for field, reason in reasons.items():
        console.print(f"{field} undefined: {reason}", highlight=False)
    if change is not None:
        console.print(_change_line(change), highlight=False)


def _change_cell(row: dict[str, Any] | None) -> str:
    if row is None or row.get("diff") is None:
        reason = (row or {}).get("undefined", {}).get("diff", "not compared")
        return f"undefined ({reason})"
    ci = "" if row.get("ci_low") is None else f" [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]"
    return f"{row['diff']:+.3f}{ci}"


def _change_line(change: dict[str, Any]) -> str:
    undefined = change.get("undefined") or {}
    if change.get("previous_run") is None:
        return f"change since the previous run: {undefined.get('previous_run')}"
    if not change.get("rows"):
        return f"change since {change['previous_run']}: not compared ({undefined.get('rows')})"
    return (
        f"change since {change['previous_run']}: {change['metric']} at each label's best weight, "
        f"paired bootstrap over questions ({change['n_resamples']} resamples, seed "
        f"{change['seed']}); all metrics: ragtrail runs compare {change['previous_run']} "
        f"{change['run']}"
    )


@eval_app.command("answers")
def eval_answers(
    file: Annotated[
        Path,
        typer.Argument(
            exists=True,
            dir_okay=False,
            help="JSONL, one answer a line: qid, question, passages [{docid, text}], answer; "
            "optional relevant_docids, gold_answers, gold_passages, label.",
        ),
    ],
    judge: Annotated[
        str,
        typer.Option(
            "--judge",
            help="Entailment judge: entailment (the configured one), entailment.nli, "
            "entailment.embedding, entailment.llm, or none.",
        ),
    ] = "entailment",
    bootstrap_samples: Annotated[int, typer.Option(min=0, help="0: no intervals.")] = 1000,
    as_json: JsonFlag = False,
) -> None:
    """Attribution metrics of answers from a log: AutoAIS, ALCE citation P/R, citation overlap,
    ROUGE-L/BLEU and citation P/R/F1, each with a 95% bootstrap CI and n."""
    from ragtrail.pipeline.answers import score_answer_file

    with _runtime() as rt:
        report = score_answer_file(rt, file, judge=judge, bootstrap_samples=bootstrap_samples)
    if as_json:
        _emit(report.as_json(), "answers score")
        return
    _print_answers(report.as_json())


def _ci(row: dict[str, Any]) -> str:
    if row["ci_low"] is None or row["ci_high"] is None:
        return "undefined"
    return f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


def _print_answers(data: dict[str, Any]) -> None:
    """Overall metrics (value, 95% CI, n, answers left out), the other facet sets' values, the
    entailment judge with its gate decision, undefined reasons and the skipped metrics."""
    by_group: dict[str, dict[str, dict[str, Any]]] = {}
    for row in data["aggregates"]:
        group = ", ".join(f"{k}={v}" for k, v in sorted(row["facets"].items())) or "all"
        by_group.setdefault(group, {})[row["metric"]] = row
    overall = "label=inclusive" if "label=inclusive" in by_group else "all"
    undefined = data["undefined"]
    table = Table("metric", "value", "95% CI", "n", "undefined", title=f"{data['answers']} answers")
    for metric, row in by_group.get(overall, {}).items():
        left_out = sum(undefined.get(metric, {}).values())
        table.add_row(metric, _num(row["value"]), _ci(row), str(row["n"]), str(left_out))
    Console().print(table)
    others = {g: rows for g, rows in by_group.items() if g != overall}
    if others:
        per_group = Table("metric", *others, title="value (n) per facet set")
        for metric in by_group.get(overall) or next(iter(others.values())):
            cells = [
                f"{_num(rows[metric]['value'])} ({rows[metric]['n']})" for rows in others.values()
            ]
            per_group.add_row(metric, *cells)
        Console().print(per_group)
    spec, decision = data["judge"], data["judge_decision"]
    if spec is None:
        console.print("entailment judge: none", highlight=False, soft_wrap=True)
    else:
        kind = f"{spec['backend']}, APPROXIMATE" if spec["approximate"] else spec["backend"]
        mode = "gates" if decision["gates"] else "advises only"
        console.print(
            f"entailment judge: {spec['name']}@{spec['version']} ({kind}; {spec['model']}), "
            f"{mode}: {decision['reason']}\n  {data['judged_pairs']} pairs judged in "
            f"{data['judge_calls']} call(s), {data['failed_verdicts']} failed",
            highlight=False,
            soft_wrap=True,
        )
    console.print(
        f"citations: {data['citations']} ({data['invalid_citations']} invalid: no such passage)",
        highlight=False,
        soft_wrap=True,
    )
    left_out: dict[tuple[str, int], list[str]] = {}
    for metric, reasons in undefined.items():
        for reason, count in reasons.items():
            left_out.setdefault((reason, count), []).append(metric)
    for (reason, count), metrics in left_out.items():
        console.print(
            f"undefined for {count} answer(s), {reason}: {', '.join(metrics)}",
            highlight=False,
            soft_wrap=True,
        )
    skipped: dict[str, list[str]] = {}
    for metric, reason in data["skipped"].items():
        skipped.setdefault(reason, []).append(metric)
    for reason, metrics in skipped.items():
        console.print(f"skipped {', '.join(metrics)}: {reason}", highlight=False, soft_wrap=True)


@corpus_app.command("quarantine")
def corpus_quarantine(corpus: CorpusOpt = "handbook", as_json: JsonFlag = False) -> None:
    """List the files the latest ingest refused, with the reason."""
    with _runtime() as rt:
        rows = rt.store.list_quarantine(corpus)
    if as_json:
        _emit([asdict(row) for row in rows])
        return
    table = Table("path", "reason", "detail")
    for row in rows:
        table.add_row(row.rel_path, row.reason, row.detail[:120])
    Console().print(table)


@corpus_app.command("snapshots")
def corpus_snapshots(corpus: CorpusOpt = "handbook", as_json: JsonFlag = False) -> None:
    """List the corpus snapshots with their diff counts."""
    with _runtime() as rt:
        rows = rt.store.list_snapshots(corpus)
    if as_json:
        _emit([asdict(row) for row in rows])
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


@app.command()
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
    with _runtime_with_progress(as_json) as (rt, _):
        summary = generate_testset(rt, request)
    if as_json:
        keys = ("version", "accepted", "targets", "model_calls", "cache_hits", "funnel", "retired")
        _emit({k: summary[k] for k in keys} | {"artifact_uri": summary.get("artifact_uri")})
        return
    console.print(
        f"version {summary['version']}: accepted {summary['accepted']} (targets "
        f"{summary['targets']}); model calls {summary['model_calls']}, cache hits "
        f"{summary['cache_hits']}"
    )


@testset_app.command("list")
def testset_list(corpus: CorpusOpt = "handbook", as_json: JsonFlag = False) -> None:
    """List test-set versions, newest first."""
    from ragtrail.testset.store import TestSetStore

    with _runtime() as rt:
        rows = TestSetStore(rt.engine).list_versions(corpus)
    if as_json:
        _emit(rows)
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
    with _runtime() as rt:
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


def _calibration_view(rt: Runtime, record: Any) -> dict[str, Any]:
    """A stored calibration with the gate decision it leads to under the configured bars."""
    from ragtrail.judges.contract import JudgeSpec
    from ragtrail.pipeline.judges import gate_decision

    decision = gate_decision(rt, JudgeSpec.from_dict(record.spec), record)
    return {
        "judge": record.judge,
        "version": record.judge_version,
        "reference": record.reference,
        "created_at": str(record.created_at),
        "metrics": record.metrics,
        "details_uri": record.details_uri,
        "decision": decision.as_dict(),
    }


def _print_calibration(view: dict[str, Any]) -> None:
    decision, metrics = view["decision"], view["metrics"]
    mode = "[green]gates[/green]" if decision["gates"] else "[yellow]advises only[/yellow]"
    console.print(f"{view['judge']}@{view['version']}: {mode} — {decision['reason']}")
    confusion = metrics.get("confusion")
    if confusion:
        columns = list(next(iter(confusion.values())))
        table = Table("reference \\ judged", *columns, title="confusion matrix")
        for ref, row in confusion.items():
            table.add_row(ref, *(str(row.get(c, 0)) for c in columns))
        Console().print(table)
    for key in ("accuracy", "precision", "recall"):
        figure = metrics.get(key)
        if isinstance(figure, dict) and figure.get("value") is not None:
            console.print(
                f"  {key}: {figure['value']:.3f} [{figure['ci_low']:.3f}, {figure['ci_high']:.3f}]"
                f" n={figure['n']}"
            )


@judge_app.command("calibrate")
def judge_calibrate(
    name: Annotated[
        str,
        typer.Argument(
            help="labeller, critique.<criterion>, critiques (all eight), entailment (the "
            "configured one), entailment.nli, entailment.embedding or entailment.llm."
        ),
    ],
    reference: Annotated[
        Path,
        typer.Option(
            "--reference",
            help="Labeller and critiques: a QA set (JSONL/CSV/Parquet, golden-set schema). "
            "Entailment: a JSONL of premise/hypothesis/label rows, or the HAGRID CSV.",
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
    from ragtrail.generate.critiques import CRITERIA
    from ragtrail.generate.judges import LABELLER, criterion_of, critique_judge_name
    from ragtrail.pipeline import judges as pj
    from ragtrail.testset.qaset import load_qa_set

    with _runtime() as rt:
        if name == LABELLER:
            items, _ = load_qa_set(reference)
            records = [pj.calibrate_labeller(rt, corpus, items, per_label=per_label)]
        elif name == "critiques" or criterion_of(name) is not None:
            criteria = list(CRITERIA) if name == "critiques" else [str(criterion_of(name))]
            pj.judge_by_name(rt, critique_judge_name(criteria[0]))  # unknown criterion: clear error
            items, _ = load_qa_set(reference)
            sources = pj.contrast_sources(rt, corpus, items)
            records = [pj.calibrate_critique(rt, c, sources, n=pairs) for c in criteria]
        else:
            records = [pj.calibrate_entailment(rt, name, reference, sample=sample)]
        views = [_calibration_view(rt, r) for r in records]
    if as_json:
        _emit(views if len(views) > 1 else views[0])
        return
    for view in views:
        _print_calibration(view)


@judge_app.command("list")
def judge_list(as_json: JsonFlag = False) -> None:
    """The configured judges, their latest calibration and whether they gate."""
    from ragtrail.pipeline import judges as pj

    with _runtime() as rt:
        judges = pj.generation_judges(rt)
        try:
            judges.append(pj.entailment_judge(rt))
        except (ValueError, OSError) as exc:
            console.print(f"[yellow]entailment judge unavailable:[/yellow] {exc}")
        decisions = pj.gate_decisions(rt, judges)
    rows = [
        {"spec": j.spec.as_dict(), "decision": decisions[j.spec.name].as_dict()} for j in judges
    ]
    if as_json:
        _emit(rows)
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


def _label_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{label} {n}" for label, n in counts.items() if n)


def _print_quality(quality: dict[str, Any]) -> None:
    stats = quality.get("statistics", {})
    verdict = "passed" if quality["success"] else "FAILED"
    if quality["success"] and quality["warnings"]:
        verdict = "passed with warnings"
    console.print(
        f"quality ({quality['name']}): {verdict}, "
        f"{stats.get('successful', 0)}/{stats.get('evaluated', 0)} expectations met",
        highlight=False,
    )
    for line in (*quality["failures"], *quality["warnings"]):
        console.print(f"  {line}", highlight=False)


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

    with _runtime() as rt:
        added = register_golden_set(rt, file, corpus=corpus, name=name)
    if as_json:
        _emit(added)
        return
    state = "added new version" if added["created"] else "unchanged, already registered as"
    console.print(
        f"golden set {added['name']} ({corpus}): {state} {added['version']} — "
        f"{added['n_items']} questions ({_label_counts(added['questions_per_label'])})",
        highlight=False,
    )
    _print_quality(added["quality"])
    console.print(f"quality result: {added['quality_uri']}", highlight=False)


@qaset_app.command("list")
def qaset_list(corpus: CorpusOpt = "handbook", as_json: JsonFlag = False) -> None:
    """List the corpus's golden QA set versions, most recently added first."""
    from ragtrail.testset.golden import GoldenSetStore

    with _runtime() as rt:
        store = GoldenSetStore(rt.engine)
        versions = store.versions(corpus)
        latest = {v.version for v in store.latest(corpus)}
    if as_json:
        _emit([{**v.as_dict(), "latest": v.version in latest} for v in versions])
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


@runs_app.command("list")
def runs_list(
    corpus: CorpusOpt = "handbook",
    limit: Annotated[int, typer.Option(min=1, help="At most this many runs.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List the corpus's runs, newest first, with their QA-set version and metric count."""
    from ragtrail.storage.runs_store import RunStore

    with _runtime() as rt:
        listed = RunStore(rt.engine).list_runs(corpus, limit=limit)
    if as_json:
        _emit(
            [
                {
                    "run_id": item.run.run_id,
                    "kind": item.run.kind,
                    "status": item.run.status,
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


@runs_app.command("compare")
def runs_compare(
    run_a: Annotated[str, typer.Argument(help="The baseline run id (A).")],
    run_b: Annotated[str, typer.Argument(help="The run compared with it (B).")],
    resamples: Annotated[
        int, typer.Option(min=1, help="Bootstrap and permutation resamples.")
    ] = 9999,
    seed: Annotated[int, typer.Option(help="Seed of both resampling procedures.")] = 13,
    as_json: JsonFlag = False,
) -> None:
    """Paired per-question comparison of two runs on the same QA-set version.

    Per metric and facet: mean A, mean B, B - A with a paired bootstrap 95% CI, a sign-flip
    permutation p-value and Holm-corrected p-values across the facets of the metric.
    """
    from ragtrail.pipeline.compare import compare_stored_runs

    with _runtime() as rt:
        comparison = compare_stored_runs(rt.engine, run_a, run_b, n_resamples=resamples, seed=seed)
    if as_json:
        _emit(comparison.as_dict(), "comparison")
        return
    console.print(
        f"A = {run_a}, B = {run_b}; QA set {comparison.qa_set_version}; "
        f"{resamples} resamples, seed {seed}",
        highlight=False,
    )
    for (evaluation, metric), rows in comparison.by_metric().items():
        table = Table(
            "facet", "A", "B", "diff [95% CI]", "p", "p_holm", "n", title=f"{evaluation}: {metric}"
        )
        for row in rows:
            s = row.stats
            ci = "" if s.ci_low is None else f" [{s.ci_low:+.3f}, {s.ci_high:+.3f}]"
            table.add_row(
                ", ".join(f"{k}={v}" for k, v in row.facets.items()),
                _num(s.mean_a),
                _num(s.mean_b),
                _num(s.diff, "+.3f") + ci,
                _num(s.p_value, ".4f"),
                _num(row.p_holm, ".4f"),
                str(s.n),
            )
        Console().print(table)


@runs_app.command("pin")
def runs_pin(
    run: Annotated[str, typer.Argument(help="The finished run to pin.")],
    note: Annotated[str | None, typer.Option(help="Why this run is the baseline.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Pin RUN as the drift baseline of its corpus and QA-set version (replaces an older pin).

    A pinned baseline wins over the champion's and over the first run (`ragtrail drift check`).
    """
    from ragtrail.storage.drift_store import DriftStore

    with _runtime() as rt:
        baseline = DriftStore(rt.engine).pin(run, note=note)
    if as_json:
        _emit(baseline.as_dict())
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

    with _runtime() as rt:
        removed = DriftStore(rt.engine).unpin(run)
    console.print(f"unpinned {run}" if removed else f"{run} was not pinned", highlight=False)


@runs_app.command("baselines")
def runs_baselines(corpus: CorpusOpt = "handbook", as_json: JsonFlag = False) -> None:
    """The pinned and champion baselines of the corpus, per QA-set version."""
    from ragtrail.storage.drift_store import DriftStore

    with _runtime() as rt:
        baselines = DriftStore(rt.engine).baselines(corpus)
    if as_json:
        _emit([b.as_dict() for b in baselines])
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
    Exit code 0 whatever the decision (1 with --fail-on-drift when one fires; 2 on bad input).
    """
    from ragtrail.pipeline.drift import check_runs, runs_to_check

    with _runtime() as rt:
        run_ids = runs_to_check(rt.engine, corpus, run)
        decisions = check_runs(rt.engine, run_ids, rt.settings.drift, corpus=corpus)
    if as_json:
        payload = [d.as_dict() for d in decisions]
        _emit(payload, "drift decisions")
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

    with _runtime() as rt:
        decisions = DriftStore(rt.engine).decisions(corpus=corpus, limit=limit)
    if as_json:
        payload = [d.as_dict() for d in decisions]
        _emit(payload, "drift decisions")
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
            str(len(d.evidence.get("drifted", []))),
            f"{d.created_at:%Y-%m-%d %H:%M}",
        )
    Console().print(table)


def _print_decision(decision: Any) -> None:
    """One decision: verdict, baseline, corpus and QA-set changes, then the evidence table."""
    evidence = decision.evidence
    verdict = "[red]DRIFT[/red]" if decision.fired else "no drift"
    if decision.baseline_run_id is None:
        console.print(f"{decision.run_id}: no baseline ({decision.status})", highlight=False)
        return
    console.print(
        f"{decision.run_id} vs {decision.baseline_run_id} ({decision.baseline_kind}): {verdict} "
        f"[{decision.status}, {evidence.get('n_tested', 0)} cells tested, "
        f"decision {decision.decision_id}]",
        highlight=False,
    )
    console.print(_corpus_drift_line(evidence), highlight=False)
    if evidence.get("undefined", {}).get("rows"):
        console.print(f"  not compared: {evidence['undefined']['rows']}", highlight=False)
    table = Table(
        "metric",
        "facets",
        "baseline",
        "current",
        "diff [95% CI]",
        "p",
        "p_holm",
        "threshold",
        "direction",
        "drift",
    )
    for row in evidence.get("rows", []):
        ci = "" if row["ci_low"] is None else f" [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]"
        table.add_row(
            f"{row['evaluation']}:{row['metric']}",
            ", ".join(f"{k}={v}" for k, v in row["facets"].items()),
            _num(row["baseline"]),
            _num(row["current"]),
            _num(row["diff"], "+.3f") + ci,
            _num(row["p_value"], ".4f"),
            _num(row["p_holm"], ".4f") if row["tested"] else "untested",
            f"{row['threshold']:.3f}",
            row["direction"] or "",
            "yes" if row["drifted"] else "",
        )
    Console().print(table)


def _corpus_drift_line(evidence: dict[str, Any]) -> str:
    """Corpus changes since the baseline's snapshot and retired items of the QA set."""
    drift = evidence.get("corpus_drift")
    corpus = (
        "corpus drift undefined"
        if drift is None
        else f"corpus since baseline: +{drift['added']} added, {drift['updated']} updated, "
        f"-{drift['removed']} removed of {drift['n_baseline']} "
        f"(changed {_num(drift['changed_share'], '.0%')})"
    )
    qa = evidence.get("qa_set") or {}
    retired = (
        "retirement unknown"
        if qa.get("retired") is None
        else f"{qa['n_retired']} of {qa['n_items']} QA items retired"
    )
    return f"  {corpus}; {retired}"


def _drift_line(drift: dict[str, Any]) -> str:
    """The nightly's one drift line: per set, fired or not and against which baseline."""
    if drift.get("skipped"):
        return f"drift: skipped ({drift['skipped']})"
    parts = []
    for name, d in drift.get("sets", {}).items():
        if d["baseline_run"] is None:
            parts.append(f"{name} no baseline")
            continue
        verdict = (
            "DRIFT in " + ", ".join(f"{r['evaluation']}:{r['metric']}" for r in d["drifted"])
            if d["fired"]
            else "no drift"
        )
        parts.append(f"{name} {verdict} vs {d['baseline_run']} ({d['baseline_kind']})")
    return "drift: " + ("; ".join(parts) or "no run checked")


@app.command()
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
            help="Register this file as a golden set of the corpus first (name: the file stem; "
            "repeatable). Every golden set of the corpus is evaluated.",
        ),
    ] = None,
    generate: Annotated[bool, typer.Option(help="Generate a test set with the LLM.")] = True,
    as_json: JsonFlag = False,
) -> None:
    """Ingest -> GX -> golden sets -> test-set generation -> retrieval evaluation of every set
    -> reports."""
    from ragtrail.paths import sample_corpus_dir
    from ragtrail.pipeline.nightly import run_nightly

    with _runtime_with_progress(as_json) as (rt, progress):
        result = run_nightly(
            rt,
            source=source or str(sample_corpus_dir()),
            corpus=corpus,
            qa_set=qa_set,
            golden=golden or (),
            progress=_step_progress(progress),
            log=console.print,
            generate=generate and qa_set is None,
        )
    report_path = Path(result.report["report_path"])
    if out is not None:
        target = out / result.run_id
        shutil.copytree(report_path.parent, target, dirs_exist_ok=True)
        report_path = target / report_path.name
    if as_json:
        _emit({**result.__dict__, "report_path": str(report_path)})
        return
    for name, summary in result.evaluation["sets"].items():
        _print_best(
            summary["best"],
            title=f"{name}: {summary['qa_set_version']} ({summary['n_questions']} questions)",
            change=summary["change"],
        )
        if summary.get("citations"):
            console.print(_citation_line(summary["citations"]), highlight=False)
        if summary.get("sufficiency"):
            console.print(_sufficiency_line(summary["sufficiency"]), highlight=False)
    if result.drift is not None:
        console.print(_drift_line(result.drift), highlight=False)
    console.print(f"report:    {report_path}")
    console.print(f"data docs: {report_path.parent / 'data_docs' / 'index.html'}")
    console.print(f"corpus checks: {result.corpus_quality['data_docs_path']}")


# ---------------------------------------------------------------------------- models (registry)

models_app = typer.Typer(
    help="The model registry: versions, champion/challenger aliases, promotion and rollback.",
    no_args_is_help=True,
)
app.add_typer(models_app, name="models")
ReasonOpt = Annotated[str, typer.Option("--reason", help="Why; kept in the alias history.")]
ActorOpt = Annotated[
    str | None, typer.Option("--actor", help="Who (default: the USER environment variable).")
]


@contextmanager
def _registry() -> Iterator[Any]:
    """The configured model registry; registry errors end as one clear line (exit 2)."""
    from ragtrail.config import load_settings
    from ragtrail.models.mlflow_registry import MlflowModelRegistry

    with _user_errors():
        yield MlflowModelRegistry.from_settings(load_settings())


def _held_by(version: int | None) -> str:
    """An alias's version in the alias history: ``v3``, or ``none`` before it was first set."""
    return "none" if version is None else f"v{version}"


def _actor(actor: str | None) -> str:
    import os

    return actor or os.environ.get("USER") or "unknown"


@models_app.command("list")
def models_list(
    name: Annotated[str | None, typer.Argument(help="List this model's versions.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """List registered models with their aliases, or one model's versions (newest first)."""
    with _registry() as registry:
        if name is None:
            models = [m.as_dict() for m in registry.list_models()]
            if as_json:
                _emit(models)
                return
            table = Table("model", "kind", "versions", "latest", "aliases")
            for m in models:
                aliases = ", ".join(f"{a}=v{v}" for a, v in m["aliases"].items())
                table.add_row(
                    m["name"], m["kind"], str(m["n_versions"]), str(m["latest_version"]), aliases
                )
            Console().print(table)
            return
        versions = registry.list_versions(name)
    if as_json:
        _emit([v.as_dict() for v in versions])
        return
    table = Table("version", "aliases", "status", "gate", "digest", "created")
    for v in versions:
        table.add_row(
            f"v{v.version}",
            ", ".join(v.aliases),
            v.status,
            v.tags.get("ragtrail.gate.decision", ""),
            v.digest[:12],
            f"{v.created_at:%Y-%m-%d %H:%M:%S}",
        )
    Console().print(table)


@models_app.command("show")
def models_show(
    name: Annotated[str, typer.Argument(help="Registered model name.")],
    ref: Annotated[str, typer.Argument(help="Version number or alias.")] = "champion",
    as_json: JsonFlag = False,
) -> None:
    """Show a version: source, digest, aliases, lineage, gate decisions and alias events."""
    with _registry() as registry:
        version = registry.get_version(name, ref)
        gates = registry.gate_decisions(name, version.version)
        events = [
            e.as_dict()
            for e in registry.alias_history(name)
            if version.version in (e.version, e.previous)
        ]
    view = {**version.as_dict(), "gate_decisions": gates, "alias_events": events}
    if as_json:
        _emit(view)
        return
    out = Console()
    out.print(
        f"[bold]{name} v{version.version}[/bold] ({version.kind}) {', '.join(version.aliases)}"
    )
    out.print(f"status: {version.status}   digest: {version.digest}")
    out.print(f"source: {version.source}", highlight=False)
    out.print(f"base model: {version.base_model}", highlight=False)
    out.print_json(json.dumps(version.lineage or {}))
    for gate in gates:
        verdict = "promote" if gate["promote"] else "reject"
        out.print(f"gate {gate['at']}: {verdict}: {gate['reason']}", highlight=False)
    for event in events:
        out.print(
            f"{event['at']}: {event['action']} {event['alias']} "
            f"{_held_by(event['previous'])} -> {_held_by(event['version'])} by {event['actor']}: "
            f"{event['reason']}",
            highlight=False,
        )


@models_app.command("promote")
def models_promote(
    name: Annotated[str, typer.Argument(help="Registered model name.")],
    version: Annotated[int, typer.Argument(min=1, help="The version to make champion.")],
    reason: ReasonOpt,
    actor: ActorOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Make VERSION the champion by hand (overrides the gate; who and why are recorded)."""
    from ragtrail.models.registry import promote

    who = _actor(actor)
    with _registry() as registry:
        event = promote(registry, name, version, actor=who, reason=reason)
        registry.record_gate_decision(
            name,
            version,
            {"manual_override": True, "actor": who, "previous_champion": event.previous},
            promote=True,
            reason=f"manual promotion by {who}: {reason}",
        )
    if as_json:
        _emit(event.as_dict())
        return
    console.print(
        f"{name}: champion {_held_by(event.previous)} -> {_held_by(event.version)} "
        f"({who}: {reason})"
    )


@models_app.command("rollback")
def models_rollback(
    name: Annotated[str, typer.Argument(help="Registered model name.")],
    reason: ReasonOpt,
    actor: ActorOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Move champion back to the version that held it before the current one."""
    from ragtrail.models.registry import rollback

    who = _actor(actor)
    with _registry() as registry:
        event = rollback(registry, name, actor=who, reason=reason)
    if as_json:
        _emit(event.as_dict())
        return
    console.print(
        f"{name}: champion rolled back {_held_by(event.previous)} -> {_held_by(event.version)} "
        f"({who})"
    )


@models_app.command("register-generator")
def models_register_generator(
    generator_dir: Annotated[
        str, typer.Argument(help="A fine-tuned generator's output directory or s3:// URI.")
    ],
    name: Annotated[
        str | None, typer.Option("--name", help="Registered model (default: the settings').")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Register a fine-tuned question generator as a new version (no alias is moved)."""
    from ragtrail.config import load_settings
    from ragtrail.train.registration import register_generator

    settings = load_settings()
    model = name or settings.registry.generator_model_name
    with _registry() as registry:
        version = register_generator(
            registry,
            model,
            generator_dir,
            cache_dir=settings.resolved_model_cache_dir,
            s3_endpoint_url=settings.s3_endpoint_url,
        )
    if as_json:
        _emit(version.as_dict())
        return
    console.print(f"{model}: registered v{version.version} from {generator_dir}")
