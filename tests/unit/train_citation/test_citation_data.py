"""Citation training data and reward (no model): the split by question and document, its
serialisation and version, the reward on hand-computed replies, best-of-N target selection."""

from __future__ import annotations

import json

import pytest

from ragtrail.evaluate.citations.mixture_answers import answer_mixtures
from ragtrail.evaluate.citations.mixtures import MixtureCorpus, stable_seed
from ragtrail.llm.client import LLMClient
from ragtrail.llm.testing import ScriptedBackend
from ragtrail.records import Chunk, QAItem
from ragtrail.train.citation import (
    CitationReward,
    CitationSplit,
    CitationSplitError,
    citation_reward,
    make_targets,
    score_reply,
    split_citation_data,
)
from ragtrail.train.citation.data import prompt_of
from tests.unit.evaluate.test_mixtures import overlap_search

DOCS = {
    "ferry": ["the harbour ferry leaves every forty minutes", "ferry tickets cost three euros"],
    "light": ["the lighthouse opened in 1998", "the lighthouse is open on sundays"],
    "museum": ["the museum shows old maps", "the museum cafe sells soup"],
    "park": ["the park closes at dusk", "dogs must be on a lead in the park"],
    "market": ["the market runs on saturdays", "the market sells fresh fish"],
    "library": ["the library lends books for three weeks", "library cards are free"],
    "pool": ["the pool opens at seven", "swimming caps are required in the pool"],
    "school": ["the school term starts in september", "school lunches cost two euros"],
    # no question is about these: pure distractors, shared out between the two sides
    "weather": ["the harbour is windy in march", "rain is common in the park in april"],
    "bakery": ["the bakery opens at six", "the bakery sells museum shaped biscuits"],
    "garage": ["the garage fixes bikes", "the garage is next to the market"],
}
CHUNKS = [
    Chunk(f"{doc}#{i}", doc, i, text, (), len(text.split()))
    for doc, texts in DOCS.items()
    for i, text in enumerate(texts)
]


_overlap_search = overlap_search(CHUNKS)
CORPUS = MixtureCorpus(CHUNKS, _overlap_search, _overlap_search)


def _item(qid: str, question: str, chunk: str, label: str = "fact_single") -> QAItem:
    return QAItem(
        qid, question, label, ground_doc_ids=(chunk.split("#")[0],), ground_chunk_ids=(chunk,)
    )


ITEMS = [
    _item("q1", "how often does the ferry leave", "ferry#0"),
    _item("q2", "what do ferry tickets cost", "ferry#1"),  # shares document ferry with q1
    _item("q3", "when did the lighthouse open", "light#0"),
    _item("q4", "what does the museum show", "museum#0"),
    _item("q5", "when does the park close", "park#0"),
    _item("q6", "when does the market run", "market#0"),
    _item("q7", "how long does the library lend books", "library#0"),
    _item("q8", "when does the pool open", "pool#0"),
    _item("q9", "when does the school term start", "school#0"),
    QAItem("q10", "who designed the town hall", "unanswerable"),
]
SPLIT_ARGS = {"eval_share": 0.3, "seed": 7, "mixture_spec": "1/1/1"}


@pytest.fixture(scope="module")
def split() -> CitationSplit:
    return split_citation_data(ITEMS, CORPUS, **SPLIT_ARGS)


def test_split_holds_out_questions_and_every_document_they_show(split: CitationSplit) -> None:
    eval_qids = set(split.eval_qids)
    assert eval_qids and split.train
    # q1 and q2 share a ground document: they are held out or trained on together.
    assert ({"q1", "q2"} <= eval_qids) or not ({"q1", "q2"} & eval_qids)
    shown = {p.doc_id for m in split.eval_mixtures for p in m.passages}
    ground = {d for i in ITEMS if i.qid in eval_qids for d in i.ground_doc_ids}
    assert shown | ground <= set(split.excluded_doc_ids)
    assert shown - ground  # held-out mixtures have distractors of their own
    eval_texts = {p.text for m in split.eval_mixtures for p in m.passages}
    for prompt in split.train:
        assert prompt.qid not in eval_qids
        assert not set(prompt.doc_ids) & set(split.excluded_doc_ids)
        assert not set(prompt.passages) & eval_texts
        assert prompt.relevant  # only answerable mixtures are trained on
    trained = {p.qid for p in split.train}
    assert "q10" not in trained
    # every question is accounted for: held out, trained on, or dropped with a reason
    assert eval_qids | trained | set(split.dropped) >= {i.qid for i in ITEMS}
    assert all(m.passages for m in split.eval_mixtures)
    if "q10" not in eval_qids:
        assert split.dropped["q10"].startswith("unanswerable")
    assert not any("shares documents" in reason for reason in split.dropped.values())
    assert split.counts["train_prompts"] == len(split.train)
    assert split.counts["eval_items"] == len(eval_qids)


