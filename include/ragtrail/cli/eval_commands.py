"""``ragtrail eval``: retrieval (TREC files and the corpus's QA sets), citations, sufficiency,
selective generation, the evidence extractor and attribution metrics of logged answers, with their
tables."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from ragtrail.cli.common import (
    CorpusOpt,
    JsonFlag,
    console,
    emit,
    runtime,
    runtime_with_progress,
    user_errors,
)
from ragtrail.cli.render import interval_text, num, print_best, value_ci
from ragtrail.evaluation_records import Aggregate
from ragtrail.records import ENTAILMENT_JUDGES, EntailmentJudgeName
from ragtrail.summaries.base import Figure
from ragtrail.summaries.citation_summary import CitationSummary
from ragtrail.summaries.evidence_summary import EvidenceSummary
from ragtrail.summaries.sufficiency_summary import AggregateRow, SufficiencySummary

if TYPE_CHECKING:  # the scoring code loads slowly: imported where a file is scored
    from ragtrail.pipeline.answers import AnswersReport

eval_app = typer.Typer(help="Evaluate retrieval and answers.", no_args_is_help=True)


@eval_app.command("trec")
def eval_trec(
    qrels: Annotated[Path, typer.Argument(exists=True, dir_okay=False)],
    run: Annotated[Path, typer.Argument(exists=True, dir_okay=False)],
    as_json: JsonFlag = False,
) -> None:
    """Score a trec_eval-format run against qrels (same conventions as trec_eval)."""
    from ragtrail.evaluate.metrics import aggregate, evaluate
    from ragtrail.evaluate.retrieval.trec import read_qrels, read_run

    names = ["recall@5", "recall@10", "mrr", "ndcg@10", "P@5", "map"]
    with user_errors():
        scores = aggregate(evaluate(read_qrels(qrels), read_run(run), names))
    if as_json:
        emit(scores)
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
    from ragtrail.pipeline.publish import publish_retrieval_report
    from ragtrail.pipeline.retrieval import evaluate_retrieval
    from ragtrail.pipeline.run_io import complete_run
    from ragtrail.storage.db import utcnow

    run_id = run_id or f"eval-{utcnow():%Y%m%dT%H%M%S}"
    with runtime_with_progress(as_json) as (rt, _):
        result = evaluate_retrieval(
            rt, corpus, run_id=run_id, qa_set=qa_set, text_weights=text_weight
        )
        published = publish_retrieval_report(rt, run_id) if report else None
        complete_run(rt, run_id)  # publishing finished it; without a report, this command does
    if as_json:
        report_json = published.model_dump(mode="json", exclude={"sets"}) if published else None
        emit(result.to_json() | ({"report": report_json} if published else {}))
        return
    print_best(result.best)
    if published:
        console.print(f"report: {published.report_path}")


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
    per mixture type and label, with CIs) and attributed-answer scenarios.

    Exit code 3 when more than citations.max_failed_share of the answers (or entailment
    verdicts) failed: the run is then stored as failed, with the reason."""
    from ragtrail.pipeline.citations.step import evaluate_citations
    from ragtrail.pipeline.citations.views import load_citations
    from ragtrail.pipeline.run_io import complete_run
    from ragtrail.storage.db import utcnow

    scenarios = None if scenario is None else [s for s in scenario if s.lower() != "none"]
    run_id = run_id or f"citations-{utcnow():%Y%m%dT%H%M%S}"
    with runtime_with_progress(as_json) as (rt, _):
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
        complete_run(rt, run_id)
        summary = load_citations(rt, run_id)
    if as_json:
        emit(summary.to_json() if summary else None)
        return
    assert summary is not None
    _print_citations(summary)
    console.print(f"stored: {result.citations_uri} (run {run_id})", highlight=False)


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
) -> tuple[SufficiencySummary, str]:
    """Run the sufficiency evaluation (``selective``: with the abstention policy) and return its
    stored summary and where it is stored; ``eval sufficiency`` and ``eval selective`` differ
    only in that flag."""
    from ragtrail.pipeline.run_io import complete_run
    from ragtrail.pipeline.sufficiency.step import evaluate_sufficiency
    from ragtrail.pipeline.sufficiency.views import load_sufficiency
    from ragtrail.storage.db import utcnow

    prefix = "selective" if selective else "sufficiency"
    run_id = run_id or f"{prefix}-{utcnow():%Y%m%dT%H%M%S}"
    with runtime_with_progress(as_json) as (rt, _):
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
        complete_run(rt, run_id)
        summary = load_sufficiency(rt, run_id)
    assert summary is not None
    return summary, result.sufficiency_uri


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
    gold contexts, and the answers classified Correct / Abstain / Hallucinate per setting.

    Exit code 3 when more than sufficiency.max_failed_share of the primary rater's verdicts,
    answers or correctness verdicts failed (the run is stored as failed, with the reason)."""
    summary, stored = _run_sufficiency(
        corpus, qa_set, rater, items, seed, run_id, selective=False, as_json=as_json
    )
    if as_json:
        emit({**summary.to_json(), "stored": stored})
        return
    _print_sufficiency(summary, stored)


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
    summary, stored = _run_sufficiency(
        corpus, qa_set, rater, items, seed, run_id, selective=True, as_json=as_json
    )
    if as_json:
        emit({**summary.to_json(), "stored": stored})
        return
    _print_sufficiency(summary, stored)
    _print_selective(summary)


def _print_sufficiency(summary: SufficiencySummary, stored: str) -> None:
    """The raters with their agreement, then Correct / Abstain / Hallucinate per setting."""
    raters = Table(title=f"sufficiency raters ({summary.items} questions)")
    for col in ("rater", "agreement", "mode", "sufficient share"):
        raters.add_column(col)
    for r in summary.raters:
        agreement = r.agreement
        shares = ", ".join(f"{s} {value_ci(v.share)}" for s, v in r.per_setting.items())
        text = (
            f"{agreement.metric} {value_ci(agreement)} (n={agreement.n})"
            if agreement.value is not None
            else agreement.reason or agreement.status or ""
        )
        star = " *" if r.name == summary.primary_rater.name else ""
        raters.add_row(r.name + star, text, agreement.mode or "", shares)
    console.print(raters)
    console.print(f"* stratifies C/A/H: {summary.primary_rater.reason}", highlight=False)
    table = Table(title=f"Correct / Abstain / Hallucinate of {summary.answerer}")
    for col in ("setting", "context", "label", "correct", "abstain", "hallucinate", "n"):
        table.add_column(col)
    for row in summary.cah.table:
        table.add_row(
            row.setting,
            row.sufficiency,
            row.label,
            *(value_ci(rate) for rate in (row.correct, row.abstain, row.hallucinate)),
            str(row.n_scored),
        )
    console.print(table)
    console.print(f"stored: {stored} (run {summary.run_id})", highlight=False)


def _print_selective(summary: SufficiencySummary) -> None:
    """The abstention policy's coverage-curve areas, or why no policy was fitted."""
    selective = summary.selective
    if selective is None or selective.status != "fitted":
        reason = (selective.reason if selective else "") or summary.undefined.get("selective")
        console.print(f"selective generation: no policy ({reason})", highlight=False)
        return
    auc = selective.auc
    gain_n = auc.gain.n if auc.gain is not None else None
    console.print(
        f"area under the coverage curve: confidence alone {value_ci(_figure(auc.confidence))}, "
        f"sufficiency + confidence {value_ci(_figure(auc.sufficiency_confidence))}, "
        f"difference {value_ci(_figure(auc.gain))} (n={gain_n}); "
        f"policy: {selective.policy_uri}",
        highlight=False,
    )


