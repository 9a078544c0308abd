"""Abstention detection: explicit flags, empty replies, whole-reply "I don't know" phrases, and
replies that merely start like one but do answer."""

from __future__ import annotations

import re

import pytest

from ragtrail.evaluate.sufficiency.abstention import ABSTENTION_PATTERNS, is_abstention


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n ",
        "I don't know.",
        "I dont know",
        "I don\u2019t know",
        "i do not know the answer to this question.",
        "I DON'T KNOW!",
        "Sorry, I can't answer that.",
        "I cannot answer this question.",
        "Unable to answer.",
        "Not sure.",
        "I'm not sure.",
        "No answer.",
        "Not enough information to answer the question.",
        "Insufficient information.",
        "There is not enough information about parking.",
        "The context does not say.",
        "The passages do not mention the leave policy.",
        "The provided context doesn't provide any information about parking.",
        "The passages do not say how many days staff get.",
        "Unfortunately, the provided context does not contain this information.",
        "Based on the context, I cannot answer.",
        "I cannot determine this from the given passages.",
        "It is not mentioned in the text.",
        "Not specified.",
        "Unknown",
        "unknown.",
        "N/A",
        "n/a.",
        '"I don\'t know."',
        "I don't know. The context does not mention it.",
        "Sorry. I don't know.",
        "I have no idea about parking.",
        "No idea.",
    ],
)
def test_abstentions(text: str) -> None:
    assert is_abstention(text)
    assert is_abstention(text, False)  # the text says so, whatever a flag claims


@pytest.mark.parametrize(
    "text",
    [
        "27 days",
        "Full-time staff get 27 days of annual leave.",
        "I don't know why it changed, but the answer is 27 days.",
        "I'm not sure, but I think it's 27 days.",
        "I do not know. It is 27 days.",
        "The context does not mention the policy, but staff get 27 days.",
        "The context does not say it is 27 days.",
        "I cannot say it is 27 days.",
        "The answer is not 27 days.",
        "Unknown callers are blocked.",
        "Not enough staff were hired.",
        "No.",
        "None",
        "Nobody knows the password except IT.",
    ],
)
def test_answers_are_not_abstentions(text: str) -> None:
    assert not is_abstention(text)
    assert not is_abstention(text, None)


def test_the_explicit_flag_decides_when_true() -> None:
    assert is_abstention("27 days", True)
    assert is_abstention("", True)
    assert not is_abstention("27 days", False)


def test_patterns_are_exported_and_compile() -> None:
    assert len(ABSTENTION_PATTERNS) >= 8
    for pattern in ABSTENTION_PATTERNS:
        re.compile(pattern)
    joined = "|".join(ABSTENTION_PATTERNS)
    assert re.fullmatch(f"(?:{joined})", "i don't know")
    assert not re.fullmatch(f"(?:{joined})", "27 days")
