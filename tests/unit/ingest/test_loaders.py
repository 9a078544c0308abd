"""Loader tests: every quarantine reason with a real malformed file, and each format parsed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ragtrail.ingest.formats.common import QuarantineError, normalise_text, render_table
from ragtrail.ingest.loaders import detect_format, parse_document
from ragtrail.records import DocFormat, QuarantineReason, SourceFile
from tests.unit._docs import (
    HTML_DOC,
    MARKDOWN_DOC,
    encrypt_pdf,
    make_docx,
    make_image_only_pdf,
    make_pdf,
    png_bytes,
    random_bytes,
    source,
    write,
    zip_without_document_xml,
)

MAX_BYTES = 1_000_000


def parse(src: SourceFile, max_bytes: int = MAX_BYTES):
    return parse_document(src, max_bytes=max_bytes)


def quarantine_reason(src: SourceFile, max_bytes: int = MAX_BYTES) -> QuarantineReason:
    with pytest.raises(QuarantineError) as info:
        parse(src, max_bytes)
    assert info.value.detail, "every quarantine needs a human-readable detail"
    return info.value.reason


# --------------------------------------------------------------------------------------------
# Quarantine cases, each with a real file on disk
# --------------------------------------------------------------------------------------------

QUARANTINE_CASES: dict[str, tuple[str, Callable[[], bytes], QuarantineReason]] = {
    "truncated_pdf": (
        "report.pdf",
        lambda: make_pdf(pages=3)[: len(make_pdf(pages=3)) // 2],
        QuarantineReason.CORRUPT,
    ),
    "pdf_garbage_body": (
        "garbage.pdf",
        lambda: b"%PDF-1.7\n" + random_bytes(3000) + b"\n%%EOF\n",
        QuarantineReason.CORRUPT,
    ),
    "not_a_pdf": ("fake.pdf", lambda: b"<html>not a pdf</html>", QuarantineReason.CORRUPT),
    "encrypted_pdf": ("locked.pdf", lambda: encrypt_pdf(make_pdf()), QuarantineReason.ENCRYPTED),
    "encrypted_pdf_empty_password": (
        "locked_blank.pdf",
        lambda: encrypt_pdf(make_pdf(), user_password=""),
        QuarantineReason.ENCRYPTED,
    ),
    "image_only_pdf": ("scan.pdf", make_image_only_pdf, QuarantineReason.NO_TEXT),
    "png_renamed_md": ("diagram.md", png_bytes, QuarantineReason.BINARY_CONTENT),
    "nul_bytes_txt": (
        "dump.txt",
        lambda: b"header\x00\x00\x00binary payload",
        QuarantineReason.BINARY_CONTENT,
    ),
    "control_bytes_html": (
        "weird.html",
        lambda: bytes([1, 2, 3, 4, 5, 6, 7, 8, 14, 15] * 20) + b"<p>x</p>",
        QuarantineReason.BINARY_CONTENT,
    ),
    "empty_file": ("empty.md", lambda: b"", QuarantineReason.EMPTY),
    "whitespace_only": ("blank.txt", lambda: b"  \n\t\r\n   \n", QuarantineReason.EMPTY),
    "bom_and_whitespace": ("bom.md", lambda: b"\xef\xbb\xbf \n\n", QuarantineReason.EMPTY),
    "invalid_utf8_txt": ("menu.txt", lambda: b"caf\xe9 au lait", QuarantineReason.INVALID_UTF8),
    "invalid_utf8_html_no_charset": (
        "page.html",
        lambda: b"<html><body><p>caf\xe9</p></body></html>",
        QuarantineReason.INVALID_UTF8,
    ),
    "utf16_txt": (
        "utf16.txt",
        lambda: "hello world".encode("utf-16"),
        QuarantineReason.INVALID_UTF8,
    ),
    "unsupported_xlsx": (
        "budget.xlsx",
        lambda: b"PK\x03\x04 data",
        QuarantineReason.UNSUPPORTED_TYPE,
    ),
    "unsupported_exe": ("setup.exe", lambda: b"MZ\x90\x00" * 10, QuarantineReason.UNSUPPORTED_TYPE),
    "no_extension": ("README", lambda: b"hello", QuarantineReason.UNSUPPORTED_TYPE),
    "random_bytes_docx": ("memo.docx", lambda: random_bytes(4096), QuarantineReason.CORRUPT),
    "zip_without_document_xml": ("memo2.docx", zip_without_document_xml, QuarantineReason.CORRUPT),
    "truncated_docx": (
        "memo3.docx",
        lambda: make_docx()[:5000],
        QuarantineReason.CORRUPT,
    ),
    "markdown_only_front_matter": (
        "stub.md",
        lambda: b"---\ntitle: Stub\n---\n\n",
        QuarantineReason.NO_TEXT,
    ),
    "html_only_boilerplate": (
        "nav.html",
        lambda: b"<html><body><nav>Home | About</nav><footer>(c) Acme</footer></body></html>",
        QuarantineReason.NO_TEXT,
    ),
    "text_only_zero_width": (
        "zw.txt",
        lambda: "\u200b\u200b\ufeff\u200d".encode(),
        QuarantineReason.NO_TEXT,
    ),
}


@pytest.mark.parametrize("case", sorted(QUARANTINE_CASES))
def test_malformed_file_is_quarantined(tmp_path: Path, case: str) -> None:
    name, build, expected = QUARANTINE_CASES[case]
    src = write(tmp_path, name, build())
    assert quarantine_reason(src) == expected


def test_file_over_max_bytes_is_too_large(tmp_path: Path) -> None:
    src = write(tmp_path, "big.txt", "All work and no play. " * 100)
    assert quarantine_reason(src, max_bytes=1000) == QuarantineReason.TOO_LARGE
    assert parse(src, max_bytes=10_000).title.startswith("All work")


def test_empty_check_comes_before_size_check(tmp_path: Path) -> None:
    src = write(tmp_path, "blank.md", b" " * 5000)
    assert quarantine_reason(src, max_bytes=100) == QuarantineReason.EMPTY


def test_unexpected_parser_exception_becomes_corrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parser bug or a hostile file tripping the library must not crash the run."""
    from ragtrail.ingest import loaders

    def boom(src: SourceFile, max_bytes: int):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setitem(loaders._PARSERS, DocFormat.HTML, boom)
    with pytest.raises(QuarantineError) as info:
        parse(source("x/page.html", b"<p>hi</p>"))
    assert info.value.reason == QuarantineReason.CORRUPT
    assert "RecursionError" in info.value.detail