def _figure(aggregate: AggregateRow | None) -> Figure | None:
    return None if aggregate is None else aggregate.figure


MAX_NOISE_RATIO = 10.0
"""The most irrelevant passages per retrieved one ``--noise`` accepts."""


def parse_noise(text: str | None) -> list[float] | None:
    """``--noise``: a comma list of distinct numbers in [0, MAX_NOISE_RATIO] (None: the
    setting's ratios); anything else is a ValueError naming the bad entry."""
    if text is None:
        return None
    ratios: list[float] = []
    for part in text.split(","):
        entry = part.strip()
        try:
            ratio = float(entry)
        except ValueError:
            raise ValueError(
                f"--noise {text!r}: {entry!r} is not a number (expected e.g. 0,1,2,4)"
            ) from None
        if not 0.0 <= ratio <= MAX_NOISE_RATIO:  # also refuses nan
            raise ValueError(
                f"--noise {text!r}: {entry} is outside [0, {MAX_NOISE_RATIO:g}] "
                "(irrelevant passages per retrieved one)"
            )
        if ratio in ratios:
            raise ValueError(f"--noise {text!r}: {entry} is listed twice")
        ratios.append(ratio)
    return ratios


NoiseOpt = Annotated[
    str | None,
    typer.Option(
        "--noise",
        help="Irrelevant passages added per retrieved one, a comma list in [0, 10], e.g. "
        "0,1,2,4 (0 is always evaluated). Default: evidence.noise_ratios.",
    ),
]