def test_training_prompt_is_what_the_evaluation_sends(split: CitationSplit) -> None:
    mixture = next(m for m in split.eval_mixtures if m.answerable)
    backend = ScriptedBackend([_reply(("A.", [1]))])
    answer_mixtures(LLMClient(backend), [mixture])
    assert list(backend.calls[0].messages) == prompt_of(mixture).messages
    assert prompt_of(mixture).relevant == tuple(sorted(mixture.relevant_numbers))


def test_split_is_seeded_serialisable_and_content_addressed(split: CitationSplit) -> None:
    again = split_citation_data(ITEMS, CORPUS, **SPLIT_ARGS)
    assert again.to_json() == split.to_json()
    assert again.split_version == split.split_version
    other = split_citation_data(ITEMS, CORPUS, **{**SPLIT_ARGS, "seed": 8})
    assert other.split_version != split.split_version
    back = CitationSplit.from_json(split.to_json())
    assert back == split
    lineage = json.loads(json.dumps(split.lineage(), allow_nan=False))
    assert lineage["split_version"] == split.split_version
    assert lineage["train_keys"] == [p.key for p in split.train]
    tampered = json.loads(split.to_json())
    tampered["eval_qids"] = ["q3"]
    with pytest.raises(CitationSplitError, match="does not match its version"):
        CitationSplit.from_json(json.dumps(tampered))


def test_split_refuses_bad_input_listing_every_problem() -> None:
    bad = [ITEMS[0], ITEMS[0], QAItem("qx", "anything", "fact_single")]
    with pytest.raises(CitationSplitError) as err:
        split_citation_data(bad, CORPUS, eval_share=1.5)
    message = str(err.value)
    assert "eval_share" in message and "repeats" in message and "without ground" in message
    with pytest.raises(CitationSplitError, match="one group"):
        split_citation_data(ITEMS[:2], CORPUS)


# ----------------------------------------------------------------------------------- reward


def _reply(*sentences: tuple[str, list[int]]) -> str:
    return json.dumps({"sentences": [{"text": t, "citations": c} for t, c in sentences]})


@pytest.mark.parametrize(
    ("text", "relevant", "n", "reward", "status"),
    [
        (_reply(("A.", [1, 2])), [1, 2], 5, 1.0, "ok"),  # P 1, R 1
        (_reply(("A.", [1, 3])), [1, 2], 5, 0.5, "ok"),  # P 1/2, R 1/2
        (_reply(("A.", [1])), [1, 2], 5, 0.75, "ok"),  # P 1, R 1/2
        (_reply(("A.", [1]), ("B.", [1, 4])), [1, 2], 5, 0.5, "ok"),  # cited {1,4}: P 1/2, R 1/2
        (_reply(("A.", [9])), [1], 5, 0.0, "ok"),  # out of range: a wrong citation
        (_reply(("Paris [2].", [])), [2], 3, 1.0, "ok"),  # markers in the text count
        (_reply(("A.", [])), [1], 3, 0.0, "no_citations"),
        ('{"sentences": []}', [1], 3, 0.0, "no_citations"),  # abstention
        ("the ferry leaves at six", [1], 3, 0.0, "unparseable"),
        ('{"sentences": [{"text": "A.", "citations": [1]}, {"te', [1], 3, 0.0, "unparseable"),
    ],
)
def test_reward_on_hand_computed_replies(
    text: str, relevant: list[int], n: int, reward: float, status: str
) -> None:
    scored = score_reply(text, relevant, n)
    assert scored.reward == pytest.approx(reward)
    assert scored.status == status


@pytest.mark.parametrize(
    ("text", "relevant", "reward", "status"),
    [
        # cut off after citing [1] (relevant, P 1, R 1/2): half of (1 + 0.5) / 2
        ('{"sentences": [{"text": "A.", "citations": [1]}, {"te', [1, 2], 0.375, "cut_off"),
        # markers in the text count too: [1][3] cited, P 1/2, R 1/2 -> half of 0.5
        ('{"sentences": [{"text": "A [1][3] b', [1, 2], 0.25, "cut_off"),
        (
            '{"sentences": [{"text": "A long sentence that never',
            [1],
            0.0,
            "cut_off_before_citation",
        ),
    ],
)
def test_cut_off_replies_are_diagnosed_and_keep_what_they_cited(
    text: str, relevant: list[int], reward: float, status: str
) -> None:
    scored = score_reply(text, relevant, 5, cut_off=True)
    assert scored.reward == pytest.approx(reward)
    assert scored.status == status
    # a complete answer with the same citations earns more than the cut-off one
    complete = (
        score_reply(_reply(("A.", list(scored.cited))), relevant, 5) if scored.cited else None
    )
    assert complete is None or complete.reward > scored.reward


