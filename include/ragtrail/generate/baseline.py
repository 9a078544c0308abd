"""The single-prompt baseline (METHODS §2): "write a factoid question and answer for this context".

The method reports that this naive generator yields almost only ``fact_single`` questions; running
it next to statement extraction, labelling both with the same labeller, shows how much balance
the statement-first pipeline buys. The candidates carry ``statement_kind="baseline"`` and no
requested label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragtrail.generate.prompts import SINGLE_SHOT_QA, BaselineInput
from ragtrail.generate.steps import candidate_id, failure_from_outcome, params_for
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.records import CandidateStatus, Context, QACandidate, StatementKind

__all__ = ["BASELINE_STAGE", "single_prompt_baseline"]

BASELINE_STAGE = "generate.baseline"


def single_prompt_baseline(
    client: LLMClient,
    contexts: Sequence[Context],
    params: GenerationParams | None = None,
    *,
    budgets: Mapping[str, int] | None = None,
    generator_info: Mapping[str, Any] | None = None,
) -> list[QACandidate]:
    """One baseline candidate per context (one batched stage), failures included.

    A successful call fills ``question`` and ``answer``; a failed one yields a ``FAILED``
    candidate (``failure_cause = "baseline_failed:<cause>"``, raw outputs kept), so the caller can
    report the baseline's failure rate too. Label them with
    :func:`ragtrail.generate.labeller.label_candidates` to get the label distribution.
    """
    if not contexts:
        return []
    outs = client.run(
        SINGLE_SHOT_QA,
        [BaselineInput(context=c.text) for c in contexts],
        stage=BASELINE_STAGE,
        params=params_for(SINGLE_SHOT_QA.name, params, budgets),
    )
    versions = {SINGLE_SHOT_QA.name: SINGLE_SHOT_QA.version}
    candidates: list[QACandidate] = []
    for ctx, out in zip(contexts, outs, strict=True):
        cand = QACandidate(
            candidate_id=candidate_id(ctx.chunk_hash, StatementKind.BASELINE, "", versions),
            context=ctx,
            statement_kind=StatementKind.BASELINE,
            requested_label="",
            raw_outputs=list(out.raw_texts),
            generator={**(generator_info or {}), "prompts": versions},
        )
        if out.ok and out.value is not None:
            cand.question = out.value.question
            cand.answer = out.value.answer
            cand.statement = out.value.answer
        else:
            cand.status = CandidateStatus.FAILED
            cand.failure_cause = f"baseline_failed:{failure_from_outcome(out).cause}"
        candidates.append(cand)
    return candidates
