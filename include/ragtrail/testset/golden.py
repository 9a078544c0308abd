"""Golden QA sets: curated, human-written questions that a data team registers per corpus.

A golden set has a *name* (a lowercase slug, e.g. ``handbook-sample``) and immutable *versions*.
A version is content-addressed: ``"gs-"`` plus 12 hex digits of the SHA-256 of the items'
canonical JSON (file order kept), so the same questions read from CSV or JSONL are the same
version, re-adding unchanged content is a no-op, and changed content is a new version beside the
old ones. The most recently added version of a name is its latest (adding an older content again
makes it the latest once more, without copying it).

Before anything is stored, every ground document — listed in ``ground_doc_ids`` or named by the
``"<doc_id>#<n>"`` chunk ids — must exist in the corpus's latest complete snapshot: a golden set
that points at documents the index never saw would score zero recall and look like a retrieval
regression.

SQLAlchemy Core on SQLite or PostgreSQL, one transaction per method (:mod:`ragtrail.storage.sql`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import Connection, select, update
from sqlalchemy.engine import RowMapping

from ragtrail.jsonsafe import JsonObject
from ragtrail.records import LABELS, ChangeKind, QAItem, sha256_json
from ragtrail.storage import tables as t
from ragtrail.storage.db import utcnow, write_transaction
from ragtrail.storage.metadata_store import MetadataStore
from ragtrail.storage.sql import Row, SqlStore, as_dict, upsert
from ragtrail.testset.qaset import QASetError, load_qa_set
from ragtrail.testset.store import doc_id_from_chunk_id

VERSION_PREFIX = "gs-"
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
RESERVED_NAMES = frozenset({"generated"})
"""Names the nightly gives to sets that are not golden ones (the generated test set)."""
MAX_LISTED_PROBLEMS = 50


class GoldenSetError(ValueError):
    """A golden set cannot be registered: a bad name, a bad file or unknown ground documents."""


class DuplicateContentError(GoldenSetError):
    """The content is already registered in the corpus under another name (``existing``)."""

    def __init__(self, message: str, existing: str) -> None:
        super().__init__(message)
        self.existing = existing


@dataclass(frozen=True)
class GoldenVersion:
    """One registered version of a golden set (a ``golden_sets`` row)."""

    corpus: str
    name: str
    version: str
    n_items: int
    questions_per_label: dict[str, int]
    source: str
    content_hash: str
    created_at: datetime
    last_added_at: datetime

    @classmethod
    def from_row(cls, row: RowMapping | Row) -> GoldenVersion:
        data = as_dict(row) if isinstance(row, RowMapping) else dict(row)
        return cls(
            corpus=data["corpus"],
            name=data["name"],
            version=data["version"],
            n_items=int(data["n_items"]),
            questions_per_label={k: int(v) for k, v in data["questions_per_label"].items()},
            source=data["source"],
            content_hash=data["content_hash"],
            created_at=data["created_at"],
            last_added_at=data["last_added_at"],
        )

    def as_dict(self) -> JsonObject:
        """Strict JSON: plain strings and integers, datetimes in ISO 8601."""
        return {
            "corpus": self.corpus,
            "name": self.name,
            "version": self.version,
            "n_items": self.n_items,
            "questions_per_label": dict(self.questions_per_label),
            "source": self.source,
            "content_hash": self.content_hash,
            "created_at": self.created_at.isoformat(),
            "last_added_at": self.last_added_at.isoformat(),
        }


@dataclass(frozen=True)
class AddResult:
    """What :meth:`GoldenSetStore.add` did: the version, and whether it was new for the name."""

    version: GoldenVersion
    created: bool


def check_name(name: str) -> str:
    """``name`` if it is a valid golden-set name, else :class:`GoldenSetError` saying why."""
    if not NAME_PATTERN.fullmatch(name):
        raise GoldenSetError(
            f"invalid golden set name {name!r}: use 1-64 lowercase letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )
    if name in RESERVED_NAMES:
        raise GoldenSetError(f"{name!r} is reserved for the generated test set; pick another name")
    return name


def item_record(item: QAItem) -> JsonObject:
    """The canonical, JSON-ready form of one item (what the version hash covers)."""
    return {
        "qid": item.qid,
        "question": item.question,
        "label": item.label,
        "answer": item.answer,
        "ground_doc_ids": list(item.ground_doc_ids),
        "ground_chunk_ids": list(item.ground_chunk_ids),
    }


def content_hash(items: Sequence[QAItem]) -> str:
    """Hex SHA-256 of the items' canonical JSON, in order (independent of the file format)."""
    return sha256_json([item_record(i) for i in items])