@eval_app.command("evidence")
def eval_evidence(
    corpus: CorpusOpt = "handbook",
    qa_set: QaSetOpt = None,
    items: Annotated[
        int | None, typer.Option(help="Questions to evaluate (0 = all); default setting.")
    ] = None,
    noise: NoiseOpt = None,
    seed: SeedOpt = None,
    run_id: Annotated[str | None, typer.Option()] = None,
    as_json: JsonFlag = False,
) -> None:
    """The evidence extractor (SEER): compression, faithfulness, helpfulness, conciseness and
    end-to-end correctness of the extractor, its base model, an extractive baseline, the full
    passages and no context, with irrelevant passages added at each noise level.

    Exit code 2 for a bad option (e.g. --noise); exit code 3 when more than
    evidence.max_failed_share of the extractions, answers or judge verdicts failed (the run is
    stored as failed, with the reason)."""
    with user_errors():
        ratios = parse_noise(noise)
    summary, stored = _run_evidence(corpus, qa_set, items, ratios, seed, run_id, as_json=as_json)
    if as_json:
        emit({**summary.to_json(), "stored": stored})
        return
    _print_evidence(summary, stored)


def _run_evidence(
    corpus: str,
    qa_set: str | None,
    items: int | None,
    noise_ratios: list[float] | None,
    seed: int | None,
    run_id: str | None,
    *,
    as_json: bool,
) -> tuple[EvidenceSummary, str]:
    """Run the evidence evaluation and return its stored summary and where it is stored."""
    from ragtrail.pipeline.evidence.step import evaluate_evidence
    from ragtrail.pipeline.evidence.views import load_evidence
    from ragtrail.pipeline.run_io import complete_run
    from ragtrail.storage.db import utcnow

    run_id = run_id or f"evidence-{utcnow():%Y%m%dT%H%M%S}"
    with runtime_with_progress(as_json) as (rt, _):
        result = evaluate_evidence(
            rt,
            corpus,
            run_id=run_id,
            qa_set=qa_set,
            max_items=items,
            noise_ratios=noise_ratios,
            seed=seed,
        )
        complete_run(rt, run_id)
        summary = load_evidence(rt, run_id)
    assert summary is not None
    return summary, result.evidence_uri


EVIDENCE_COLUMNS = (
    ("correct", "correct"),
    ("compression", "compression"),
    ("faithfulness", "faithful"),
    ("silver_faithfulness", "silver faithful"),
    ("helpfulness", "helpful"),
    ("conciseness", "concise"),
    ("correct_diff_vs_full", "correct - full"),
    ("correct_diff_vs_none", "correct - none"),
)
"""(metric, column title) of the method x noise table ``eval evidence`` prints."""
EVIDENCE_METHOD_ORDER = ("extractor", "base", "extractive", "full", "none")


