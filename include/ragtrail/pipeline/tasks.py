"""The nightly's steps: one function per Airflow task and per in-process stage.

Each step takes the :class:`Runtime` first and JSON values as keyword arguments, and returns a small
strict-JSON dict (what travels as XCom). Artifacts live in the artifact store and only their URIs
travel. A step that announces an Asset returns its event extras under ``"event"`` (None: nothing to
announce). ``ragtrail.pipeline.night`` wires these steps into flows; the DAGs and ``ragtrail nightly``
both run them from there, so the two can no longer drift apart.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ragtrail import jsonsafe
from ragtrail.artifact_keys import generation_plan_key, testset_quality_key
from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.budget import BudgetExhausted
from ragtrail.llm.together import together
from ragtrail.pipeline import ingest as _ingest
from ragtrail.pipeline.budgets import budget_stop, budgeted_step, generation_fingerprint
from ragtrail.pipeline.corpus_checks import check_corpus_quality
from ragtrail.pipeline.events import (
    CITATION_MODEL,
    COUNT_KEYS,
    EXTRACTOR_MODEL,
    RETRAINABLE,
    AssetEvent,
    CitationMetricsEvent,
    CorpusEvent,
    DriftEvent,
    EvidenceMetricsEvent,
    SufficiencyMetricsEvent,
    TestsetEvent,
    model_of_evaluation,
)
from ragtrail.pipeline.ingest import IngestSummary
from ragtrail.pipeline.publish import announce_headlines, publish_night
from ragtrail.pipeline.retrieval import evaluate_retrieval
from ragtrail.pipeline.run_io import evaluated_snapshot, resume_runs, settle_runs
from ragtrail.records import QASetRef, SetKind
from ragtrail.runtime import Runtime
from ragtrail.summaries.base import Record
from ragtrail.summaries.drift_summary import DriftCheck
from ragtrail.summaries.generation_summary import GenerationOutcome
from ragtrail.summaries.qa_sets import PlannedSet

XCom = JsonObject
"""A step's strict-JSON argument or result: what travels between tasks (the pipeline's edge)."""

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------ ingest


def plan_ingest(
    rt: Runtime,
    *,
    source: str,
    corpus: str,
    shard_size: int = 25,
    allow_mass_removal: bool = False,
    run_id: str | None = None,
    in_process: bool = False,
) -> XCom:
    """Diff the source against the corpus; shards of changed files (none when unchanged).

    Fails (nothing written, the live snapshot untouched) on a mass removal that was not allowed
    and while another ingest of the corpus runs. The snapshot is owned by ``run_id``, so a
    retried plan of the same run takes over its own earlier try; ``in_process`` says that this
    process also runs the shards and finalize (``ragtrail nightly``), so that its death frees
    the corpus at once, where Airflow's separate tasks rely on the heartbeat timeout.
    """
    owner = _ingest.SnapshotOwner.this_process(run_id, holds_run=in_process)
    plan = _ingest.plan_ingest(
        rt,
        source,
        corpus,
        shard_size=shard_size,
        allow_mass_removal=allow_mass_removal,
        owner=owner,
    )
    return {
        "snapshot_id": plan.snapshot_id,
        "corpus": plan.corpus,
        "shards": plan.shards,
        "manifest_uri": plan.manifest_uri,
        "counts": plan.counts,
        "changed": plan.changed,
    }


def ingest_shard(rt: Runtime, *, corpus: str, snapshot_id: str, rel_paths: list[str]) -> XCom:
    """Parse, chunk, embed and index one shard; its counts are kept with the snapshot."""
    counts = _ingest.ingest_shard(rt, corpus, snapshot_id, rel_paths)
    log.info(
        "shard of %d files: %d documents, %d chunks, %d embedded, %d quarantined",
        len(rel_paths),
        counts["documents"],
        counts["chunks"],
        counts["embedded"],
        counts["quarantined"],
    )
    return counts


def finalize_ingest(rt: Runtime, *, corpus: str, snapshot_id: str, changed: bool = True) -> XCom:
    """Apply removals, reconcile the index, close the snapshot; counts summed over its shards."""
    return _ingest.finalize_ingest(rt, corpus, snapshot_id, changed=changed).as_dict()


def register_golden_sets(rt: Runtime, *, corpus: str, source: str, golden: list[str]) -> XCom:
    """The corpus's golden sets (configured, given, the sample set on the sample corpus),
    registered before the corpus is announced, so calibration and drift find them."""
    from ragtrail.pipeline.golden import register_corpus_golden_sets

    found = register_corpus_golden_sets(rt, corpus, source, golden)
    for reg in found.registered:
        log.info("%s", reg.line())
    for note in found.notes:
        log.info("%s", note)
    for refused in found.refused:
        log.error("golden set file refused: %s", refused["error"])
    return found.to_json()


def check_corpus(rt: Runtime, *, corpus: str, snapshot_id: str, summary: XCom) -> XCom:
    """GX on the snapshot (raises on a failed fail-severity check); announces the corpus."""
    result = check_corpus_quality(rt, corpus, snapshot_id)
    ingested = IngestSummary(**summary)
    event = CorpusEvent(
        corpus=corpus,
        snapshot_id=snapshot_id,
        changed=ingested.changed,
        manifest_uri=ingested.manifest_uri,
        data_docs_uri=result.data_docs_uri,
        **{key: int(getattr(ingested, key)) for key in COUNT_KEYS},
    )
    return {**result.to_json(), "event": event.to_extra()}


# -------------------------------------------------------------------------------- generation


def calibrate_judges(rt: Runtime, *, corpus: str) -> XCom:
    """Measure the generation judges (labeller, critiques) that have no calibration for their
    version yet.

    ``gates``: each generation judge's gate decision from the stored calibrations, which the
    run's judging and finalize apply: a judge gates only when its own calibration meets the bar.
    Model calls are cached, so the step is cheap once a version is calibrated.
    """
    from ragtrail.pipeline.judges import calibrate_missing, generation_gates, uncalibrated_judges

    judges = _calibrated(rt, corpus, "calibration", uncalibrated_judges(rt), calibrate_missing)
    # the generation judges' gates, fixed here: every shard of the run applies the same policy
    return {"corpus": corpus, **judges, "gates": generation_gates(rt)}


def calibrate_evaluation_judges(rt: Runtime, *, corpus: str) -> XCom:
    """Measure the judges of the enabled evaluation steps (sufficiency raters, correctness) that
    have no calibration for their version yet (:mod:`ragtrail.pipeline.night_judges`), beside
    the generation, so that the evaluation's branches find them calibrated."""
    from ragtrail.pipeline.night_judges import (
        calibrate_missing_evaluation_judges,
        uncalibrated_evaluation_judges,
    )

    missing = uncalibrated_evaluation_judges(rt)
    judges = _calibrated(
        rt, corpus, "evaluation_judges", missing, calibrate_missing_evaluation_judges
    )
    return {"corpus": corpus, **judges}


