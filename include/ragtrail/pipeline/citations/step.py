"""Citation evaluation as a pipeline step: relevance mixtures and attributed-answer scenarios on
one QA set, stored in the set's run.

``evaluate_citations`` samples the set's questions (stratified by label, seeded; the nightly's
sizes are settings, 0 = every question), then

* answers seeded relevance mixtures with the answering model and scores its citations against
  the known relevance, next to a random baseline on the same mixtures (evaluator ``citations``,
  :mod:`ragtrail.evaluate.citations.evaluator`);
* runs the attributed-answer scenarios over the corpus index and scores them with the attribution
  metrics (evaluator ``attribution``), the entailment ones by the configured entailment judge,
  named with its calibration and gate decision.

Both land in the metrics history under the set's run id (next to its retrieval metrics), the
per-query values included, and one strict-JSON summary (``runs/<run id>/citations.json``) holds
everything the report shows. Model calls go through the cached client: a rerun makes none and
gives the same numbers. Rerunning the step replaces the run's citation rows instead of adding.

When more than ``citations.max_failed_share`` of the mixture answers, of the scenario answers or
of the scenarios' entailment verdicts failed, nothing of that evaluation is recorded: the run
ends ``failed`` with the counts and the step raises (:mod:`ragtrail.failures`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import cast

from ragtrail.artifact_keys import citation_queries_key, citations_key
from ragtrail.config import CitationSettings, ModelRole
from ragtrail.evaluate.attribution.scenario_results import ScenarioRun
from ragtrail.evaluate.attribution.scenarios import run_scenarios
from ragtrail.evaluate.attribution.scoring import score_answers
from ragtrail.evaluate.citations.evaluator import (
    CitationEvalConfig,
    MixtureEvaluation,
    evaluate_mixtures,
)
from ragtrail.evaluate.citations.mixture_answers import DEFAULT_ANSWER_PARAMS
from ragtrail.failures import FailureCount
from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.client import GenerationParams
from ragtrail.llm.together import together
from ragtrail.pipeline.budgets import Allowance, budgeted_set_step, keep_finished
from ragtrail.pipeline.citations.views import citation_queries_frame, compact, mixture_view
from ragtrail.pipeline.judges import entailment_judge, gate_decisions
from ragtrail.pipeline.passage_sources import corpus_from_runtime, scenario_corpus
from ragtrail.pipeline.run_io import (
    SetRun,
    best_text_weight,
    check_step_failures,
    held_run,
    open_set_run,
    put_parquet,
    sample_items,
)
from ragtrail.pipeline.sample_size import bounded_by_budget, sized_items
from ragtrail.records import QAItem
from ragtrail.runtime import Runtime
from ragtrail.storage.runs_store import RunStore
from ragtrail.summaries.citation_summary import (
    CitationRun,
    CitationSummary,
    ScenarioAggregate,
    ScenarioCounts,
    ScenarioRetrievalRow,
    ScenarioSummary,
)
from ragtrail.summaries.judge_summary import JudgeGate
from ragtrail.summaries.qa_sets import SampleSizing

log = logging.getLogger(__name__)


def evaluate_citations(
    rt: Runtime,
    corpus: str,
    *,
    run_id: str,
    qa_set: str | Path | None = None,
    set_name: str | None = None,
    snapshot_id: str | None = None,
    mixture: str | None = None,
    scenarios: Sequence[str] | None = None,
    seed: int | None = None,
    max_items: int | None = None,
    scenario_items: int | None = None,
) -> CitationRun:
    """Evaluate the answering model's citations on one QA set (see the module docstring).

    Arguments left None take their value from ``settings.citations`` (and ``settings.seed``).
    Returns the set's headline and where the full summary is stored (:func:`citations_key`).
    """
    cs = rt.settings.citations
    seed = rt.settings.seed if seed is None else seed
    scenario_names = tuple(cs.scenarios if scenarios is None else scenarios)
    config = CitationEvalConfig(  # checked before the run is touched
        mixture_spec=mixture or cs.mixture,
        mixture_types=tuple(cs.mixture_types),
        seed=seed,
        baseline_repeats=cs.baseline_repeats,
        bootstrap_samples=cs.bootstrap_samples,
        exclude_ground_documents=cs.exclude_ground_documents,
    )
    opened = open_set_run(
        rt,
        corpus,
        run_id,
        "evaluate_citations",
        qa_set=qa_set,
        set_name=set_name,
        snapshot_id=snapshot_id,
    )
    n_scenarios = cs.scenario_items if scenario_items is None else scenario_items
    n, sizing = sized_items(
        rt,
        corpus,
        "citations",
        target_mde=cs.target_mde,
        max_items=cs.max_items if max_items is None else max_items,
        available=len(opened.items),
    )
    with (
        held_run(rt, run_id, opened.night),
        budgeted_set_step(
            rt,
            "citations",
            opened,
            max_items=n,
            seed=seed,
            settings={
                **cs.model_dump(mode="json"),
                "mixture": config.mixture_spec,
                "scenarios": list(scenario_names),
                "scenario_items": n_scenarios,
            },
        ) as allowance,
    ):
        return keep_finished(
            allowance,
            lambda k: _evaluate(
                rt,
                opened,
                config,
                scenario_names,
                set_name=set_name,
                max_items=k,
                # the scenarios' sample shrinks with the budget's n like the mixtures' does
                scenario_items=_bounded(n_scenarios, k, allowance),
                allowance=allowance,
                sizing=bounded_by_budget(sizing, k),
            ),
        )


def answer_params(cs: CitationSettings, seed: int) -> GenerationParams:
    """The answering model's parameters in the mixtures and the scenarios."""
    return GenerationParams(
        **{**DEFAULT_ANSWER_PARAMS.__dict__, "max_new_tokens": cs.max_new_tokens, "seed": seed}
    )


