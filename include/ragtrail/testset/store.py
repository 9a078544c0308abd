"""Storage for generated QA candidates and immutable, content-addressed QA set versions.

Every candidate is stored with its full lineage — corpus, snapshot, document and chunk with their
content hashes, the chunk text itself, the statement it was written from, critiques, raw model
outputs and generator settings — so a published test-set version can be audited without the corpus.

Candidates whose source text changed or disappeared are *retired*, never deleted: versions that
already contain them stay reproducible. A version is identified by a hash of its corpus, candidate
ids and seed, so creating the same set twice is a no-op and a version's content never changes.

SQLAlchemy Core on SQLite or PostgreSQL, one transaction per method, like
:class:`ragtrail.storage.metadata_store.SqlMetadataStore`; the SQL helpers are
:mod:`ragtrail.storage.sql`'s.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, func, or_, select, update
from sqlalchemy.engine import RowMapping

from ragtrail.jsonsafe import JsonObject
from ragtrail.records import CandidateStatus, Context, QACandidate, sha256_text
from ragtrail.storage import tables as t
from ragtrail.storage.db import utcnow, write_transaction
from ragtrail.storage.sql import BATCH_SIZE, Row, SqlStore, as_dict, batches, upsert

ACTIVE_STATUSES: tuple[CandidateStatus, ...] = (CandidateStatus.ACCEPTED, CandidateStatus.PENDING)
"""Statuses that retirement applies to; rejected and failed candidates keep their verdict."""

DOCUMENT_UPDATED = "document_updated"
DOCUMENT_REMOVED = "document_removed"
SOURCE_DOCUMENT_REMOVED = "source_document_removed"
"""Retirement reasons used by :meth:`TestSetStore.retire_stale_hashes`."""

_RETIRED_AT_UPSERT = "retired_at_upsert"
_RETIREMENT_COLUMNS = ("retired_at", "retired_reason", "retired_snapshot_id")


def qid_for(candidate_id: str) -> str:
    """The stable question id of a candidate in every version that contains it."""
    return f"q-{candidate_id[:16]}"


def version_id_for(corpus: str, candidate_ids: Iterable[str], seed: int) -> str:
    """``"ts-"`` + the first 12 hex digits of sha256 over (corpus, sorted candidate ids, seed).

    The order of the items is not part of the identity: the same candidates with the same seed are
    the same version.
    """
    payload = json.dumps(
        {"corpus": corpus, "candidate_ids": sorted(set(candidate_ids)), "seed": int(seed)},
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return f"ts-{sha256_text(payload)[:12]}"


def doc_id_from_chunk_id(chunk_id: str) -> str | None:
    """The document of a chunk id in ingest's ``"<doc_id>#<ordinal>"`` form, else None."""
    doc_id, sep, ordinal = chunk_id.rpartition("#")
    return doc_id if sep and doc_id and ordinal.isdigit() else None


