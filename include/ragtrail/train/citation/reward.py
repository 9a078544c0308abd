"""The citation reward of RL fine-tuning: (citation precision + citation recall) / 2 (METHODS §7).

What a completion is: the answerer's reply to :data:`CITED_ANSWER_PROMPT`, i.e. the JSON object
``{"sentences": [{"text": ..., "citations": [k, ...]}]}``. Training targets are that object
serialised like the prompt's worked example (``model_dump_json``), RL completions are sampled
free (TRL does not guide decoding) and evaluation decodes under the schema; all three are read
the same way here and at evaluation: the client's parser (:func:`parse_output`, the first
complete JSON object, lightly repaired) and :func:`statements_of` (``[k]`` markers written into a
sentence's text count too). Precision and recall are :func:`score_citations`' (an out-of-range
number is a wrong citation).

Values that the metrics leave undefined get a number here, since a trainer needs one per
completion (never NaN):

* unparseable reply (not JSON, wrong shape, cut off before the object closes): **0**;
* a parsed reply that cites nothing (including an empty ``sentences`` list, the prompt's way to
  abstain): **0** (precision is undefined, recall is 0; every training prompt has a relevant
  passage, so not citing is wrong).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ragtrail.evaluate.attribution.cited_answers import (
    CitedAnswerOutput,
    all_citations,
    statements_of,
)
from ragtrail.evaluate.citations.rage_metrics import score_citations
from ragtrail.llm.structured import parse_output

RewardStatus = Literal["ok", "no_citations", "unparseable"]


@dataclass(frozen=True)
class RewardBreakdown:
    """One completion's reward and where it came from (precision/recall None when undefined)."""

    reward: float
    status: RewardStatus
    cited: tuple[int, ...] = ()
    precision: float | None = None
    recall: float | None = None


def completion_text(completion: str | Sequence[Mapping[str, Any]]) -> str:
    """The answer text of a completion: a string as is, a conversational completion (a list of
    messages, as TRL passes them for chat prompts) as its last message's content."""
    if isinstance(completion, str):
        return completion
    if not completion:
        return ""
    return str(completion[-1].get("content") or "")


def cited_numbers(text: str) -> tuple[int, ...] | None:
    """The distinct passage numbers a reply cites, in order; None when it cannot be parsed."""
    parsed = parse_output(text, CitedAnswerOutput)
    if not parsed.ok or parsed.value is None:
        return None
    return all_citations(statements_of(parsed.value))


def score_reply(text: str, relevant: Sequence[int], n_passages: int) -> RewardBreakdown:
    """The reward of one reply against its mixture (see the module docstring)."""
    if not relevant:
        raise ValueError("a reward needs at least one relevant passage")
    cited = cited_numbers(text)
    if cited is None:
        return RewardBreakdown(0.0, "unparseable")
    if not cited:
        return RewardBreakdown(0.0, "no_citations", (), None, 0.0)
    scores = score_citations(cited, relevant, n_passages)
    assert scores.precision is not None and scores.recall is not None
    reward = (scores.precision + scores.recall) / 2
    return RewardBreakdown(reward, "ok", cited, scores.precision, scores.recall)


def citation_reward(
    prompts: Sequence[Any] | None = None,
    completions: Sequence[Any] = (),
    completion_ids: Sequence[Any] | None = None,
    *,
    relevant: Sequence[Sequence[int]],
    n_passages: Sequence[int],
    **columns: Any,
) -> list[float]:
    """TRL reward function: one reward per completion, ``relevant`` and ``n_passages`` being the
    training dataset's columns of the same names (TRL passes every column as a keyword)."""
    if not len(completions) == len(relevant) == len(n_passages):
        raise ValueError(
            f"{len(completions)} completions, {len(relevant)} relevant sets, "
            f"{len(n_passages)} passage counts"
        )
    return [
        score_reply(completion_text(c), list(r), int(n)).reward
        for c, r, n in zip(completions, relevant, n_passages, strict=True)
    ]
