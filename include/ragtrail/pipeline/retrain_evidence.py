"""Drift-triggered retraining of the evidence extractor by self-alignment (SEER, METHODS §10).

The ``retrain_models`` flow runs these three steps when the drift event names the extractor
(its ``correct`` with evidence drifted), or when a manual run asks for it:

1. :func:`prepare_evidence_data`: every QA set the night evaluates, split by question and
   document (:func:`ragtrail.train.evidence.split_evidence_data`) into training prompts and
   frozen held-out questions, stored under ``retrain/<run>/evidence_split.json``;
2. :func:`train_evidence_challenger` (gpu pool, gpu queue): self-sampling from the extractor in
   service, the three experts, CoV weighting, LPO with LoRA; the bundle is registered as a new
   version of the extractor (no alias yet);
3. :func:`gate_evidence_challenger`: the extractor in service (champion, else the configured
   extractor) and the new version write evidence for the same held-out questions with the same
   seeds, the answerer answers from it, and
   :func:`~ragtrail.evaluate.comparison.promotion.decide_evidence_promotion` decides on
   end-to-end correctness (paired CI above zero) guarded by faithfulness and compression; the
   registry records the decision and moves ``champion`` or ``challenger`` (rollback as for the
   citation model: ``ragtrail models rollback``).

Every step is idempotent per flow run (the split and the version are found again by run id).
"""

from __future__ import annotations

import logging
import random
import tempfile
from pathlib import Path
from typing import Any

from ragtrail.artifact_keys import retrain_evidence_split_key
from ragtrail.config import ModelRole
from ragtrail.evaluate.evidence.experts import faithfulness_verdicts, verdict_score
from ragtrail.evaluate.evidence.extraction import extract_evidence, extraction_params
from ragtrail.evaluate.evidence.full_answers import full_length_answers
from ragtrail.evaluate.evidence.measures import compression, token_count
from ragtrail.evaluate.sufficiency.cah import AnswerCase, Outcome, classify
from ragtrail.evaluate.sufficiency.short_answers import (
    ShortAnswerInput,
    answer_questions,
    short_answer_params,
)
from ragtrail.failures import FailureCount, check_failures
from ragtrail.jsonsafe import JsonObject
from ragtrail.models.registry import settle_challenger
from ragtrail.pipeline.correctness import correctness_judge
from ragtrail.pipeline.evaluation_sets import items_of_sets
from ragtrail.pipeline.judges import entailment_judge
from ragtrail.pipeline.passage_sources import scenario_corpus
from ragtrail.pipeline.run_io import best_text_weight, evaluated_snapshot
from ragtrail.pipeline.serving import base_model_of, serving_spec, version_of_run
from ragtrail.records import ModelKind, ModelSpec, QuestionLabel
from ragtrail.redact import redact
from ragtrail.runtime import Runtime
from ragtrail.summaries.retrain_summary import (
    EvidenceChallenger,
    EvidenceGateOutcome,
    EvidenceTrainingSplit,
)

log = logging.getLogger(__name__)


def _name(rt: Runtime) -> str:
    return rt.settings.registry.extractor_model_name


def in_service(rt: Runtime) -> tuple[str, str]:
    """The extractor in service and what it is."""
    return serving_spec(rt, _name(rt), ModelRole.EXTRACTOR)


def prepare_evidence_data(
    rt: Runtime,
    *,
    corpus: str,
    run_id: str,
    snapshot_id: str | None = None,
    qa_set: str | None = None,
) -> EvidenceTrainingSplit:
    """Split the corpus's QA sets (``qa_set``: that set in place of the generated one) into
    training prompts and frozen held-out questions."""
    from ragtrail.train.evidence.data import split_evidence_data

    key = retrain_evidence_split_key(run_id)
    snapshot = evaluated_snapshot(rt, corpus, snapshot_id)
    items, sets = items_of_sets(rt, corpus, run_id, qa_set)
    if rt.artifacts.exists(key):  # a retried task reuses the split it stored
        split = load_evidence_split(rt, run_id)
    else:
        cfg = rt.settings.evidence_training
        text_weight, _ = best_text_weight(rt, run_id)
        search = scenario_corpus(rt, corpus).search
        split = split_evidence_data(
            items,
            lambda questions, depth: search(questions, depth, text_weight),
            k=rt.settings.evidence.retrieval_k,
            eval_share=cfg.eval_share,
            seed=cfg.seed,
        )
        rt.artifacts.put_bytes(key, split.to_json().encode("utf-8"))
        log.info("evidence split %s from %s", split.split_version, ", ".join(sets))
    return EvidenceTrainingSplit(
        split_uri=rt.artifacts.uri_for(key),
        split_version=split.split_version,
        snapshot_id=snapshot.snapshot_id,
        items=len(items),
        train_prompts=len(split.train),
        eval_items=len(split.held_out),
        dropped=len(split.dropped),
        held_out_documents=len(split.held_out_docs),
    )


