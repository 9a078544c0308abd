"""Reading the files a user hands ragtrail (QA sets, answers, references, TREC files) safely.

Whatever is wrong with such a file ends as one :class:`InputFileError` that names the file and,
where there is one, the line: a missing file, a directory, a file that cannot be read, bytes
that are not UTF-8, a binary file, a line longer than :data:`MAX_LINE_BYTES` (memory stays
bounded however long a line is: a 1 GB line is refused after its first 16 MiB), JSON nested
deeper than Python's parser goes. A UTF-8 byte order mark, as spreadsheet programs write one, is
skipped in every text format alike.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_LINE_BYTES = 16 * 1024 * 1024
"""The longest line a line-based input (JSONL, TREC) may have: one record per line, so a longer
line is a file of another kind (a minified dump, a binary file), not a record."""

StrPath = str | os.PathLike[str]

UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SNIFF_BYTES = 8192


class InputFileError(ValueError):
    """A file given as input is missing, unreadable or not the text it should be; the message is
    one line naming the file (and the line, where there is one)."""


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB"


def check_input_file(path: StrPath, what: str) -> Path:
    """``path`` as a :class:`Path` if something readable may be there; InputFileError when it is
    missing or a directory. ``what`` names the kind of file in messages ("QA set", "answers
    file")."""
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"{what} not found: {path}")
    if path.is_dir():
        raise InputFileError(f"{path}: is a directory, not a file")
    return path


def _undecodable(path: Path, where: str, raw: bytes, exc: UnicodeDecodeError) -> InputFileError:
    return InputFileError(
        f"{path}{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1}"
        f"{' of the line' if where else ''}); save the file as UTF-8"
    )


def check_text_file(path: StrPath, what: str) -> Path:
    """:func:`check_input_file`, then a look at the file's first bytes: a NUL byte (a binary
    file) or bytes that are not UTF-8 are refused before a parser sees them."""
    path = check_input_file(path, what)
    if not path.is_file():
        return path  # a pipe or device: reading a sample would consume it
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    if head.startswith(UTF16_BOMS):
        raise InputFileError(f"{path}: UTF-16 text; save the file as UTF-8")
    if b"\x00" in head:
        raise InputFileError(f"{path}: binary data (a NUL byte), expected a UTF-8 text file")
    try:
        head.removeprefix(UTF8_BOM).decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not just a character cut at the end of the sample
            raise _undecodable(path, "", head.removeprefix(UTF8_BOM), exc) from None
    return path


def read_lines(path: StrPath, what: str) -> Iterator[str]:
    """Every line of a UTF-8 text file (line ends and a leading byte order mark removed), blank
    lines included so that callers number lines as an editor does. The file is read once, so a
    pipe (``<(zcat qrels.gz)``) works.

    InputFileError, naming the file, for a file whose first bytes are binary (a NUL byte) or
    UTF-16; naming the line, for a line that is longer than :data:`MAX_LINE_BYTES`, holds a NUL
    byte or is not UTF-8.
    """
    path = check_input_file(path, what)
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    with fh:
        try:
            head = fh.peek(_SNIFF_BYTES)[:_SNIFF_BYTES]  # not consumed: a pipe is read once
        except OSError as exc:
            raise InputFileError(
                f"{path}: cannot read the {what} ({exc.strerror or exc})"
            ) from None
        if head.startswith(UTF16_BOMS):
            raise InputFileError(f"{path}: UTF-16 text; save the file as UTF-8")
        if b"\x00" in head:
            raise InputFileError(f"{path}: binary data (a NUL byte), expected a UTF-8 text file")
        number = 0
        while True:
            try:
                raw = fh.readline(MAX_LINE_BYTES + 1)
            except OSError as exc:
                raise InputFileError(
                    f"{path}: cannot read the {what} ({exc.strerror or exc})"
                ) from None
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE_BYTES:
                raise InputFileError(
                    f"{path}:{number}: line longer than {_mib(MAX_LINE_BYTES)}; the {what} takes "
                    "one record per line"
                )
            if number == 1:
                raw = raw.removeprefix(UTF8_BOM)
            if b"\x00" in raw:
                raise InputFileError(
                    f"{path}:{number}: binary data (a NUL byte), expected a UTF-8 text file"
                )
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _undecodable(path, f":{number}", raw, exc) from None
            yield text.rstrip("\r\n")


def parse_json(text: str) -> Any:
    """``json.loads(text)``; ValueError (never RecursionError) for JSON nested too deeply, and
    for a ``\\uD800``-style escape that is half a surrogate pair: Python accepts it, but it is no
    character and fails later, far from the file, when the text is encoded."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            half = exc.object[exc.start : exc.end].encode("unicode_escape").decode()
            raise ValueError(
                f"the escape {half} is half a surrogate pair, not a character"
            ) from None
    return value


def jsonl_hint(line: str) -> str:
    """A hint for an invalid JSONL line that opens an indented JSON document ("" otherwise)."""
    if line.strip() in ("[", "{"):
        return "; a JSONL file holds one JSON object per line, not one indented document"
    return ""


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages ("an array", "a string", "null")."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)
