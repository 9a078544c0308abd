"""Real malformed files, one per quarantine reason, for the ingest integration tests."""

from __future__ import annotations

from pathlib import Path

from tests.unit import _docs


def write_malformed_files(folder: Path, duplicate_of: Path) -> dict[str, str]:
    """Write the files into ``folder``; return file name -> expected quarantine reason.

    ``folder`` must sort after the corpus's other folders so that the copy of ``duplicate_of`` is the
    second path seen with those bytes (the first one is kept).
    """
    files: dict[str, tuple[bytes, str]] = {
        "empty.md": (b"", "empty"),
        "blank.txt": (b"  \n\t\n", "empty"),
        "picture.md": (_docs.png_bytes(), "binary_content"),
        "latin1.txt": ("caf\xe9 au lait".encode("latin-1"), "invalid_utf8"),
        "huge.txt": (b"word " * 50_000, "too_large"),
        "budget.xlsx": (_docs.zip_without_document_xml(), "unsupported_type"),
        "truncated.pdf": (_docs.make_pdf()[:300], "corrupt"),
        "locked.pdf": (_docs.encrypt_pdf(_docs.make_pdf()), "encrypted"),
        "scanned.pdf": (_docs.make_image_only_pdf(), "no_text"),
        "broken.docx": (_docs.random_bytes(4096), "corrupt"),
        "copy-of-" + duplicate_of.name: (duplicate_of.read_bytes(), "duplicate_content"),
    }
    for name, (data, _) in files.items():
        (folder / name).write_bytes(data)
    return {name: reason for name, (_, reason) in files.items()}
