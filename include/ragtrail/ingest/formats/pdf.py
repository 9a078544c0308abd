"""PDF parser (``.pdf``): the text of every page as one section, via pypdf.

PDF keeps no reliable heading structure, so the pages are joined into a single section and
words hyphenated across line ends are rejoined. Encrypted and structurally broken files are
refused; a page whose extraction fails is skipped and counted instead of sinking the document.
"""

from __future__ import annotations

import io
import re
from typing import Any

from ragtrail.ingest.formats.common import Parsed, QuarantineError, first_line, normalise_text
from ragtrail.jsonsafe import JsonObject
from ragtrail.records import QuarantineReason, Section, SourceFile

__all__ = ["parse_pdf"]

_HYPHEN_BREAK = re.compile(r"(\w)-\n(?=[a-z])")


def parse_pdf(src: SourceFile, max_bytes: int) -> Parsed:
    """All pages as one text section (headings are not reliably recoverable from PDF).

    A page whose text extraction fails is skipped and counted in ``metadata["pages_failed"]``;
    only when every page fails is the document CORRUPT.
    """
    from pypdf import PdfReader

    data = src.data
    if b"%PDF-" not in data[:1024]:
        raise QuarantineError(QuarantineReason.CORRUPT, "not a PDF: missing %PDF- header")
    if b"%%EOF" not in data[-2048:]:
        raise QuarantineError(QuarantineReason.CORRUPT, "truncated PDF: missing %%EOF marker")
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        encrypted = reader.is_encrypted
        if not encrypted:
            page_list = list(reader.pages)
    except Exception as exc:
        raise QuarantineError(
            QuarantineReason.CORRUPT, f"unreadable PDF: {type(exc).__name__}: {exc}"
        ) from exc
    if encrypted:
        raise QuarantineError(QuarantineReason.ENCRYPTED, "PDF is encrypted")
    pages: list[str] = []
    errors: list[str] = []
    for page in page_list:
        try:
            pages.append(_HYPHEN_BREAK.sub(r"\1", normalise_text(page.extract_text() or "")))
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    if page_list and len(errors) == len(page_list):
        raise QuarantineError(QuarantineReason.CORRUPT, f"no page could be read: {errors[0]}")
    text = normalise_text("\n\n".join(pages))
    metadata: JsonObject = {"n_pages": len(page_list)}
    if errors:
        metadata["pages_failed"] = len(errors)
    info_title, author = _pdf_info(reader)
    if author:
        metadata["author"] = author
    return Parsed(
        title=info_title or first_line(text),
        sections=[Section(text=text)] if text else [],
        metadata=metadata,
        no_text_detail=f"no extractable text on {len(page_list)} page(s) (scanned/image-only?)",
    )


def _pdf_info(reader: Any) -> tuple[str, str]:
    """(title, author) from the document information dictionary; "" when absent or broken."""
    try:
        info = reader.metadata
        if info is None:
            return "", ""
        return str(info.title or "").strip(), str(info.author or "").strip()
    except Exception:
        return "", ""
