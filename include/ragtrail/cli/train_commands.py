"""``ragtrail models train``: the retraining flow's training by hand, for one model."""

from __future__ import annotations

from typing import Annotated

import typer

from ragtrail.cli.common import JsonFlag, console, emit, runtime
from ragtrail.records import RLAlgorithm
from ragtrail.summaries.base import Record

train_app = typer.Typer(
    help="Train a new version of a model by hand (registered; aliases move only if its gate "
    "says so).",
    no_args_is_help=True,
)


QASetOpt = Annotated[
    str | None,
    typer.Option(help="QA set file or testset:<version>, besides the golden sets."),
]
BaseModelOpt = Annotated[
    str | None, typer.Option(help="Model the adapters are trained on; default the champion's.")
]


def emit_run(run_id: str, split: Record, trained: Record, gate: Record) -> None:
    """A training run's summary as JSON: its id, split, trained version and gate decision."""
    emit(
        {
            "run_id": run_id,
            "split": split.to_json(),
            "trained": trained.to_json(),
            "gate": gate.to_json(),
        }
    )


@train_app.command("citation")
def train_citation(
    corpus: Annotated[str, typer.Option(help="Corpus whose QA sets give the training data.")],
    qa_set: QASetOpt = None,
    algorithm: Annotated[
        RLAlgorithm | None,
        typer.Option(help="RL algorithm after SFT; default citation_training.rl_algorithm."),
    ] = None,
    sft_steps: Annotated[int | None, typer.Option(min=1, help="SFT optimiser steps.")] = None,
    rl_steps: Annotated[
        int | None, typer.Option(min=1, help="RL iterations (one rollout batch each).")
    ] = None,
    base_model: BaseModelOpt = None,
    run_id: Annotated[
        str | None, typer.Option(help="Run id; default train-citation-<time>.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Retrain the citation answerer by hand, as retrain_models does: split the corpus's QA sets
    by question and document, make SFT targets (the teacher, else best-of-N from the model in
    service), SFT, then RL (PPO, GRPO or RLOO) on (citation precision + recall) / 2, register the
    version and put it through the promotion gate against the model in service (aliases move only
    if the gate says so). Exit code 3 when most target or gate answers failed."""
    from ragtrail.pipeline.retrain import gate_challenger, prepare_citation_data, train_challenger
    from ragtrail.storage.db import utcnow

    run_id = run_id or f"train-citation-{utcnow():%Y%m%dT%H%M%S}"
    with runtime() as rt:
        steps = {"sft_steps": sft_steps, "rl_steps": rl_steps}
        chosen = {k: v for k, v in steps.items() if v is not None}
        if chosen:
            rt.settings.citation_training = rt.settings.citation_training.model_copy(update=chosen)
        split = prepare_citation_data(rt, corpus=corpus, run_id=run_id, qa_set=qa_set)
        trained = train_challenger(
            rt, corpus=corpus, run_id=run_id, base_model=base_model, rl_algorithm=algorithm
        )
        gate = gate_challenger(rt, corpus=corpus, run_id=run_id, version=trained.version)
    if as_json:
        emit_run(run_id, split, trained, gate)
        return
    console.print(
        f"split {split.split_version}: {split.train_prompts} training prompts from "
        f"{split.train_items} questions, {split.eval_items} held-out questions "
        f"({split.eval_mixtures} frozen mixtures)"
    )
    reward = "" if trained.rl_mean_reward is None else f", mean reward {trained.rl_mean_reward:.3f}"
    if trained.reused:
        console.print(
            f"{trained.model} v{trained.version} was already trained by run {run_id} "
            "(nothing trained again)"
        )
    else:
        console.print(
            f"{trained.model} v{trained.version} trained on {trained.base_model} in "
            f"{trained.wall_seconds} s: {trained.sft_steps} SFT steps, {trained.rl_steps} "
            f"{str(trained.rl_algorithm).upper()} iterations{reward}"
        )
    if trained.rl_note:
        console.print(f"  RL: {trained.rl_note}")
    verdict = "promoted to champion" if gate.promoted else "kept as challenger"
    console.print(f"gate: {verdict} — {gate.reason}")
    if gate.current_f1 is not None:
        console.print(f"  in service ({gate.compared_with}): {gate.current_f1.get('model')}")
        console.print(f"  new version: {(gate.challenger_f1 or {}).get('model')}")


@train_app.command("evidence")
def train_evidence(
    corpus: Annotated[str, typer.Option(help="Corpus whose QA sets give the training data.")],
    qa_set: QASetOpt = None,
    samples: Annotated[
        int | None, typer.Option(min=2, max=64, help="M: evidence samples per prompt.")
    ] = None,
    steps: Annotated[
        int | None, typer.Option(min=0, help="LPO optimiser steps (0 = the epochs).")
    ] = None,
    base_model: BaseModelOpt = None,
    run_id: Annotated[
        str | None, typer.Option(help="Run id; default train-evidence-<time>.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Self-align the evidence extractor (SEER): split the corpus's QA sets by question and
    document, sample evidence from the extractor in service, score it with the three experts,
    train LPO (LoRA), register the version and put it through the gate against the extractor in
    service. Exit code 3 when most samples, scores or gate answers failed."""
    from ragtrail.pipeline.retrain_evidence import (
        gate_evidence_challenger,
        prepare_evidence_data,
        train_evidence_challenger,
    )
    from ragtrail.storage.db import utcnow

    run_id = run_id or f"train-evidence-{utcnow():%Y%m%dT%H%M%S}"
    with runtime() as rt:
        overrides = {"samples": samples, "max_steps": steps}
        chosen = {k: v for k, v in overrides.items() if v is not None}
        if chosen:
            rt.settings.evidence_training = rt.settings.evidence_training.model_copy(update=chosen)
        split = prepare_evidence_data(rt, corpus=corpus, run_id=run_id, qa_set=qa_set)
        trained = train_evidence_challenger(rt, corpus=corpus, run_id=run_id, base_model=base_model)
        gate = gate_evidence_challenger(rt, corpus=corpus, run_id=run_id, version=trained.version)
    if as_json:
        emit_run(run_id, split, trained, gate)
        return
    console.print(
        f"split {split.split_version}: {split.train_prompts} training prompts, "
        f"{split.eval_items} held-out questions ({split.dropped} dropped)"
    )
    console.print(
        f"{trained.model} v{trained.version} trained on {trained.base_model} in "
        f"{trained.wall_seconds} s ({trained.lpo_steps} LPO steps, "
        f"{trained.preference_lists} ranked lists, expert weights {trained.expert_weights})"
    )
    verdict = "promoted to champion" if gate.promoted else "kept as challenger"
    console.print(f"gate: {verdict} — {gate.reason}")
    console.print(f"  in service ({gate.compared_with}): {gate.current}")
    console.print(f"  new version: {gate.challenger}")
