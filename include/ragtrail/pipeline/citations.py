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
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ragtrail import jsonsafe
from ragtrail.config import ModelRole
from ragtrail.evaluate.attribution.scenarios import run_scenarios
from ragtrail.evaluate.attribution.scoring import score_answers
from ragtrail.evaluate.citations.evaluator import (
    ANSWERABLE,
    CitationEvalConfig,
    MixtureEvaluation,
    evaluate_mixtures,
)
from ragtrail.evaluate.citations.mixture_answers import DEFAULT_ANSWER_PARAMS
from ragtrail.llm.client import GenerationParams
from ragtrail.pipeline.evaluate import (
    load_run_summary,
    open_set_run,
    put_parquet,
    run_prefix,
)
from ragtrail.pipeline.judges import entailment_judge, gate_decisions
from ragtrail.pipeline.mixtures import corpus_from_runtime
from ragtrail.pipeline.scenarios import scenario_corpus
from ragtrail.records import INCLUSIVE, QAItem, QuestionLabel
from ragtrail.runtime import Runtime
from ragtrail.storage.runs_store import RunStore

log = logging.getLogger(__name__)

DEFAULT_TEXT_WEIGHT = 0.5
"""Hybrid weight when the set has no retrieval run to take the best weight from."""


def citations_key(run_id: str) -> str:
    return f"{run_prefix(run_id)}/citations.json"


def sample_items(items: Sequence[QAItem], n: int, seed: int) -> list[QAItem]:
    """``n`` items spread over the labels (round robin over seeded shuffles; 0 = all items)."""
    if n <= 0 or n >= len(items):
        return list(items)
    rng = random.Random(seed)
    pools = []
    for label in QuestionLabel:
        pool = sorted((i for i in items if i.label == label), key=lambda i: i.qid)
        rng.shuffle(pool)
        if pool:
            pools.append(pool)
    picked: list[QAItem] = []
    while len(picked) < n:
        for pool in pools:
            if pool and len(picked) < n:
                picked.append(pool.pop())
    return picked


def best_text_weight(rt: Runtime, run_id: str) -> tuple[float, str]:
    """The best text weight of the set's latest retrieval run (its inclusive row), and where the
    choice came from; the default weight when the run has no retrieval summary."""
    key = f"{run_prefix(run_id)}/metrics.json"
    if not rt.artifacts.exists(key):
        return DEFAULT_TEXT_WEIGHT, f"default {DEFAULT_TEXT_WEIGHT} (no retrieval run {run_id})"
    best = {row["label"]: row for row in load_run_summary(rt, run_id).get("best", [])}
    row = best.get(INCLUSIVE)
    if not row or row.get("best_weight") is None:
        return DEFAULT_TEXT_WEIGHT, f"default {DEFAULT_TEXT_WEIGHT} (no inclusive best weight)"
    return float(row["best_weight"]), f"best inclusive Recall@5 weight of run {run_id}"


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
) -> dict[str, Any]:
    """Evaluate the answering model's citations on one QA set (see the module docstring).

    Arguments left None take their value from ``settings.citations`` (and ``settings.seed``).
    Returns a compact strict-JSON summary; the full one is stored at :func:`citations_key`.
    """
    cs = rt.settings.citations
    seed = rt.settings.seed if seed is None else seed
    scenario_names = tuple(cs.scenarios if scenarios is None else scenarios)
    opened = open_set_run(
        rt,
        corpus,
        run_id,
        "evaluate_citations",
        qa_set=qa_set,
        set_name=set_name,
        snapshot_id=snapshot_id,
    )
    items, params = opened.items, opened.params
    text_weight, weight_source = best_text_weight(rt, run_id)
    runs = RunStore(rt.engine)
    client = rt.llm(ModelRole.ANSWERER)
    answer_params = GenerationParams(
        **{**DEFAULT_ANSWER_PARAMS.__dict__, "max_new_tokens": cs.max_new_tokens, "seed": seed}
    )
    answerer = rt.llm_models().get(ModelRole.ANSWERER.value, client.backend.model_id)
    record = opened.record(rt, answerer=answerer)

    sample = sample_items(items, cs.max_items if max_items is None else max_items, seed)
    config = CitationEvalConfig(
        mixture_spec=mixture or cs.mixture,
        mixture_types=tuple(cs.mixture_types),
        seed=seed,
        baseline_repeats=cs.baseline_repeats,
        bootstrap_samples=cs.bootstrap_samples,
        exclude_ground_documents=cs.exclude_ground_documents,
    )
    mix = evaluate_mixtures(
        sample,
        corpus_from_runtime(rt, corpus, text_weight=text_weight),
        client,
        config=config,
        params=answer_params,
    )
    runs.record_evaluation(run_id, mix.result, **record, judges={})

    summary: dict[str, Any] = {
        "run_id": run_id,
        "set_name": set_name,
        **params,
        "answerer": answerer,
        "text_weight": text_weight,
        "text_weight_source": weight_source,
        "mixture": mixture_view(mix),
    }
    if scenario_names:
        scen_sample = sample_items(
            items, cs.scenario_items if scenario_items is None else scenario_items, seed
        )
        summary["scenarios"] = _scenarios(
            rt, corpus, run_id, scen_sample, scenario_names, text_weight, answer_params, record
        )
    else:
        jsonsafe.mark_undefined(summary, "scenarios", "no scenario requested")
    uri = rt.artifacts.put_bytes(
        citations_key(run_id), jsonsafe.dumps(summary, "citations.json", indent=1).encode()
    )
    put_parquet(rt, f"{run_prefix(run_id)}/citation_queries.parquet", citation_queries_frame(mix))
    return {**compact(summary), "citations_uri": uri}