def _print_evidence(summary: EvidenceSummary, stored: str) -> None:
    """Models and judges, then every figure per method and noise level with its interval
    (undefined ones with their reason below the table)."""
    base = summary.base or f"none ({summary.reason('base', 'no base model')})"
    console.print(
        f"extractor {summary.extractor} ({summary.extractor_source}); base {base}; answerer "
        f"{summary.answerer}; scorer {summary.scorer}; full answers {summary.full_answer_model}",
        highlight=False,
        soft_wrap=True,
    )
    for judge in summary.judges:
        mode = "gates" if judge.gates else "advises only"
        figure = Figure(
            value=judge.value,
            ci_low=judge.ci_low,
            ci_high=judge.ci_high,
            n=judge.n,
            ci_method=judge.ci_method,
        )
        agreement = (
            f"{judge.metric} {value_ci(figure)} (n={judge.n})"
            if judge.value is not None
            else judge.reason or "not calibrated"
        )
        console.print(f"{judge.role} judge {judge.judge}: {mode}; {agreement}", highlight=False)
    cells = {
        (str(a.facets.get("method")), float(a.facets.get("noise") or 0.0))
        for a in summary.aggregates
    }
    order = {m: i for i, m in enumerate(EVIDENCE_METHOD_ORDER)}
    table = Table(
        "method",
        "noise",
        *(title for _, title in EVIDENCE_COLUMNS),
        title=f"evidence extractor on {summary.items} questions of {summary.qa_set}",
    )
    reasons: dict[str, list[str]] = {}
    for method, noise in sorted(cells, key=lambda c: (order.get(c[0], len(order)), c)):
        row = []
        for metric, _ in EVIDENCE_COLUMNS:
            agg = summary.aggregate(metric, method, noise)
            row.append(value_ci(_figure(agg)) if agg is not None else "")
            if agg is not None and agg.value is None:
                why = agg.reason("value", "not computed")
                reasons.setdefault(why, []).append(f"{metric} of {method}@{noise:g}")
        table.add_row(method, f"{noise:g}", *row)
    console.print(table)
    for why, where in reasons.items():
        console.print(f"undefined ({why}): {', '.join(where)}", highlight=False, soft_wrap=True)
    console.print(f"stored: {stored} (run {summary.run_id})", highlight=False)


def _print_citations(summary: CitationSummary) -> None:
    """Model vs random per mixture type and label, then the scenario table."""
    mixture = summary.mixture
    by = {(a.system, a.mixture, a.label, a.metric): a.figure for a in mixture.aggregates}
    table = Table(
        "mixture",
        "label",
        "model F1",
        "random F1",
        "model P",
        "model R",
        "n",
        title=f"Citations of {summary.answerer} on mixtures {mixture.spec}",
    )
    for mix in mixture.types:
        labels = sorted({a.label for a in mixture.aggregates if a.mixture == mix})
        for label in labels:
            f1 = by.get(("model", mix, label, "citation_f1"))
            if f1 is None:
                continue
            table.add_row(
                mix,
                label,
                value_ci(f1),
                value_ci(by.get(("random", mix, label, "citation_f1"))),
                value_ci(by.get(("model", mix, label, "citation_precision"))),
                value_ci(by.get(("model", mix, label, "citation_recall"))),
                str(f1.n),
            )
    Console().print(table)
    console.print(
        f"answers: {mixture.counts.answers_ok} ok, {mixture.failed} failed, "
        f"{mixture.counts.abstained} abstained",
        highlight=False,
    )
    scenarios = summary.scenarios
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
    by_s = {(a.scenario, a.metric): a.figure for a in scenarios.aggregates}
    table = Table("scenario", *metrics, title="Attributed-answer scenarios")
    for name in scenarios.names:
        table.add_row(name, *(value_ci(by_s.get((name, m))) for m in metrics))
    Console().print(table)
    judge = scenarios.judge
    console.print(
        f"entailment judge {judge.judge}: {judge.mode} ({judge.reason or 'calibrated'})",
        highlight=False,
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
            help=f"Entailment judge: {EntailmentJudgeName.CONFIGURED} (the configured one), "
            f"{', '.join(ENTAILMENT_JUDGES)}, or none.",
        ),
    ] = EntailmentJudgeName.CONFIGURED.value,
    bootstrap_samples: Annotated[int, typer.Option(min=0, help="0: no intervals.")] = 1000,
    as_json: JsonFlag = False,
) -> None:
    """Attribution metrics of answers from a log: AutoAIS, ALCE citation P/R, citation overlap,
    ROUGE-L/BLEU and citation P/R/F1, each with a 95% bootstrap CI and n."""
    from ragtrail.pipeline.answers import score_answer_file

    with runtime() as rt:
        report = score_answer_file(rt, file, judge=judge, bootstrap_samples=bootstrap_samples)
    if as_json:
        emit(report.as_json(), "answers score")
        return
    _print_answers(report)