def _calibrated(
    rt: Runtime,
    corpus: str,
    scope: str,
    missing: list[str],
    calibrate: Callable[[Runtime, str], dict[str, JsonObject]],
) -> XCom:
    """``calibrate(rt, corpus)`` under the calibration budget (``missing``: the judges it is
    expected to measure): ``judges``, each judge's outcome; on a budget stop, none and the
    stop (the judges left uncalibrated only advise; the next night calibrates them, cached)."""
    try:
        with budgeted_step(
            rt, "calibration", corpus=corpus, scope=scope, planned=len(missing)
        ) as allowance:
            if missing and allowance.items <= 0:
                raise BudgetExhausted(allowance.reason or "no budget left")
            judges = calibrate(rt, corpus)
            allowance.done(sum(1 for j in judges.values() if j.get("status") == "calibrated"))
    except BudgetExhausted as exc:
        log.warning("judge calibration stopped: %s", exc.reason)
        return {"judges": {}, **budget_stop(exc)}
    for name, outcome in judges.items():
        log.info("judge %s: %s", name, outcome)
    return {"judges": judges}


def plan_generation(
    rt: Runtime,
    *,
    corpus: str,
    run_id: str,
    snapshot_id: str | None = None,
    changed: bool = True,
    per_label: int | None = None,
    seed: int | None = None,
    labels: list[str] | None = None,
    doc_ids: list[str] | None = None,
) -> XCom:
    """Plan and shard a generation run, or reuse the version already built on this snapshot.

    An unchanged corpus does not churn test-set versions: when the corpus event says nothing
    changed and no labels/documents were asked for by hand, the latest version generated from the
    same snapshot is announced again and no model is called.
    """
    from ragtrail.pipeline.generate import GenerationRequest
    from ragtrail.pipeline.generate import plan_generation as plan_run

    manual = bool(labels or doc_ids)
    if not changed and not manual:
        reuse = _version_on_snapshot(rt, corpus, snapshot_id)
        if reuse is not None:
            log.info("corpus unchanged: reusing test-set version %s", reuse)
            return {"corpus": corpus, "run_id": run_id, "shards": [], "retired": 0, "reuse": reuse}
    per_label, bounded = _budgeted_per_label(rt, corpus, run_id, snapshot_id, per_label, seed)
    if per_label == 0:
        reuse = _version_on_snapshot(rt, corpus, None)
        log.warning("generation skipped: %s; reusing %s", bounded, reuse)
        return {
            "corpus": corpus,
            "run_id": run_id,
            "shards": [],
            "retired": 0,
            "reuse": reuse,
            "partial": True,
            "budget_reason": bounded,
        }
    request = GenerationRequest(
        corpus=corpus,
        run_id=run_id,
        per_label=per_label,
        seed=seed,
        labels=tuple(labels or ()),
        doc_ids=tuple(doc_ids or ()),
        snapshot_id=snapshot_id,
    )
    plan = plan_run(rt, request)
    return {
        "corpus": corpus,
        "run_id": run_id,
        "shards": plan.shards,
        "retired": plan.retired,
        "reuse": None,
        "partial": bounded is not None,
        "budget_reason": bounded,
    }


