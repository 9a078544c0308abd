"""Balanced, labelled, critiqued QA generation (METHODS §1-§3).

Typical flow, every step one batched LLM stage per prompt::

    sets = extract_statements(client, contexts)                       # theme, facts, summaries...
    cands = make_candidates(sets, rng=random.Random(seed), kinds_wanted={"fact": 20, ...},
                            generator_info={"backend": ..., "seed": seed})
    write_questions(client, cands)                                    # statement = answer
    cands += make_unanswerable(cands, contexts, random.Random(seed))  # foreign contexts
    label_candidates(client, cands)                                   # observed label
    critique_candidates(client, cands)                                # eight 1-5 ratings
    apply_thresholds(cands)                                           # failed / rejected / pending

and :func:`single_prompt_baseline` for the naive generator to compare label balance against.
"""

from ragtrail.generate.baseline import single_prompt_baseline
from ragtrail.generate.critiques import (
    ALL,
    CRITERIA,
    Criterion,
    apply_thresholds,
    critique_candidates,
)
from ragtrail.generate.labeller import (
    Agreement,
    agreement_vs_majority,
    fleiss_kappa,
    label_candidates,
)
from ragtrail.generate.prompts import GENERATION_PROMPTS, TOKEN_BUDGETS, prompt_versions
from ragtrail.generate.steps import (
    PromptFailure,
    StatementSet,
    extract_statements,
    make_candidates,
    make_unanswerable,
    write_questions,
)

__all__ = [
    "ALL",
    "CRITERIA",
    "GENERATION_PROMPTS",
    "TOKEN_BUDGETS",
    "Agreement",
    "Criterion",
    "PromptFailure",
    "StatementSet",
    "agreement_vs_majority",
    "apply_thresholds",
    "critique_candidates",
    "extract_statements",
    "fleiss_kappa",
    "label_candidates",
    "make_candidates",
    "make_unanswerable",
    "prompt_versions",
    "single_prompt_baseline",
    "write_questions",
]
