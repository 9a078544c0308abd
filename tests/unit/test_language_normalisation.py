"""Text normalisation per language: stop words from the kept list, elision, the answer match,
and the model-free check that a generated question is in its context's language."""

from __future__ import annotations

import pytest

from ragtrail.evaluate.sufficiency.answer_match import matches_gold, normalise_answer
from ragtrail.generate.checks import CheckName, answer_repeats_question, wrong_language
from ragtrail.languages import detect_language
from ragtrail.text import STOP_WORDS, content_words, stop_words, strip_elisions


def test_stop_words_per_language():
    assert stop_words("en") is STOP_WORDS  # English keeps its own short list
    french = stop_words("fr")
    assert {"le", "la", "les", "des", "est", "pour"} <= french
    assert {"paquet", "système"}.isdisjoint(french)
    assert {"der", "die", "und"} <= stop_words("de")
    assert stop_words("sw") == frozenset()  # no list for Swahili: nothing is a stop word


def test_elided_words_go_with_their_apostrophe():
    assert strip_elisions("l’architecture d'un système qu’il gère", "fr") == (
        "architecture un système il gère"
    )
    assert strip_elisions("dell'Italia", "it") == "Italia"
    assert strip_elisions("don't stop", "en") == "don't stop"  # English keeps its apostrophes


def test_content_words_in_french():
    words = content_words("Combien de paquets pour l’architecture amd64 ?", language="fr")
    assert words == {"combien", "paquets", "architecture", "amd64"}
    # the English list would have kept the French function words
    assert {"de", "pour"} <= content_words("de paquets pour", language="en")


@pytest.mark.parametrize(
    ("answer", "gold", "matches"),
    [
        ("On compte 68980 paquets pour l’architecture amd64.", "68980 paquets", True),
        ("Il y a 68980 paquets.", "les 68980 paquets", True),  # articles are not content
        ("Les congés sont payés.", "ne sont pas payés", False),  # negation kept
        ("Deux approbations suffisent.", "trois approbations", False),  # numbers kept
        ("Le fichier est /etc/motd", "/etc/motd", True),
    ],
)
def test_the_answer_match_in_french(answer, gold, matches):
    assert matches_gold(answer, [gold], "fr") is matches


def test_a_language_without_meaning_words_keeps_every_word():
    # Italian has a stop list but no curated meaning words: nothing is removed, so a match is
    # stricter, never wrong
    assert normalise_answer("Non è il file", "it") == "non è il file"
    assert matches_gold("il file motd", ["file motd"], "it")
    assert not matches_gold("il file", ["il file motd"], "it")


def test_the_answer_repeats_question_check_uses_the_contexts_stop_words():
    question = "Quel fichier contient le message de bienvenue ?"
    assert answer_repeats_question(question, "le message", "fr").kind == (
        CheckName.ANSWER_REPEATS_QUESTION
    )
    assert answer_repeats_question(question, "le fichier /etc/motd", "fr") is None


def test_a_question_not_in_its_contexts_language_is_rejected():
    failure = wrong_language("What is the PID of the init program?", "fr")
    assert failure is not None and failure.kind == CheckName.WRONG_LANGUAGE
    assert failure.reason().startswith("check:wrong_language=fr=0.0")
    assert wrong_language("Quel est le PID du programme init ?", "fr") is None
    assert wrong_language("PID ?", "fr") is None  # too short to call
    assert wrong_language("What is the PID of init?", "und") is None  # context language unknown


def test_a_low_confidence_call_is_undetermined():
    guess = detect_language("# Code Review Guidelines")
    assert (guess.code, guess.method) == ("und", "uncertain") and 0 < guess.confidence < 0.5


def test_undetermined_text_uses_the_english_stop_words():
    assert stop_words("und") is STOP_WORDS
    assert content_words("the leave policy", language="und") == {"leave", "policy"}