def _bounded(n: int, k: int, allowance: Allowance) -> int:
    """``n`` (0 = all) cut to ``k`` items when a budget bounded the step."""
    if not allowance.partial and k >= allowance.items:
        return n
    return k if n <= 0 else min(n, k)


def _evaluate(
    rt: Runtime,
    opened: SetRun,
    config: CitationEvalConfig,
    scenario_names: Sequence[str],
    *,
    set_name: str | None,
    max_items: int,
    scenario_items: int,
    allowance: Allowance | None = None,
    sizing: SampleSizing | None = None,
) -> CitationRun:
    """The body of :func:`evaluate_citations`, on the opened and held run."""
    cs = rt.settings.citations
    corpus, run_id, seed = opened.corpus, opened.run_id, config.seed
    items, params = opened.items, opened.params
    text_weight, weight_source = best_text_weight(rt, run_id)
    runs = RunStore(rt.engine)
    client = rt.llm(ModelRole.ANSWERER)
    params_of_answers = answer_params(cs, seed)
    answerer = rt.llm_models().get(ModelRole.ANSWERER.value, client.backend.model_id)
    record = opened.record(rt, answerer=answerer)

    sample = sample_items(items, max_items, seed)
    scen_sample = sample_items(items, scenario_items, seed) if scenario_names else []
    corpus_view = corpus_from_runtime(rt, corpus, text_weight=text_weight)

    def mixtures() -> MixtureEvaluation:
        """The mixtures answered, checked and recorded (before the scenarios end: a run killed
        in them keeps its mixture results)."""
        mix = evaluate_mixtures(
            sample, corpus_view, client, config=config, params=params_of_answers
        )
        _check(
            rt,
            run_id,
            FailureCount.of(
                "answers of the relevance mixtures",
                (None if a.ok else (a.error or a.cause or "failed") for a in mix.answers),
            ),
        )
        runs.record_evaluation(run_id, mix.result, **record, judges={})
        return mix

    # the mixtures' and the scenarios' answers do not read each other: at once on an endpoint
    done, answered = together(
        [
            mixtures,
            partial(
                _answer_scenarios,
                rt,
                corpus,
                scen_sample,
                scenario_names,
                text_weight,
                params_of_answers,
            ),
        ],
        concurrent=client.concurrent,
    )
    mix = cast(MixtureEvaluation, done)

    scenarios: ScenarioSummary | None = None
    if answered is not None:
        run = cast(ScenarioRun, answered)
        scenarios = _scenarios(rt, run_id, run, len(scen_sample), params_of_answers, record)
    if allowance is not None:
        allowance.done(len(sample))
    summary = CitationSummary(
        budget=allowance.note_now(rt) if allowance is not None else None,
        run_id=run_id,
        set_name=set_name,
        **params,
        answerer=answerer,
        text_weight=text_weight,
        text_weight_source=weight_source,
        mixture=mixture_view(mix),
        scenarios=scenarios,
        sample_size=sizing,
        undefined={} if scenarios else {"scenarios": "no scenario requested"},
    )
    uri = rt.artifacts.put_bytes(citations_key(run_id), summary.dumps(indent=1).encode())
    put_parquet(rt, citation_queries_key(run_id), citation_queries_frame(mix))
    return CitationRun(**dict(compact(summary)), citations_uri=uri)


