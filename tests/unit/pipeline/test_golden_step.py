"""The ingest's golden step: which files it takes, and what it refuses."""

from __future__ import annotations

import shutil
from pathlib import Path

from ragtrail.paths import sample_corpus_dir
from ragtrail.pipeline.golden import golden_files, is_sample_corpus


def test_a_folder_gives_its_qa_set_files_sorted_and_recursively(tmp_path: Path) -> None:
    (tmp_path / "sets" / "deep").mkdir(parents=True)
    for name in ("b.jsonl", "a.csv", "deep/c.parquet", "notes.txt", "deep/README.md"):
        (tmp_path / "sets" / name).write_text("x")
    single = tmp_path / "one.jsonl"
    single.write_text("x")
    assert golden_files([tmp_path / "sets", single]) == (
        [
            tmp_path / "sets" / "a.csv",
            tmp_path / "sets" / "b.jsonl",
            tmp_path / "sets" / "deep" / "c.parquet",
            single,
        ],
        [],
    )


def test_missing_paths_empty_folders_and_clashing_names_are_refused_alone(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for folder in ("x", "y"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "Team QA.jsonl").write_text("x")
    (tmp_path / "y" / "other.csv").write_text("x")
    paths = [tmp_path / "nowhere.jsonl", tmp_path / "empty", tmp_path / "x", tmp_path / "y"]
    files, refused = golden_files(paths)
    assert files == [tmp_path / "x" / "Team QA.jsonl", tmp_path / "y" / "other.csv"]
    assert [r["path"] for r in refused] == [
        str(tmp_path / "nowhere.jsonl"),
        str(tmp_path / "empty"),
        str(tmp_path / "y" / "Team QA.jsonl"),
    ]
    assert "no such file or folder" in refused[0]["error"]
    assert "a golden-set folder with no .jsonl/.ndjson/.csv/.parquet file" in refused[1]["error"]
    assert (
        f"golden set 'team-qa' is already {tmp_path / 'x' / 'Team QA.jsonl'}"
        in (refused[2]["error"])
    )


def test_the_sample_corpus_is_recognised_by_its_folder_only(tmp_path: Path) -> None:
    assert is_sample_corpus(str(sample_corpus_dir()))
    assert not is_sample_corpus(str(shutil.copytree(sample_corpus_dir(), tmp_path / "copy")))
    assert not is_sample_corpus("s3://bucket/handbook")
