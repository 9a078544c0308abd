"""The claim a label-queue entailment row asks about: the whole sentence holding the answer."""

from __future__ import annotations

from ragtrail.pipeline.label_queue import _claim

CHUNK = (
    "Onboarding > Mandatory training\n"
    "Every new starter completes four courses on Campus, our learning platform, within 30 days of\n"
    "their start date:\n\n"
    "- Security Awareness (about 45 minutes)\n"
    "- Data Protection Essentials (about 60 minutes)\n\n"
    "Your manager sees your progress on Campus."
)


def test_a_sentence_wrapped_over_lines_is_the_claim_whole():
    assert _claim(CHUNK, "30 days") == (
        "Every new starter completes four courses on Campus, our learning platform, within 30 "
        "days of their start date:"
    )


def test_list_items_stay_apart_and_a_missing_answer_falls_back_to_the_first_sentence():
    assert _claim(CHUNK, "60 minutes") == "- Data Protection Essentials (about 60 minutes)"
    assert _claim(CHUNK, "a bicycle").startswith("Onboarding > Mandatory training")