def version_for(items: Sequence[QAItem]) -> str:
    """The version id of these items: ``"gs-"`` + the first 12 hex digits of the content hash."""
    return _version_id(content_hash(items))


def _version_id(digest: str) -> str:
    return VERSION_PREFIX + digest[:12]


def questions_per_label(items: Sequence[QAItem]) -> dict[str, int]:
    """Questions per label, every taxonomy label present (0 when the set has none of it)."""
    counts = Counter(item.label for item in items)
    return {label: int(counts.get(label, 0)) for label in LABELS}


class GoldenSetStore(SqlStore):
    """Golden set versions and their items in the metadata database."""

    def add(self, corpus: str, name: str, items: Sequence[QAItem], *, source: str) -> AddResult:
        """Register ``items`` as a version of golden set ``name`` of ``corpus``.

        Idempotent: when this content is already a version of the name, nothing is written but
        its ``last_added_at`` (it becomes the name's latest again) and ``created`` is False. The
        same content under a second name of the same corpus is refused: the night would evaluate
        the same questions twice.
        """
        check_name(name)
        if not items:
            raise GoldenSetError(f"golden set {name!r} has no items")
        digest = content_hash(items)
        version = _version_id(digest)
        now = utcnow()
        gs = t.golden_sets
        with write_transaction(self.engine) as conn:
            _refuse_other_names(conn, corpus, name, version)
            existing = _set_row(conn, corpus, name, version)
            if existing is None:
                rows = [
                    {**item_record(i), "version": version, "position": n}
                    for n, i in enumerate(items)
                ]
                upsert(conn, t.golden_items, rows, ["version", "qid"], [])
                row = {
                    "corpus": corpus,
                    "name": name,
                    "version": version,
                    "n_items": len(items),
                    "questions_per_label": questions_per_label(items),
                    "source": source,
                    "content_hash": digest,
                    "created_at": now,
                    "last_added_at": now,
                }
                upsert(conn, gs, [row], ["corpus", "name", "version"], [])
            else:
                conn.execute(update(gs).where(gs.c.id == existing["id"]).values(last_added_at=now))
            stored = _set_row(conn, corpus, name, version)
        assert stored is not None
        return AddResult(GoldenVersion.from_row(stored), created=existing is None)

    def holds(self, corpus: str, name: str, version: str) -> bool:
        """Whether ``version`` is registered as golden set ``name`` of ``corpus``."""
        with self.engine.connect() as conn:
            return _set_row(conn, corpus, name, version) is not None

    def versions(self, corpus: str, name: str | None = None) -> list[GoldenVersion]:
        """Every version of the corpus's golden sets (or of one name), most recently added first."""
        gs = t.golden_sets
        query = select(gs).where(gs.c.corpus == corpus)
        if name is not None:
            query = query.where(gs.c.name == name)
        query = query.order_by(gs.c.last_added_at.desc(), gs.c.id.desc())
        with self.engine.connect() as conn:
            return [GoldenVersion.from_row(r) for r in conn.execute(query).mappings()]

    def latest(self, corpus: str) -> list[GoldenVersion]:
        """The latest version of each golden set of ``corpus``, ordered by name."""
        newest: dict[str, GoldenVersion] = {}
        for version in self.versions(corpus):
            newest.setdefault(version.name, version)
        return [newest[name] for name in sorted(newest)]

    def get(self, version: str, *, corpus: str | None = None) -> GoldenVersion | None:
        """The registration of ``version`` (in ``corpus`` when given; the first one otherwise:
        identical content may be registered in several corpora), or None."""
        gs = t.golden_sets
        query = select(gs).where(gs.c.version == version)
        if corpus is not None:
            query = query.where(gs.c.corpus == corpus)
        with self.engine.connect() as conn:
            row = conn.execute(query.order_by(gs.c.id).limit(1)).mappings().first()
        return GoldenVersion.from_row(row) if row is not None else None

    def items(self, version: str) -> list[QAItem]:
        """The items of ``version`` in file order; KeyError for an unknown version."""
        gi = t.golden_items
        query = select(gi).where(gi.c.version == version).order_by(gi.c.position)
        with self.engine.connect() as conn:
            rows = list(conn.execute(query).mappings())
        if not rows:
            raise KeyError(f"no golden set version {version!r}")
        return [
            QAItem(
                qid=r["qid"],
                question=r["question"],
                label=r["label"],
                answer=r["answer"],
                ground_doc_ids=tuple(r["ground_doc_ids"]),
                ground_chunk_ids=tuple(r["ground_chunk_ids"]),
            )
            for r in rows
        ]


