"""The nightly job in process: the flows of :data:`ragtrail.pipeline.night.NIGHT` on one Runtime.

Each flow is resolved from its Params and the event the previous flow announced, exactly as the
scheduler would resolve a DAG run triggered by that Asset event, so the in-process run and the
Airflow deployment execute the same steps with the same arguments.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragtrail.config import Settings
from ragtrail.jsonsafe import JsonObject
from ragtrail.languages import load_detector
from ragtrail.llm.together import together
from ragtrail.pipeline.budgets import night_budget_notes
from ragtrail.pipeline.ingest import IngestSummary
from ragtrail.pipeline.night import (
    EVALUATE,
    EVALUATE_GOLDEN,
    GENERATE,
    INGEST,
    RETRAIN,
    Flow,
    FlowRun,
    Progress,
    run_flow,
)
from ragtrail.report.judge_notes import label_source_note
from ragtrail.runtime import Runtime
from ragtrail.storage.budget_store import BudgetStore
from ragtrail.storage.db import utcnow
from ragtrail.summaries.budget_summary import StepBudgetNote
from ragtrail.summaries.drift_summary import DriftCheck
from ragtrail.summaries.generation_summary import GenerationOutcome
from ragtrail.summaries.night_summary import NightPublication, NightReport, SetResult
from ragtrail.summaries.qa_sets import GoldenRegistration
from ragtrail.summaries.quality_summary import CorpusQuality
from ragtrail.summaries.retrain_summary import GateOutcome

STEP_MODULES = (
    "ragtrail.pipeline.generate",
    "ragtrail.pipeline.night_judges",
    "ragtrail.pipeline.citations.step",
    "ragtrail.pipeline.citations.ask_ahead",
    "ragtrail.pipeline.sufficiency.step",
    "ragtrail.pipeline.evidence.step",
)
"""The modules of the generation's and the golden sets' steps, which they import on first use."""


def first_use_imports(settings: Settings, *, scores_cached: bool = False) -> tuple[str, ...]:
    """What the two side-by-side flows would import on first use, to be imported before they
    start: the steps' modules; torch when the evidence step runs and its helpfulness scores are
    not all cached (:func:`scores_cached`; the scorer, a local torch model built for the first
    missing score, is the only local model of an endpoint night: about 1.5 s of one core);
    scikit-learn's estimators when the selective policy is fitted.

    Importing holds the import lock and mostly the GIL, so one flow's first imports would stall
    the other's requests; a night that will not use a module does not import it."""
    modules = list(STEP_MODULES)
    if settings.evidence.enabled and not scores_cached:
        modules.append("torch")
    if settings.sufficiency.enabled and settings.selective.enabled:
        modules += ["sklearn.linear_model", "sklearn.model_selection"]
    return tuple(modules)


def scores_cached(rt: Runtime, *, corpus_changed: bool) -> bool:
    """Whether the evidence step's helpfulness scores are likely all in the score cache: the
    corpus is unchanged and an earlier night stored scores of this scorer model. Then the
    scorer is not built (a warm endpoint night imports no torch); when a score is missing after
    all, it is built as on any night, only with its imports inside the flows."""
    if corpus_changed:
        return False
    from ragtrail.llm.score_cache import SqlScoreCache

    return SqlScoreCache(rt.engine).holds_model(rt.scorer.model_id)  # the scorer is not loaded