def load_evidence_split(rt: Runtime, run_id: str) -> Any:
    from ragtrail.train.evidence.data import EvidenceSplit

    raw = rt.artifacts.get_bytes(retrain_evidence_split_key(run_id))
    return EvidenceSplit.from_json(raw.decode("utf-8"))


def train_evidence_challenger(
    rt: Runtime, *, corpus: str, run_id: str, base_model: str | None = None
) -> EvidenceChallenger:
    """Self-align a new extractor on the run's split and register it (not yet an alias)."""
    from ragtrail.train.evidence.run import train_evidence_model

    name = _name(rt)
    existing = version_of_run(rt, name, run_id)
    if existing is not None:
        log.info("%s v%d was already trained by %s", name, existing, run_id)
        return EvidenceChallenger(model=name, version=existing, reused=True)
    split = load_evidence_split(rt, run_id)
    serving, serving_what = in_service(rt)
    base = base_model or base_model_of(rt, serving, role=ModelRole.EXTRACTOR)
    cfg = rt.settings.evidence_training
    fulls = full_length_answers(
        rt.llm(ModelRole.GENERATOR), [(p.question, p.gold) for p in split.train], seed=cfg.seed
    )
    with tempfile.TemporaryDirectory(prefix="ragtrail-seer-") as work:
        result = train_evidence_model(
            base,
            split,
            cfg,
            Path(work) / "run",
            extractor=rt.llm_for_spec(serving),
            judge=entailment_judge(rt),
            scorer=rt.scorer,
            encode=rt.embedder.encode,
            full_answers={p.qid: f.sentence for p, f in zip(split.train, fulls, strict=True)},
            max_new_tokens=rt.settings.evidence.max_new_tokens,
            cache_dir=rt.settings.resolved_model_cache_dir,
        )
        lineage = {
            **result.lineage,
            "retrain_run": run_id,
            "corpus": corpus,
            "samples_from": f"{redact(serving)} ({serving_what})",
        }
        version = rt.registry.register_bundle(
            name,
            result.bundle.path,
            lineage=lineage,
            description=f"self-aligned by {run_id} on {corpus} (split {split.split_version})",
        )
    return EvidenceChallenger(
        model=name,
        version=version.version,
        reused=False,
        base_model=base,
        wall_seconds=round(result.wall_seconds, 1),
        lpo_steps=result.lpo.steps,
        preference_lists=result.preferences.lists,
        expert_weights=result.preferences.weights,
    )


def gate_questions(split: Any, limit: int, seed: int) -> list[Any]:
    """The held-out questions the gate compares on: all, or a seeded sample of ``limit``."""
    prompts = list(split.held_out)
    if 0 < limit < len(prompts):
        picked = sorted(random.Random(seed).sample(range(len(prompts)), limit))
        prompts = [prompts[i] for i in picked]
    return prompts


