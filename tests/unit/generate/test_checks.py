"""The model-free checks of generated candidates (``ragtrail.generate.checks``) and their wiring
into ``label_and_critique``: rejected before any model call, with the reason stored."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from ragtrail.config import load_settings
from ragtrail.generate.checks import (
    CheckFailure,
    CheckName,
    answer_repeats_question,
    check_candidates,
    empty_answer,
    mentions_passage,
    reject_reason,
    unrelated_statements,
)
from ragtrail.generate.critiques import CRITERIA
from ragtrail.llm.backends.base import GenerationRequest, GenerationResult
from ragtrail.llm.testing import ScriptedBackend
from ragtrail.pipeline.generate.candidates import label_and_critique
from ragtrail.pipeline.generate.plan import GenerationPlan
from ragtrail.pipeline.generate.report_data import failures, funnel
from ragtrail.records import (
    CandidateStatus,
    QACandidate,
    RejectKind,
    parse_reject_reason,
)
from tests.unit.generate import (
    calls_by_prompt,
    input_fields,
    label_by_kind,
    prompt_name,
    routed_backend,
    sample_contexts,
)

LEAVE_FACT = "Full-time staff receive 27 days of annual leave per year."
REVIEW_FACT = "Every merge request needs one approval from someone other than the author."


SOURCE_REFERENCES = [
    ("According to the passage, how many days of leave do staff get?", "according to the"),
    ("What does the text above say about carry over?", "the text"),
    ("In the given context, who approves exceptions?", "given context"),
    ("What is mentioned in this document?", "this document"),
    ("Which rule does THE EXCERPT state?", "the excerpt"),
    ("What do the documents say about leave?", "the documents"),
    ("As mentioned above, who signs off?", "mentioned above"),
]
TOPIC_QUESTIONS = [
    "How many days of annual leave do full-time staff get?",
    "Who owns the document retention schedule?",
    "What is a merge request in the context of code review?",
    "How long is the text message retention period?",
    "Is passage of the budget required by March?",
    "Which contexts does the retrieval evaluation cover?",  # no article: a topic word
]


@pytest.mark.parametrize(("question", "phrase"), SOURCE_REFERENCES)
def test_mentions_passage_finds_source_references(question: str, phrase: str) -> None:
    assert mentions_passage(question) == CheckFailure(CheckName.MENTIONS_PASSAGE, phrase)


@pytest.mark.parametrize("question", TOPIC_QUESTIONS)
def test_mentions_passage_leaves_topic_words_alone(question: str) -> None:
    assert mentions_passage(question) is None


def test_gx_suite_flags_exactly_what_the_check_rejects() -> None:
    """Accepted items pass the test-set suite's ``mentions_context`` expectation: one pattern list."""
    import pandas as pd

    from ragtrail.quality.suites import CONTEXT_REFERENCE

    questions = [q for q, _ in SOURCE_REFERENCES] + TOPIC_QUESTIONS
    flagged = pd.Series(questions).str.contains(CONTEXT_REFERENCE, case=False, regex=True)
    assert list(flagged) == [mentions_passage(q) is not None for q in questions]
    assert flagged.sum() == len(SOURCE_REFERENCES)


def test_answer_repeats_question() -> None:
    same = answer_repeats_question("How many days of leave?", "how many days of LEAVE")
    assert same == CheckFailure(CheckName.ANSWER_REPEATS_QUESTION, "same_text")
    yes_no = answer_repeats_question(
        "Is it true that carried days must be taken by 30 June?",
        "Carried days must be taken by 30 June.",
    )
    assert yes_no == CheckFailure(CheckName.ANSWER_REPEATS_QUESTION, "no_new_word")
    # "27", "receive" and "year" are new: a real answer
    real = "How many days of annual leave do full-time staff get?"
    assert answer_repeats_question(real, LEAVE_FACT) is None
    assert answer_repeats_question("Is leave approved by managers?", "Yes.") is None
    assert answer_repeats_question("Anything?", "") is None  # empty answers: their own check


def test_empty_answer_only_for_answerable_labels() -> None:
    assert empty_answer("", "fact_single") == CheckFailure(CheckName.EMPTY_ANSWER)
    assert empty_answer("  \n", "summary") == CheckFailure(CheckName.EMPTY_ANSWER)
    assert empty_answer("", "reasoning") == CheckFailure(CheckName.EMPTY_ANSWER)
    assert empty_answer("", "unanswerable") is None
    assert empty_answer("27 days", "fact_single") is None