@dataclass
class NightlyResult:
    """What a night did: the ingest, the corpus checks, the generated test set, every evaluated
    set's result by name, the published report, the golden sets registered (and the files
    refused, with the reason), the drift check and,
    when a decision fired, the retraining's gate decision."""

    run_id: str
    ingest: IngestSummary
    corpus_quality: CorpusQuality
    generation: GenerationOutcome | None
    sets: dict[str, SetResult]
    report: NightReport
    golden: list[GoldenRegistration] = field(default_factory=list)
    golden_refused: list[dict[str, str]] = field(default_factory=list)
    drift: DriftCheck | None = None
    retraining: GateOutcome | None = None
    budgets: list[StepBudgetNote] = field(default_factory=list)
    step_seconds: dict[str, float] = field(default_factory=dict)
    """Wall time of each step that ran, as ``<dag id>.<step>``, in run order."""

    @property
    def partial_steps(self) -> list[StepBudgetNote]:
        """The budgeted step instances a budget bounded."""
        return [n for n in self.budgets if n.partial]

    def to_json(self) -> JsonObject:
        """The ``ragtrail nightly --json`` document (strict JSON)."""
        return {
            "run_id": self.run_id,
            "ingest": self.ingest.as_dict(),
            "corpus_quality": self.corpus_quality.to_json(),
            "generation": self.generation.to_json() if self.generation else None,
            "evaluation": {"sets": {name: s.to_json() for name, s in self.sets.items()}},
            "report": self.report.to_json(),
            "golden": [g.to_json() for g in self.golden],
            "golden_refused": list(self.golden_refused),
            "drift": self.drift.to_json() if self.drift else None,
            "retraining": self.retraining.to_json() if self.retraining else None,
            "budgets": {
                "night": self.run_id,
                "partial": bool(self.partial_steps),
                "steps": [n.to_json() for n in self.budgets],
            },
            "step_seconds": dict(self.step_seconds),
        }


def run_nightly(
    rt: Runtime,
    *,
    source: str,
    corpus: str,
    qa_set: str | Path | None = None,
    golden: Sequence[str | Path] = (),
    run_id: str | None = None,
    progress: Progress | None = None,
    log: Callable[[str], None] = print,
    generate: bool = True,
    allow_mass_removal: bool = False,
) -> NightlyResult:
    """ingest -> golden sets -> test-set generation + GX, beside the golden sets' evaluation ->
    the evaluation of every set (the golden sets' runs taken over) -> report.

    The ingest's ``golden`` step registers the ``golden`` files (and folders) as golden sets of
    the corpus (name: the file stem), with the configured ``golden_sets`` of the corpus and, on
    the shipped sample corpus, the shipped sample QA set as
    :data:`~ragtrail.pipeline.golden.SAMPLE_GOLDEN_SET` (all idempotent), exactly as the ingest
    DAG does. Evaluation covers every golden set of the corpus
    plus the generated version; with ``generate=False``, or when generation accepts nothing, it
    covers ``qa_set`` instead (when given; the sample set when the corpus has no golden set).

    Budgets (``settings.budgets``) count against the night ``run_id``: a step they bound runs
    on fewer items or stops, is marked partial (``NightlyResult.budgets``) and the night goes on.

    A step whose model calls mostly failed stops the night as it stops the DAGs
    (:func:`~ragtrail.pipeline.night.run_flow`): the other sets' instances of that step still
    run, then :class:`~ragtrail.failures.EvaluationFailedError` names every failed set.
    """
    run_id = run_id or f"nightly-{utcnow():%Y%m%dT%H%M%S}"
    # Every budgeted step of this process counts against this night (its time from now on).
    BudgetStore(rt.engine).open_night(run_id, corpus)
    previous_night, rt.budget_night = rt.budget_night, run_id
    try:
        result = _run_night(
            rt,
            run_id,
            source=source,
            corpus=corpus,
            qa_set=qa_set,
            golden=golden,
            progress=progress,
            log=log,
            generate=generate,
            allow_mass_removal=allow_mass_removal,
        )
    finally:
        rt.budget_night = previous_night
        BudgetStore(rt.engine).close_night(run_id)
    result.budgets = night_budget_notes(rt, run_id)
    return result


