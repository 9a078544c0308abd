"""Evidence extraction, SEER (METHODS §10): the model-free math of measuring and training an
extractor that turns a question and its passages into short, faithful evidence.

- :mod:`.measures`: token counts, compression, helpfulness (a sigmoid of a log-prob gain), cosine;
- :mod:`.weighting`: the experts and their smoothing coefficient-of-variation weights;
- :mod:`.ranking`: ranks and lambda-weighted preference pairs for LPO;
- :mod:`.dedup`: near-duplicate removal of sampled evidence by word n-gram Jaccard;
- :mod:`.extractive`: the extractive baseline (closest sentences within a token budget);
- :mod:`.noise`: relevant passages mixed with distractors for the robustness check;
- :mod:`.evaluator`: the registered ``evidence`` evaluator.
"""

from ragtrail.evaluate.evidence.dedup import dedupe, ngram_similarity, word_ngrams
from ragtrail.evaluate.evidence.evaluator import (
    CONTINUOUS_METRICS,
    DIFF_METRICS,
    METHODS,
    EvidenceEvalConfig,
    EvidenceEvaluator,
    EvidenceInputs,
    EvidenceRow,
    check_rows,
)
from ragtrail.evaluate.evidence.extractive import extractive_evidence, truncate_tokens
from ragtrail.evaluate.evidence.measures import (
    TOKEN_PATTERN,
    compression,
    cosine,
    helpfulness,
    token_count,
)
from ragtrail.evaluate.evidence.noise import NOISE_RATIOS, noisy_passages
from ragtrail.evaluate.evidence.ranking import (
    PreferencePair,
    lambda_weight,
    preference_pairs,
    ranks,
)
from ragtrail.evaluate.evidence.weighting import EXPERTS, combine, cov_weights, equal_weights

__all__ = [
    "CONTINUOUS_METRICS",
    "DIFF_METRICS",
    "EXPERTS",
    "METHODS",
    "NOISE_RATIOS",
    "TOKEN_PATTERN",
    "EvidenceEvalConfig",
    "EvidenceEvaluator",
    "EvidenceInputs",
    "EvidenceRow",
    "PreferencePair",
    "check_rows",
    "combine",
    "compression",
    "cosine",
    "cov_weights",
    "dedupe",
    "equal_weights",
    "extractive_evidence",
    "helpfulness",
    "lambda_weight",
    "ngram_similarity",
    "noisy_passages",
    "preference_pairs",
    "ranks",
    "token_count",
    "truncate_tokens",
    "word_ngrams",
]
