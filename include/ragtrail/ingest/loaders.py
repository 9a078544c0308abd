"""Parse one source file into a :class:`ParsedDocument`, or refuse it with a quarantine reason.

This module is the entry point; the parsers themselves live in :mod:`ragtrail.ingest.formats`,
one module per format. :func:`parse_document` picks the parser from the file extension, runs
the checks every format shares and turns the parser's output into a :class:`ParsedDocument`.

Every refusal is a :class:`QuarantineError` carrying a stable :class:`QuarantineReason` code, so the
caller can write a :class:`~ragtrail.records.QuarantineRecord` and carry on: a hostile or broken
file must never crash a nightly run. Any unexpected parser exception is therefore wrapped into
``CORRUPT`` with the exception type and message.

Checks run in this order: unsupported extension, empty, too large, then format-specific checks
(binary content and encoding for text formats, structure/encryption for PDF and DOCX), and finally
"no text after parsing". Duplicate content is detected by the caller, not here.
"""

from __future__ import annotations

import codecs
import datetime as dt
import re
from collections.abc import Mapping
from decimal import Decimal
from pathlib import PurePosixPath
from typing import Any

from ragtrail.ingest.formats.common import Parser, QuarantineError, normalise_text, render_table
from ragtrail.ingest.formats.docx import parse_docx
from ragtrail.ingest.formats.html import parse_html
from ragtrail.ingest.formats.markdown import parse_markdown
from ragtrail.ingest.formats.pdf import parse_pdf
from ragtrail.ingest.formats.text import parse_text
from ragtrail.records import DocFormat, ParsedDocument, QuarantineReason, SourceFile

__all__ = [
    "FORMAT_BY_EXTENSION",
    "QuarantineError",
    "detect_format",
    "normalise_text",
    "parse_document",
    "render_table",
]

FORMAT_BY_EXTENSION: Mapping[str, DocFormat] = {
    ".md": DocFormat.MARKDOWN,
    ".markdown": DocFormat.MARKDOWN,
    ".txt": DocFormat.TEXT,
    ".text": DocFormat.TEXT,
    ".html": DocFormat.HTML,
    ".htm": DocFormat.HTML,
    ".pdf": DocFormat.PDF,
    ".docx": DocFormat.DOCX,
}
"""Lower-case file extension -> format. Anything else is ``UNSUPPORTED_TYPE``."""

TEXT_FORMATS = frozenset({DocFormat.MARKDOWN, DocFormat.TEXT, DocFormat.HTML})
MAX_TITLE_CHARS = 120
_NON_SPACE_BYTE = re.compile(rb"\S")

_PARSERS: dict[DocFormat, Parser] = {
    DocFormat.TEXT: parse_text,
    DocFormat.MARKDOWN: parse_markdown,
    DocFormat.HTML: parse_html,
    DocFormat.PDF: parse_pdf,
    DocFormat.DOCX: parse_docx,
}
"""Format -> its parser. Every member of :class:`DocFormat` has one."""


def detect_format(rel_path: str) -> DocFormat | None:
    """Format from the file extension (case-insensitive), or None when unsupported."""
    return FORMAT_BY_EXTENSION.get(PurePosixPath(rel_path).suffix.lower())


def parse_document(src: SourceFile, *, max_bytes: int) -> ParsedDocument:
    """Parse ``src`` into normalised sections, or raise :class:`QuarantineError`.

    Never raises anything else: unexpected parser failures become ``CORRUPT`` so one hostile file
    cannot abort the run.
    """
    fmt = detect_format(src.rel_path)
    if fmt is None:
        suffix = PurePosixPath(src.rel_path).suffix or "(no extension)"
        raise QuarantineError(QuarantineReason.UNSUPPORTED_TYPE, f"unsupported file type {suffix}")
    _check_size(src, max_bytes)
    try:
        parsed = _PARSERS[fmt](src, max_bytes)
    except QuarantineError:
        raise
    except Exception as exc:  # a hostile file must never crash the run
        raise QuarantineError(
            QuarantineReason.CORRUPT, f"{fmt.value} parser failed: {type(exc).__name__}: {exc}"
        ) from exc
    sections = tuple(s for s in parsed.sections if s.text)
    if not sections:
        raise QuarantineError(
            QuarantineReason.NO_TEXT, parsed.no_text_detail or "no text after parsing"
        )
    stem = PurePosixPath(src.rel_path).stem
    metadata = _json_safe(parsed.metadata)
    metadata.update({"size_bytes": src.size, "source_format": fmt.value})
    return ParsedDocument(
        doc_id=src.rel_path,
        uri=src.uri,
        format=fmt,
        title=_shorten(normalise_text(parsed.title or "")) or stem,
        sections=sections,
        metadata=metadata,
    )


def _check_size(src: SourceFile, max_bytes: int) -> None:
    """EMPTY for zero bytes or whitespace only (a UTF-8 BOM counts as nothing); TOO_LARGE above
    the limit. The whitespace test stops at the first non-space byte, so it is cheap."""
    if src.size == 0:
        raise QuarantineError(QuarantineReason.EMPTY, "file is empty (0 bytes)")
    start = len(codecs.BOM_UTF8) if src.data.startswith(codecs.BOM_UTF8) else 0
    if _NON_SPACE_BYTE.search(src.data, start) is None:
        raise QuarantineError(QuarantineReason.EMPTY, f"file has only whitespace ({src.size} B)")
    if src.size > max_bytes:
        raise QuarantineError(
            QuarantineReason.TOO_LARGE, f"{src.size} bytes exceeds the limit of {max_bytes} bytes"
        )


def _shorten(text: str, limit: int = MAX_TITLE_CHARS) -> str:
    """One line, at most ``limit`` characters, cut at a word boundary with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip() + "…"


def _json_safe(value: Any) -> Any:
    """Convert metadata to JSON-safe types: dates -> ISO strings, sets/tuples -> lists, else str."""
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return [_json_safe(v) for v in items]
    if isinstance(value, dt.date | dt.datetime | dt.time):
        return value.isoformat()
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)
