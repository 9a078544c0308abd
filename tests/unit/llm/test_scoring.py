"""Log-prob scorer on a tiny random Llama: values match a hand computation from the logits, do not
depend on batching, keep the continuation whole when the prompt is cut; the cache serves repeats
without calling the model and never stores a non-finite value."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from sqlalchemy import create_engine

from ragtrail.llm.score_cache import SqlScoreCache
from ragtrail.llm.scoring import (
    CachedLogProbScorer,
    LazyLogProbScorer,
    ScoreRequest,
    TransformersLogProbScorer,
    encode_continuation,
    score_key,
)
from tests.tiny_models import build_tiny_llama

CORPUS = [
    "The ferry to the island leaves at nine every morning.",
    "Tickets are sold at the harbour office and online.",
    "Question: when does the ferry leave? Answer: at nine.",
    "Evidence: the ferry leaves at nine. The office sells tickets.",
] * 5


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("llama"), CORPUS, max_positions=128)


@pytest.fixture(scope="module")
def scorer(llama: Path) -> TransformersLogProbScorer:
    return TransformersLogProbScorer(str(llama), batch_size=4, device="cpu")


def req(question: str, answer: str, system: str | None = None) -> ScoreRequest:
    messages = [{"role": "user", "content": question}]
    if system:
        messages.insert(0, {"role": "system", "content": system})
    return ScoreRequest(tuple(messages), answer)


REQUESTS = [
    req("When does the ferry leave?", "At nine."),
    req("Where are tickets sold?", "At the harbour office and online.", system="Be brief."),
    req("Evidence: the ferry leaves at nine. When?", "nine"),
    req("x", "The ferry to the island leaves at nine every morning."),
]


def by_hand(scorer: TransformersLogProbScorer, request: ScoreRequest) -> float:
    """log_softmax over the logits of one unpadded sequence, summed over the continuation."""
    enc = scorer.encode(request)
    ids = torch.tensor([enc.ids])
    with torch.no_grad():
        logp = torch.log_softmax(scorer.model(input_ids=ids).logits[0].float(), dim=-1)
    n = len(enc.ids)
    return sum(float(logp[pos - 1, enc.ids[pos]]) for pos in range(n - enc.n_continuation, n))


def test_values_are_finite_negative_and_match_a_hand_computation(
    scorer: TransformersLogProbScorer,
) -> None:
    values = scorer.log_probs(REQUESTS)
    assert len(values) == len(REQUESTS)
    assert all(math.isfinite(v) and v < 0 for v in values)
    assert values[1] == pytest.approx(by_hand(scorer, REQUESTS[1]), abs=1e-4)
    # the continuation's tokens are exactly its own, at the end of the sequence
    enc = scorer.encode(REQUESTS[0])
    own = scorer.tokenizer("At nine.", add_special_tokens=False)["input_ids"]
    assert list(enc.ids[-enc.n_continuation :]) == own


def test_batched_equals_alone(scorer: TransformersLogProbScorer) -> None:
    batched = scorer.log_probs(REQUESTS)
    alone = [scorer.log_probs([r])[0] for r in REQUESTS]
    assert batched == pytest.approx(alone, abs=1e-4)


def test_long_sequences_are_scored_alone_and_short_ones_batched(
    llama: Path, scorer: TransformersLogProbScorer
) -> None:
    """With ``alone_from`` at the second-longest request's length, the two longest get a forward
    pass each and the rest one batch; the values are the batched scorer's and the hand
    computation's."""
    lengths = sorted((len(scorer.encode(r).ids) for r in REQUESTS), reverse=True)
    assert lengths[1] > lengths[2]
    split = TransformersLogProbScorer(str(llama), batch_size=4, device="cpu", alone_from=lengths[1])
    widths: list[int] = []
    hook = split.model.register_forward_pre_hook(
        lambda _m, _args, kwargs: widths.append(int(kwargs["input_ids"].shape[0])),
        with_kwargs=True,
    )
    try:
        values = split.log_probs(REQUESTS)
    finally:
        hook.remove()
    assert widths == [1, 1, len(REQUESTS) - 2]
    assert values == pytest.approx(scorer.log_probs(REQUESTS), abs=1e-4)
    assert values == pytest.approx([by_hand(split, r) for r in REQUESTS], abs=1e-4)


def test_only_continuation_positions_get_logits(scorer: TransformersLogProbScorer) -> None:
    """The head runs on the positions that predict some row's continuation, not on every prompt
    token; every value still equals the hand computation over full logits."""
    shapes: list[tuple[int, ...]] = []
    head = scorer.model.get_output_embeddings()
    hook = head.register_forward_hook(lambda _m, _i, out: shapes.append(tuple(out.shape)))
    try:
        values = scorer.log_probs(REQUESTS)
    finally:
        hook.remove()
    encoded = [scorer.encode(r) for r in REQUESTS]
    width = max(len(e.ids) for e in encoded)
    wanted = {p for e in encoded for p in range(len(e.ids) - 1 - e.n_continuation, len(e.ids) - 1)}
    assert shapes == [(len(REQUESTS), len(wanted), scorer.model.config.vocab_size)]
    assert len(wanted) < width - 1
    assert values == pytest.approx([by_hand(scorer, r) for r in REQUESTS], abs=1e-4)