def _budgeted_per_label(
    rt: Runtime,
    corpus: str,
    run_id: str,
    snapshot_id: str | None,
    per_label: int | None,
    seed: int | None,
) -> tuple[int, str | None]:
    """The items per label the budgets afford (the settings' quota at most), and why fewer."""
    from ragtrail.records import LABELS

    asked = per_label or rt.settings.generation.per_label
    with budgeted_step(
        rt,
        "generation",
        corpus=corpus,
        scope=f"{run_id}/plan",
        planned=asked * len(LABELS),
        fingerprint=generation_fingerprint(rt, corpus, snapshot_id, seed),
        gate=False,
    ) as allowance:
        pass
    return min(asked, allowance.items // len(LABELS)), allowance.reason


def _version_on_snapshot(rt: Runtime, corpus: str, snapshot_id: str | None) -> str | None:
    from ragtrail.testset.store import TestSetStore

    latest = TestSetStore(rt.engine).latest_version(corpus)
    if latest is None or (snapshot_id is not None and latest["snapshot_id"] != snapshot_id):
        return None
    return str(latest["version"])


def draft_shard(rt: Runtime, *, corpus: str, run_id: str, chunk_ids: list[str]) -> XCom:
    """Statements and questions for one shard of contexts (every call cached by content); a
    budget stop keeps no draft, so the shard has no candidates."""
    from ragtrail.pipeline.generate import draft_shard as run_draft

    return _shard_step(rt, corpus, run_id, chunk_ids, "draft", run_draft)


def judge_shard(
    rt: Runtime, *, corpus: str, run_id: str, chunk_ids: list[str], gates: dict[str, Any]
) -> XCom:
    """Checks, labels and critiques of one shard's drafted candidates under the run's gates; a
    budget stop keeps none of them, and finalize goes on."""
    from ragtrail.pipeline.generate import judge_shard as run_judging

    return _shard_step(
        rt, corpus, run_id, chunk_ids, "judge", lambda *args: run_judging(*args, gates)
    )


def _shard_step(
    rt: Runtime,
    corpus: str,
    run_id: str,
    chunk_ids: list[str],
    what: str,
    work: Callable[[Runtime, str, str, list[str]], JsonObject],
) -> XCom:
    """``work`` on one shard as a budgeted generation step, scoped ``<run>/<what>-<shard>``."""
    scope = f"{run_id}/{what}-{hashlib.sha256(','.join(chunk_ids).encode()).hexdigest()[:12]}"
    try:
        with budgeted_step(rt, "generation", corpus=corpus, scope=scope, planned=0):
            result = work(rt, corpus, run_id, chunk_ids)
    except BudgetExhausted as exc:
        log.warning("%s of %d contexts stopped: %s", what, len(chunk_ids), exc.reason)
        return budget_stop(exc)
    log.info("%s of %d contexts: %s", what, len(chunk_ids), result)
    return result


def generation_baseline(rt: Runtime, *, corpus: str, run_id: str, reuse: str | None = None) -> XCom:
    """The single-prompt baseline on the contexts the plan drafted, beside the shards."""
    from ragtrail.pipeline.generate import run_baseline

    if reuse or not rt.artifacts.exists(generation_plan_key(corpus, run_id)):
        return {"items": 0, "skipped": "no generation run was planned"}
    try:
        with budgeted_step(rt, "generation", corpus=corpus, scope=f"{run_id}/baseline", planned=0):
            items = run_baseline(rt, corpus, run_id)
    except BudgetExhausted as exc:  # the night's summary has no baseline then
        log.warning("generation baseline stopped: %s", exc.reason)
        return budget_stop(exc)
    return {"items": len(items), "labelled": sum(1 for c in items if c.observed_label)}


def finalize_generation(
    rt: Runtime,
    *,
    corpus: str,
    run_id: str,
    gates: dict[str, Any],
    reuse: str | None = None,
) -> XCom:
    """Version the set and validate it with GX; announces the test set to evaluation. The
    set's citation first round is asked beside the check
    (:mod:`ragtrail.pipeline.citations.ask_ahead`).

    The event always goes out, so evaluation runs every night; when nothing was accepted its
    ``qa_set`` is null with the reason, and evaluation falls back to its configured QA set.
    """
    from ragtrail.pipeline.citations.ask_ahead import ask_citations_ahead
    from ragtrail.pipeline.generate import check_testset_quality, load_generation_summary
    from ragtrail.pipeline.generate import finalize_generation as run_finalize

    if reuse:
        summary = load_generation_summary(rt, corpus, reuse)
        regenerated = False
    else:
        # Finalize's top-up rounds cannot stop half-way (a version is all or nothing): they are
        # bounded by the plan's budgeted quota and recorded here, not stopped.
        with budgeted_step(
            rt,
            "generation",
            corpus=corpus,
            scope=f"{run_id}/finalize",
            planned=0,
            gate=False,
        ) as allowance:
            summary = run_finalize(rt, corpus, run_id, gates)
            allowance.items_planned = allowance.items = sum(summary.targets.values())
            allowance.done(sum(summary.accepted.values()))
        regenerated = True
        if version := summary.version:
            out = rt.settings.home / "reports" / "testsets" / corpus / version
            # asked as soon as the set exists, while the night's last requests are in flight
            quality, asked = together(
                [
                    lambda: check_testset_quality(rt, summary, out),
                    lambda: ask_citations_ahead(rt, [QASetRef.generated(version)]),
                ],
                concurrent=rt.llm_calls_overlap(),
            )
            log.info("the test set's citation first round: %s", asked)
            rt.artifacts.put_bytes(
                testset_quality_key(corpus, version),
                jsonsafe.dumps(quality, "test-set quality").encode(),
            )
    outcome = GenerationOutcome.of(summary, regenerated=regenerated)
    version = outcome.version
    event = TestsetEvent(
        corpus=corpus,
        snapshot_id=outcome.snapshot_id,
        qa_set=str(QASetRef.generated(version)) if version else None,
        qa_set_version=version,
        accepted=outcome.accepted,
        regenerated=regenerated,
    )
    if not version:
        reason = "generation accepted no item"
        event = event.with_undefined("qa_set", reason).with_undefined("qa_set_version", reason)
    return {**outcome.to_json(), "event": event.to_extra()}


# -------------------------------------------------------------------------------- evaluation


def plan_evaluation(
    rt: Runtime,
    *,
    corpus: str,
    run_id: str,
    qa_set: str | None = None,
    snapshot_id: str | None = None,
    text_weights: list[float] | None = None,
) -> XCom:
    """The QA sets this night evaluates (every golden set's latest version, then the generated
    or given set) and the snapshot they are all evaluated on. A golden set that the golden sets'
    evaluation has handed over for this snapshot and these settings is its run, ``reused``
    (waited for while that evaluation still runs)."""
    from ragtrail.pipeline.evaluation_sets import await_golden_runs, plan_sets

    snapshot = evaluated_snapshot(rt, corpus, snapshot_id)
    reusable, waited = await_golden_runs(rt, corpus, snapshot.snapshot_id, text_weights)
    if waited >= 1.0:
        log.info("waited %.0f s for the golden sets' evaluation of this snapshot", waited)
    sets = plan_sets(rt, corpus, run_id, qa_set, reusable)
    log.info(
        "evaluating %d QA sets: %s",
        len(sets),
        ", ".join(f"{s.name} (evaluated by {s.run_id})" if s.reused else s.name for s in sets),
    )
    return {"sets": [s.to_json() for s in sets], "snapshot_id": snapshot.snapshot_id}


def plan_golden_evaluation(
    rt: Runtime,
    *,
    corpus: str,
    run_id: str,
    snapshot_id: str | None = None,
    text_weights: list[float] | None = None,
) -> XCom:
    """The corpus's golden sets (each one's latest version) and the snapshot they are evaluated
    on, for their evaluation beside the generation; recorded as started, so that the night's
    evaluation of this snapshot waits for their hand-over."""
    from ragtrail.pipeline.evaluation_sets import golden_evaluation_started, golden_sets

    snapshot = evaluated_snapshot(rt, corpus, snapshot_id)
    sets = golden_sets(rt, corpus, run_id)
    log.info("evaluating %d golden sets: %s", len(sets), ", ".join(s.name for s in sets))
    if sets:
        golden_evaluation_started(rt, corpus, snapshot.snapshot_id, sets, text_weights)
    return {"sets": [s.to_json() for s in sets], "snapshot_id": snapshot.snapshot_id}


def ask_golden_citations_ahead(rt: Runtime, *, corpus: str, sets: list[XCom]) -> XCom:
    """The golden sets' citation scenarios' first round, asked into the call cache while they
    are evaluated (:mod:`ragtrail.pipeline.citations.ask_ahead`)."""
    from ragtrail.pipeline.citations.ask_ahead import ask_citations_ahead

    if not sets:
        return {"corpus": corpus, "skipped": "the corpus has no golden set"}
    return {"corpus": corpus, **ask_citations_ahead(rt, [s.qa_set for s in _planned(sets)])}


def hand_over_golden_runs(
    rt: Runtime,
    *,
    corpus: str,
    sets: list[XCom],
    snapshot_id: str,
    text_weights: list[float] | None = None,
) -> XCom:
    """Hand the golden sets' runs, retrieval, sufficiency and evidence done, over to the night's
    evaluation of this snapshot (which then skips those steps and cites them)."""
    from ragtrail.pipeline.evaluation_sets import hand_over

    if not sets:
        return {"corpus": corpus, "sets": [], "skipped": "the corpus has no golden set"}
    done = hand_over(rt, corpus, snapshot_id, _planned(sets), text_weights)
    return {"corpus": corpus, "sets": [s.run_id for s in done.sets]}


def evaluate_set(
    rt: Runtime,
    *,
    corpus: str,
    qa_set_entry: XCom,
    text_weights: list[float] | None = None,
    snapshot_id: str | None = None,
) -> XCom:
    """Scan the text weights on one planned QA set as its own stored run (embeds the queries)."""
    planned = PlannedSet.from_json(qa_set_entry)
    if why := _reused(planned):
        return {"name": planned.name, "skipped": why}
    result = evaluate_retrieval(
        rt,
        corpus,
        run_id=planned.run_id,
        qa_set=planned.qa_set,
        text_weights=[float(w) for w in text_weights] if text_weights else None,
        snapshot_id=snapshot_id,
        set_name=planned.name,
    )
    return {"name": planned.name, **result.to_json()}


def evaluate_set_citations(
    rt: Runtime,
    *,
    corpus: str,
    qa_set_entry: XCom,
    snapshot_id: str | None = None,
) -> XCom:
    """Citation quality of the answering model on one planned QA set (relevance mixtures vs a
    random baseline, attributed-answer scenarios), stored in the set's run. A golden set handed
    over by the golden sets' evaluation is cited here too, in its run: that evaluation leaves
    the citations to this step (see ``evaluate_golden_sets``)."""
    planned = PlannedSet.from_json(qa_set_entry)
    if not rt.settings.citations.enabled:
        return {"name": planned.name, "skipped": "citations.enabled is false"}
    from ragtrail.pipeline.citations.step import evaluate_citations

    return _set_step_result(
        planned.name,
        "citations",
        lambda: evaluate_citations(
            rt,
            corpus,
            run_id=planned.run_id,
            qa_set=planned.qa_set,
            set_name=planned.name,
            snapshot_id=snapshot_id,
        ),
    )


def _set_step_result(name: str, what: str, run: Callable[[], Any]) -> XCom:
    """A QA set's step result; when a budget stopped it with nothing kept, its partial record
    instead (the set keeps its other results; the night goes on)."""
    try:
        result = run()
    except BudgetExhausted as exc:
        log.warning("%s of %s stopped: %s", what, name, exc.reason)
        return {"name": name, **budget_stop(exc)}
    return {"name": name, **result.to_json()}


def announce_citations(
    rt: Runtime, *, corpus: str, run_id: str, sets: list[XCom], snapshot_id: str
) -> XCom:
    """Every set's headline citation F1 (model and random per mixture type) in one document,
    announced as the citation-metrics Asset; no event when no set was evaluated."""
    from ragtrail.pipeline.citations.views import compact, load_citations

    stored = {s.name: load_citations(rt, s.run_id) for s in _planned(sets)}
    headlines = {name: compact(summary) for name, summary in stored.items() if summary}
    event = announce_headlines(rt, CitationMetricsEvent, headlines, corpus, run_id, snapshot_id)
    return _announced(headlines, event)


def evaluate_set_sufficiency(
    rt: Runtime,
    *,
    corpus: str,
    qa_set_entry: XCom,
    snapshot_id: str | None = None,
) -> XCom:
    """Sufficient context, C/A/H and selective generation on one planned QA set (golden sets
    only unless ``sufficiency.qa_sets`` is ``all``), stored in the set's run."""
    planned = PlannedSet.from_json(qa_set_entry)
    ss = rt.settings.sufficiency
    name = planned.name
    if why := _not_evaluated(planned, "sufficiency", ss.enabled, ss.qa_sets):
        return {"name": name, "skipped": why}
    from ragtrail.pipeline.sufficiency.step import evaluate_sufficiency

    return _set_step_result(
        name,
        "sufficiency",
        lambda: evaluate_sufficiency(
            rt,
            corpus,
            run_id=planned.run_id,
            qa_set=planned.qa_set,
            set_name=name,
            snapshot_id=snapshot_id,
        ),
    )


def announce_sufficiency(
    rt: Runtime, *, corpus: str, run_id: str, sets: list[XCom], snapshot_id: str
) -> XCom:
    """Every rated set's headline (hallucination rate per setting, the policy's gain) in one
    document, announced as the sufficiency-metrics Asset; no event when no set was rated."""
    from ragtrail.pipeline.sufficiency.views import compact, load_sufficiency

    stored = {s.name: load_sufficiency(rt, s.run_id) for s in _planned(sets)}
    headlines = {name: compact(summary) for name, summary in stored.items() if summary is not None}
    event = announce_headlines(rt, SufficiencyMetricsEvent, headlines, corpus, run_id, snapshot_id)
    return _announced(headlines, event)


def evaluate_set_evidence(
    rt: Runtime,
    *,
    corpus: str,
    qa_set_entry: XCom,
    snapshot_id: str | None = None,
) -> XCom:
    """The evidence extractor on one planned QA set (golden sets only unless
    ``evidence.qa_sets`` is ``all``), stored in the set's run."""
    planned = PlannedSet.from_json(qa_set_entry)
    es = rt.settings.evidence
    name = planned.name
    if why := _not_evaluated(planned, "evidence", es.enabled, es.qa_sets):
        return {"name": name, "skipped": why}
    from ragtrail.pipeline.evidence.step import evaluate_evidence

    return _set_step_result(
        name,
        "evidence",
        lambda: evaluate_evidence(
            rt,
            corpus,
            run_id=planned.run_id,
            qa_set=planned.qa_set,
            set_name=name,
            snapshot_id=snapshot_id,
        ),
    )


def announce_evidence(
    rt: Runtime, *, corpus: str, run_id: str, sets: list[XCom], snapshot_id: str
) -> XCom:
    """Every evaluated set's evidence headline in one document, announced as the
    evidence-metrics Asset; no event when no set was evaluated."""
    from ragtrail.pipeline.evidence.views import compact, load_evidence

    stored = {s.name: load_evidence(rt, s.run_id) for s in _planned(sets)}
    headlines = {name: compact(summary) for name, summary in stored.items() if summary is not None}
    event = announce_headlines(rt, EvidenceMetricsEvent, headlines, corpus, run_id, snapshot_id)
    return _announced(headlines, event)


def _reused(planned: PlannedSet) -> str | None:
    """Why the retrieval, sufficiency and evidence steps skip this set: its run is the golden
    sets' evaluation's (None: they do not)."""
    return f"evaluated as {planned.run_id}" if planned.reused else None


def _not_evaluated(planned: PlannedSet, section: str, enabled: bool, qa_sets: str) -> str | None:
    """Why an answer-side evaluation (settings ``section``) skips this set, or None."""
    if why := _reused(planned):
        return why
    if not enabled:
        return f"{section}.enabled is false"
    if qa_sets == "golden" and planned.kind is not SetKind.GOLDEN:
        return f"{section}.qa_sets is 'golden'"
    return None


def _planned(sets: list[XCom]) -> list[PlannedSet]:
    return [PlannedSet.from_json(entry) for entry in sets]


def _announced(headlines: Mapping[str, Record], event: AssetEvent | None) -> XCom:
    """An announcing step's result: the headlines, and the event with its document's URI."""
    result: XCom = {name: h.to_json() for name, h in headlines.items()}
    if event is None:
        return {"sets": result, "event": None}
    extra = event.to_extra()
    return {"sets": result, "metrics_uri": extra["metrics_uri"], "event": extra}


def check_drift(
    rt: Runtime, *, corpus: str, run_id: str, sets: list[XCom], snapshot_id: str
) -> XCom:
    """Every set's run of the night against its baseline; every decision is stored (a first
    night's too, as ``no_baseline``). ``fired``: any set drifted."""
    if not rt.settings.drift.enabled:
        skipped = DriftCheck(run_id=run_id, fired=False, sets={}, skipped="drift.enabled is false")
        return skipped.to_json()
    from ragtrail.pipeline.drift.step import check_runs
    from ragtrail.pipeline.drift.views import compact

    planned = _planned(sets)
    settle_runs(rt)
    resume_runs(rt, [s.run_id for s in planned])  # the night's own runs, still to be published
    decisions = check_runs(rt.engine, [s.run_id for s in planned], rt.settings.drift, corpus=corpus)
    per_set = {s.name: compact(d) for s, d in zip(planned, decisions, strict=True)}
    for name, d in per_set.items():
        log.info(
            "drift %s: %s against %s (%s), %d cells tested, %d drifted",
            name,
            "FIRED" if d.fired else d.status,
            d.baseline_run,
            d.baseline_kind,
            d.n_tested,
            len(d.drifted),
        )
    fired = any(d.fired for d in per_set.values())
    check = DriftCheck(run_id=run_id, snapshot_id=snapshot_id, fired=fired, sets=per_set)
    return check.to_json()


def announce_drift(rt: Runtime, *, corpus: str, run_id: str, snapshot_id: str, drift: XCom) -> XCom:
    """The drift Asset event when a decision fired (led by the first fired set, all fired sets
    under ``decisions``); no event otherwise, so that a negative decision triggers nothing."""
    fired = DriftCheck.from_json(drift).fired_sets
    if not fired:
        return {"fired": False, "event": None}
    lead = next(iter(fired.values()))
    drifted = {model_of_evaluation(c.evaluation) for h in fired.values() for c in h.drifted}
    event = DriftEvent(
        decision_id=lead.decision_id,
        run_id=lead.run_id,
        night_run_id=run_id,
        corpus=corpus,
        snapshot_id=snapshot_id,
        qa_set_version=lead.qa_set_version,
        baseline_run=lead.baseline_run,
        baseline_kind=lead.baseline_kind,
        fired=True,
        metrics=[cell.to_json() for cell in lead.drifted],
        decisions={name: headline.to_json() for name, headline in fired.items()},
        models=[m for m in RETRAINABLE if m in drifted],
    )
    return {"fired": True, "event": event.to_extra()}


def publish_report(
    rt: Runtime, *, corpus: str, run_id: str, sets: list[XCom], snapshot_id: str
) -> XCom:
    """GX on every set's metrics, one HTML report with each set's change since its previous run;
    announces the metrics (:func:`ragtrail.pipeline.publish.publish_night`)."""
    publication, event = publish_night(
        rt, corpus=corpus, run_id=run_id, sets=_planned(sets), snapshot_id=snapshot_id
    )
    return {**publication.to_json(), "event": event.to_extra()}


# --------------------------------------------------------------------- retraining (RETRAIN flow)


def _skipped(model: str, models: list[str] | None) -> str | None:
    """Why this run does not train ``model`` (None: it does; ``models`` None: every model)."""
    if models is None or model in models:
        return None
    return f"this run trains {', '.join(models) or 'no model'}, not the {model} model"


def prepare_citation_training(
    rt: Runtime,
    *,
    corpus: str,
    run_id: str,
    snapshot_id: str | None = None,
    models: list[str] | None = None,
) -> XCom:
    """Split the corpus's QA sets into training prompts and frozen evaluation mixtures."""
    if why := _skipped(CITATION_MODEL, models):
        return {"split_version": None, "skipped": why}
    from ragtrail.pipeline.retrain import prepare_citation_data

    return prepare_citation_data(
        rt, corpus=corpus, run_id=run_id, snapshot_id=snapshot_id
    ).to_json()


def train_citation_challenger(
    rt: Runtime,
    *,
    corpus: str,
    run_id: str,
    base_model: str | None = None,
    rl_algorithm: str | None = None,
    models: list[str] | None = None,
) -> XCom:
    """SFT + RL on the run's split; the bundle registered as a new citation-model version."""
    if why := _skipped(CITATION_MODEL, models):
        return {"version": None, "skipped": why}
    from ragtrail.pipeline.retrain import train_challenger

    return train_challenger(
        rt, corpus=corpus, run_id=run_id, base_model=base_model, rl_algorithm=rl_algorithm
    ).to_json()


def gate_citation_challenger(
    rt: Runtime,
    *,
    corpus: str,
    run_id: str,
    version: int | None,
    drift_run_id: str | None = None,
) -> XCom:
    """The promotion gate: the model in service vs the new version, decided and recorded."""
    if version is None:
        return {"skipped": "no citation model was trained by this run"}
    from ragtrail.pipeline.retrain import gate_challenger

    return gate_challenger(
        rt, corpus=corpus, run_id=run_id, version=int(version), drift_run_id=drift_run_id
    ).to_json()


def prepare_evidence_training(
    rt: Runtime,
    *,
    corpus: str,
    run_id: str,
    snapshot_id: str | None = None,
    models: list[str] | None = None,
) -> XCom:
    """Split the corpus's QA sets for the extractor into training prompts and held-out items."""
    if why := _skipped(EXTRACTOR_MODEL, models):
        return {"evidence_split_version": None, "skipped": why}
    from ragtrail.pipeline.retrain_evidence import prepare_evidence_data

    split = prepare_evidence_data(rt, corpus=corpus, run_id=run_id, snapshot_id=snapshot_id)
    return {**split.to_json(), "evidence_split_version": split.split_version}


def train_evidence_challenger(
    rt: Runtime,
    *,
    corpus: str,
    run_id: str,
    base_model: str | None = None,
    models: list[str] | None = None,
) -> XCom:
    """Self-sampling, the three experts and LPO on the run's split; a new extractor version."""
    if why := _skipped(EXTRACTOR_MODEL, models):
        return {"evidence_version": None, "skipped": why}
    from ragtrail.pipeline.retrain_evidence import train_evidence_challenger as train

    trained = train(rt, corpus=corpus, run_id=run_id, base_model=base_model)
    return {**trained.to_json(), "evidence_version": trained.version}


def gate_evidence_challenger(
    rt: Runtime, *, corpus: str, run_id: str, evidence_version: int | None
) -> XCom:
    """The extractor gate: the one in service vs the new version, decided and recorded."""
    if evidence_version is None:
        return {"skipped": "no extractor was trained by this run"}
    from ragtrail.pipeline.retrain_evidence import gate_evidence_challenger as gate

    return gate(rt, corpus=corpus, run_id=run_id, version=int(evidence_version)).to_json()
