"""The ingest's golden step on a real corpus: configured, given and sample sets, idempotent."""

from __future__ import annotations

import shutil
from pathlib import Path

from ragtrail.config import Settings
from ragtrail.paths import sample_corpus_dir, sample_qa_set
from ragtrail.pipeline.golden import register_corpus_golden_sets
from ragtrail.pipeline.ingest import ingest
from ragtrail.runtime import Runtime


def test_configured_and_given_sets_are_registered_once(tmp_path: Path) -> None:
    corpus_dir = shutil.copytree(sample_corpus_dir(), tmp_path / "corpus")
    folder = tmp_path / "golden"
    folder.mkdir()
    shutil.copyfile(sample_qa_set(), folder / "team.jsonl")
    lines = sample_qa_set().read_text().splitlines()
    extra = tmp_path / "extra.jsonl"
    extra.write_text("\n".join(lines[:12]) + "\n")
    settings = Settings(home=tmp_path / "home", golden_sets={"hb": [str(folder)]})
    rt = Runtime(settings)
    try:
        ingest(rt, str(corpus_dir), "hb")
        first = register_corpus_golden_sets(rt, "hb", str(corpus_dir), [str(extra)])
        assert [(g.name, g.created) for g in first.registered] == [
            ("team", True),
            ("extra", True),
        ]
        assert first.notes == []
        again = register_corpus_golden_sets(rt, "hb", str(corpus_dir), [str(extra)])
        assert [(g.version, g.created) for g in again.registered] == [
            (g.version, False) for g in first.registered
        ]
        # On the shipped sample corpus the sample set is added too, unless its content is
        # already a golden set of the corpus (here: "team"), which a note says.
        sample = register_corpus_golden_sets(rt, "hb", str(sample_corpus_dir()))
        assert [g.name for g in sample.registered] == ["team"]
        assert sample.notes == ["golden set handbook-sample: the sample set is registered as team"]
    finally:
        rt.close()


def test_a_bad_file_is_refused_with_its_reason_and_the_others_go_on(tmp_path: Path) -> None:
    corpus_dir = shutil.copytree(sample_corpus_dir(), tmp_path / "corpus")
    good = tmp_path / "good.jsonl"
    shutil.copyfile(sample_qa_set(), good)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"qid": "x1", "question": "Where is it?", "label": "fact_single", '
        '"answer": "here", "ground_doc_ids": ["nowhere/missing.md"]}\n'
    )
    rt = Runtime(Settings(home=tmp_path / "home"))
    try:
        ingest(rt, str(corpus_dir), "hb")
        found = register_corpus_golden_sets(rt, "hb", str(corpus_dir), [str(good), str(bad)])
        assert [g.name for g in found.registered] == ["good"]
        (refused,) = found.refused
        assert (
            refused["path"] == str(bad)
            and "unknown document 'nowhere/missing.md'" in (refused["error"])
        )
        # A registered set whose ground document was removed since is still the same set:
        # its questions count as retired by drift, the set is not refused.
        (corpus_dir / "people" / "leave-policy.md").unlink()
        ingest(rt, str(corpus_dir), "hb")
        again = register_corpus_golden_sets(rt, "hb", str(corpus_dir), [str(good)])
        assert [(g.name, g.created) for g in again.registered] == [("good", False)]
        assert again.refused == []
        # ... while the same questions as a new set are checked, and refused.
        renamed = tmp_path / "renamed.jsonl"
        renamed.write_text(good.read_text().replace('"q001"', '"q001b"'))
        late = register_corpus_golden_sets(rt, "hb", str(corpus_dir), [str(renamed)])
        assert late.registered == [] and "people/leave-policy.md" in late.refused[0]["error"]
    finally:
        rt.close()