def _ci(row: Aggregate) -> str:
    """An aggregate's 95% interval as ``[low, high] method`` (three decimals), or "undefined"."""
    if row.ci_low is None or row.ci_high is None:
        return "undefined"
    return interval_text(row.ci_low, row.ci_high, row.ci_method, ".3f").strip()


def _print_answers(report: AnswersReport) -> None:
    """Overall metrics (value, 95% CI, n, answers left out), the other facet sets' values, the
    entailment judge with its gate decision, undefined reasons and the skipped metrics."""
    score = report.score
    by_group: dict[str, dict[str, Aggregate]] = {}
    for row in score.result.aggregates:
        group = ", ".join(f"{k}={v}" for k, v in sorted(row.facets.items())) or "all"
        by_group.setdefault(group, {})[row.metric] = row
    overall = "label=inclusive" if "label=inclusive" in by_group else "all"
    undefined = score.undefined
    table = Table(
        "metric", "value", "95% CI", "n", "undefined", title=f"{len(score.records)} answers"
    )
    for metric, row in by_group.get(overall, {}).items():
        left_out = sum(undefined.get(metric, {}).values())
        table.add_row(metric, num(row.value), _ci(row), str(row.n), str(left_out))
    Console().print(table)
    others = {g: rows for g, rows in by_group.items() if g != overall}
    if others:
        per_group = Table("metric", *others, title="value (n) per facet set")
        for metric in by_group.get(overall) or next(iter(others.values())):
            cells = [f"{num(rows[metric].value)} ({rows[metric].n})" for rows in others.values()]
            per_group.add_row(metric, *cells)
        Console().print(per_group)
    spec, decision = score.judge, report.decision
    if spec is None or decision is None:
        console.print("entailment judge: none", highlight=False, soft_wrap=True)
    else:
        kind = f"{spec.backend}, APPROXIMATE" if spec.approximate else spec.backend
        mode = "gates" if decision.gates else "advises only"
        console.print(
            f"entailment judge: {spec.name}@{spec.version} ({kind}; {spec.model}), "
            f"{mode}: {decision.reason}\n  {score.judged_pairs} pairs judged in "
            f"{score.judge_calls} call(s), {score.failed_verdicts} failed",
            highlight=False,
            soft_wrap=True,
        )
    console.print(
        f"citations: {score.citations} ({score.invalid_citations} invalid: no such passage)",
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
    for metric, reason in score.skipped.items():
        skipped.setdefault(reason, []).append(metric)
    for reason, metrics in skipped.items():
        console.print(f"skipped {', '.join(metrics)}: {reason}", highlight=False, soft_wrap=True)
