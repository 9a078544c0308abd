"""Language identification: offline, deterministic, refusing to guess on too little text."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ragtrail.config import IngestSettings
from ragtrail.languages import UNDETERMINED, detect_language, known_languages

TEXTS = {
    "en": "The apt-get command installs and removes packages on a Debian system, with their "
    "dependencies resolved for you.",
    "fr": "La commande apt-get installe et supprime des paquets sur un système Debian, en "
    "résolvant leurs dépendances pour vous.",
    "de": "Der Befehl apt-get installiert und entfernt Pakete auf einem Debian-System und löst "
    "dabei ihre Abhängigkeiten für Sie auf.",
    "es": "La orden apt-get instala y elimina paquetes en un sistema Debian y resuelve sus "
    "dependencias por usted.",
}


@pytest.mark.parametrize("code", sorted(TEXTS))
def test_each_language_is_recognised_confidently(code):
    guess = detect_language(TEXTS[code])
    assert (guess.code, guess.method) == (code, "detected") and guess.confidence > 0.5
    assert detect_language(TEXTS[code]) == guess  # deterministic


def test_too_little_text_is_undetermined_and_configuration_forces_a_language():
    assert detect_language("apt-get -y 2>&1").code == UNDETERMINED
    assert detect_language("§ 4.2").method == "too short"
    forced = detect_language(TEXTS["en"], configured="fr")
    assert (forced.code, forced.confidence, forced.method) == ("fr", 1.0, "configured")
    assert {"en", "fr", "de", "es", "it", "nl", "pt"} <= known_languages()


def test_the_setting_accepts_auto_or_a_known_code():
    assert IngestSettings(language="FR").language == "fr"
    assert IngestSettings().language == "auto"
    with pytest.raises(ValidationError, match="ISO 639-1 code the detector knows"):
        IngestSettings(language="french")


def test_a_long_document_is_judged_on_all_of_it_not_its_opening_pages():
    from ragtrail.languages import SAMPLE_CHARS

    text = TEXTS["en"] * 1300 + TEXTS["fr"] * 3000  # an English opening, French for the rest
    assert len(TEXTS["en"] * 1300) < SAMPLE_CHARS < len(text)
    assert detect_language(text).code == "fr"


def test_threads_needing_the_detector_at_once_wait_for_one_load(monkeypatch):
    import threading

    import py3langid.langid as langid

    from ragtrail import languages

    monkeypatch.setattr(languages, "_DETECTOR", [])
    languages._classify.cache_clear()  # an earlier test may have called this text already
    loads = []
    real = langid.LanguageIdentifier.from_model_file

    def counted(*args, **kwargs):
        loads.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(langid.LanguageIdentifier, "from_model_file", counted)
    start = threading.Barrier(6)
    seen = []

    def first_use():
        start.wait()
        seen.append(detect_language("The office opens at nine and closes at five.").code)

    threads = [threading.Thread(target=first_use) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1 and seen == ["en"] * 6


def test_a_text_called_again_is_not_classified_again(monkeypatch):
    """A night asks for the language of one document many times (each critique, each rater):
    the detector classifies each distinct sample once."""
    from ragtrail import languages

    languages._classify.cache_clear()
    detector = languages._identifier()
    calls = []

    class Counted:
        def classify(self, sample):
            calls.append(sample)
            return detector.classify(sample)

    monkeypatch.setattr(languages, "_identifier", Counted)
    text = "Le bureau ouvre à neuf heures et ferme à dix-sept heures, du lundi au vendredi."
    guesses = [detect_language(text) for _ in range(3)]
    other = detect_language("The office opens at nine and closes at five, Monday to Friday.")
    assert [g.code for g in guesses] == ["fr"] * 3 and other.code == "en"
    assert guesses[0] == guesses[2]
    assert len(calls) == 2
