"""Score a citation answerer on a split's frozen held-out mixtures.

Base, SFT and RL models (and later champion and challenger) answer the very same mixtures —
stored in the split, not rebuilt from an index that may have changed — with the same decoding
parameters and seeds, and are scored by the ``citations`` evaluator
(:class:`ragtrail.evaluate.citations.evaluator.CitationEvaluator`) next to its seeded random baseline: the
same per-query rows, 95% bootstrap intervals and n the nightly evaluation produces, so the
numbers are comparable with the nightly's and pair query by query for the promotion gate.
"""

from __future__ import annotations

from dataclasses import replace

from ragtrail.evaluate.citations.evaluator import (
    ANSWERABLE,
    CitationEvaluator,
    CitationInputs,
    MixtureEvaluation,
)
from ragtrail.evaluate.citations.mixture_answers import DEFAULT_ANSWER_PARAMS, answer_mixtures
from ragtrail.evaluate.citations.mixtures import MixtureSet, MixtureSpec
from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.train.citation.data import CitationSplit

EVAL_STAGE = "citation_model_eval"


def evaluate_citation_model(
    client: LLMClient,
    split: CitationSplit,
    *,
    max_new_tokens: int = 160,
    baseline_repeats: int = 200,
    bootstrap_samples: int = 1000,
    stage: str = EVAL_STAGE,
) -> MixtureEvaluation:
    """Answer the split's held-out mixtures with ``client`` (greedy, guided, seeded with the
    split's seed) and score them; :func:`headline` reads the F1 rows."""
    config = replace(
        split.eval_config,
        baseline_repeats=baseline_repeats,
        bootstrap_samples=bootstrap_samples,
    )
    params = GenerationParams(
        **{**DEFAULT_ANSWER_PARAMS.__dict__, "max_new_tokens": max_new_tokens, "seed": config.seed}
    )
    mixtures = split.eval_mixtures
    answers = answer_mixtures(client, mixtures, params=params, stage=stage)
    evaluator = CitationEvaluator(config)
    rows = evaluator.rows(CitationInputs(mixtures, answers))
    return MixtureEvaluation(
        config=config,
        mixtures=MixtureSet(tuple(mixtures), (), MixtureSpec.parse(config.mixture_spec)),
        answers=answers,
        rows=rows,
        result=evaluator.result_of(rows),
    )


def headline(evaluation: MixtureEvaluation, metric: str = "citation_f1") -> JsonObject:
    """``metric`` over every answerable label, per system (model, random) and mixture type:
    value, 95% CI and n (strict JSON; undefined values carry their reason)."""
    out: JsonObject = {}
    for agg in evaluation.result.aggregates:
        if agg.metric != metric or agg.facets.get("label") != ANSWERABLE:
            continue
        row = agg.as_dict()
        system, mixture = agg.facets["system"], agg.facets["mixture"]
        out.setdefault(system, {})[mixture] = {
            k: row[k] for k in ("value", "ci_low", "ci_high", "n", "undefined") if k in row
        }
    return out