def test_deeply_nested_html_does_not_crash() -> None:
    html = "<div>" * 5000 + "<p>deep text</p>" + "</div>" * 5000
    try:
        doc = parse(source("deep.html", html.encode()))
    except QuarantineError as exc:  # acceptable outcome; crashing is not
        assert exc.reason in (QuarantineReason.CORRUPT, QuarantineReason.NO_TEXT)
    else:
        assert "deep text" in doc.text


def test_loaders_still_exports_the_names_that_moved() -> None:
    """Callers that import these from ``ragtrail.ingest.loaders`` keep working."""
    from ragtrail.ingest import loaders
    from ragtrail.ingest.formats import common

    assert loaders.QuarantineError is common.QuarantineError
    assert loaders.normalise_text is common.normalise_text
    assert loaders.render_table is common.render_table
    assert set(loaders.__all__) == {
        "FORMAT_BY_EXTENSION",
        "QuarantineError",
        "detect_format",
        "normalise_text",
        "parse_document",
        "render_table",
    }


def test_quarantine_error_message() -> None:
    err = QuarantineError(QuarantineReason.EMPTY, "file is empty")
    assert err.reason is QuarantineReason.EMPTY
    assert str(err) == "empty: file is empty"


# --------------------------------------------------------------------------------------------
# Charset handling
# --------------------------------------------------------------------------------------------


def test_html_declared_latin1_charset_parses(tmp_path: Path) -> None:
    html = (
        '<html><head><meta charset="iso-8859-1"><title>Caf\xe9 menu</title></head>'
        "<body><h1>Desserts</h1><p>Cr\xe8me br\xfbl\xe9e co\xfbte 5 \u20ac</p></body></html>"
    )
    src = write(tmp_path, "menu.html", html.replace("\u20ac", "EUR").encode("latin-1"))
    doc = parse(src)
    assert doc.title == "Café menu"
    assert "Crème brûlée coûte 5 EUR" in doc.text