def test_trl_reward_knows_cut_off_completions_by_their_last_token() -> None:
    good = _reply(("A.", [2]))
    reward = CitationReward(end_ids=[0, 99])
    rewards = reward(
        completions=[good, '{"sentences": [{"text": "A [2] and', "x"],
        completion_ids=[[5, 6, 99], [5, 6, 7], [8, 0]],  # the second ends without an end token
        relevant=[[2], [2], [2]],
        n_passages=[3, 3, 3],
    )
    assert rewards == pytest.approx([1.0, 0.5, 0.0])
    assert [b.status for b in reward.last] == ["ok", "cut_off", "unparseable"]
    assert reward.status_totals == {"ok": 1, "cut_off": 1, "unparseable": 1}
    assert reward.__name__ == "citation_reward"
    with pytest.raises(ValueError, match="completion_ids"):
        reward(completions=[good], relevant=[[2]], n_passages=[3])


def test_reward_function_takes_trl_arguments() -> None:
    good = _reply(("A.", [2]))
    rewards = citation_reward(
        prompts=[[{"role": "user", "content": "q"}]] * 3,
        completions=[[{"role": "assistant", "content": good}], good, "nonsense"],
        completion_ids=[[1], [2], [3]],
        relevant=[[2], [1, 2], [2]],
        n_passages=[3, 3, 3],
        label=["a", "b", "c"],
    )
    assert rewards == pytest.approx([1.0, 0.75, 0.0])
    with pytest.raises(ValueError, match="completions"):
        citation_reward(completions=[good], relevant=[], n_passages=[])


# ------------------------------------------------------------------------------ best-of-N


def test_best_of_n_keeps_the_best_draw_above_the_threshold(split: CitationSplit) -> None:
    prompts = list(split.train[:2])
    first, second = prompts
    wrong = next(k for k in range(1, first.n_passages + 1) if k not in first.relevant)
    assert len(first.relevant) == 1  # spec 1/1/1
    # prompt 1: draw 0 wrong (0), draw 1 right + wrong (P 1/2, R 1: 0.75), draw 2 exact (1)
    # -> keeps draw 2
    # prompt 2: every draw cites a wrong passage -> nothing clears 0.5
    wrong2 = next(k for k in range(1, second.n_passages + 1) if k not in second.relevant)
    script = [
        _reply(("A.", [wrong])),
        _reply(("A.", [first.relevant[0], wrong])),
        _reply(("A.", list(first.relevant))),
        _reply(("B.", [wrong2])),
        "not json at all",
        _reply(("B.", [wrong2])),
    ]
    backend = ScriptedBackend(script, model_id="bon-v1")
    client = LLMClient(backend, max_attempts=1)
    targets, report = make_targets(
        prompts, client, source="best_of_n", samples=3, temperature=0.7, threshold=0.5, seed=5
    )
    assert [(t.key, t.draw, t.reward) for t in targets] == [(first.key, 2, 1.0)]
    assert json.loads(targets[0].completion) == {
        "sentences": [{"text": "A.", "citations": list(first.relevant)}]
    }
    seeds = [r.seed for r in backend.calls]
    assert seeds == [stable_seed(5, p.key, d) % 2**31 for p in prompts for d in range(3)]
    assert all(r.temperature == 0.7 for r in backend.calls)
    summary = report.as_dict()
    assert summary["kept"] == 1 and summary["prompts"] == 2
    assert summary["failed_answers"] == 1 and summary["answers"] == 6
    assert summary["reward_all"]["n"] == 5
    assert summary["reward_all"]["mean"] == pytest.approx((0 + 0.75 + 1 + 0 + 0) / 5)
    assert summary["tokens_generated"] > 0


def test_teacher_targets_are_one_greedy_answer_each(split: CitationSplit) -> None:
    prompts = list(split.train[:2])
    script = [_reply(("A.", list(p.relevant))) for p in prompts]
    backend = ScriptedBackend(script, model_id="teacher-v1")
    targets, report = make_targets(
        prompts, LLMClient(backend), source="teacher", samples=5, threshold=0.9
    )
    assert [t.key for t in targets] == [p.key for p in prompts]
    assert all(r.temperature == 0.0 for r in backend.calls) and len(backend.calls) == 2
    assert report.source == "teacher" and report.model_id == "teacher-v1"
