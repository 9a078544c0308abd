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

A completion the token limit **cut off** (the RL stage knows: it ended without an end-of-turn
token) is not "unparseable" but diagnosed as such: the citations it wrote before the limit (every
``[k]`` group in its raw text, the JSON ``"citations": [..]`` lists included) earn
:data:`CUT_OFF_CREDIT` times their (P + R) / 2, status ``cut_off``; one cut off before any
citation earns 0, status ``cut_off_before_citation``. The half credit keeps a signal when the
limit is tight, and a complete answer still earns more than the same citations cut off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ragtrail.evaluate.attribution.cited_answers import (
    CitedAnswerOutput,
    all_citations,
    parse_citation_markers,
    statements_of,
    unique,
)
from ragtrail.evaluate.citations.rage_metrics import score_citations
from ragtrail.llm.structured import parse_output

RewardStatus = Literal["ok", "no_citations", "unparseable", "cut_off", "cut_off_before_citation"]
CUT_OFF_CREDIT = 0.5
"""Share of the reward a cut-off completion earns for the citations it wrote."""


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


def score_reply(
    text: str, relevant: Sequence[int], n_passages: int, *, cut_off: bool = False
) -> RewardBreakdown:
    """The reward of one reply against its mixture (see the module docstring); ``cut_off``
    says the reply ended at the token limit."""
    if not relevant:
        raise ValueError("a reward needs at least one relevant passage")
    if cut_off:
        written = unique(parse_citation_markers(text))
        if not written:
            return RewardBreakdown(0.0, "cut_off_before_citation")
        return _scored(written, relevant, n_passages, "cut_off", CUT_OFF_CREDIT)
    cited = cited_numbers(text)
    if cited is None:
        return RewardBreakdown(0.0, "unparseable")
    if not cited:
        return RewardBreakdown(0.0, "no_citations", (), None, 0.0)
    return _scored(cited, relevant, n_passages, "ok", 1.0)


def _scored(
    cited: tuple[int, ...],
    relevant: Sequence[int],
    n_passages: int,
    status: RewardStatus,
    credit: float,
) -> RewardBreakdown:
    scores = score_citations(cited, relevant, n_passages)
    assert scores.precision is not None and scores.recall is not None
    reward = credit * (scores.precision + scores.recall) / 2
    return RewardBreakdown(reward, status, cited, scores.precision, scores.recall)


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


class CitationReward:
    """:func:`citation_reward` for a TRL trainer, told which completions were cut off.

    TRL calls it with ``completion_ids`` (each completion's tokens up to and including its end
    token); one whose last token is not an end token (``end_ids``: end of turn, end of sequence,
    padding) ran into the limit — the rule TRL itself uses for truncation. The last call's rewards
    and statuses are kept (:attr:`last`) for the stage's spread guard, and every status is
    counted (:attr:`status_totals`).
    """

    __name__ = "citation_reward"  # TRL names the logged reward columns after it

    def __init__(self, end_ids: Sequence[int]) -> None:
        if not end_ids:
            raise ValueError("CitationReward needs the end token ids to recognise a cut-off")
        self.end_ids = frozenset(int(i) for i in end_ids)
        self.last: list[RewardBreakdown] = []
        self.status_totals: dict[str, int] = {}

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] = (),
        completion_ids: Sequence[Sequence[int]] | None = None,
        *,
        relevant: Sequence[Sequence[int]],
        n_passages: Sequence[int],
        **columns: Any,
    ) -> list[float]:
        if completion_ids is None or not len(completions) == len(completion_ids) == len(relevant):
            raise ValueError("CitationReward needs completion_ids, one per completion")
        self.last = [
            score_reply(
                completion_text(c), list(r), int(n), cut_off=not ids or ids[-1] not in self.end_ids
            )
            for c, ids, r, n in zip(completions, completion_ids, relevant, n_passages, strict=True)
        ]
        for scored in self.last:
            self.status_totals[scored.status] = self.status_totals.get(scored.status, 0) + 1
        return [scored.reward for scored in self.last]