def _run_night(
    rt: Runtime,
    run_id: str,
    *,
    source: str,
    corpus: str,
    qa_set: str | Path | None,
    golden: Sequence[str | Path],
    progress: Progress | None,
    log: Callable[[str], None],
    generate: bool,
    allow_mass_removal: bool,
) -> NightlyResult:
    """The body of :func:`run_nightly` for the night ``run_id``."""
    params = {"corpus": corpus, "qa_set": str(qa_set) if qa_set else None}
    step_seconds: dict[str, float] = {}

    def run(
        flow: Flow, step: str, event: JsonObject | None, on: Runtime = rt, **extra: Any
    ) -> FlowRun:
        log(f"[{step}] {flow.dag_id}")
        events = [{"timestamp": utcnow().isoformat(), "extra": event}] if event else []
        state = flow.resolve({**params, **extra}, events, run_id)
        flow_run = run_flow(on, flow, state, progress=progress)
        step_seconds.update({f"{flow.dag_id}.{k}": v for k, v in flow_run.seconds.items()})
        return flow_run

    overlap = rt.llm_calls_overlap()

    def on_corpus_event(flow: Flow, step: str, event: JsonObject | None) -> Callable[[], FlowRun]:
        """A flow the corpus event triggers, run on its own sibling runtime when the flows run
        side by side (every model a remote endpoint), as on its own Airflow workers."""

        def go() -> FlowRun:
            if not overlap:
                return run(flow, step, event)
            with rt.sibling() as own:
                return run(flow, step, event, own)

        return go

    # This process runs every step of the ingest: its death frees the corpus's ingest lock.
    ingested = run(
        INGEST,
        "1/4",
        None,
        source=source,
        allow_mass_removal=allow_mass_removal,
        golden=[str(path) for path in golden],
        in_process=True,
    )
    summary = ingested.results["finalize"]
    log(
        f"      added={summary['added']} updated={summary['updated']} "
        f"unchanged={summary['unchanged']} removed={summary['removed']} "
        f"quarantined={summary['quarantined']} chunks={summary['chunks']} "
        f"embedded={summary['embedded']}"
    )
    golden_added = [GoldenRegistration.from_json(g) for g in ingested.results["golden"]["golden"]]
    for note in ingested.results["golden"]["notes"]:
        log(f"      {note}")
    for refused in ingested.results["golden"]["refused"]:
        log(f"      golden set REFUSED: {refused['error']}")
    for reg in golden_added:
        log(f"      {reg.line()}")
    generation = None
    # The generation and the golden sets' evaluation both listen to the corpus Asset: side by
    # side on an endpoint, else one after the other. The evaluation listens to the test-set
    # Asset; it takes over the golden sets' runs, and without a generated set it evaluates the
    # snapshot just ingested, as a manual run of the DAG with that snapshot would.
    evaluation_event, evaluation_params = None, {"snapshot_id": summary["snapshot"]}
    golden_evaluation = on_corpus_event(EVALUATE_GOLDEN, "3/4", ingested.event)
    if overlap:
        cached = scores_cached(rt, corpus_changed=summary["changed"])
        for module in first_use_imports(rt.settings, scores_cached=cached):
            importlib.import_module(module)
        load_detector()  # every prompt names its input's language
    if generate:
        generated, _ = together(
            [on_corpus_event(GENERATE, "2/4", ingested.event), golden_evaluation],
            concurrent=overlap,
        )
        generation = GenerationOutcome.from_json(_without_event(generated.results["finalize"]))
        log(
            f"      version {generation.version}: accepted {generation.accepted}, "
            f"model calls {generation.model_calls}, cache hits {generation.cache_hits}"
        )
        gating = generation.gating_judges
        log(f"      judges gating: {', '.join(gating) or 'none'} (of {len(generation.judges)})")
        log(f"      {label_source_note(generation.judges)}")
        evaluation_event, evaluation_params = generated.event, {}
    else:
        log("[2/4] generate_testset skipped")
        golden_evaluation()
    evaluated = run(EVALUATE, "4/4", evaluation_event, **evaluation_params)
    published = NightPublication.from_json(_without_event(evaluated.results["publish"]))
    retraining = None
    if evaluated.event is not None:  # the drift Asset: a decision fired, as the scheduler would
        retrained = run(RETRAIN, "drift fired", evaluated.event)
        retraining = GateOutcome.from_json(retrained.results["gate"])
        log(
            f"      {retraining.model} v{retraining.version}: "
            f"{'promoted' if retraining.promoted else 'kept as challenger'} "
            f"({retraining.reason})"
        )
    return NightlyResult(
        run_id=run_id,
        ingest=IngestSummary(**summary),
        corpus_quality=CorpusQuality.from_json(_without_event(ingested.results["quality"])),
        generation=generation,
        sets=published.sets,
        report=published.report(),
        golden=golden_added,
        golden_refused=list(ingested.results["golden"]["refused"]),
        drift=_drift_check(evaluated.results.get("drift")),
        retraining=retraining,
        step_seconds=step_seconds,
    )


def _without_event(result: JsonObject | None) -> Any:
    return None if result is None else {k: v for k, v in result.items() if k != "event"}


def _drift_check(result: JsonObject | None) -> DriftCheck | None:
    """The drift step's result (None when the evaluation flow has no drift step)."""
    return None if result is None else DriftCheck.from_json(result)