class TestSetStore(SqlStore):
    """QA candidates, their retirement, and immutable QA set versions in the metadata database."""

    __test__ = False  # not a pytest test class despite the name

    # -- candidates ------------------------------------------------------------------------

    def upsert_candidates(
        self, candidates: Sequence[QACandidate], *, corpus: str, run_id: str
    ) -> None:
        """Insert or replace candidates by ``candidate_id``; rerunning writes the same rows.

        The stored row reflects the candidate as given (status included), except ``created_at``,
        which keeps the first write's time. A candidate given as RETIRED keeps an earlier
        retirement record (or gets one now). For unanswerable candidates the source chunk's
        document is resolved from the chunks table, else from the chunk id's ``doc#n`` form.
        """
        if not candidates:
            return
        for cand in candidates:
            _check_candidate(cand, corpus)
        now = utcnow()
        with write_transaction(self.engine) as conn:
            source_docs = _source_doc_ids(conn, corpus, candidates)
            rows = [_candidate_row(c, run_id, now, source_docs) for c in candidates]
            live = [r for r in rows if r["status"] != CandidateStatus.RETIRED]
            retired = [r for r in rows if r["status"] == CandidateStatus.RETIRED]
            keep = {"candidate_id", "created_at"}
            upsert(conn, t.qa_candidates, live, ["candidate_id"], _columns_except(keep))
            keep_retired = keep | set(_RETIREMENT_COLUMNS)
            upsert(conn, t.qa_candidates, retired, ["candidate_id"], _columns_except(keep_retired))
            _stamp_retirement(conn, [r["candidate_id"] for r in retired], now)

    def get_candidates(
        self,
        corpus: str,
        *,
        status: CandidateStatus | str | Iterable[CandidateStatus | str] | None = None,
        doc_ids: Iterable[str] | None = None,
        run_id: str | None = None,
    ) -> list[QACandidate]:
        """Candidates of ``corpus``, optionally of some statuses / documents / run, by id."""
        qc = t.qa_candidates
        query = select(qc).where(qc.c.corpus == corpus)
        if status is not None:
            query = query.where(qc.c.status.in_(_statuses(status)))
        if run_id is not None:
            query = query.where(qc.c.run_id == run_id)
        with self.engine.connect() as conn:
            if doc_ids is None:
                rows = list(conn.execute(query).mappings())
            else:
                rows = []
                for batch in batches(list(dict.fromkeys(doc_ids)), BATCH_SIZE):
                    rows.extend(conn.execute(query.where(qc.c.doc_id.in_(batch))).mappings())
        return [_candidate_from_row(r) for r in sorted(rows, key=lambda r: r["candidate_id"])]

    def get_candidate_rows(self, candidate_ids: Iterable[str]) -> dict[str, Row]:
        """candidate_id -> the full stored row (retirement columns included); unknown ids absent."""
        qc = t.qa_candidates
        out: dict[str, Row] = {}
        with self.engine.connect() as conn:
            for batch in batches(list(dict.fromkeys(candidate_ids)), BATCH_SIZE):
                query = select(qc).where(qc.c.candidate_id.in_(batch))
                out.update({r["candidate_id"]: as_dict(r) for r in conn.execute(query).mappings()})
        return out

    def get_candidates_by_id(self, candidate_ids: Iterable[str]) -> list[QACandidate]:
        """The candidates of ``candidate_ids`` that exist, in the order given."""
        rows = self.get_candidate_rows(candidate_ids)
        return [_candidate_from_row(rows[i]) for i in dict.fromkeys(candidate_ids) if i in rows]

    def count_candidates(self, corpus: str) -> dict[str, int]:
        """status -> number of candidates of ``corpus`` (statuses without any are absent)."""
        qc = t.qa_candidates
        query = select(qc.c.status, func.count()).where(qc.c.corpus == corpus).group_by(qc.c.status)
        with self.engine.connect() as conn:
            return {status: int(n) for status, n in conn.execute(query)}

    # -- retirement ------------------------------------------------------------------------

    def retire_for_documents(
        self, corpus: str, doc_ids: Iterable[str], *, reason: str, snapshot_id: str
    ) -> int:
        """Retire accepted/pending candidates grounded in, or (unanswerable) written from, any of
        ``doc_ids``; returns how many were retired."""
        qc = t.qa_candidates
        now = utcnow()
        retired = 0
        with write_transaction(self.engine) as conn:
            for batch in batches(list(dict.fromkeys(doc_ids)), BATCH_SIZE):
                hit = or_(qc.c.doc_id.in_(batch), qc.c.source_doc_id.in_(batch))
                stmt = (
                    update(qc)
                    .where(qc.c.corpus == corpus, qc.c.status.in_(_statuses(ACTIVE_STATUSES)), hit)
                    .values(_retirement(now, reason, snapshot_id))
                )
                retired += conn.execute(stmt).rowcount
        return retired

    def retire_stale_hashes(
        self,
        corpus: str,
        current_doc_hashes: Mapping[str, str],
        snapshot_id: str,
        *,
        retire_missing: bool = True,
    ) -> int:
        """Retire accepted/pending candidates whose document changed since they were generated.

        ``current_doc_hashes`` maps doc_id -> content hash in the current snapshot. A candidate
        whose ``doc_content_hash`` differs is retired as ``document_updated``. With
        ``retire_missing`` (the mapping then being the whole corpus), a candidate whose document
        — or, for unanswerable ones, source document — is absent is retired as
        ``document_removed`` / ``source_document_removed``. Returns how many were retired.
        """
        qc = t.qa_candidates
        now = utcnow()
        active = qc.c.status.in_(_statuses(ACTIVE_STATUSES))
        query = select(
            qc.c.candidate_id, qc.c.doc_id, qc.c.doc_content_hash, qc.c.source_doc_id
        ).where(qc.c.corpus == corpus, active)
        retired = 0
        with write_transaction(self.engine) as conn:
            by_reason: dict[str, list[str]] = {}
            for row in conn.execute(query):
                reason = _stale_reason(row, current_doc_hashes, retire_missing)
                if reason is not None:
                    by_reason.setdefault(reason, []).append(row.candidate_id)
            for reason, ids in sorted(by_reason.items()):
                values = _retirement(now, reason, snapshot_id)
                for batch in batches(ids, BATCH_SIZE):
                    stmt = update(qc).where(qc.c.candidate_id.in_(batch), active).values(values)
                    retired += conn.execute(stmt).rowcount
        return retired

    # -- versions --------------------------------------------------------------------------

    def create_version(
        self,
        corpus: str,
        snapshot_id: str,
        candidate_ids_in_order: Sequence[str],
        *,
        parent_version: str | None,
        run_id: str,
        seed: int,
        params: Mapping[str, Any],
        counts: Mapping[str, Any],
    ) -> str:
        """Publish an immutable QA set version and return its id (see :func:`version_id_for`).

        Items are stored with their position and :func:`qid_for` question id. When the version
        already exists this is a no-op that returns it unchanged (its first-written order, snapshot
        and params stand). Every candidate must exist, belong to ``corpus`` and be ACCEPTED, and
        ``parent_version`` (if given) must exist; ValueError / KeyError otherwise.
        """
        ids = list(candidate_ids_in_order)
        _check_item_ids(ids)
        version = version_id_for(corpus, ids, seed)
        with write_transaction(self.engine) as conn:
            if _version_row(conn, version) is not None:
                return version
            _check_version_candidates(conn, corpus, ids)
            if parent_version is not None and _version_row(conn, parent_version) is None:
                raise KeyError(f"parent version {parent_version!r} does not exist")
            row = {
                "version": version,
                "corpus": corpus,
                "snapshot_id": snapshot_id,
                "parent_version": parent_version,
                "created_at": utcnow(),
                "run_id": run_id,
                "seed": int(seed),
                "params": dict(params),
                "counts": dict(counts),
                "n_items": len(ids),
                "artifact_uri": None,
            }
            items = [
                {"version": version, "candidate_id": cid, "qid": qid_for(cid), "position": pos}
                for pos, cid in enumerate(ids)
            ]
            upsert(conn, t.qa_sets, [row], ["version"], [])
            upsert(conn, t.qa_set_items, items, ["version", "candidate_id"], [])
        return version

    def get_version(self, version: str) -> Row | None:
        """The qa_sets row of ``version``, or None."""
        with self.engine.connect() as conn:
            return _version_row(conn, version)

    def latest_version(self, corpus: str) -> Row | None:
        """The most recently created version of ``corpus``, or None."""
        versions = self._versions(corpus, limit=1)
        return versions[0] if versions else None

    def list_versions(self, corpus: str) -> list[Row]:
        """Every version of ``corpus``, newest first."""
        return self._versions(corpus, limit=None)

    def version_items(self, version: str) -> list[QACandidate]:
        """The candidates of ``version`` in position order (their qids: :meth:`version_qids`).

        Candidates come back with their current status, which is RETIRED when their source text
        has changed since; the version itself never changes. KeyError for an unknown version.
        """
        qc, qi = t.qa_candidates, t.qa_set_items
        query = (
            select(qc)
            .join(qi, qi.c.candidate_id == qc.c.candidate_id)
            .where(qi.c.version == version)
            .order_by(qi.c.position)
        )
        with self.engine.connect() as conn:
            if _version_row(conn, version) is None:
                raise KeyError(f"no QA set version {version!r}")
            return [_candidate_from_row(r) for r in conn.execute(query).mappings()]

    def version_qids(self, version: str) -> dict[str, str]:
        """candidate_id -> qid for the items of ``version``, in position order."""
        qi = t.qa_set_items
        query = (
            select(qi.c.candidate_id, qi.c.qid)
            .where(qi.c.version == version)
            .order_by(qi.c.position)
        )
        with self.engine.connect() as conn:
            return {r.candidate_id: r.qid for r in conn.execute(query)}

    def set_artifact_uri(self, version: str, artifact_uri: str) -> None:
        """Record where ``version`` was exported (the only mutable field); KeyError if unknown."""
        qs = t.qa_sets
        stmt = update(qs).where(qs.c.version == version).values(artifact_uri=artifact_uri)
        with write_transaction(self.engine) as conn:
            if conn.execute(stmt).rowcount == 0:
                raise KeyError(f"no QA set version {version!r}")

    def _versions(self, corpus: str, limit: int | None) -> list[Row]:
        qs = t.qa_sets
        query = (
            select(qs)
            .where(qs.c.corpus == corpus)
            .order_by(qs.c.created_at.desc(), qs.c.version.desc())
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [as_dict(r) for r in conn.execute(query).mappings()]


# -- helpers -------------------------------------------------------------------------------


def _check_candidate(cand: QACandidate, corpus: str) -> None:
    """Reject candidates of another corpus and unknown statuses before anything is written."""
    if cand.context.corpus != corpus:
        raise ValueError(
            f"candidate {cand.candidate_id} belongs to corpus {cand.context.corpus!r}, "
            f"not {corpus!r}"
        )
    CandidateStatus(cand.status)  # ValueError for an unknown status


def _columns_except(excluded: set[str]) -> list[str]:
    return [c.name for c in t.qa_candidates.columns if c.name not in excluded]


def _source_doc_ids(
    conn: Connection, corpus: str, candidates: Sequence[QACandidate]
) -> dict[str, str]:
    """source_chunk_id -> doc_id for the candidates' source chunks present in the chunks table."""
    wanted = list(dict.fromkeys(c.source_chunk_id for c in candidates if c.source_chunk_id))
    ch = t.chunks
    out: dict[str, str] = {}
    for batch in batches(wanted, BATCH_SIZE):
        query = select(ch.c.chunk_id, ch.c.doc_id).where(
            ch.c.corpus == corpus, ch.c.chunk_id.in_(batch)
        )
        out.update({r.chunk_id: r.doc_id for r in conn.execute(query)})
    return out


def _candidate_row(cand: QACandidate, run_id: str, now: Any, source_docs: Mapping[str, str]) -> Row:
    """The qa_candidates row for one candidate (retirement columns NULL)."""
    ctx = cand.context
    source_doc = None
    if cand.source_chunk_id:
        source_doc = source_docs.get(cand.source_chunk_id) or doc_id_from_chunk_id(
            cand.source_chunk_id
        )
    return {
        "candidate_id": cand.candidate_id,
        "corpus": ctx.corpus,
        "snapshot_id": ctx.snapshot_id,
        "doc_id": ctx.doc_id,
        "doc_content_hash": ctx.doc_content_hash,
        "chunk_id": ctx.chunk_id,
        "chunk_hash": ctx.chunk_hash,
        "context_text": ctx.text,
        "context_headings": list(ctx.headings),
        "statement_kind": cand.statement_kind,
        "requested_label": cand.requested_label,
        "theme": cand.theme,
        "statement": cand.statement,
        "question": cand.question,
        "answer": cand.answer,
        "source_chunk_id": cand.source_chunk_id,
        "source_doc_id": source_doc,
        "observed_label": cand.observed_label,
        "label_reason": cand.label_reason,
        "label_source": cand.label_source,
        "label_judge": cand.label_judge,
        "critiques": _json_safe(cand.critiques),
        "status": CandidateStatus(cand.status).value,
        "reject_reason": cand.reject_reason,
        "failure_cause": cand.failure_cause,
        "raw_outputs": list(cand.raw_outputs),
        "generator": _json_safe(cand.generator),
        "run_id": run_id,
        "created_at": now,
        "retired_at": None,
        "retired_reason": None,
        "retired_snapshot_id": None,
    }


def _json_safe(value: Any) -> Any:
    """A JSON round trip, so stored values equal what is read back (tuples become lists)."""
    return json.loads(json.dumps(value, default=str))


def _stamp_retirement(conn: Connection, candidate_ids: Sequence[str], now: Any) -> None:
    """Give retired-on-upsert candidates without a retirement record one."""
    qc = t.qa_candidates
    for batch in batches(list(candidate_ids), BATCH_SIZE):
        conn.execute(
            update(qc)
            .where(qc.c.candidate_id.in_(batch), qc.c.retired_at.is_(None))
            .values(retired_at=now, retired_reason=_RETIRED_AT_UPSERT)
        )


def _candidate_from_row(row: RowMapping | Mapping[str, Any]) -> QACandidate:
    """Rebuild a :class:`QACandidate` (with its :class:`Context`) from a qa_candidates row."""
    context = Context(
        corpus=row["corpus"],
        snapshot_id=row["snapshot_id"],
        doc_id=row["doc_id"],
        doc_content_hash=row["doc_content_hash"],
        chunk_id=row["chunk_id"],
        chunk_hash=row["chunk_hash"],
        text=row["context_text"],
        headings=tuple(row["context_headings"] or ()),
    )
    return QACandidate(
        candidate_id=row["candidate_id"],
        context=context,
        statement_kind=row["statement_kind"],
        requested_label=row["requested_label"],
        theme=row["theme"],
        statement=row["statement"],
        question=row["question"],
        answer=row["answer"],
        source_chunk_id=row["source_chunk_id"],
        observed_label=row["observed_label"],
        label_reason=row["label_reason"],
        label_source=row.get("label_source"),
        label_judge=row.get("label_judge"),
        critiques=dict(row["critiques"] or {}),
        status=CandidateStatus(row["status"]),
        reject_reason=row["reject_reason"],
        failure_cause=row["failure_cause"],
        raw_outputs=list(row["raw_outputs"] or []),
        generator=dict(row["generator"] or {}),
    )


def _statuses(status: CandidateStatus | str | Iterable[CandidateStatus | str]) -> list[str]:
    """One status or several, as validated plain strings."""
    if isinstance(status, str):
        status = [status]
    return [CandidateStatus(s).value for s in status]


def _retirement(now: Any, reason: str, snapshot_id: str) -> JsonObject:
    return {
        "status": CandidateStatus.RETIRED.value,
        "retired_at": now,
        "retired_reason": reason,
        "retired_snapshot_id": snapshot_id,
    }


def _stale_reason(row: Any, current: Mapping[str, str], retire_missing: bool) -> str | None:
    """Why a candidate row is stale given the current doc hashes, or None if it is current."""
    current_hash = current.get(row.doc_id)
    if current_hash is None:
        return DOCUMENT_REMOVED if retire_missing else None
    if current_hash != row.doc_content_hash:
        return DOCUMENT_UPDATED
    if retire_missing and row.source_doc_id is not None and row.source_doc_id not in current:
        return SOURCE_DOCUMENT_REMOVED
    return None


def _check_item_ids(ids: Sequence[str]) -> None:
    if not ids:
        raise ValueError("a QA set version needs at least one item")
    if len(set(ids)) != len(ids):
        dupes = sorted(i for i, n in Counter(ids).items() if n > 1)
        raise ValueError(f"duplicate candidate ids in version: {dupes[:5]}")
    qids = {qid_for(i) for i in ids}
    if len(qids) != len(ids):
        raise ValueError("candidate ids collide on their qid prefix; ids must differ early")


def _check_version_candidates(conn: Connection, corpus: str, ids: Sequence[str]) -> None:
    """Every id must be an ACCEPTED candidate of ``corpus``."""
    qc = t.qa_candidates
    found: dict[str, tuple[str, str]] = {}
    for batch in batches(list(ids), BATCH_SIZE):
        query = select(qc.c.candidate_id, qc.c.corpus, qc.c.status).where(
            qc.c.candidate_id.in_(batch)
        )
        found.update({r.candidate_id: (r.corpus, r.status) for r in conn.execute(query)})
    missing = [i for i in ids if i not in found]
    if missing:
        raise KeyError(f"{len(missing)} unknown candidate ids, e.g. {missing[:5]}")
    foreign = [i for i in ids if found[i][0] != corpus]
    if foreign:
        raise ValueError(f"candidates of another corpus: {foreign[:5]}")
    not_accepted = [i for i in ids if found[i][1] != CandidateStatus.ACCEPTED.value]
    if not_accepted:
        raise ValueError(f"{len(not_accepted)} candidates are not accepted: {not_accepted[:5]}")


def _version_row(conn: Connection, version: str) -> Row | None:
    qs = t.qa_sets
    row = conn.execute(select(qs).where(qs.c.version == version)).mappings().first()
    return as_dict(row) if row is not None else None


__all__ = [
    "ACTIVE_STATUSES",
    "DOCUMENT_REMOVED",
    "DOCUMENT_UPDATED",
    "SOURCE_DOCUMENT_REMOVED",
    "TestSetStore",
    "doc_id_from_chunk_id",
    "qid_for",
    "version_id_for",
]