def load_golden_items(
    metadata_store: MetadataStore,
    path: str | Path,
    *,
    corpus: str,
    registered: Callable[[list[QAItem]], bool] | None = None,
) -> list[QAItem]:
    """Load a golden set file and check its ground documents against the corpus.

    Every bad row is reported at once (:func:`~ragtrail.testset.qaset.load_qa_set`), then every
    ground document that the corpus's latest complete snapshot does not hold, with row numbers.
    Content for which ``registered`` is true was checked when it was added: a document removed
    since then is corpus drift (its questions count as retired), not a reason to refuse the set.
    """
    snapshot = metadata_store.latest_snapshot(corpus)
    if snapshot is None:
        raise GoldenSetError(
            f"corpus {corpus!r} has no complete snapshot: ingest it before adding golden sets"
        )
    try:
        items, _file_version = load_qa_set(path)
    except QASetError as exc:
        raise GoldenSetError(str(exc)) from exc
    if registered is not None and registered(items):
        return items
    present = {
        d.doc_id
        for d in metadata_store.get_snapshot_documents(snapshot.snapshot_id)
        if d.change != ChangeKind.REMOVED.value
    }
    problems = [
        f"row {row}: {problem}"
        for row, item in enumerate(items, 1)  # load_qa_set kept every row, in file order
        for problem in _ground_problems(item, present)
    ]
    if problems:
        shown = "; ".join(problems[:MAX_LISTED_PROBLEMS])
        more = (
            f" (+{len(problems) - MAX_LISTED_PROBLEMS} more)"
            if len(problems) > MAX_LISTED_PROBLEMS
            else ""
        )
        raise GoldenSetError(
            f"{path}: {len(problems)} ground references unknown to corpus {corpus!r} "
            f"(snapshot {snapshot.snapshot_id}): {shown}{more}"
        )
    return items


def add_golden_set(
    store: GoldenSetStore,
    metadata_store: MetadataStore,
    path: str | Path,
    *,
    corpus: str,
    name: str,
    check: Callable[[list[QAItem]], None] | None = None,
) -> AddResult:
    """Validate the file at ``path`` against ``corpus`` and register it as golden set ``name``.

    ``check`` (e.g. a data-quality gate) sees the loaded items before anything is stored and
    refuses them by raising. Adding registered content again checks its rows, not its ground
    documents against today's corpus (:func:`load_golden_items`).
    """
    check_name(name)

    def registered(items: list[QAItem]) -> bool:
        return store.holds(corpus, name, version_for(items))

    items = load_golden_items(metadata_store, path, corpus=corpus, registered=registered)
    if check is not None:
        check(items)
    return store.add(corpus, name, items, source=str(path))


def _ground_problems(item: QAItem, present: set[str]) -> list[str]:
    problems = [f"unknown document {d!r}" for d in item.ground_doc_ids if d not in present]
    for chunk_id in item.ground_chunk_ids:
        doc_id = doc_id_from_chunk_id(chunk_id)
        if doc_id is None:
            problems.append(f"chunk id {chunk_id!r} is not of the form '<doc_id>#<n>'")
        elif doc_id not in present:
            problems.append(f"unknown document {doc_id!r} (of chunk {chunk_id!r})")
    return problems


def _set_row(conn: Connection, corpus: str, name: str, version: str) -> Row | None:
    gs = t.golden_sets
    query = select(gs).where(gs.c.corpus == corpus, gs.c.name == name, gs.c.version == version)
    row = conn.execute(query).mappings().first()
    return as_dict(row) if row is not None else None


def _refuse_other_names(conn: Connection, corpus: str, name: str, version: str) -> None:
    gs = t.golden_sets
    query = select(gs.c.name).where(
        gs.c.corpus == corpus, gs.c.version == version, gs.c.name != name
    )
    other = conn.execute(query.limit(1)).scalar()
    if other is not None:
        raise DuplicateContentError(
            f"this content is already registered in corpus {corpus!r} as golden set {other!r} "
            f"(version {version}); add it under that name",
            existing=other,
        )


__all__ = [
    "NAME_PATTERN",
    "RESERVED_NAMES",
    "VERSION_PREFIX",
    "AddResult",
    "DuplicateContentError",
    "GoldenSetError",
    "GoldenSetStore",
    "GoldenVersion",
    "add_golden_set",
    "check_name",
    "content_hash",
    "load_golden_items",
    "questions_per_label",
    "version_for",
]
