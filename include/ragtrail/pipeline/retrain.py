"""Drift-triggered retraining of the citation answerer: data, training, registration, the gate.

The ``retrain_models`` flow (``pipeline/night.py`` RETRAIN) runs these three steps:

1. :func:`prepare_citation_data`: every QA set the night evaluates (golden sets and the newest
   test set), split by question *and* document (:func:`ragtrail.train.citation.split_citation_data`)
   into training prompts and frozen evaluation mixtures; the split is stored as JSON in the
   artifact store under ``retrain/<run>/split.json`` and travels with the model's lineage.
2. :func:`train_challenger` (gpu pool, gpu queue): SFT targets (the configured teacher, else
   best-of-N from the model in service), SFT, then RL on the citation reward; the bundle is
   registered as a new version of the citation model.
3. :func:`gate_challenger`: the model in service (the registered champion, else the configured
   answerer) and the new version answer the same frozen mixtures with the same seeds; the
   promotion gate (:func:`ragtrail.evaluate.comparison.promotion.decide_promotion`) decides, the registry
   records the decision and moves ``champion`` or ``challenger``. A promoted model's acceptance
   becomes the drift baseline of the night's set runs (``DriftStore.record_champion_baseline``):
   later nights are compared with the state it was accepted on, so a corpus change that was
   already answered by retraining does not fire again every night.

Every step is idempotent per flow run: the split and the registered version are looked up by the
run id before anything is recomputed. A step whose model calls mostly failed (more than
``citation_training.max_failed_share`` of the SFT target answers, or of either model's answers at
the gate) raises :class:`~ragtrail.failures.EvaluationFailedError`: nothing is trained, and no
promotion is decided.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

from ragtrail.artifact_keys import retrain_split_key
from ragtrail.config import ModelRole
from ragtrail.evaluate.citations.evaluator import MixtureEvaluation
from ragtrail.failures import FailureCount, check_failures
from ragtrail.models.registry import (
    settle_challenger,
)
from ragtrail.pipeline.evaluation_sets import items_of_sets
from ragtrail.pipeline.passage_sources import corpus_from_runtime
from ragtrail.pipeline.run_io import evaluated_snapshot
from ragtrail.pipeline.serving import base_model_of, version_of_run
from ragtrail.pipeline.serving import serving_spec as model_in_service
from ragtrail.records import ModelKind, ModelSpec
from ragtrail.redact import redact
from ragtrail.runtime import Runtime
from ragtrail.summaries.retrain_summary import ChallengerVersion, GateOutcome, TrainingSplit

log = logging.getLogger(__name__)


def prepare_citation_data(
    rt: Runtime,
    *,
    corpus: str,
    run_id: str,
    snapshot_id: str | None = None,
    qa_set: str | None = None,
) -> TrainingSplit:
    """Split the corpus's QA sets (``qa_set``: that set in place of the generated one) into
    training prompts and frozen evaluation mixtures."""
    from ragtrail.train.citation import split_citation_data

    key = retrain_split_key(run_id)
    snapshot = evaluated_snapshot(rt, corpus, snapshot_id)
    if rt.artifacts.exists(key):  # a retried task reuses the split it stored
        split = _load_split(rt, run_id)
    else:
        items, sets = items_of_sets(rt, corpus, run_id, qa_set)
        cfg = rt.settings.citation_training
        split = split_citation_data(
            items,
            corpus_from_runtime(rt, corpus),
            eval_share=cfg.eval_share,
            seed=cfg.seed,
            mixture_spec=rt.settings.citations.mixture,
            mixture_types=rt.settings.citations.mixture_types,
            exclude_ground_documents=rt.settings.citations.exclude_ground_documents,
        )
        rt.artifacts.put_bytes(key, split.to_json().encode("utf-8"))
        log.info("citation split %s from %s", split.split_version, ", ".join(sets))
    return TrainingSplit(
        split_uri=rt.artifacts.uri_for(key),
        split_version=split.split_version,
        snapshot_id=snapshot.snapshot_id,
        **split.counts,
    )


def _load_split(rt: Runtime, run_id: str) -> Any:
    from ragtrail.train.citation import CitationSplit

    return CitationSplit.from_json(
        rt.artifacts.get_bytes(retrain_split_key(run_id)).decode("utf-8")
    )


def serving_spec(rt: Runtime) -> tuple[str, str]:
    """The citation model in service and what it is (the champion, else the answerer)."""
    return model_in_service(rt, rt.settings.registry.citation_model_name, ModelRole.ANSWERER)


def train_challenger(
    rt: Runtime,
    *,
    corpus: str,
    run_id: str,
    base_model: str | None = None,
    rl_algorithm: str | None = None,
) -> ChallengerVersion:
    """Train a new citation model on the run's split and register it (not yet an alias);
    ``rl_algorithm`` (ppo, grpo, rloo) overrides ``citation_training.rl_algorithm``."""
    from ragtrail.train.citation import CitationTrainingConfig, train_citation_model

    name = rt.settings.registry.citation_model_name
    existing = version_of_run(rt, name, run_id)
    if existing is not None:
        log.info("%s v%d was already trained by %s", name, existing, run_id)
        return ChallengerVersion(model=name, version=existing, reused=True)
    split = _load_split(rt, run_id)
    serving, serving_what = serving_spec(rt)
    base = base_model or base_model_of(rt, serving, role=ModelRole.ANSWERER)
    cfg = rt.settings.citation_training
    teacher = rt.llm_for_spec(cfg.teacher) if cfg.teacher else None
    current = None if teacher is not None else rt.llm_for_spec(serving)
    chosen = {"rl_algorithm": rl_algorithm} if rl_algorithm else {}
    config = CitationTrainingConfig.from_settings(rt.settings, **chosen)
    with tempfile.TemporaryDirectory(prefix="ragtrail-train-") as work:
        result = train_citation_model(
            base,
            split,
            config,
            Path(work) / "run",
            teacher=teacher,
            current=current,
            cache_dir=rt.settings.resolved_model_cache_dir,
        )
        lineage = {
            **result.lineage,
            "retrain_run": run_id,
            "corpus": corpus,
            "targets_from": redact(cfg.teacher or f"best-of-{cfg.best_of_n} from {serving_what}"),
        }
        version = rt.registry.register_bundle(
            name,
            result.bundle.path,
            lineage=lineage,
            description=f"trained by {run_id} on {corpus} (split {split.split_version})",
        )
    return ChallengerVersion(
        model=name,
        version=version.version,
        reused=False,
        base_model=base,
        wall_seconds=round(result.wall_seconds, 1),
        sft_steps=result.sft.steps,
        rl_steps=result.rl.steps,
        rl_algorithm=str(config.rl_algorithm),
        rl_mean_reward=result.rl.as_dict()["mean_reward"],
        rl_note=result.rl.skipped or result.rl.stopped,
    )


def _evaluate(rt: Runtime, spec: str, split: Any, run_id: str) -> MixtureEvaluation:
    """``spec`` on the split's frozen mixtures; raises when most of its answers failed (a gate
    decided on what a dead endpoint left would promote or keep a model for nothing)."""
    from ragtrail.train.citation import evaluate_citation_model

    cfg = rt.settings.citations
    evaluation = evaluate_citation_model(
        rt.llm_for_spec(spec),
        split,
        max_new_tokens=cfg.max_new_tokens,
        baseline_repeats=cfg.baseline_repeats,
        bootstrap_samples=cfg.bootstrap_samples,
    )
    check_failures(
        "promotion gate",
        [
            FailureCount.of(
                f"answers of {spec}",
                (None if a.ok else (a.error or a.cause or "failed") for a in evaluation.answers),
            )
        ],
        max_share=rt.settings.citation_training.max_failed_share,
        setting="citation_training.max_failed_share",
        run_id=run_id,
    )
    return evaluation


def gate_challenger(
    rt: Runtime,
    *,
    corpus: str,
    run_id: str,
    version: int,
    drift_run_id: str | None = None,
) -> GateOutcome:
    """Champion (or the configured answerer) vs the new version on the frozen mixtures; the gate
    decides and the registry records it. ``drift_run_id`` (a night or set run) names the runs the
    champion is accepted on; default: the corpus's newest night."""
    from ragtrail.evaluate.comparison.promotion import GateConfig, decide_promotion
    from ragtrail.pipeline.drift.step import runs_to_check
    from ragtrail.storage.drift_store import DriftStore
    from ragtrail.train.citation import headline

    name = rt.settings.registry.citation_model_name
    split = _load_split(rt, run_id)
    serving, serving_what = serving_spec(rt)
    challenger_spec = str(ModelSpec(ModelKind.REGISTRY, f"{name}@{version}"))
    if serving == challenger_spec:
        return GateOutcome(model=name, version=version, promoted=True, reason="already champion")
    current = _evaluate(rt, serving, split, run_id)
    challenger = _evaluate(rt, challenger_spec, split, run_id)
    decision = decide_promotion(
        current.rows,
        challenger.rows,
        GateConfig.from_settings(rt.settings.promotion),
        serving=f"the {serving_what}",
    )
    evidence = {
        **decision.as_json(),
        "compared_with": serving_what,
        "compared_spec": redact(serving),
        "split_version": split.split_version,
        "current": headline(current),
        "challenger": headline(challenger),
    }
    # The runs a promoted model is accepted on, found before the registry changes: a night that
    # did not complete is refused here, not after the promotion.
    accepted = runs_to_check(rt.engine, corpus, drift_run_id) if decision.promote else []
    settle_challenger(
        rt.registry,
        name,
        version,
        promote_it=decision.promote,
        reason=decision.reason,
        decision=evidence,
    )
    accepted_on: list[str] = []
    if decision.promote:
        store = DriftStore(rt.engine)
        for run in accepted:
            store.record_champion_baseline(corpus, run, name, str(version))
            accepted_on.append(run)
    log.info(
        "%s v%d: %s (%s)",
        name,
        version,
        "promoted" if decision.promote else "kept",
        decision.reason,
    )
    return GateOutcome(
        model=name,
        version=version,
        promoted=decision.promote,
        reason=decision.reason,
        compared_with=serving_what,
        current_f1=evidence["current"],
        challenger_f1=evidence["challenger"],
        accepted_on=accepted_on,
    )