class TableEncoder:
    """Fixed unit vectors per text (hand-made, so every cosine is known); records its calls."""

    def __init__(self, table: dict[str, Sequence[float]]) -> None:
        self.table = {k: np.asarray(v, dtype=np.float32) for k, v in table.items()}
        self.calls: list[list[str]] = []

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.stack([self.table[t] for t in texts])


def test_unrelated_statements_against_hand_computed_cosines() -> None:
    encode = TableEncoder({"q1": [1, 0], "s1": [0.6, 0.8], "q2": [1, 0], "s2": [0, 1]})
    out = unrelated_statements(["q1", "q2", "", "q3"], ["s1", "s2", "s3", " "], encode, 0.5)
    assert out == [None, CheckFailure(CheckName.UNRELATED_STATEMENT, "0.000<0.5"), None, None]
    assert encode.calls == [["q1", "q2", "s1", "s2"]]  # one call; blank pairs never encoded
    # the bar is inclusive: cos 0.6 passes at 0.6, fails just above
    assert unrelated_statements(["q1"], ["s1"], encode, 0.6) == [None]
    assert unrelated_statements(["q1"], ["s1"], encode, 0.61) == [
        CheckFailure(CheckName.UNRELATED_STATEMENT, "0.600<0.61")
    ]
    assert unrelated_statements([], [], encode, 0.5) == []
    with pytest.raises(ValueError, match="2 questions but 1 statements"):
        unrelated_statements(["q1", "q2"], ["s1"], encode, 0.5)


def test_default_bar_separates_a_related_from_an_unrelated_statement(embedder) -> None:
    bar = load_settings().generation.min_question_statement_similarity
    question = "How many days of annual leave do full-time staff get?"
    related, unrelated = unrelated_statements(
        [question, question], [LEAVE_FACT, REVIEW_FACT], embedder.encode, bar
    )
    assert related is None
    assert unrelated is not None and unrelated.kind == CheckName.UNRELATED_STATEMENT


def _cand(n: int, question: str, statement: str, answer: str, label: str) -> QACandidate:
    return QACandidate(
        candidate_id=f"c{n}",
        context=sample_contexts()[0],
        statement_kind="foreign" if label == "unanswerable" else "fact",
        requested_label=label,
        statement=statement,
        question=question,
        answer=answer,
    )


GOOD_QUESTION = "Is it true that Full-time staff receive 27 days of annual leave per what?"


def _candidates() -> list[QACandidate]:
    """One candidate per check outcome; c0 and c5 pass every check."""
    return [
        _cand(0, GOOD_QUESTION, LEAVE_FACT, LEAVE_FACT, "fact_single"),
        _cand(
            1,
            "According to the passage, how many days of annual leave do staff receive?",
            LEAVE_FACT,
            LEAVE_FACT,
            "fact_single",
        ),
        _cand(2, f"Is it true that {LEAVE_FACT[:-1]}?", LEAVE_FACT, LEAVE_FACT, "fact_single"),
        _cand(3, GOOD_QUESTION, LEAVE_FACT, "", "fact_single"),
        _cand(
            4,
            "Is it true that every merge request needs one approval from someone other than who?",
            LEAVE_FACT,
            LEAVE_FACT,
            "fact_single",
        ),
        _cand(5, GOOD_QUESTION, LEAVE_FACT, "", "unanswerable"),
    ]


def test_check_candidates_and_reasons(embedder) -> None:
    bar = load_settings().generation.min_question_statement_similarity
    results = check_candidates(_candidates(), embedder.encode, bar)
    kinds = [[f.kind for f in found] for found in results]
    assert kinds == [
        [],
        [CheckName.MENTIONS_PASSAGE],
        [CheckName.ANSWER_REPEATS_QUESTION],
        [CheckName.EMPTY_ANSWER],
        [CheckName.UNRELATED_STATEMENT],
        [],
    ]
    assert reject_reason(results[1]) == "check:mentions_passage=according to the"
    assert parse_reject_reason(reject_reason(results[4]))[0] == RejectKind.CHECK
    two = [
        CheckFailure(CheckName.MENTIONS_PASSAGE, "the text"),
        CheckFailure(CheckName.EMPTY_ANSWER),
    ]
    assert reject_reason(two) == "check:mentions_passage=the text; check:empty_answer"
    with pytest.raises(ValueError):
        reject_reason([])


def _plan() -> GenerationPlan:
    """A plan in which the labeller gates (its calibration met the bar when it was planned)."""
    return GenerationPlan(
        corpus="test",
        run_id="r1",
        snapshot_id="snap-1",
        seed=3,
        targets={},
        existing_ids=[],
        previous_version=None,
        previous_questions=[],
        pool=[],
        shards=[],
        retired=0,
        params={},
        judges={"labeller": {"mode": "gate"}},
    )