def test_html_http_equiv_charset(tmp_path: Path) -> None:
    html = (
        '<html><head><meta http-equiv="Content-Type" content="text/html; charset=windows-1252">'
        "</head><body><p>\u201csmart quotes\u201d</p></body></html>"
    )
    doc = parse(write(tmp_path, "q.htm", html.encode("cp1252")))
    assert "\u201csmart quotes\u201d" in doc.text


def test_utf8_bom_is_stripped(tmp_path: Path) -> None:
    doc = parse(write(tmp_path, "bom.txt", b"\xef\xbb\xbfFirst line\nsecond"))
    assert doc.title == "First line"
    assert not doc.text.startswith("\ufeff")


# --------------------------------------------------------------------------------------------
# Formats
# --------------------------------------------------------------------------------------------


def test_detect_format() -> None:
    assert detect_format("a/b/Guide.MD") is DocFormat.MARKDOWN
    assert detect_format("x.markdown") is DocFormat.MARKDOWN
    assert detect_format("x.text") is DocFormat.TEXT
    assert detect_format("x.htm") is DocFormat.HTML
    assert detect_format("x.PDF") is DocFormat.PDF
    assert detect_format("x.docx") is DocFormat.DOCX
    assert detect_format("x.doc") is None
    assert detect_format("Makefile") is None


def test_markdown_front_matter_headings_and_table(tmp_path: Path) -> None:
    src = write(tmp_path, "policies/travel.md", MARKDOWN_DOC)
    doc = parse(src)
    assert doc.doc_id == "policies/travel.md"
    assert doc.uri == str(tmp_path / "policies/travel.md")
    assert doc.format is DocFormat.MARKDOWN
    assert doc.title == "Travel Policy"
    assert doc.metadata["owner"] == "Finance"
    assert doc.metadata["effective"] == "2024-03-01"
    assert doc.metadata["reviewed_at"] == "2024-05-02T10:30:00"
    assert doc.metadata["tags"] == ["travel", "expenses"]
    assert doc.metadata["size_bytes"] == len(MARKDOWN_DOC.encode())
    assert doc.metadata["source_format"] == "markdown"
    json.dumps(doc.metadata)  # JSON-safe

    headings = [s.headings for s in doc.sections]
    assert ("Travel",) in headings
    assert ("Travel", "Per diem") in headings
    assert ("Travel", "Lodging") in headings
    tables = [s for s in doc.sections if s.kind == "table"]
    assert len(tables) == 1
    assert tables[0].headings == ("Travel", "Per diem")
    assert tables[0].text == "| City | Rate (EUR) |\n| Paris | 95 |\n| Berlin | 80 |"
    # '#' inside a fenced code block is not a heading
    assert not any("shell comment" in h for s in doc.sections for h in s.headings)
    assert "# this is a shell comment" in doc.text
    assert "---" not in doc.text and "Finance" not in doc.text  # front matter not in the text


def test_markdown_title_fallbacks(tmp_path: Path) -> None:
    assert parse(write(tmp_path, "a.md", "intro\n\n# Real Title\n\nbody")).title == "Real Title"
    assert parse(write(tmp_path, "plain-notes.md", "just some text")).title == "plain-notes"


def test_markdown_setext_and_nested_headings(tmp_path: Path) -> None:
    text = "Handbook\n========\n\nIntro.\n\nSetup\n-----\n\nInstall it.\n\n### Linux\n\napt\n\n## Use\n\nRun."
    doc = parse(write(tmp_path, "h.md", text))
    assert doc.title == "Handbook"
    assert [s.headings for s in doc.sections] == [
        ("Handbook",),
        ("Handbook", "Setup"),
        ("Handbook", "Setup", "Linux"),
        ("Handbook", "Use"),
    ]


def test_markdown_bad_front_matter_is_not_fatal(tmp_path: Path) -> None:
    doc = parse(write(tmp_path, "bad.md", "---\ntitle: [unclosed\n---\n# Heading\n\nBody text."))
    assert "front_matter_error" in doc.metadata
    assert doc.text == "Body text."
    assert doc.title == "Heading"