def _check(rt: Runtime, run_id: str, *counts: FailureCount) -> None:
    check_step_failures(
        run_id,
        "citation evaluation",
        counts,
        max_share=rt.settings.citations.max_failed_share,
        setting="citations.max_failed_share",
    )


def _answer_scenarios(
    rt: Runtime,
    corpus: str,
    items: list[QAItem],
    names: Sequence[str],
    text_weight: float,
    params: GenerationParams,
) -> ScenarioRun | None:
    """The attributed-answer scenarios' answers on ``items`` (None: no scenario requested)."""
    if not names:
        return None
    cs = rt.settings.citations
    return run_scenarios(
        items,
        scenario_corpus(rt, corpus),
        rt.llm(ModelRole.ANSWERER),
        scenarios=names,
        k=cs.scenario_k,
        text_weight=text_weight,
        subqueries=cs.subqueries,
        fusion=cs.fusion,
        params=params,
        bootstrap_samples=cs.bootstrap_samples,
        seed=params.seed,
    )


def _scenarios(
    rt: Runtime,
    run_id: str,
    run: ScenarioRun,
    items: int,
    params: GenerationParams,
    record: JsonObject,
) -> ScenarioSummary:
    """Score the attributed-answer scenarios' answers (``items`` questions) and record their
    metrics."""
    cs = rt.settings.citations
    judge = entailment_judge(rt)
    decision = gate_decisions(rt, [judge])[judge.spec.name].as_dict()
    records, facets = [], []
    for name, result in run.scenarios.items():
        for answer in result.answers:
            if answer.status == "ok":
                records.append(answer.record)
                facets.append({"scenario": name})
    answers = [
        answer
        for result in run.scenarios.values()
        for answer in result.answers
        if answer.status != "skipped"
    ]
    _check(
        rt,
        run_id,
        FailureCount.of(
            "answers of the attributed-answer scenarios",
            (None if a.status == "ok" else (a.error or a.cause or str(a.status)) for a in answers),
        ),
    )
    by_record = dict(zip(map(id, records), facets, strict=True))
    score = score_answers(
        records,
        judge,
        facets_of=lambda r: by_record[id(r)],
        bootstrap_samples=cs.bootstrap_samples,
        seed=params.seed,
    )
    first_verdict_error = next((str(f.get("error")) for f in score.failures), None)
    _check(
        rt,
        run_id,
        FailureCount(
            "entailment verdicts of the scenarios",
            score.failed_verdicts,
            score.judged_pairs,
            first_verdict_error,
        ),
    )
    runs = RunStore(rt.engine)
    runs.record_evaluation(run_id, score.result, **record, judges={"entailment": decision})
    details = run.as_json()
    return ScenarioSummary(
        names=list(run.scenarios),
        items=items,
        judge=JudgeGate.from_json(decision),
        aggregates=[
            ScenarioAggregate(
                scenario=a["facets"]["scenario"],
                **{k: v for k, v in a.items() if k != "facets"},
            )
            for a in score.as_json()["aggregates"]
        ],
        retrieval=[
            ScenarioRetrievalRow(scenario=name, **row)
            for name, result in run.scenarios.items()
            if result.retrieval is not None
            for row in result.retrieval.macro
        ],
        counts={
            name: ScenarioCounts(
                **{k: details["scenarios"][name][k] for k in ("n", "n_ok", "n_failed", "n_skipped")}
            )
            for name in run.scenarios
        },
        seconds_per_question={
            name: details["scenarios"][name]["seconds_per_question"] for name in run.scenarios
        },
        skipped=score.skipped,
        failed_verdicts=score.failed_verdicts,
        details=details,
    )
