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
