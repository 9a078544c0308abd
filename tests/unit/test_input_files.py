"""Reading user files: every problem one line naming the file (and line); a BOM is skipped."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ragtrail import input_files
from ragtrail.input_files import (
    InputFileError,
    check_input_file,
    check_text_file,
    json_type,
    parse_json,
    read_lines,
)


def test_lines_are_numbered_as_an_editor_does_with_the_bom_and_line_ends_removed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"\xef\xbb\xbf{}\r\n\nsecond\n\xef\xbb\xbfthird")
    assert list(read_lines(path, "x")) == ["{}", "", "second", "\ufeffthird"]  # only a first BOM


def test_a_missing_file_and_a_directory_are_named(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=rf"^QA set not found: {tmp_path}/nope$"):
        check_input_file(tmp_path / "nope", "QA set")
    with pytest.raises(InputFileError, match=rf"^{tmp_path}: is a directory, not a file$"):
        list(read_lines(tmp_path, "QA set"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"ok\ncaf\xe9\n", r"x.txt:2: not UTF-8 text \(byte 0xe9 at byte 4 of the line\)"),
        (b"ok\n\x89PNG\x00\x00\n", r"x.txt: binary data \(a NUL byte\)"),
        (b"ok\n" * 5000 + b"\x00\n", r"x.txt:5001: binary data \(a NUL byte\)"),
        (b"\xff\xfe{\x00}\x00", r"x.txt: UTF-16 text; save the file as UTF-8"),
    ],
)
def test_bytes_that_are_not_utf8_text_name_the_line(
    tmp_path: Path, data: bytes, message: str
) -> None:
    path = tmp_path / "x.txt"
    path.write_bytes(data)
    with pytest.raises(InputFileError, match=message) as caught:
        list(read_lines(path, "answers file"))
    assert "\n" not in str(caught.value)


def test_a_line_over_the_limit_is_refused_without_reading_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(input_files, "MAX_LINE_BYTES", 64)
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"{}\n" + b"a" * 10_000 + b"\n")
    with pytest.raises(
        InputFileError,
        match=r"big.jsonl:2: line longer than .* MiB; the QA set takes one record per line",
    ):
        list(read_lines(path, "QA set"))
    path.write_bytes(b"{}\n" + b"a" * 63 + b"\n")
    assert len(list(read_lines(path, "QA set"))) == 2


def test_a_file_that_cannot_be_opened_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "locked.jsonl"
    path.write_text("{}\n")

    def denied(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "open", denied)
    with pytest.raises(InputFileError, match=r"locked.jsonl: cannot read the QA set \(Permission"):
        list(read_lines(path, "QA set"))
    with pytest.raises(InputFileError, match=r"locked.jsonl: cannot read the QA set"):
        check_text_file(path, "QA set")


def test_the_text_sniff_refuses_binary_and_latin1_but_not_a_cut_character(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"a,b\n" + bytes(range(256)))
    with pytest.raises(InputFileError, match=r"t.csv: binary data"):
        check_text_file(path, "QA set")
    path.write_bytes(b"a,b\ncaf\xe9,1\n")
    with pytest.raises(InputFileError, match=r"t.csv: not UTF-8 text \(byte 0xe9 at byte 8\)"):
        check_text_file(path, "QA set")
    # a multi-byte character cut by the sniff's 8 KiB window is not an error
    path.write_bytes(b"a" * 8191 + "é".encode() + b"\n")
    assert check_text_file(path, "QA set") == path


def test_deeply_nested_json_is_a_value_error_not_a_recursion_error() -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_json("[" * 100_000 + "]" * 100_000)
    assert parse_json('{"a": [1]}') == {"a": [1]}


@pytest.mark.parametrize(
    ("value", "name"),
    [([1], "an array"), ("x", "a string"), (None, "null"), (4, "a number"), (1.5, "a number"),
     (True, "a boolean"), ({}, "an object")],
)  # fmt: skip
def test_json_type_names(value: object, name: str) -> None:
    assert json_type(value) == name


def test_a_pipe_is_read_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def write() -> None:
        with fifo.open("wb") as fh:
            fh.write(b"\xef\xbb\xbfq1 0 d1 1\nq2 0 d2 0\n")

    writer = threading.Thread(target=write)
    writer.start()
    assert check_text_file(fifo, "TREC file") == fifo  # no sample taken from a pipe
    assert list(read_lines(fifo, "TREC file")) == ["q1 0 d1 1", "q2 0 d2 0"]
    writer.join(timeout=10)


def test_half_a_surrogate_pair_is_refused_but_a_whole_pair_is_a_character() -> None:
    assert parse_json(r'{"a": "\ud83d\ude00"}') == {"a": "\N{GRINNING FACE}"}
    with pytest.raises(ValueError, match=r"the escape \\ud800 is half a surrogate pair"):
        parse_json(r'{"question": "Leave \ud800?"}')
    assert parse_json(r'["\\ud800"]') == ["\\ud800"]  # an escaped backslash: plain text