def test_label_and_critique_rejects_failed_checks_before_any_model_call(make_runtime) -> None:
    rt = make_runtime()
    backend = routed_backend({"label": label_by_kind})
    rt.use_llm_backends({rt.settings.generation.llm: backend})
    cands = _candidates()
    label_and_critique(rt, _plan(), cands)

    by_id = {c.candidate_id: c for c in cands}
    for cid, check in [
        ("c1", "mentions_passage"),
        ("c2", "answer_repeats_question"),
        ("c3", "empty_answer"),
        ("c4", "unrelated_statement"),
    ]:
        cand = by_id[cid]
        assert cand.status == CandidateStatus.REJECTED
        assert cand.reject_reason is not None
        assert cand.reject_reason.startswith(f"check:{check}")
        assert cand.observed_label is None and cand.critiques == {}
    # only the two candidates that passed reached the labeller (they ask the same question of the
    # same context: one call answers both); only the label match was critiqued
    labelled = [input_fields(r)["question"] for r in backend.calls if prompt_name(r) == "label"]
    assert labelled == [GOOD_QUESTION]
    assert by_id["c0"].observed_label == "fact_single"
    assert by_id["c0"].status == CandidateStatus.PENDING
    assert by_id["c5"].reject_reason == "label_mismatch:unanswerable->fact_single"
    counts = calls_by_prompt(backend)
    assert sum(n for name, n in counts.items() if name.startswith("critique_")) == len(CRITERIA)

    # the report data counts the new kind: its own funnel stage and one group per check
    stages = {s.stage: s.count for s in funnel(cands)}
    assert stages["parsed"] == 6 and stages["model-free checks passed"] == 2
    causes = {f.cause: f.count for f in failures(cands)}
    assert causes["rejected:check:mentions_passage"] == 1
    assert causes["rejected:check:unrelated_statement"] == 1
    assert causes["rejected:label_mismatch"] == 1


def test_a_question_not_in_a_french_contexts_language_is_rejected_and_counted(embedder) -> None:
    french = replace(
        sample_contexts()[0],
        language="fr",
        text="Le personnel à temps plein reçoit 27 jours de congés annuels par an.",
    )
    english = _cand(0, "How many days of annual leave do full-time staff get?", "", "27", "x")
    in_french = _cand(1, "Combien de jours de congés annuels reçoit le personnel ?", "", "27", "x")
    cands = [replace(c, context=french) for c in (english, in_french)]
    results = check_candidates(cands, embedder.encode, 0.0)
    assert [[f.kind for f in found] for found in results] == [[CheckName.WRONG_LANGUAGE], []]
    assert reject_reason(results[0]).startswith("check:wrong_language=fr=")

    cands[0].status, cands[0].reject_reason = CandidateStatus.REJECTED, reject_reason(results[0])
    stages = {stage.stage: stage.count for stage in funnel(cands)}
    assert stages["parsed"] == 2 and stages["in the context's language"] == 1
    assert stages["model-free checks passed"] == 1


@dataclass
class _MeetingBackend(ScriptedBackend):
    """A concurrent scripted backend whose label call waits (up to 5 s) for a critique call to
    arrive: it sees one only when the two run at once."""

    concurrent_requests: int = 8
    critique_arrived: threading.Event = field(default_factory=threading.Event)
    label_met_critique: bool = False

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        names = {prompt_name(r) for r in requests}
        if any(n.startswith("critique_") for n in names):
            self.critique_arrived.set()
        if "label" in names:
            self.label_met_critique = self.critique_arrived.wait(timeout=5)
        return super().generate(requests)


def test_an_advisory_labeller_and_the_critiques_reach_an_endpoint_at_once(make_runtime) -> None:
    rt = make_runtime()
    scripted = routed_backend({"label": label_by_kind})
    backend = _MeetingBackend(scripted.responder, model_id=scripted.model_id)
    rt.use_llm_backends({rt.settings.generation.llm: backend})
    cands = _candidates()
    label_and_critique(rt, replace(_plan(), judges={"labeller": {"mode": "advise"}}), cands)

    assert backend.label_met_critique
    by_id = {c.candidate_id: c for c in cands}
    # the advisory verdict is stored, but the mismatch keeps its requested label and is critiqued
    assert by_id["c5"].observed_label == "fact_single"
    assert by_id["c5"].status == CandidateStatus.PENDING and by_id["c5"].critiques
    assert by_id["c0"].critiques.keys() == {
        name for name, crit in CRITERIA.items() if crit.applies_to(by_id["c0"])
    }