def test_html_boilerplate_dropped_and_structure_kept(tmp_path: Path) -> None:
    doc = parse(write(tmp_path, "kb/security.html", HTML_DOC))
    assert doc.format is DocFormat.HTML
    assert doc.title == "Security Handbook"
    text = doc.text
    for boilerplate in ("NAV_BOILERPLATE", "FOOTER_BOILERPLATE", "HEADER_BOILERPLATE"):
        assert boilerplate not in text
    assert "ASIDE_BOILERPLATE" not in text
    assert "SHOULD_NOT_APPEAR" not in text and "color: red" not in text
    assert "Passwords must have at least 14 characters." in text
    assert "Use a password manager." in text

    by_heading = {s.headings: s for s in doc.sections if s.kind == "text"}
    assert ("Security Handbook", "Passwords", "Exceptions") in by_heading
    assert (
        "Laptops must use full-disk encryption."
        in by_heading[("Security Handbook", "Devices")].text
    )
    tables = [s for s in doc.sections if s.kind == "table"]
    assert len(tables) == 1
    assert tables[0].headings == ("Security Handbook", "Passwords")
    assert tables[0].text.splitlines() == [
        "| System | Rotation |",
        "| VPN | 90 days |",
        "| Email | 180 days |",
    ]
    # document order: text before the table, table, then the next heading's text
    kinds = [(s.kind, s.headings[-1]) for s in doc.sections]
    assert kinds.index(("table", "Passwords")) == kinds.index(("text", "Passwords")) + 1


def test_html_title_falls_back_to_h1_and_layout_tables_are_text(tmp_path: Path) -> None:
    html = (
        "<html><body><table><tr><td><h1>Layout Page</h1><p>Inside a layout table.</p></td></tr>"
        "</table></body></html>"
    )
    doc = parse(write(tmp_path, "layout.html", html))
    assert doc.title == "Layout Page"
    assert [s.kind for s in doc.sections] == ["text"]
    assert doc.sections[0].text == "Inside a layout table."


# Malformed pages that browsers still render in full (HTML5 parsing moves all of it into <body>).
RENDERED_MALFORMED_HTML: dict[str, tuple[str, list[str]]] = {
    "text_after_html": (
        "<html><head><title>T</title></head><body><p>Inside.</p></body></html>"
        "<p>After the end.</p>Trailing words",
        ["Inside.", "After the end.", "Trailing words"],
    ),
    "two_bodies": (
        "<html><body><p>First body.</p></body><body><p>Second body.</p></body></html>",
        ["First body.", "Second body."],
    ),
    "content_before_html": (
        "<p>Before html.</p><html><body><p>Inside.</p></body></html>",
        ["Before html.", "Inside."],
    ),
    "unclosed_tags": (
        "<html><body><div><p>Alpha <b>bold<p>Beta<ul><li>one<li>two</div>",
        ["Alpha bold", "Beta", "one", "two"],
    ),
    "no_html_or_body": (
        "<title>Bare page</title><h1>Bare page</h1><p>Para one<p>Para two",
        ["Para one", "Para two"],
    ),
}


@pytest.mark.parametrize("case", sorted(RENDERED_MALFORMED_HTML))
def test_malformed_html_indexes_what_a_browser_renders(tmp_path: Path, case: str) -> None:
    html, expected_blocks = RENDERED_MALFORMED_HTML[case]
    doc = parse(write(tmp_path, f"{case}.html", html))
    assert [s.text for s in doc.sections] == ["\n\n".join(expected_blocks)]


def test_html_outside_body_still_drops_boilerplate_and_head(tmp_path: Path) -> None:
    html = (
        "<html><head><title>Page</title></head><body><p>Shown.</p></body></html>"
        "<script>var SCRIPT_AFTER = 1;</script><nav>NAV_AFTER</nav><p>Also shown.</p>"
        "<head><style>.STYLE_AFTER {}</style><title>SECOND_TITLE</title></head>"
    )
    doc = parse(write(tmp_path, "late.html", html))
    assert doc.title == "Page"
    assert doc.text == "Shown.\n\nAlso shown."


