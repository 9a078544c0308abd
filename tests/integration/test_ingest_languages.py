"""A corpus that mixes languages: each document keeps its own, in the table and the snapshot."""

from __future__ import annotations

from ragtrail.pipeline.ingest import ingest
from tests.unit.test_languages import TEXTS


def _write(root, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {name}\n\n{text}\n\n{text}\n", encoding="utf-8")


def test_a_mixed_folder_records_each_documents_language(make_runtime, tmp_path):
    source = tmp_path / "mixed"
    for code, text in TEXTS.items():
        _write(source, f"{code}/guide.md", text)
    _write(source, "short.md", "ok")
    rt = make_runtime()
    ingest(rt, str(source), "mixed")

    documents = rt.store.get_documents("mixed")
    assert {d: r.language for d, r in documents.items()} == {
        "en/guide.md": "en",
        "fr/guide.md": "fr",
        "de/guide.md": "de",
        "es/guide.md": "es",
        "short.md": "und",
    }
    detection = documents["fr/guide.md"].doc_metadata["language"]
    assert detection["method"] == "detected" and detection["detector"] == "py3langid"
    snapshot = rt.store.latest_snapshot("mixed").snapshot_id
    assert {r.doc_id: r.language for r in rt.store.get_snapshot_documents(snapshot)} == {
        d: r.language for d, r in documents.items()
    }

    # an unchanged document keeps its language in the next snapshot; a changed one is re-detected
    _write(source, "es/guide.md", TEXTS["fr"])
    ingest(rt, str(source), "mixed")
    again = rt.store.latest_snapshot("mixed").snapshot_id
    languages = {r.doc_id: r.language for r in rt.store.get_snapshot_documents(again)}
    assert languages["es/guide.md"] == "fr" and languages["de/guide.md"] == "de"

    # a removed document's row in the snapshot still says what language it was in
    (source / "de" / "guide.md").unlink()
    ingest(rt, str(source), "mixed")
    third = rt.store.latest_snapshot("mixed").snapshot_id
    removed = {r.doc_id: r for r in rt.store.get_snapshot_documents(third)}["de/guide.md"]
    assert (removed.change, removed.language) == ("removed", "de")


def test_a_configured_language_is_every_new_documents_language(make_runtime, tmp_path):
    source = tmp_path / "forced"
    _write(source, "a.md", TEXTS["en"])
    rt = make_runtime(ingest={"language": "fr"})
    ingest(rt, str(source), "forced")
    (record,) = rt.store.get_documents("forced").values()
    assert record.language == "fr" and record.doc_metadata["language"]["method"] == "configured"


def _versions(rt, corpus: str) -> dict[str, tuple[int, str]]:
    return {d: (r.version, r.language) for d, r in rt.store.get_documents(corpus).items()}


def test_changing_the_language_setting_reindexes_what_it_changes(make_runtime, tmp_path):
    source = tmp_path / "src"
    _write(source, "fr.md", TEXTS["fr"])
    _write(source, "en.md", TEXTS["en"])
    home = tmp_path / "home"
    auto = make_runtime(home=home)
    ingest(auto, str(source), "c")
    assert _versions(auto, "c") == {"fr.md": (1, "fr"), "en.md": (1, "en")}
    # French analysis: an inflected form of "résolvant" finds the French document
    assert [h.doc_id for h in auto.index("c").search_lexical("résolvait", 3)] == ["fr.md"]
    auto.close()

    forced = make_runtime(home=home, ingest={"language": "en"})
    summary = ingest(forced, str(source), "c")
    # same bytes, but the French document is now analysed as English: re-indexed, new version
    assert _versions(forced, "c") == {"fr.md": (2, "en"), "en.md": (1, "en")}
    assert summary.changed_doc_ids == ["fr.md"]
    again = ingest(forced, str(source), "c")
    assert not again.changed  # the setting is recorded: nothing is read twice
    assert forced.index("c").search_lexical("résolvait", 3) == []  # English analysis misses it
    forced.close()


def test_a_corpus_ingested_before_languages_is_read_again_once(make_runtime, tmp_path):
    import json

    from ragtrail.artifact_keys import manifest_key

    source = tmp_path / "src"
    _write(source, "fr.md", TEXTS["fr"])
    rt = make_runtime()
    ingest(rt, str(source), "c")
    snapshot = rt.store.latest_snapshot("c")
    key = manifest_key("c", snapshot.snapshot_id)
    manifest = json.loads(rt.artifacts.get_bytes(key))
    del manifest["languages"]  # what the previous version recorded
    rt.artifacts.put_bytes(key, json.dumps(manifest).encode())

    summary = ingest(rt, str(source), "c")
    assert summary.changed and summary.changed_doc_ids == []  # read again, language unchanged
    assert not ingest(rt, str(source), "c").changed


def test_each_question_takes_its_ground_documents_language_else_its_own(make_runtime, tmp_path):
    from ragtrail.pipeline.retrieval import question_languages
    from ragtrail.records import QAItem

    source = tmp_path / "src"
    _write(source, "fr.md", TEXTS["fr"])
    _write(source, "short.md", "ok")
    rt = make_runtime()
    ingest(rt, str(source), "c")
    items = [
        QAItem(qid="a", question="What does apt-get do?", label="x", ground_doc_ids=("fr.md",)),
        QAItem(
            qid="b",
            question="Welche Pakete installiert der Befehl apt-get auf dem System?",
            label="unanswerable",
        ),
        QAItem(
            qid="c",
            question="Which packages does apt-get install on a Debian system?",
            label="x",
            ground_doc_ids=("short.md", "gone.md"),  # undetermined and unknown documents
        ),
    ]
    assert question_languages(rt, "c", items) == {"a": "fr", "b": "de", "c": "en"}
