"""Building blocks shared by the format parsers in :mod:`ragtrail.ingest.formats`.

Each parser turns the bytes of one file into a :class:`Parsed` (title, sections, metadata) or
refuses the file with a :class:`QuarantineError`. What more than one parser needs lives here:
the error itself, text normalisation (so identical content hashes identically whatever its
format), the pipe rendering of tables, the heading-path :class:`SectionBuilder`, and the binary
and UTF-8 checks of the text formats (Markdown, plain text, HTML).
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ragtrail.jsonsafe import JsonObject
from ragtrail.records import QuarantineReason, Section, SourceFile

__all__ = [
    "BINARY_SAMPLE_BYTES",
    "MAX_CONTROL_BYTE_SHARE",
    "Parsed",
    "Parser",
    "QuarantineError",
    "SectionBuilder",
    "check_binary",
    "decode_text",
    "decode_utf8",
    "first_line",
    "normalise_text",
    "render_table",
]

BINARY_SAMPLE_BYTES = 64 * 1024
MAX_CONTROL_BYTE_SHARE = 0.05
"""A text file whose sample has more than 5% C0 control bytes (other than tab/newline/CR/FF) is
treated as binary: real text almost never contains them, binary formats are full of them."""

_BINARY_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"%PDF-", "PDF document"),
    (b"PK\x03\x04", "ZIP archive"),
    (b"\x7fELF", "ELF executable"),
    (b"\x1f\x8b", "gzip archive"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "OLE2 (legacy Office) file"),
)
_CONTROL_BYTES = bytes(b for b in [*range(0x20), 0x7F] if b not in b"\t\n\r\f")
_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)

# Characters removed by normalise_text besides C0/C1 controls: zero-width and invisible format
# characters that split words for the tokenizer and make identical text hash differently.
_INVISIBLE = "\u00ad\u180e\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
_INVISIBLE += "\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069\ufeff"
_DROP_CHARS = {ord(c): None for c in _INVISIBLE}
_DROP_CHARS.update({c: None for c in range(0x20) if c not in (0x09, 0x0A)})
_DROP_CHARS.update({c: None for c in range(0x7F, 0xA0)})
_DROP_CHARS.update({0x2028: "\n", 0x2029: "\n\n"})
_HSPACE_RUN = re.compile(r"[^\S\n]+")  # any whitespace except newline (tabs, NBSP, thin spaces…)
_BLANK_RUNS = re.compile(r"\n{3,}")


class QuarantineError(Exception):
    """A source file was refused; ``reason`` is the stable code, ``detail`` says why in words."""

    def __init__(self, reason: QuarantineReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


def normalise_text(text: str) -> str:
    """Canonical form of extracted text, so identical content always hashes identically.

    Unicode NFC; CRLF/CR -> LF; zero-width, bidi and control characters removed (tab and newline
    kept until spacing is collapsed); runs of horizontal whitespace (spaces, tabs, NBSP) -> one
    space; lines stripped at both ends; 2+ consecutive blank lines -> one blank line; leading and
    trailing blank lines removed.
    """
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = text.translate(_DROP_CHARS)
    lines = (_HSPACE_RUN.sub(" ", line).strip() for line in text.split("\n"))
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip("\n")


def render_table(rows: Iterable[Iterable[str]]) -> str:
    """Render table rows as pipe-separated lines ``| a | b |`` (empty rows dropped).

    Cell text is whitespace-collapsed and literal pipes are escaped so the row structure survives.
    """
    lines = []
    for row in rows:
        cells = [_one_line(c).replace("|", "\\|") for c in row]
        if any(cells):
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@dataclass
class Parsed:
    """What a format parser returns, before :func:`ragtrail.ingest.loaders.parse_document`
    drops empty sections, settles the title and makes the metadata JSON-safe."""

    title: str | None
    sections: list[Section]
    metadata: JsonObject = field(default_factory=dict)
    no_text_detail: str | None = None


Parser = Callable[[SourceFile, int], Parsed]
"""A format parser: ``(source file, max_bytes) -> Parsed``; it raises :class:`QuarantineError`
to refuse the file."""


class SectionBuilder:
    """Accumulates text blocks under a heading path and emits normalised sections in order.

    Heading levels are kept on a stack: a heading of level L closes every open heading of level
    >= L, which is how both Markdown and HTML/DOCX outlines nest.
    """

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self._stack: list[tuple[int, str]] = []
        self._blocks: list[str] = []

    @property
    def headings(self) -> tuple[str, ...]:
        return tuple(text for _, text in self._stack)

    def heading(self, level: int, text: str) -> None:
        """Start a new heading of ``level``; flushes the text gathered under the previous one."""
        text = _one_line(text)
        self.flush()
        if not text:
            return
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, text))

    def add_text(self, block: str) -> None:
        """Append a paragraph-like block of text to the current section."""
        if block.strip():
            self._blocks.append(block)

    def add_table(self, rendered: str) -> None:
        """Emit a table as its own section (kind="table") under the current heading path."""
        self.flush()
        text = normalise_text(rendered)
        if text:
            self.sections.append(Section(text=text, headings=self.headings, kind="table"))

    def flush(self) -> None:
        """Close the current text section, if it has any text."""
        text = normalise_text("\n\n".join(self._blocks))
        self._blocks = []
        if text:
            self.sections.append(Section(text=text, headings=self.headings, kind="text"))

    def build(self) -> list[Section]:
        self.flush()
        return self.sections


def check_binary(data: bytes) -> None:
    """BINARY_CONTENT for bytes that are clearly not text (magic number, NUL, many controls)."""
    for magic, kind in _BINARY_MAGIC:
        if data.startswith(magic):
            raise QuarantineError(QuarantineReason.BINARY_CONTENT, f"content is a {kind}, not text")
    if data.startswith(_UTF16_BOMS):
        raise QuarantineError(
            QuarantineReason.INVALID_UTF8, "file is UTF-16 encoded; only UTF-8 is accepted"
        )
    sample = data[:BINARY_SAMPLE_BYTES]
    nul = sample.find(b"\x00")
    if nul >= 0:
        raise QuarantineError(QuarantineReason.BINARY_CONTENT, f"NUL byte at offset {nul}")
    controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    share = controls / len(sample)
    if share > MAX_CONTROL_BYTE_SHARE:
        raise QuarantineError(
            QuarantineReason.BINARY_CONTENT, f"{share:.0%} of the first bytes are control bytes"
        )


def decode_utf8(data: bytes) -> str:
    """Strict UTF-8 decode (a leading BOM is dropped); INVALID_UTF8 names the bad offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise QuarantineError(
            QuarantineReason.INVALID_UTF8,
            f"not valid UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}",
        ) from None


def decode_text(src: SourceFile) -> str:
    """Binary check then UTF-8 decode with newlines unified; shared by Markdown and text."""
    check_binary(src.data)
    return decode_utf8(src.data).replace("\r\n", "\n").replace("\r", "\n")


def _one_line(text: str) -> str:
    """Normalised text on a single line (cell contents, headings): every whitespace run -> " "."""
    return " ".join(normalise_text(text).split())


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped ("" when there is none)."""
    return next((line.strip() for line in text.split("\n") if line.strip()), "")
