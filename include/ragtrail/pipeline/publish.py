"""Publish evaluated QA sets: GX on each set's metrics, one HTML report, metrics.json, upload.

One report covers one or several stored evaluation runs. ``ragtrail eval retrieval`` publishes a
single run (no set headings, no comparison); the night publishes all its sets under the night's run
id: per set its best strategy per label, its change since the previous run on the same QA-set
version, its plot and metric matrix, and every set's validations in one Data Docs site. The
night's ``metrics.json`` carries each set's summary under ``sets.<name>``. Each set's run is
finished with its own status (``success`` or ``failed_quality``) and the report's location; the
fail-severity gate applies after everything is written, so a failed check still leaves a report.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from ragtrail import jsonsafe
from ragtrail.artifact_keys import (
    citation_queries_key,
    corpus_quality_key,
    evidence_queries_key,
    golden_quality_key,
    headlines_key,
    report_prefix,
    run_summary_key,
    sufficiency_queries_key,
    testset_quality_key,
)
from ragtrail.pipeline.budgets import night_budget_notes, night_of
from ragtrail.pipeline.citations.views import compact as compact_citations
from ragtrail.pipeline.citations.views import load_citations
from ragtrail.pipeline.drift.views import load_drift
from ragtrail.pipeline.evaluation_sets import change_since_previous, primary_set
from ragtrail.pipeline.events import HeadlinesEvent, RetrievalMetricsEvent
from ragtrail.pipeline.evidence.views import HEADLINE_METHODS as EVIDENCE_METHODS
from ragtrail.pipeline.evidence.views import compact as compact_evidence
from ragtrail.pipeline.evidence.views import load_evidence
from ragtrail.pipeline.evidence.views import metrics_frame as evidence_metrics_frame
from ragtrail.pipeline.generate import load_generation_summary
from ragtrail.pipeline.run_io import (
    get_parquet,
    load_run_summary,
    report_dir,
    resume_runs,
    settle_runs,
    stored_json,
)
from ragtrail.pipeline.sufficiency.views import compact as compact_sufficiency
from ragtrail.pipeline.sufficiency.views import load_sufficiency, metrics_frame
from ragtrail.records import INCLUSIVE, LABELS, SetKind
from ragtrail.runtime import Runtime
from ragtrail.storage.db import utcnow
from ragtrail.storage.runs_store import RunStore
from ragtrail.summaries.base import Record
from ragtrail.summaries.citation_summary import CitationSummary
from ragtrail.summaries.drift_summary import DriftView
from ragtrail.summaries.evidence_summary import EvidenceSummary
from ragtrail.summaries.generation_summary import GenerationSummary
from ragtrail.summaries.night_summary import (
    NightDocument,
    NightPublication,
    PublishedReport,
    PublishedSet,
    SetResult,
)
from ragtrail.summaries.qa_sets import PlannedSet
from ragtrail.summaries.quality_summary import ValidationResult
from ragtrail.summaries.retrieval_summary import RetrievalSummary
from ragtrail.summaries.sufficiency_summary import SufficiencySummary

if TYPE_CHECKING:  # GX loads slowly: imported where a report is built
    from ragtrail.quality.runner import QualityResult, QualityRunner
    from ragtrail.report.html import ReportSection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SetToPublish:
    """One evaluated set: its stored run, its name in the report (None: a single-set report),
    its kind (golden / generated / file), validations made elsewhere (its test-set or golden-set
    checks), for a generated set its generation summary (adds the funnel sections), and its
    citation summary when citations were evaluated (adds the citation sections and checks), and
    its sufficiency summary when it was rated (adds the sufficiency / C/A/H / selective sections),
    its evidence summary when the evidence extractor was evaluated on it (adds the evidence
    sections and checks), and its drift decision with the primary metrics' history when it was checked (adds the drift
    sections; :func:`ragtrail.pipeline.drift.views.load_drift`)."""

    run_id: str
    name: str | None = None
    kind: SetKind | None = None
    extra_quality: tuple[ValidationResult, ...] = ()
    generation: GenerationSummary | None = None
    citations: CitationSummary | None = None
    sufficiency: SufficiencySummary | None = None
    evidence: EvidenceSummary | None = None
    drift: DriftView | None = None


def publish_sets(
    rt: Runtime,
    run_id: str,
    sets: Sequence[SetToPublish],
    *,
    shared_quality: Sequence[ValidationResult] = (),
    compare: bool = True,
    extra_sections: Sequence[ReportSection] = (),
) -> PublishedReport:
    """Validate, render and upload the report of ``sets`` under ``run_id``; finish their runs.

    ``shared_quality`` are validations shown once (the corpus checks). With ``compare`` each set
    gets its change since the previous run on its QA-set version. ``extra_sections`` (the
    night's budgets) go with the first set.
    """
    from ragtrail.quality.runner import QualityRunner, enforce
    from ragtrail.report.citation_sections import citation_sections
    from ragtrail.report.drift_sections import drift_sections
    from ragtrail.report.evidence_sections import evidence_sections
    from ragtrail.report.html import ReportContext, SetView, render_sets_report
    from ragtrail.report.language_sections import language_section
    from ragtrail.report.sufficiency_sections import sufficiency_sections
    from ragtrail.report.testset_sections import testset_sections

    if not sets:
        raise ValueError("nothing to publish: no evaluated QA set")
    settle_runs(rt)
    resume_runs(rt, [entry.run_id for entry in sets])
    out = report_dir(rt, run_id)
    out.mkdir(parents=True, exist_ok=True)
    runner = QualityRunner(out)
    quality = list(shared_quality)
    results: list[QualityResult] = []
    views: list[SetView] = []
    summaries: list[PublishedSet] = []
    loaded: list[RetrievalSummary] = []
    for entry in sets:
        summary = load_run_summary(rt, entry.run_id)
        loaded.append(summary)
        result = _validate_metrics(rt, runner, summary, entry.name)
        results.append(result)
        quality += [*entry.extra_quality, _validation(result)]
        sections = list(testset_sections(entry.generation, out) if entry.generation else ())
        languages = language_section(summary)
        if languages is not None:
            sections.append(languages)
        if not views:
            sections += extra_sections
        if entry.citations:
            cited = _validate_citations(rt, runner, entry.citations, entry.name)
            results += cited
            quality += [_validation(r) for r in cited]
            suffix = "" if entry.name is None else f".{entry.name}"
            sections += citation_sections(entry.citations, out, suffix)
        if entry.sufficiency is not None:
            rated = _validate_sufficiency(rt, runner, entry.sufficiency, entry.name)
            results += rated
            quality += [_validation(r) for r in rated]
            suffix = "" if entry.name is None else f".{entry.name}"
            sections += sufficiency_sections(entry.sufficiency, out, suffix)
        if entry.evidence is not None:
            checked = _validate_evidence(rt, runner, entry.evidence, entry.name)
            results += checked
            quality += [_validation(r) for r in checked]
            sections += evidence_sections(entry.evidence, out, _validation_suffix(entry.name))
        if entry.drift:
            suffix = "" if entry.name is None else f".{entry.name}"
            sections += drift_sections(entry.drift, out, suffix)
        change = (
            change_since_previous(
                rt,
                entry.run_id,
                summary.best,
                evaluation=summary.evaluation.evaluator,
                metric=summary.evaluation.primary_metric,
            )
            if compare
            else None
        )
        summaries.append(
            PublishedSet(
                **dict(summary),
                name=entry.name,
                kind=entry.kind,
                change=change,
                citations=compact_citations(entry.citations) if entry.citations else None,
                sufficiency=(
                    compact_sufficiency(entry.sufficiency)
                    if entry.sufficiency is not None
                    else None
                ),
                evidence=compact_evidence(entry.evidence) if entry.evidence is not None else None,
            )
        )
        views.append(
            SetView(
                metrics=_frame(summary.metrics),
                best=_frame(summary.best),
                name=entry.name,
                description=_description(entry, summary),
                change=change,
                sections=sections,
            )
        )
    runner.build_docs()
    first = summaries[0]
    generated = any(entry.generation for entry in sets)
    context = ReportContext(
        run_id=run_id,
        corpus_snapshot=first.snapshot_id,
        qa_set_version=", ".join(
            s.qa_set_version if s.name is None else f"{s.name} {s.qa_set_version}"
            for s in summaries
        ),
        date=utcnow().isoformat(timespec="seconds"),
        backends={
            **first.backends,
            "judge": "LLM critiques + labeller (test-set generation)"
            if generated
            else "none (retrieval metrics only)",
        },
    )
    html = render_sets_report(
        out,
        title=f"ragtrail retrieval evaluation — {first.corpus}",
        sets=views,
        context=context,
        quality=quality,
    )
    single = len(sets) == 1 and sets[0].name is None
    document: Record = (
        loaded[0]
        if single
        else NightDocument(
            run_id=run_id,
            corpus=first.corpus,
            snapshot_id=first.snapshot_id,
            backends=first.backends,
            primary_metric=first.primary_metric,
            sets={s.name or "": s for s in summaries},
        )
    )
    (out / "metrics.json").write_text(document.dumps(indent=1))
    report_uri = rt.artifacts.put_tree(report_prefix(run_id), out)
    runs = RunStore(rt.engine)
    for entry in sets:
        ok = all(r.success for r in results if r.name.endswith(_validation_suffix(entry.name)))
        runs.finish_run(entry.run_id, "success" if ok else "failed_quality", str(html))
    enforce(results)
    return PublishedReport(
        report_path=str(html),
        report_uri=report_uri,
        data_docs_path=str(out / "data_docs" / "index.html"),
        success=all(r.success for r in results),
        sets={s.name: SetResult.of(s) for s in summaries if s.name is not None},
    )


def _validate_metrics(
    rt: Runtime, runner: QualityRunner, summary: RetrievalSummary, name: str | None
) -> QualityResult:
    """GX retrieval-results suite on one run's metrics (every label the set has, every weight)."""
    from ragtrail.quality.suites import prepare_retrieval_results, retrieval_results_suite

    present = [lb for lb in LABELS if summary.questions_per_label.get(lb)] + [INCLUSIVE]
    suite = retrieval_results_suite(
        present, summary.text_weights, rt.settings.retrieval.min_questions_per_label
    )
    frame = prepare_retrieval_results(_frame(summary.metrics))
    validation = "retrieval_results" if name is None else f"retrieval_results.{name}"
    return runner.validate(validation, frame, suite)


def _frame(rows: Sequence[Record]) -> pd.DataFrame:
    """A table of records, as pandas builds it from their JSON."""
    return pd.DataFrame([row.to_json() for row in rows])


def _validation(result: QualityResult) -> ValidationResult:
    return ValidationResult.from_json(result.as_dict())


def _stored_validations(rt: Runtime, key: str) -> list[ValidationResult]:
    """The validations stored under ``key`` (one result or a list of them; none when absent)."""
    stored = stored_json(rt, key)
    if stored is None:
        return []
    return [
        ValidationResult.from_json(v) for v in (stored if isinstance(stored, list) else [stored])
    ]


def _validation_suffix(name: str | None) -> str:
    return "" if name is None else f".{name}"


def _validate_citations(
    rt: Runtime, runner: QualityRunner, citations: CitationSummary, name: str | None
) -> list[QualityResult]:
    """GX on one set's citation results: the per-query rows (parquet) and every aggregate of the
    mixture and scenario evaluations."""
    from ragtrail.quality.suites import (
        citation_metrics_suite,
        citation_queries_suite,
        prepare_citation_metrics,
    )

    suffix = _validation_suffix(name)
    queries = get_parquet(rt, citation_queries_key(citations.run_id))
    scenarios = citations.scenarios.aggregates if citations.scenarios else []
    aggregates = [
        {"evaluation": "citations", **a.to_json()} for a in citations.mixture.aggregates
    ] + [{"evaluation": "attribution", **a.to_json()} for a in scenarios]
    columns = ["evaluation", "metric", "value", "ci_low", "ci_high", "n"]
    metrics = prepare_citation_metrics(
        pd.DataFrame(aggregates, columns=None if aggregates else columns)
    )
    limit = rt.settings.citations.max_invalid_share
    return [
        runner.validate(f"citation_queries{suffix}", queries, citation_queries_suite()),
        runner.validate(f"citation_metrics{suffix}", metrics, citation_metrics_suite(limit)),
    ]


def _validate_sufficiency(
    rt: Runtime, runner: QualityRunner, summary: SufficiencySummary, name: str | None
) -> list[QualityResult]:
    """GX on one set's sufficiency results: the per-(question, setting) rows and every figure
    (raters' agreement, C/A/H rates, the selective policy's areas)."""
    from ragtrail.quality.suites import (
        prepare_citation_metrics,
        sufficiency_metrics_suite,
        sufficiency_queries_suite,
    )

    suffix = _validation_suffix(name)
    queries = get_parquet(rt, sufficiency_queries_key(summary.run_id))
    metrics = prepare_citation_metrics(metrics_frame(summary))
    return [
        runner.validate(
            f"sufficiency_queries{suffix}", queries, sufficiency_queries_suite(summary.settings)
        ),
        runner.validate(f"sufficiency_metrics{suffix}", metrics, sufficiency_metrics_suite()),
    ]


def _validate_evidence(
    rt: Runtime, runner: QualityRunner, summary: EvidenceSummary, name: str | None
) -> list[QualityResult]:
    """GX on one set's evidence results: the per-(question, method, noise) rows and every figure
    (the aggregates per method and noise, the judges' agreement)."""
    from ragtrail.quality.suites import (
        evidence_metrics_suite,
        evidence_queries_suite,
        prepare_evidence_metrics,
    )

    suffix = _validation_suffix(name)
    queries = get_parquet(rt, evidence_queries_key(summary.run_id))
    metrics = prepare_evidence_metrics(evidence_metrics_frame(summary))
    suite = evidence_queries_suite(EVIDENCE_METHODS, summary.noise_ratios)
    return [
        runner.validate(f"evidence_queries{suffix}", queries, suite),
        runner.validate(f"evidence_metrics{suffix}", metrics, evidence_metrics_suite()),
    ]


def _description(entry: SetToPublish, summary: RetrievalSummary) -> str:
    kinds = {SetKind.GOLDEN: "golden set", SetKind.GENERATED: "generated test set"}
    kind = kinds.get(entry.kind, "QA set") if entry.kind else "QA set"
    return (
        f"{kind} version {summary.qa_set_version}: {summary.n_questions} questions; "
        f"stored run {entry.run_id}"
    )


def publish_retrieval_report(
    rt: Runtime,
    run_id: str,
    *,
    extra_quality: Sequence[ValidationResult] = (),
    generation: GenerationSummary | None = None,
) -> PublishedReport:
    """Validate one run's metrics with GX, render its HTML report and upload both
    (:func:`publish_sets` with a single, unnamed set)."""
    entry = SetToPublish(run_id, generation=generation)
    return publish_sets(rt, run_id, [entry], shared_quality=extra_quality, compare=False)


def announce_headlines(
    rt: Runtime,
    event_type: type[HeadlinesEvent],
    headlines: Mapping[str, Record],
    corpus: str,
    run_id: str,
    snapshot_id: str,
) -> HeadlinesEvent | None:
    """Every evaluated set's headline in one document under the night's run (named after the
    event's Asset, e.g. ``citation_metrics.json``), announced as that Asset; None (no event)
    when no set has one."""
    if not headlines:
        return None
    per_set = {name: headline.to_json() for name, headline in headlines.items()}
    document = {"run_id": run_id, "corpus": corpus, "snapshot_id": snapshot_id, "sets": per_set}
    name = event_type.asset
    metrics_uri = rt.artifacts.put_bytes(
        headlines_key(run_id, name), jsonsafe.dumps(document, f"{name}.json", indent=1).encode()
    )
    return event_type(**document, metrics_uri=metrics_uri)


def publish_night(
    rt: Runtime, *, corpus: str, run_id: str, sets: Sequence[PlannedSet], snapshot_id: str
) -> tuple[NightPublication, RetrievalMetricsEvent]:
    """GX on every set's metrics, one HTML report with each set's change since its previous run;
    the retrieval-metrics event that announces it.

    Everything the report shows is read back from the stores (the snapshot's corpus checks, the
    generated version's summary and checks, the golden versions' checks), so a report published by
    Airflow has the same sections as one from ``ragtrail nightly``.
    """
    entries = []
    for entry in sets:
        version = entry.qa_set.version
        generation, quality = None, []
        if entry.kind is SetKind.GENERATED and version:
            generation = load_generation_summary(rt, corpus, version)
            quality = _stored_validations(rt, testset_quality_key(corpus, version))
        elif entry.kind is SetKind.GOLDEN and version:
            quality = _stored_validations(rt, golden_quality_key(corpus, entry.name, version))
        entries.append(
            SetToPublish(
                run_id=entry.run_id,
                name=entry.name,
                kind=entry.kind,
                extra_quality=tuple(quality),
                generation=generation,
                citations=load_citations(rt, entry.run_id),
                sufficiency=load_sufficiency(rt, entry.run_id),
                evidence=load_evidence(rt, entry.run_id),
                drift=load_drift(rt.engine, entry.run_id),
            )
        )
    corpus_quality = _stored_validations(rt, corpus_quality_key(corpus, snapshot_id))
    from ragtrail.report.budget_sections import budget_sections

    night = night_of(rt, corpus)
    report = publish_sets(
        rt,
        run_id,
        entries,
        shared_quality=corpus_quality,
        extra_sections=budget_sections(night_budget_notes(rt, night), night),
    )
    primary = primary_set(sets)
    metrics_uri = rt.artifacts.put_file(
        run_summary_key(run_id), report_dir(rt, run_id) / "metrics.json"
    )
    links: dict[str, str | None] = {}
    undefined: dict[str, str] = {}
    for name, page in (("report_url", "report.html"), ("data_docs_url", "data_docs/index.html")):
        base = rt.settings.reports_url
        links[name] = f"{base.rstrip('/')}/{report_prefix(run_id)}/{page}" if base else None
        if not base:
            undefined[name] = "RAGTRAIL_REPORTS_URL is not set"
    event = RetrievalMetricsEvent(
        run_id=run_id,
        corpus=corpus,
        snapshot_id=snapshot_id,
        qa_set=str(primary.qa_set),
        qa_set_version=report.sets[primary.name].qa_set_version,
        sets={
            name: {"run_id": s.run_id, "qa_set": s.qa_set, "qa_set_version": s.qa_set_version}
            for name, s in report.sets.items()
        },
        metrics_uri=metrics_uri,
        report_uri=report.report_uri,
        report_path=report.report_path,
        data_docs_path=report.data_docs_path,
        **links,
        undefined=undefined,
    )
    log.info("report: %s (uploaded to %s)", report.report_path, report.report_uri)
    log.info("report link: %s", links["report_url"] or undefined["report_url"])
    publication = NightPublication(
        **dict(report), run_id=run_id, metrics_uri=metrics_uri, report_url=links["report_url"]
    )
    return publication, event