def test_edit_after_closing_html_changes_content_hash(tmp_path: Path) -> None:
    page = "<html><body><h1>Policy</h1><p>Main text.</p></body></html>\n<p>Appendix: {}.</p>\n"
    before = parse(write(tmp_path, "a.html", page.format("30 days")))
    after = parse(write(tmp_path, "b.html", page.format("60 days")))
    assert "Appendix: 30 days." in before.text and "Appendix: 60 days." in after.text
    assert before.content_hash != after.content_hash


def test_pdf_parsed_with_metadata_title(tmp_path: Path) -> None:
    doc = parse(write(tmp_path, "guides/expenses.pdf", make_pdf(pages=2)))
    assert doc.format is DocFormat.PDF
    assert doc.title == "Expense Guide"
    assert "Receipts are required for every expense above 25 euros." in doc.text
    assert "(page 2)" in doc.text
    assert doc.metadata["n_pages"] == 2
    assert doc.metadata["source_format"] == "pdf"
    assert all(s.headings == () for s in doc.sections)


def test_pdf_title_falls_back_to_first_line(tmp_path: Path) -> None:
    doc = parse(
        write(tmp_path, "x.pdf", make_pdf(["Quarterly Results", "Revenue grew."], title=None))
    )
    assert doc.title == "Quarterly Results"


def test_docx_headings_tables_and_title(tmp_path: Path) -> None:
    doc = parse(write(tmp_path, "hr/onboarding.docx", make_docx()))
    assert doc.format is DocFormat.DOCX
    assert doc.title == "Onboarding Guide"
    sections = [(s.kind, s.headings, s.text) for s in doc.sections]
    assert sections == [
        ("text", ("Onboarding Guide",), "Welcome to the company."),
        (
            "text",
            ("Onboarding Guide", "First week"),
            "You will meet your buddy on Monday.\n\n- Collect your badge at reception.",
        ),
        (
            "table",
            ("Onboarding Guide", "First week", "Equipment"),
            "| Item | Owner |\n| Laptop | IT |\n| Badge | Security |",
        ),
        (
            "text",
            ("Onboarding Guide", "First week", "Equipment"),
            "Return equipment on your last day.",
        ),
        ("text", ("Onboarding Guide", "Benefits"), "Health insurance starts on day one."),
    ]
    json.dumps(doc.metadata)


def test_docx_core_title_wins(tmp_path: Path) -> None:
    assert parse(write(tmp_path, "a.docx", make_docx(core_title="HR Onboarding"))).title == (
        "HR Onboarding"
    )


def test_text_single_section_and_long_title(tmp_path: Path) -> None:
    long_line = "word " * 60
    doc = parse(write(tmp_path, "notes/log.txt", f"{long_line}\n\nSecond paragraph."))
    assert doc.format is DocFormat.TEXT
    assert len(doc.sections) == 1
    assert len(doc.title) <= 120
    assert doc.title.startswith("word word")
    assert parse(write(tmp_path, "x.txt", "\n\n  Title here  \nbody")).title == "Title here"


# --------------------------------------------------------------------------------------------
# Normalisation and hashing
# --------------------------------------------------------------------------------------------


def test_normalise_text() -> None:
    raw = (
        "Cafe\u0301\r\nzero\u200bwidth  and\t\ttabs   \r\n\r\n\r\n\r\n\x07bell\x00 end\u00a0nbsp  "
    )
    assert normalise_text(raw) == "Café\nzerowidth and tabs\n\nbell end nbsp"
    assert normalise_text("\n\n a \n\n\n b \n") == "a\n\nb"


def test_content_hash_stable_across_line_endings_and_runs(tmp_path: Path) -> None:
    a = parse(write(tmp_path, "a.md", "# T\r\n\r\nSame   text.\r\n"))
    b = parse(write(tmp_path, "b.md", "# T\n\nSame text.\n"))
    assert a.content_hash == b.content_hash
    assert a.content_hash == parse(write(tmp_path, "c.md", "# T\n\nSame text.\n")).content_hash
    assert parse(write(tmp_path, "d.md", "# T\n\nOther text.\n")).content_hash != a.content_hash


def test_render_table_escapes_pipes_and_drops_empty_rows() -> None:
    rows = [["a|b", " c  d "], ["", ""], ["1", "two\nlines"]]
    assert render_table(rows) == "| a\\|b | c d |\n| 1 | two lines |"