def _scenarios(
    rt: Runtime,
    corpus: str,
    run_id: str,
    items: list[QAItem],
    names: Sequence[str],
    text_weight: float,
    params: GenerationParams,
    record: dict[str, Any],
) -> dict[str, Any]:
    cs = rt.settings.citations
    run = run_scenarios(
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
    judge = entailment_judge(rt)
    decision = gate_decisions(rt, [judge])[judge.spec.name].as_dict()
    records, facets = [], []
    for name, result in run.scenarios.items():
        for answer in result.answers:
            if answer.status == "ok":
                records.append(answer.record)
                facets.append({"scenario": name})
    by_record = dict(zip(map(id, records), facets, strict=True))
    score = score_answers(
        records,
        judge,
        facets_of=lambda r: by_record[id(r)],
        bootstrap_samples=cs.bootstrap_samples,
        seed=params.seed,
    )
    runs = RunStore(rt.engine)
    runs.record_evaluation(run_id, score.result, **record, judges={"entailment": decision})
    details = run.as_json()
    return {
        "names": list(run.scenarios),
        "items": len(items),
        "judge": decision,
        "aggregates": [
            {
                "scenario": a["facets"].get("scenario"),
                **{k: v for k, v in a.items() if k != "facets"},
            }
            for a in score.as_json()["aggregates"]
        ],
        "retrieval": [
            {"scenario": name, **row}
            for name, result in run.scenarios.items()
            if result.retrieval is not None
            for row in result.retrieval.macro
        ],
        "counts": {
            name: {k: details["scenarios"][name][k] for k in ("n", "n_ok", "n_failed", "n_skipped")}
            for name in run.scenarios
        },
        "seconds_per_question": {
            name: details["scenarios"][name]["seconds_per_question"] for name in run.scenarios
        },
        "skipped": score.skipped,
        "failed_verdicts": score.failed_verdicts,
        "details": details,
    }


def mixture_view(mix: MixtureEvaluation) -> dict[str, Any]:
    """What the report reads of a mixture evaluation: the spec, aggregates, the unanswerable
    table, failure counts and the drill-down rows (numbered passages, answer, cited vs relevant)."""
    summary = mix.as_json()
    config = summary["config"]
    queries = []
    for q in summary["queries"]:
        answer = q["answer"]
        model = q["scores"]["model"]
        cited = [k for k in answer.get("cited", []) if 1 <= k <= len(q["passages"])]
        queries.append(
            {
                "qid": q["qid"],
                "label": q["label"],
                "mixture": q["mixture"],
                "question": q["question"],
                "relevant_source": q["relevant_source"],
                "passages": [
                    {
                        "kind": p["kind"],
                        "doc_id": p["doc_id"],
                        "chunk_id": p["chunk_id"],
                        "text": p["text"],
                    }
                    for p in q["passages"]
                ],
                "answer": answer.get("text", ""),
                "cited": cited,
                "invalid": [k for k in answer.get("cited", []) if not 1 <= k <= len(q["passages"])],
                "relevant": q["relevant"],
                "precision": model.get("citation_precision"),
                "recall": model.get("citation_recall"),
                "f1": model.get("citation_f1"),
                "error": answer.get("error"),
                "raw": "\n---\n".join(answer.get("raw_texts", [])),
            }
        )
    aggregates = summary["aggregates"]
    unanswerable = []
    for mixture_type in config["mixture_types"]:
        for system in ("model", "random"):
            rows = {
                a["metric"]: a
                for a in aggregates
                if a.get("label") == QuestionLabel.UNANSWERABLE.value
                and a.get("mixture") == mixture_type
                and a.get("system") == system
            }
            if rows:
                unanswerable.append(
                    {
                        "mixture": mixture_type,
                        "system": system,
                        "cited_any": rows.get("cited_any"),
                        "abstained": rows.get("abstained"),
                    }
                )
    return {
        "spec": config["mixture_spec"],
        "types": list(config["mixture_types"]),
        "seed": config["seed"],
        "baseline_repeats": config["baseline_repeats"],
        "counts": summary["counts"],
        "failed": summary["counts"]["answers_failed"],
        "skipped": summary["skipped"],
        "random_expected": summary["random_expected"],
        "aggregates": aggregates,
        "unanswerable": unanswerable,
        "queries": queries,
    }


def citation_queries_frame(mix: MixtureEvaluation) -> pd.DataFrame:
    """One row per (question, mixture type, system) with precision, recall and F1 (GX input)."""
    frame = mix.per_query
    if frame.empty:  # every item was skipped: an empty table the checks still read
        return pd.DataFrame(
            columns=["qid", "label", "mixture", "system", "precision", "recall", "f1"]
        )
    out = pd.DataFrame(
        {
            "qid": frame["qid"],
            "label": frame["label"],
            "mixture": frame["mixture"],
            "system": frame["system"],
            "precision": frame["citation_precision"],
            "recall": frame["citation_recall"],
            "f1": frame["citation_f1"],
        }
    )
    return out


def compact(summary: dict[str, Any]) -> dict[str, Any]:
    """The step's result: where the summary is, and the headline F1 model vs random per type."""
    headline = {}
    for agg in summary["mixture"]["aggregates"]:
        if agg["metric"] == "citation_f1" and agg.get("label") == ANSWERABLE:
            headline.setdefault(agg["mixture"], {})[agg["system"]] = {
                k: agg.get(k) for k in ("value", "ci_low", "ci_high", "n")
            }
    return jsonsafe.check_finite(
        {
            "run_id": summary["run_id"],
            "answerer": summary["answerer"],
            "f1": headline,
        },
        "citation result",
    )


def load_citations(rt: Runtime, run_id: str) -> dict[str, Any] | None:
    """The stored citation summary of a set's run (None when citations were not evaluated)."""
    key = citations_key(run_id)
    return json.loads(rt.artifacts.get_bytes(key)) if rt.artifacts.exists(key) else None