def test_a_model_without_logits_to_keep_gets_the_same_values(
    scorer: TransformersLogProbScorer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragtrail.llm import scoring

    kept = scorer.log_probs(REQUESTS)
    monkeypatch.setattr(scoring, "keeps_logits", lambda _model: False)
    assert scorer.log_probs(REQUESTS) == pytest.approx(kept, abs=1e-5)


def test_prompt_is_cut_from_the_left_and_the_continuation_kept(llama: Path) -> None:
    short = TransformersLogProbScorer(str(llama), max_length=24, device="cpu")
    long_request = req(" ".join(["Tickets are sold at the harbour office."] * 6), "At nine.")
    enc = short.encode(long_request)
    assert len(enc.ids) == 24 and enc.truncated > 0
    full = encode_continuation(short.tokenizer, long_request.messages, "At nine.", max_length=None)
    assert enc.ids == full.ids[-24:]  # the prompt's tail plus the whole continuation
    assert enc.n_continuation == full.n_continuation
    assert short.log_probs([long_request])[0] == pytest.approx(
        by_hand(short, long_request), abs=1e-4
    )
    too_long = req("q", " ".join(["The ferry leaves at nine."] * 10))
    with pytest.raises(ValueError, match="no prompt token"):
        short.log_probs([too_long])


def test_request_validation() -> None:
    with pytest.raises(ValueError, match="non-empty continuation"):
        ScoreRequest(({"role": "user", "content": "q"},), "")
    with pytest.raises(ValueError, match="role"):
        ScoreRequest(({"role": "robot", "content": "q"},), "a")


class Counting:
    """Wraps a scorer and counts the requests it is asked to score."""

    def __init__(self, inner: object, values: Sequence[float] | None = None) -> None:
        self.inner = inner
        self.model_id = getattr(inner, "model_id", "fake")
        self.values = values
        self.calls: list[int] = []

    def log_probs(self, requests: Sequence[ScoreRequest]) -> list[float]:
        self.calls.append(len(requests))
        if self.values is not None:
            return list(self.values[: len(requests)])
        return self.inner.log_probs(requests)  # type: ignore[attr-defined, no-any-return]


def test_cache_hit_does_not_call_the_model(
    scorer: TransformersLogProbScorer, tmp_path: Path
) -> None:
    counting = Counting(scorer)
    cached = CachedLogProbScorer(
        counting, SqlScoreCache(create_engine(f"sqlite:///{tmp_path}/m.db"))
    )
    first = cached.log_probs([*REQUESTS[:2], REQUESTS[0]])  # a repeat inside one call
    assert counting.calls == [2]
    second = cached.log_probs(REQUESTS[:2])
    assert counting.calls == [2]  # served from the table
    assert second == first[:2] and first[2] == first[0]
    # another engine on the same file (another process) sees the values
    again = CachedLogProbScorer(
        Counting(scorer), SqlScoreCache(create_engine(f"sqlite:///{tmp_path}/m.db"))
    )
    assert again.log_probs(REQUESTS[:1]) == first[:1]
    assert again.store.count() == 2  # type: ignore[attr-defined]
    # a plain dict works as the store; keys depend on the model id
    store: dict[str, float] = {}
    CachedLogProbScorer(Counting(scorer), store).log_probs(REQUESTS[:1])
    assert list(store) == [score_key(scorer.model_id, REQUESTS[0])]
    assert score_key("other", REQUESTS[0]) != score_key(scorer.model_id, REQUESTS[0])


def test_non_finite_values_are_not_cached() -> None:
    store: dict[str, float] = {}
    fake = Counting(object(), values=[-1.5, float("nan")])
    with pytest.raises(ValueError, match=r"nan.*'At the harbour"):
        CachedLogProbScorer(fake, store).log_probs(REQUESTS[:2])
    assert list(store.values()) == [-1.5]


def test_a_lazy_scorer_loads_its_model_only_for_an_uncached_score(
    scorer: TransformersLogProbScorer,
) -> None:
    built: list[int] = []

    def build() -> TransformersLogProbScorer:
        built.append(1)
        return scorer

    request = ScoreRequest(({"role": "user", "content": "a question"},), " an answer")
    store: dict[str, float] = {}
    warm = CachedLogProbScorer(LazyLogProbScorer(scorer.model_id, build), store)
    cold_value = CachedLogProbScorer(scorer, store).log_probs([request])
    assert warm.log_probs([request]) == cold_value and built == []  # all cached: no model
    other = ScoreRequest(({"role": "user", "content": "another question"},), " an answer")
    assert warm.log_probs([other]) == scorer.log_probs([other]) and built == [1]
    warm.log_probs([ScoreRequest(({"role": "user", "content": "a third"},), " x")])
    assert built == [1]  # built once
    wrong = LazyLogProbScorer("another-model", build)
    with pytest.raises(ValueError, match="reports"):
        wrong.log_probs([request])


def test_a_bf16_scorer_names_its_precision_and_stays_close_to_float32(
    llama: Path, scorer: TransformersLogProbScorer
) -> None:
    bf16 = TransformersLogProbScorer(str(llama), batch_size=4, device="cpu", dtype="bfloat16")
    assert bf16.model_id == f"{llama}+dtype:bfloat16" and scorer.model_id == str(llama)
    assert next(bf16.model.parameters()).dtype == torch.bfloat16
    requests = [req("when does the ferry leave?", " at nine")]
    (half,), (full,) = bf16.log_probs(requests), scorer.log_probs(requests)
    assert math.isfinite(half) and half == pytest.approx(full, abs=0.5)
