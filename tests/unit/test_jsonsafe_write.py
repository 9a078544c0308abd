"""jsonsafe.write_jsonl: strict JSON lines, written atomically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragtrail.jsonsafe import NonFiniteValueError, write_jsonl


def test_rows_are_written_one_per_line(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "rows.jsonl"
    assert write_jsonl([{"a": 1, "t": "é"}, {"a": None}], path) == 2
    assert [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] == [
        {"a": 1, "t": "é"},
        {"a": None},
    ]


def test_a_nan_fails_the_write_and_keeps_the_earlier_file(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    write_jsonl([{"a": 1}], path)
    with pytest.raises(NonFiniteValueError, match=r"row 2 holds non-finite numbers at \$\.a"):
        write_jsonl([{"a": 2}, {"a": float("nan")}], path)
    assert path.read_text() == '{"a": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]
