"""SFT targets of the citation answerer: from a teacher, or best-of-N self-distillation.

* **teacher** (any LLM spec, e.g. a capable OpenAI-compatible endpoint): one greedy answer per
  prompt;
* **best-of-N** (no teacher): N answers per prompt sampled from the current answerer at a
  temperature above 0, each with its own seed (``stable_seed(seed, prompt key, draw)``), so the
  draws differ, are reproducible and are cached one by one by the client.

Either way the answers are read like the evaluation reads them and scored with the citation
reward (:mod:`.reward`); per prompt the best-scoring answer is kept (ties: the earlier draw) if its
reward reaches ``threshold``. A kept target is the parsed answer serialised as the prompt's
worked example is (``model_dump_json``), the form the model is then trained to write. Failed and
cut-off replies are counted, never kept. The report records how many prompts kept a target, the
reward distribution of all answers and of the kept ones, and the tokens generated.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ragtrail.evaluate.attribution.cited_answers import CITED_ANSWER_PROMPT
from ragtrail.evaluate.citations.mixtures import stable_seed
from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.client import GenerationParams, LLMClient
from ragtrail.train.citation.data import CitationPrompt
from ragtrail.train.citation.reward import score_reply

TARGET_STAGE = "citation_targets"
TargetSource = Literal["teacher", "best_of_n"]


@dataclass(frozen=True)
class SFTTarget:
    """The completion one prompt is trained on, its reward and which draw it was."""

    key: str
    completion: str
    reward: float
    draw: int


@dataclass(frozen=True)
class TargetReport:
    """How the targets were made and what came of it (strict JSON via :meth:`as_dict`)."""

    source: TargetSource
    model_id: str
    prompts: int
    samples_per_prompt: int
    threshold: float
    kept: int
    answers: int
    failed_answers: int
    rewards_all: tuple[float, ...]
    rewards_kept: tuple[float, ...]
    tokens_generated: int
    cached_answers: int
    wall_seconds: float
    first_error: str | None = None

    def as_dict(self) -> JsonObject:
        return {
            "source": self.source,
            "model_id": self.model_id,
            "prompts": self.prompts,
            "samples_per_prompt": self.samples_per_prompt,
            "threshold": self.threshold,
            "kept": self.kept,
            "kept_share": self.kept / self.prompts if self.prompts else 0.0,
            "answers": self.answers,
            "failed_answers": self.failed_answers,
            "reward_all": _distribution(self.rewards_all),
            "reward_kept": _distribution(self.rewards_kept),
            "tokens_generated": self.tokens_generated,
            "cached_answers": self.cached_answers,
            "wall_seconds": round(self.wall_seconds, 3),
        }


def _distribution(values: Sequence[float]) -> JsonObject:
    if not values:
        return {"n": 0, "mean": None, "undefined": {"mean": "no answer"}}
    arr = np.asarray(values, dtype=float)
    return {
        "n": len(values),
        "mean": float(arr.mean()),
        "min": float(arr.min()),
        "median": float(np.median(arr)),
        "max": float(arr.max()),
        "share_at_1": float((arr >= 1.0).mean()),
    }


def make_targets(
    prompts: Sequence[CitationPrompt],
    client: LLMClient,
    *,
    source: TargetSource,
    samples: int = 4,
    temperature: float = 0.8,
    threshold: float = 0.5,
    max_new_tokens: int = 160,
    seed: int = 13,
) -> tuple[list[SFTTarget], TargetReport]:
    """Targets for ``prompts`` from ``client`` (see the module docstring). A teacher gives one
    greedy answer per prompt (``samples`` and ``temperature`` are ignored)."""
    if source == "teacher":
        samples, temperature = 1, 0.0
    elif samples < 1 or temperature <= 0:
        raise ValueError("best-of-N needs samples >= 1 and a temperature > 0")
    inputs, seeds, owners = [], [], []
    for i, prompt in enumerate(prompts):
        inp = prompt.answer_input
        for draw in range(samples):
            inputs.append(inp)
            seeds.append(stable_seed(seed, prompt.key, draw) % 2**31)
            owners.append((i, draw))
    started = time.perf_counter()
    params = GenerationParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    outcomes = client.run(
        CITED_ANSWER_PROMPT, inputs, stage=TARGET_STAGE, params=params, seeds=seeds
    )

    best: dict[int, SFTTarget] = {}
    rewards_all: list[float] = []
    failed = tokens = cached = 0
    first_error: str | None = None
    for (i, draw), outcome in zip(owners, outcomes, strict=True):
        tokens += sum(a.completion_tokens for a in outcome.attempts)
        cached += all(a.cached for a in outcome.attempts)
        if not outcome.ok or outcome.value is None or outcome.cut_off:
            failed += 1
            if first_error is None:
                cut = "the reply was cut off at the token limit" if outcome.cut_off else None
                first_error = cut or outcome.error or "no value"
            continue
        text = outcome.value.model_dump_json()
        prompt = prompts[i]
        reward = score_reply(text, prompt.relevant, prompt.n_passages).reward
        rewards_all.append(reward)
        if i not in best or reward > best[i].reward:
            best[i] = SFTTarget(prompt.key, text, reward, draw)
    kept = [best[i] for i in sorted(best) if best[i].reward >= threshold]
    report = TargetReport(
        source=source,
        model_id=client.backend.model_id,
        prompts=len(prompts),
        samples_per_prompt=samples,
        threshold=threshold,
        kept=len(kept),
        answers=len(outcomes),
        failed_answers=failed,
        rewards_all=tuple(rewards_all),
        rewards_kept=tuple(t.reward for t in kept),
        tokens_generated=tokens,
        cached_answers=cached,
        wall_seconds=time.perf_counter() - started,
        first_error=first_error,
    )
    return kept, report
