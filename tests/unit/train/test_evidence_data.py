"""The evidence extractor's training split, proved on a hand-built corpus.

Ten questions over a fake hybrid search whose results are fixed per question. The rules are
checked on every seed of a range (whole groups move together; no training prompt shows a
held-out question, a held-out ground document or any document a held-out prompt shows) and,
for the seeds that put the right questions on each side, the dropping rules one by one. The
JSON form round-trips, and a tampered or foreign document is refused.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable

import pytest

from ragtrail.evaluate.attribution.passage_corpus import CorpusPassage
from ragtrail.evaluate.evidence.extraction import EVIDENCE_PROMPT, EvidenceInput
from ragtrail.records import QAItem, QuestionLabel
from ragtrail.train.evidence.data import (
    SEARCH_DEPTH,
    SPLIT_FORMAT,
    EvidencePrompt,
    EvidenceSplit,
    EvidenceSplitError,
    split_evidence_data,
)
from ragtrail.train.question_split import document_groups, held_out_questions

K = 2
SHARE = 0.3
FACT, SUMMARY, REASONING, UNANSWERABLE = (
    QuestionLabel.FACT_SINGLE,
    QuestionLabel.SUMMARY,
    QuestionLabel.REASONING,
    QuestionLabel.UNANSWERABLE,
)

# qid: (question, label, answer, ground documents, chunks the search returns, best first).
# A chunk id is "<doc>#<n>"; the same id is the same chunk whoever retrieves it.
TABLE: dict[str, tuple[str, str, str, tuple[str, ...], list[str]]] = {
    # f1 - f2 - f3 are one group: f2 shares d_fuel with f1 and d_staff with f3.
    "f1": ("Where is the fuel depot?", FACT, "Dock 4", ("d_fuel",), ["d_fuel#0", "d_fuel#1", "d_misc#0"]),
    "f2": ("Who runs the fuel depot?", FACT, " Ana ", ("d_fuel", "d_staff"), ["d_fuel#1", "d_staff#0", "d_misc#0"]),
    "f3": ("When do the staff arrive?", FACT, "At 7 am", ("d_staff",), ["d_staff#0", "d_misc#1"]),
    "g1": ("Which gate is for trucks?", FACT, "Gate B", ("d_gate",), ["d_gate#0", "d_gate#1"]),
    # h1 shows d_pop#0 (not a ground document of anyone) in its top k; d_deep#0 only below k.
    "h1": ("Where is the main hall?", SUMMARY, "North wing", ("d_hall",), ["d_hall#0", "d_pop#0", "d_deep#0"]),
    "p1": ("How is the popular room booked?", FACT, "Online", ("d_p1",), ["d_pop#1", "d_p1#0", "d_p1#1"]),
    # t1's search finds only chunks of g1's ground document.
    "t1": ("Which tools are allowed?", FACT, "Hand tools", ("d_tool",), ["d_gate#0", "d_gate#1"]),
    # s1's results interleave g1's document with its own.
    "s1": ("What does the sign say?", REASONING, "Stop", ("d_sign",), ["d_gate#0", "d_sign#0", "d_gate#1", "d_sign#1", "d_deep#1"]),
    "u1": ("What is the wifi password?", UNANSWERABLE, "", ("d_unk",), ["d_unk#0", "d_misc#0"]),
    "e1": ("Is the deep archive open?", FACT, "Yes", ("d_deep",), ["d_deep#0", "d_misc#1"]),
}  # fmt: skip


def passage(chunk_id: str) -> CorpusPassage:
    return CorpusPassage(chunk_id, chunk_id.split("#")[0], f"Text of chunk {chunk_id}.")


def make_items(table: dict = TABLE) -> list[QAItem]:
    return [
        QAItem(qid=qid, question=q, label=label, answer=answer, ground_doc_ids=docs)
        for qid, (q, label, answer, docs, _) in table.items()
    ]


class FakeSearch:
    """``search(questions, depth)`` with fixed results per question; records every call."""

    def __init__(self, table: dict = TABLE) -> None:
        self.by_question = {row[0]: row[4] for row in table.values()}
        self.calls: list[tuple[list[str], int]] = []

    def __call__(self, questions: list[str], depth: int) -> list[list[CorpusPassage]]:
        self.calls.append((list(questions), depth))
        return [[passage(c) for c in self.by_question[q][:depth]] for q in questions]


def split(seed: int, items: list[QAItem] | None = None, **kw) -> EvidenceSplit:
    return split_evidence_data(
        items or make_items(), FakeSearch(), k=kw.get("k", K), eval_share=SHARE, seed=seed
    )


def find_split(rule: Callable[[set[str]], bool], what: str) -> EvidenceSplit:
    """The split of the first seed whose held-out qids satisfy ``rule``."""
    for seed in range(300):
        s = split(seed)
        if rule({p.qid for p in s.held_out}):
            return s
    pytest.fail(f"no seed in 0..299 holds out {what}")


# ------------------------------------------------------------------------ question groups


def test_document_groups_link_questions_through_shared_documents() -> None:
    items = [
        QAItem("z9", "?", FACT, "a", ("d3",)),
        QAItem("b2", "?", FACT, "a", ("d1",)),
        QAItem("m5", "?", FACT, "a", ("d9",)),
        QAItem("a7", "?", FACT, "a", ("d1", "d2")),
        QAItem("c1", "?", FACT, "a", ("d2", "d3")),  # joins a7/b2 (d1, d2) with z9 (d3)
        QAItem("n0", "?", UNANSWERABLE, "", ()),  # no ground document: alone
    ]
    assert document_groups(items) == [["a7", "b2", "c1", "z9"], ["m5"], ["n0"]]


def test_document_groups_keep_unrelated_questions_apart() -> None:
    items = [QAItem(f"q{i}", "?", FACT, "a", (f"d{i}",)) for i in range(4)]
    assert document_groups(items) == [["q0"], ["q1"], ["q2"], ["q3"]]


@pytest.mark.parametrize("share", [0.01, 0.3, 0.5, 0.99])
def test_held_out_questions_take_whole_groups_in_shuffled_order(share: float) -> None:
    groups = [["a1", "a2", "a3"], ["b1"], ["c1", "c2"], ["d1"], ["e1"], ["f1", "f2"]]
    n = sum(len(g) for g in groups)
    wanted = max(1, math.ceil(share * n))
    seen_last = set()
    for seed in range(40):
        shuffled = [list(g) for g in groups]
        held = held_out_questions(shuffled, n, share, random.Random(seed))
        # the groups were shuffled in place, and with that seed's order
        expected_order = [list(g) for g in groups]
        random.Random(seed).shuffle(expected_order)
        assert shuffled == expected_order
        # held out: a prefix of the shuffled groups, stopping as soon as ``wanted`` is reached,
        # never the last group
        taken, total = [], 0
        for group in shuffled[:-1]:
            if total >= wanted:
                break
            taken.append(group)
            total += len(group)
        assert held == {q for g in taken for q in g}
        assert not held & set(shuffled[-1])
        assert len(held) >= min(wanted, n - len(shuffled[-1]))
        assert held  # at least one question, even for a tiny share
        seen_last.add(tuple(shuffled[-1]))
    assert len(seen_last) > 1  # the kept group depends on the seed


def test_held_out_questions_keep_the_last_group_even_for_a_share_near_one() -> None:
    groups = [["a"], ["b"], ["c"]]
    held = held_out_questions(groups, 3, 0.99, random.Random(0))
    assert held == {groups[0][0], groups[1][0]}


# ------------------------------------------------------------------------ the split's rules


def check_rules(items: list[QAItem], s: EvidenceSplit, k: int = K) -> None:
    by_qid = {i.qid: i for i in items}
    held = {p.qid for p in s.held_out}
    train = [p.qid for p in s.train]
    # every question lands exactly once
    assert sorted([*held, *train, *s.dropped]) == sorted(by_qid)
    # whole groups are held out
    for group in document_groups(items):
        assert set(group) <= held or not set(group) & held, group
    assert len(held) >= math.ceil(SHARE * len(items))
    held_questions = {by_qid[q].question for q in held}
    held_ground = {d for q in held for d in by_qid[q].ground_doc_ids}
    held_shown = {d for p in s.held_out for d in p.doc_ids}
    held_texts = {t for p in s.held_out for t in p.passages}
    assert set(s.held_out_docs) == held_ground | held_shown
    for p in s.held_out:  # the held-out prompts: the top k chunks, whatever they are
        chunks = TABLE[p.qid][4][:k]
        assert p.doc_ids == tuple(c.split("#")[0] for c in chunks)
        assert p.passages == tuple(passage(c).text for c in chunks)
    for p in s.train:
        item = by_qid[p.qid]
        assert p.question == item.question and p.question not in held_questions
        assert p.gold == item.answer.strip() and p.gold
        assert p.label == str(item.label) and item.label != UNANSWERABLE
        assert 1 <= len(p.passages) <= k and len(p.passages) == len(p.doc_ids)
        assert not set(p.doc_ids) & held_ground, p
        assert not set(p.doc_ids) & held_shown, p
        assert not set(p.passages) & held_texts, p
        # the kept chunks are the first allowed ones, in search order
        allowed = [c for c in TABLE[p.qid][4] if c.split("#")[0] not in s.held_out_docs]
        assert p.passages == tuple(passage(c).text for c in allowed[:k])


def test_rules_hold_for_every_seed() -> None:
    items = make_items()
    held_sets = set()
    for seed in range(60):
        s = split(seed)
        check_rules(items, s)
        held_sets.add(frozenset(p.qid for p in s.held_out))
    assert len(held_sets) > 5  # the seeds really explore different splits


def test_search_is_asked_once_for_every_question_at_the_deeper_depth() -> None:
    search = FakeSearch()
    items = make_items()
    s = split_evidence_data(items, search, k=K, eval_share=SHARE, seed=3)
    assert len(search.calls) == 1
    questions, depth = search.calls[0]
    assert depth == K * SEARCH_DEPTH
    assert sorted(questions) == sorted(i.question for i in items)
    held = {p.question for p in s.held_out}
    assert set(questions[: len(held)]) == held  # held-out questions first


def test_questions_sharing_a_ground_document_stay_together_both_ways() -> None:
    fuel = {"f1", "f2", "f3"}
    held_out = find_split(lambda h: fuel <= h, "the fuel group")
    assert fuel <= {p.qid for p in held_out.held_out}
    kept = find_split(lambda h: not fuel & h, "anything but the fuel group")
    assert fuel <= {p.qid for p in kept.train}


def test_unanswerable_question_is_held_out_or_dropped_never_trained() -> None:
    s = find_split(lambda h: "u1" not in h, "another group than u1")
    assert "u1" not in {p.qid for p in s.train}
    assert (
        s.dropped["u1"]
        == "no gold answer (unanswerable, or its answer is empty): helpfulness is undefined"
    )
    s = find_split(lambda h: "u1" in h, "u1")
    (prompt,) = [p for p in s.held_out if p.qid == "u1"]
    assert prompt.gold == "" and prompt.label == "unanswerable"
    assert "u1" not in s.dropped


def test_training_question_whose_every_chunk_is_blocked_is_dropped_with_reason() -> None:
    s = find_split(lambda h: "g1" in h and "t1" not in h, "g1 without t1")
    assert "t1" not in {p.qid for p in s.train}
    assert s.dropped["t1"] == "every retrieved chunk belongs to a held-out document"
    assert "d_gate" in s.held_out_docs
    # the same question trains on those chunks when g1 is not held out
    s = find_split(lambda h: not {"g1", "t1"} & h, "neither g1 nor t1")
    (t1,) = [p for p in s.train if p.qid == "t1"]
    assert t1.doc_ids == ("d_gate", "d_gate")
    assert "t1" not in s.dropped


def test_training_prompt_skips_blocked_chunks_and_still_gets_k() -> None:
    s = find_split(lambda h: "g1" in h and "s1" not in h, "g1 without s1")
    (s1,) = [p for p in s.train if p.qid == "s1"]
    assert s1.doc_ids == ("d_sign", "d_sign")
    assert s1.passages == (passage("d_sign#0").text, passage("d_sign#1").text)


def test_document_a_held_out_prompt_shows_is_blocked_not_only_its_chunk() -> None:
    # h1 shows d_pop#0; p1 retrieves d_pop#1, another chunk of that document
    s = find_split(lambda h: "h1" in h and "p1" not in h, "h1 without p1")
    assert "d_pop" in s.held_out_docs
    (p1,) = [p for p in s.train if p.qid == "p1"]
    assert p1.doc_ids == ("d_p1", "d_p1")
    # h1 retrieved d_deep#0 only below its top k: it never showed it, so e1 may train on it
    s = find_split(lambda h: "h1" in h and not {"e1", "p1"} & h, "h1 without e1")
    assert "d_deep" not in s.held_out_docs
    (e1,) = [p for p in s.train if p.qid == "e1"]
    assert e1.doc_ids[0] == "d_deep"
    # without h1 held out, p1 is shown d_pop
    s = find_split(lambda h: not {"h1", "p1"} & h, "neither h1 nor p1")
    (p1,) = [p for p in s.train if p.qid == "p1"]
    assert p1.doc_ids == ("d_pop", "d_p1")


def test_all_questions_in_one_group_cannot_be_split() -> None:
    items = [
        QAItem("a", "A?", FACT, "x", ("d1",)),
        QAItem("b", "B?", FACT, "y", ("d1", "d2")),
        QAItem("c", "C?", FACT, "z", ("d2",)),
    ]
    with pytest.raises(EvidenceSplitError, match="all share ground documents"):
        split_evidence_data(items, FakeSearch(), k=K, eval_share=0.3, seed=1)


def test_repeated_qid_is_refused() -> None:
    items = make_items()
    items.append(QAItem("f1", "Another?", FACT, "x", ("d_other",)))
    with pytest.raises(EvidenceSplitError, match="repeat a qid"):
        split_evidence_data(items, FakeSearch(), k=K, eval_share=SHARE, seed=0)


def test_no_training_prompt_left_is_an_error_naming_the_reasons() -> None:
    table = {"a1": TABLE["g1"], "u1": TABLE["u1"]}
    items = make_items(table)
    outcomes = set()
    for seed in range(20):
        try:
            s = split_evidence_data(items, FakeSearch(table), k=K, eval_share=0.3, seed=seed)
        except EvidenceSplitError as err:
            assert "no training prompt is left (1 dropped: u1: no gold answer" in str(err)
            outcomes.add("error")
        else:
            assert [p.qid for p in s.train] == ["a1"]
            assert [p.qid for p in s.held_out] == ["u1"]
            outcomes.add("split")
    assert outcomes == {"error", "split"}


# ------------------------------------------------------------------------ versions and JSON


def test_json_round_trip_keeps_everything() -> None:
    s = find_split(lambda h: "u1" not in h and "g1" in h, "g1 without u1")
    assert s.dropped  # the round trip carries dropped questions too
    text = s.to_json()
    data = json.loads(text)
    assert data["format"] == SPLIT_FORMAT
    assert data["split_version"] == s.split_version
    back = EvidenceSplit.from_json(text)
    assert back == s
    assert back.split_version == s.split_version
    assert back.to_json() == text
    assert all(isinstance(p.passages, tuple) for p in (*back.train, *back.held_out))
    assert back.settings == {"eval_share": SHARE, "seed": s.settings["seed"], "k": K}
    lineage = back.lineage()
    assert lineage["split_version"] == s.split_version
    assert lineage["train_prompts"] == len(s.train)
    assert lineage["eval_items"] == len(s.held_out)
    assert "Text of chunk" not in json.dumps(lineage)  # no passage text in the lineage


@pytest.mark.parametrize(
    "tamper",
    [
        lambda d: d["train"][0]["passages"].__setitem__(0, "a different passage"),
        lambda d: d["held_out"].pop(),
        lambda d: d["dropped"].__setitem__("x", "made up"),
        lambda d: d["settings"].__setitem__("seed", 99),
        lambda d: d.__setitem__("split_version", "0" * 16),
    ],
)
def test_from_json_refuses_a_tampered_document(tamper: Callable[[dict], None]) -> None:
    data = json.loads(split(5).to_json())
    tamper(data)
    with pytest.raises(EvidenceSplitError, match="does not match its version"):
        EvidenceSplit.from_json(json.dumps(data))


def test_from_json_refuses_another_format() -> None:
    data = json.loads(split(5).to_json())
    data["format"] = "ragtrail-citation-split/1"
    with pytest.raises(EvidenceSplitError, match="not an evidence split"):
        EvidenceSplit.from_json(json.dumps(data))


def test_same_seed_same_version_other_seed_other_held_out_set() -> None:
    a, b = split(7), split(7)
    assert a.split_version == b.split_version and a.to_json() == b.to_json()
    held = {p.qid for p in a.held_out}
    others = [split(seed) for seed in range(8, 20)]
    assert any({p.qid for p in o.held_out} != held for o in others)
    assert all(o.split_version != a.split_version for o in others)  # the seed is in the content
    assert split(7, k=3).split_version != a.split_version


# ------------------------------------------------------------------------ the prompt


def test_prompt_messages_are_the_extractor_prompt() -> None:
    p = EvidencePrompt(
        qid="q",
        label="fact_single",
        question="Where is the fuel depot?",
        gold="Dock 4",
        passages=("The depot is at Dock 4.", "Trucks use gate B."),
        doc_ids=("d_fuel", "d_gate"),
    )
    messages = p.messages()
    assert messages == tuple(
        EVIDENCE_PROMPT.render(
            EvidenceInput(
                question=p.question, passages=["The depot is at Dock 4.", "Trucks use gate B."]
            )
        )
    )
    assert messages[0]["role"] == "system"
    assert "Copy from the numbered passages" in messages[0]["content"]
    last = messages[-1]
    assert last["role"] == "user"
    assert "<question>Where is the fuel depot?</question>" in last["content"]
    first = last["content"].index('index="1">\nThe depot is at Dock 4.')
    second = last["content"].index('index="2">\nTrucks use gate B.')
    assert first < second
    assert "Dock 4" not in last["content"].replace("The depot is at Dock 4.", "")  # no gold
    assert EvidencePrompt.from_dict(json.loads(json.dumps(p.__dict__))) == p
