"""SEER's self-alignment data: sampled evidence, scored by three experts, ranked per question.

For every training prompt the extractor in service writes ``samples`` pieces of evidence
(temperature, top-p and top-k of :class:`EvidenceTrainingSettings`; one seed per sample, so a
rerun draws the same ones from the cache). Near-duplicates are removed (word-trigram Jaccard at
``dedup_threshold``), which keeps the sampled distribution from piling preference pairs onto one
frequent answer. Each remaining sample is scored by the experts (faithfulness to the passages,
helpfulness under the scorer LM, conciseness against the full-length answer) and the scores are
combined with smoothed coefficient-of-variation weights computed over all samples (or equal
weights, the ablation). A failed sample or expert score counts as a failure
(``max_failed_share``) and the sample is left out, never scored as 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ragtrail.config import EvidenceTrainingSettings
from ragtrail.evaluate.evidence.dedup import dedupe, word_ngrams
from ragtrail.evaluate.evidence.experts import (
    Encode,
    conciseness_scores,
    faithfulness_verdicts,
    helpfulness_scores,
    verdict_score,
)
from ragtrail.evaluate.evidence.extraction import completion_of, extract_evidence, sampling_params
from ragtrail.evaluate.evidence.weighting import EXPERTS, combine, cov_weights, equal_weights
from ragtrail.failures import FailureCount, check_failures
from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.contract import Judge
from ragtrail.llm.client import LLMClient
from ragtrail.llm.scoring import LogProbScorer
from ragtrail.train.evidence.data import EvidencePrompt
from ragtrail.train.evidence.lpo import PreferenceList

SAMPLE_STAGE = "evidence.self_samples"


@dataclass(frozen=True)
class Sample:
    qid: str
    evidence: str
    scores: Mapping[str, float]


@dataclass(frozen=True)
class PreferenceReport:
    """What the sampling and scoring did: counts, the expert weights and their source."""

    prompts: int
    sampled: int
    failed_samples: int
    kept_after_dedup: int
    empty: int
    failed_scores: int
    lists: int
    pairs_possible: int
    weights: dict[str, float]
    weighting: str
    first_error: str | None = None
    per_expert_mean: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> JsonObject:
        return dict(self.__dict__)


def build_preferences(
    prompts: Sequence[EvidencePrompt],
    extractor: LLMClient,
    config: EvidenceTrainingSettings,
    *,
    judge: Judge,
    scorer: LogProbScorer,
    encode: Encode,
    full_answers: Mapping[str, str | None],
    max_new_tokens: int,
) -> tuple[list[PreferenceList], PreferenceReport]:
    """Sample, deduplicate, score and rank (see the module docstring)."""
    m = config.samples
    inputs = [p.evidence_input() for p in prompts for _ in range(m)]
    seeds = [config.seed * 100_003 + i * m + j for i in range(len(prompts)) for j in range(m)]
    params = sampling_params(
        max_new_tokens, temperature=config.temperature, top_p=config.top_p, top_k=config.top_k
    )
    written = extract_evidence(extractor, inputs, params, stage=SAMPLE_STAGE, seeds=seeds)
    errors = [e.error for e in written if e.failed]
    check_failures(
        "evidence self-sampling",
        [FailureCount.of("evidence samples", (e.error if e.failed else None for e in written))],
        max_share=config.max_failed_share,
        setting="evidence_training.max_failed_share",
    )
    kept: list[tuple[EvidencePrompt, str]] = []
    empty = 0
    for i, prompt in enumerate(prompts):
        texts = [e.text for e in written[i * m : (i + 1) * m] if not e.failed]
        empty += sum(1 for t in texts if not word_ngrams(t, 1))  # what dedupe drops as blank
        kept += [(prompt, texts[j]) for j in dedupe(texts, threshold=config.dedup_threshold)]
    samples, failed_scores, first_error = _score(kept, judge, scorer, encode, full_answers)
    check_failures(
        "evidence expert scores",
        [
            FailureCount(
                f"expert scores ({', '.join(EXPERTS)})",
                failed_scores,
                sum(1 for _, e in kept if e.strip()),
                first_error,
            )
        ],
        max_share=config.max_failed_share,
        setting="evidence_training.max_failed_share",
    )
    columns = {x: [s.scores[x] for s in samples] for x in EXPERTS}
    weights = (
        cov_weights(columns, config.tau) if config.weighting == "cov" else equal_weights(EXPERTS)
    )
    lists = []
    pairs = 0
    for prompt in prompts:
        mine = [s for s in samples if s.qid == prompt.qid]
        scores = [combine(s.scores, weights) for s in mine]
        distinct = len(set(scores))
        if len(mine) < 2 or distinct < 2:
            continue
        pairs += sum(1 for a in scores for b in scores if a > b)
        lists.append(
            PreferenceList(
                qid=prompt.qid,
                messages=prompt.messages(),
                candidates=tuple(completion_of(s.evidence) for s in mine),
                scores=tuple(scores),
            )
        )
    report = PreferenceReport(
        prompts=len(prompts),
        sampled=len(written),
        failed_samples=len(errors),
        kept_after_dedup=len(kept),
        empty=empty,
        failed_scores=failed_scores,
        lists=len(lists),
        pairs_possible=pairs,
        weights=weights,
        weighting=config.weighting,
        first_error=errors[0] if errors else first_error,
        per_expert_mean={x: sum(v) / len(v) for x, v in columns.items() if v},
    )
    return lists, report


def _score(
    kept: Sequence[tuple[EvidencePrompt, str]],
    judge: Judge,
    scorer: LogProbScorer,
    encode: Encode,
    full_answers: Mapping[str, str | None],
) -> tuple[list[Sample], int, str | None]:
    """Every kept, non-empty sample with all three experts; a sample missing one is left out
    and counted. Empty samples ("nothing answers") are not ranked: no expert defines a score
    for them (conciseness has no embedding to compare), and every training question has an
    answer, so they are reported apart."""
    usable = [(p, e) for p, e in kept if e.strip()]
    verdicts = faithfulness_verdicts(judge, [("\n\n".join(p.passages), e) for p, e in usable])
    helpful = helpfulness_scores(scorer, [(p.question, e, p.gold) for p, e in usable])
    fulls = [full_answers.get(p.qid) for p, _ in usable]
    concise_pairs = [(f, e) for (_, e), f in zip(usable, fulls, strict=True) if f]
    concise_values = iter(conciseness_scores(encode, concise_pairs))
    samples: list[Sample] = []
    failed = 0
    first_error: str | None = None
    for (prompt, evidence), verdict, h, full in zip(usable, verdicts, helpful, fulls, strict=True):
        c = next(concise_values) if full else None
        f = verdict_score(verdict)
        if f is None or c is None:
            failed += 1
            first_error = first_error or (
                verdict.error or "no faithfulness verdict"
                if f is None
                else "no full-length answer for conciseness"
            )
            continue
        samples.append(
            Sample(
                prompt.qid,
                evidence,
                {"faithfulness": f, "helpfulness": h, "conciseness": max(0.0, c)},
            )
        )
    return samples, failed, first_error
