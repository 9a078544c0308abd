"""Test-set dedup and the GX question-uniqueness check key questions the same way.

Each pair is validated by the real test-set suite (GX) and compared with dedup's verdict: the
suite fails on exactly the pairs dedup calls the same question.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ragtrail.quality import suites
from ragtrail.quality.runner import QualityRunner
from ragtrail.testset.dedup import find_duplicates, normalize_question
from ragtrail.testset.export import to_frame
from tests.unit.testset import make_candidate

PAIRS = [
    # equal for both (the old GX key dropped punctuation without a space: "ptopolicy")
    ("What's the PTO-policy?", "what s the pto policy"),
    ("How many days_off are granted?", "How many days off are granted"),
    ("Ｗｈａｔ is the leave policy?", "what is the LEAVE policy"),
    ("Who signs the Straße permit?", "who signs the STRASSE permit"),
    # different for both (the old GX key merged "e-mail" and "email")
    ("Is e-mail allowed on trips?", "Is email allowed on trips?"),
    ("What is the travel fee?", "What is the travel fee for?"),
]


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> QualityRunner:
    return QualityRunner(Path(tmp_path_factory.mktemp("keys")))


def _uniqueness_failed(runner: QualityRunner, first: str, second: str) -> tuple[bool, list[str]]:
    items = [make_candidate("a", question=first), make_candidate("b", question=second)]
    prepared = suites.prepare_testset(to_frame(items), [1, 1])
    result = runner.validate("testset", prepared, suites.testset_suite())
    others = [f for f in result.failures if "question_key" not in f]
    return any("question_key" in f for f in result.failures), [*others, *prepared["question_key"]]


@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_gx_uniqueness_fails_exactly_on_dedup_duplicates(
    runner: QualityRunner, first: str, second: str
) -> None:
    same_for_dedup = normalize_question(first) == normalize_question(second)
    failed, details = _uniqueness_failed(runner, first, second)
    assert details[-2:] == [normalize_question(first), normalize_question(second)]
    assert details[:-2] == []  # the pair breaks no other expectation
    assert failed == same_for_dedup
    if same_for_dedup:
        [kept, dropped] = find_duplicates([first, second])
        assert kept is None and dropped is not None and dropped.of_index == 0


def test_pairs_cover_both_verdicts() -> None:
    verdicts = {normalize_question(a) == normalize_question(b) for a, b in PAIRS}
    assert verdicts == {True, False}
