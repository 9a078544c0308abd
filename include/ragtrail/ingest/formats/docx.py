"""Word parser (``.docx``): Heading/Title styles build heading paths, tables stay in place.

The zip container is checked before python-docx opens it, so a file that is not a DOCX, or
whose ``word/document.xml`` would expand to an absurd size (a zip bomb), is refused with a clear
reason. Paragraphs inside content controls are read too, which python-docx alone would skip.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator
from typing import Any

from ragtrail.ingest.formats.common import Parsed, QuarantineError, SectionBuilder, render_table
from ragtrail.jsonsafe import JsonObject
from ragtrail.records import QuarantineReason, SourceFile

__all__ = ["MAX_DOCX_XML_BYTES", "parse_docx"]

MAX_DOCX_XML_BYTES = 256 * 1024 * 1024
"""Refuse a DOCX whose uncompressed document.xml exceeds this (zip-bomb guard)."""

_DOCX_HEADING = re.compile(r"^heading\s*(\d)$", re.I)
_DOCX_LIST = re.compile(r"^list", re.I)


def _check_docx_zip(data: bytes) -> None:
    """CORRUPT unless the bytes are a zip holding word/document.xml of a sane size."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            info = archive.getinfo("word/document.xml")
    except zipfile.BadZipFile as exc:
        raise QuarantineError(QuarantineReason.CORRUPT, f"not a valid DOCX zip: {exc}") from None
    except KeyError:
        raise QuarantineError(
            QuarantineReason.CORRUPT, "zip archive has no word/document.xml (not a DOCX)"
        ) from None
    if info.file_size > MAX_DOCX_XML_BYTES:
        raise QuarantineError(
            QuarantineReason.TOO_LARGE,
            f"word/document.xml expands to {info.file_size} bytes (limit {MAX_DOCX_XML_BYTES})",
        )


def parse_docx(src: SourceFile, max_bytes: int) -> Parsed:
    """Heading/Title styles build heading paths; body tables stay in place as table sections."""
    import docx
    from docx.table import Table

    _check_docx_zip(src.data)
    try:
        document = docx.Document(io.BytesIO(src.data))
    except Exception as exc:
        raise QuarantineError(
            QuarantineReason.CORRUPT, f"unreadable DOCX: {type(exc).__name__}: {exc}"
        ) from exc
    builder = SectionBuilder()
    first_heading: str | None = None
    for block in _docx_blocks(document):
        if isinstance(block, Table):
            builder.add_table(render_table(_docx_table_rows(block)))
            continue
        text = block.text
        level = _docx_heading_level(block)
        if level is not None:
            builder.heading(level, text)
            if level <= 1 and first_heading is None and text.strip():
                first_heading = text
        elif text.strip():
            style = _style_name(block)
            builder.add_text(f"- {text}" if _DOCX_LIST.match(style) else text)
    props = document.core_properties
    metadata: JsonObject = {}
    for key in ("author", "created", "modified", "subject", "keywords"):
        value = getattr(props, key, None)
        if value:
            metadata[key] = value
    title = (props.title or "").strip() or first_heading
    return Parsed(title=title, sections=builder.build(), metadata=metadata)


def _docx_blocks(document: Any) -> Iterator[Any]:
    """Paragraphs and tables of the body in document order, including those inside content
    controls (``w:sdt``), which python-docx's own iterator skips."""
    from docx.oxml.ns import qn
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    tag_p, tag_tbl, tag_sdt, tag_content = qn("w:p"), qn("w:tbl"), qn("w:sdt"), qn("w:sdtContent")
    parent = document._body
    stack = list(reversed(list(document.element.body.iterchildren())))
    while stack:
        element = stack.pop()
        if element.tag == tag_p:
            yield Paragraph(element, parent)
        elif element.tag == tag_tbl:
            yield Table(element, parent)
        elif element.tag in (tag_sdt, tag_content):
            children = [c for c in element.iterchildren() if c.tag in (tag_content, tag_p, tag_tbl)]
            stack.extend(reversed(children))


def _style_name(paragraph: Any) -> str:
    """Paragraph style name, "" when the style is missing or broken."""
    try:
        style = paragraph.style
    except Exception:
        return ""
    return (style.name or "") if style is not None else ""


def _docx_heading_level(paragraph: Any) -> int | None:
    """0 for "Title", N for "Heading N", None for body paragraphs."""
    name = _style_name(paragraph).strip()
    if name.lower() == "title":
        return 0
    match = _DOCX_HEADING.match(name)
    return int(match.group(1)) if match else None


def _docx_table_rows(table: Any) -> list[list[str]]:
    """Cell texts per row; horizontally merged cells (repeated by python-docx) appear once."""
    rows = []
    for row in table.rows:
        cells, seen = [], set()
        for cell in row.cells:
            if id(cell._tc) in seen:
                continue
            seen.add(id(cell._tc))
            cells.append(cell.text)
        rows.append(cells)
    return rows