def extractor_rows(rt: Runtime, spec: str, split: Any, run_id: str) -> list[JsonObject]:
    """``spec`` on the split's held-out questions: per question ``correct`` (1/0; a failed
    extraction or answer counts 0), ``faithfulness`` and ``compression``. Raises when most of
    its extractions or answers failed (a gate decided on what a dead model left decides
    nothing)."""
    seed = rt.settings.evidence_training.seed
    es = rt.settings.evidence
    prompts = gate_questions(split, rt.settings.evidence_training.max_eval_items, seed)
    written = extract_evidence(
        rt.llm_for_spec(spec),
        [p.evidence_input() for p in prompts],
        extraction_params(es.max_new_tokens, seed),
        stage="evidence.gate",
    )
    answers = answer_questions(
        rt.llm(ModelRole.ANSWERER),
        [
            ShortAnswerInput(question=p.question, passages=[e.text] if e.text else [])
            for p, e in zip(prompts, written, strict=True)
        ],
        short_answer_params(es.answer_max_new_tokens, seed),
        stage="evidence.gate_answers",
    )
    check_failures(
        "evidence promotion gate",
        [
            FailureCount.of(f"extractions of {redact(spec)}", (e.error for e in written)),
            FailureCount.of("answers", (a.error if a.failed else None for a in answers)),
        ],
        max_share=rt.settings.evidence_training.max_failed_share,
        setting="evidence_training.max_failed_share",
        run_id=run_id,
    )
    records = classify(
        [
            AnswerCase(
                qid=p.qid,
                label=p.label,
                setting="evidence",
                question=p.question,
                answer=a,
                golds=(p.gold,) if p.gold else (),
            )
            for p, a in zip(prompts, answers, strict=True)
        ],
        correctness_judge(rt),
    )
    usable = [(p, e) for p, e in zip(prompts, written, strict=True) if e.text]
    verdicts = iter(
        faithfulness_verdicts(
            entailment_judge(rt), [("\n\n".join(p.passages), e.text) for p, e in usable]
        )
    )
    rows: list[JsonObject] = []
    for prompt, evidence, record in zip(prompts, written, records, strict=True):
        wanted = Outcome.ABSTAIN if prompt.label == QuestionLabel.UNANSWERABLE else Outcome.CORRECT
        row: JsonObject = {
            "qid": prompt.qid,
            "correct": 1.0 if record.outcome == wanted else 0.0,
            "faithfulness": None,
            "compression": None,
        }
        if evidence.text:
            row["faithfulness"] = verdict_score(next(verdicts))
            passage_tokens = sum(token_count(t) for t in prompt.passages)
            row["compression"] = compression(passage_tokens, token_count(evidence.text))
        rows.append(row)
    return rows


def _headline(rows: list[JsonObject]) -> JsonObject:
    def mean(key: str) -> float | None:
        values = [float(r[key]) for r in rows if r[key] is not None]
        return round(sum(values) / len(values), 4) if values else None

    return {
        "n": len(rows),
        "correct": mean("correct"),
        "faithfulness": mean("faithfulness"),
        "compression": mean("compression"),
    }


def gate_evidence_challenger(
    rt: Runtime, *, corpus: str, run_id: str, version: int
) -> EvidenceGateOutcome:
    """The extractor in service vs the new version on the frozen held-out questions; the gate
    decides and the registry records it."""
    from ragtrail.evaluate.comparison.promotion import decide_evidence_promotion

    name = _name(rt)
    split = load_evidence_split(rt, run_id)
    serving, serving_what = in_service(rt)
    challenger_spec = str(ModelSpec(ModelKind.REGISTRY, f"{name}@{version}"))
    if serving == challenger_spec:
        return EvidenceGateOutcome(
            model=name, version=version, promoted=True, reason="already champion"
        )
    current = extractor_rows(rt, serving, split, run_id)
    challenger = extractor_rows(rt, challenger_spec, split, run_id)
    promotion = rt.settings.promotion
    cfg = rt.settings.evidence_training
    decision = decide_evidence_promotion(
        current,
        challenger,
        confidence=promotion.confidence,
        n_resamples=promotion.n_resamples,
        seed=promotion.seed,
        max_faithfulness_decrease=cfg.max_faithfulness_decrease,
        max_compression_decrease=cfg.max_compression_decrease,
        serving=f"the {serving_what}",
    )
    evidence = {
        **decision.as_json(),
        "compared_with": serving_what,
        "compared_spec": redact(serving),
        "split_version": split.split_version,
        "corpus": corpus,
        "current": _headline(current),
        "challenger": _headline(challenger),
    }
    settle_challenger(
        rt.registry,
        name,
        version,
        promote_it=decision.promote,
        reason=decision.reason,
        decision=evidence,
    )
    log.info(
        "%s v%d: %s (%s)",
        name,
        version,
        "promoted" if decision.promote else "kept",
        decision.reason,
    )
    return EvidenceGateOutcome(
        model=name,
        version=version,
        promoted=decision.promote,
        reason=decision.reason,
        compared_with=serving_what,
        current=evidence["current"],
        challenger=evidence["challenger"],
    )
