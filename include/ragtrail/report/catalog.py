"""What an installation has published, for a browser: corpora, their nights with the headline
metrics, and the published files themselves (read-only).

A *report* is what :func:`ragtrail.pipeline.publish.publish_sets` uploads under
``runs/<report id>/report/`` (the HTML report, its plots, ``metrics.json`` and the GX Data Docs
under ``data_docs/``): one per night (its sets' runs are ``<night>.<set name>``) or one per lone
``ragtrail eval retrieval`` run. Publishing records the report on every set's run
(``runs.report_uri``, the report's path in the publishing process's
``$RAGTRAIL_HOME/reports/<report id>/``), so the metadata database lists the reports of a corpus
in one query; the headline metrics are read back from the report's own ``metrics.json`` (a night's
:class:`~ragtrail.summaries.night_summary.NightDocument`, or a lone run's
:class:`~ragtrail.summaries.retrieval_summary.RetrievalSummary`): what the report shows.

Files are resolved to a key of the artifact store (local folder or S3) and only inside two kinds of
prefix: a report's ``runs/<report id>/report/`` and a corpus snapshot's checks
``corpora/<corpus>/snapshots/<snapshot>/quality/data_docs/``. Anything else (``..``, absolute
paths, backslashes, a key outside those prefixes) is refused with :class:`RefusedPath`; a file
that is not there is :class:`NotPublished`.
"""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import PurePosixPath, PureWindowsPath
from typing import Final, Protocol

from pydantic import ValidationError
from sqlalchemy import Engine, select

from ragtrail.artifact_keys import corpus_quality_prefix, report_prefix
from ragtrail.records import INCLUSIVE, SetKind
from ragtrail.redact import redact
from ragtrail.report.html import DATA_DOCS_INDEX, REPORT_FILE
from ragtrail.storage import tables as t
from ragtrail.storage.artifacts import ArtifactStore, normalize_key
from ragtrail.storage.sql import utc
from ragtrail.summaries.night_summary import NightDocument, PublishedSet
from ragtrail.summaries.retrieval_summary import BestRow, RetrievalSummary

METRICS_FILE: Final = "metrics.json"
"""The report's own document, uploaded with it (see the module docstring)."""
DATA_DOCS_DIR: Final = PurePosixPath(DATA_DOCS_INDEX).parent.as_posix()
DEFAULT_NIGHTS: Final = 30
"""Nights a corpus page shows unless asked for more (each one is one read of the store)."""
READERS: Final = 8
"""Nights' documents read at once."""


class Stores(Protocol):
    """What the catalog reads: the artifact store and the metadata database (a
    :class:`~ragtrail.runtime.Runtime` is one)."""

    @property
    def artifacts(self) -> ArtifactStore: ...

    @property
    def engine(self) -> Engine: ...


class CatalogError(Exception):
    """A request the catalog cannot serve; the message says why (shown to the user)."""


class RefusedPath(CatalogError, ValueError):
    """A path that would leave the report or Data Docs prefix it was asked under."""


class NotPublished(CatalogError, LookupError):
    """No such corpus, report or file."""


@dataclass(frozen=True)
class ServedFile:
    """A published file: its store key, bytes and HTTP content type."""

    key: str
    data: bytes
    media_type: str


@dataclass(frozen=True)
class SetHeadline:
    """One QA set of a report: its run, QA-set version, size and its best strategy over all
    labels (the ``inclusive`` label's row: best value of the primary metric, its interval and
    weight; None when the set has no such row)."""

    name: str
    run_id: str
    kind: SetKind | None
    qa_set_version: str
    n_questions: int
    primary_metric: str
    overall: BestRow | None


@dataclass(frozen=True)
class Night:
    """One published report of a corpus (a night, or a lone run): when its runs started, their
    statuses, the snapshot, and each set's headline; ``problem`` says why the headlines could
    not be read (the report is still listed and linked)."""

    report_id: str
    corpus: str
    started_at: datetime
    statuses: tuple[str, ...]
    snapshot_id: str | None
    sets: tuple[SetHeadline, ...] = ()
    problem: str | None = None


@dataclass(frozen=True)
class CorpusReports:
    """A corpus with published reports: how many, and when the newest one's runs started."""

    corpus: str
    reports: int
    newest: datetime


@dataclass(frozen=True)
class NightListing:
    """The newest nights of a corpus (newest first) and how many it has in all."""

    corpus: str
    nights: tuple[Night, ...]
    total: int


@dataclass(frozen=True)
class _PublishedRun:
    run_id: str
    corpus: str
    status: str
    started_at: datetime
    snapshot_id: str | None
    report_id: str


class ReportCatalog:
    """Lists the published reports of the metadata database and resolves their files in the
    artifact store. Reads only: runs left running are shown as the database has them."""

    def __init__(self, stores: Stores) -> None:
        self._stores = stores

    @property
    def source(self) -> str:
        """Where the files come from, for the pages' footer (credentials redacted)."""
        return redact(self._stores.artifacts.uri)

    def corpora(self) -> list[CorpusReports]:
        """Every corpus with at least one published report, by name."""
        grouped: dict[str, dict[str, datetime]] = {}
        for run in self._published_runs(None):
            newest = grouped.setdefault(run.corpus, {})
            newest[run.report_id] = max(newest.get(run.report_id, run.started_at), run.started_at)
        return [
            CorpusReports(corpus, len(reports), max(reports.values()))
            for corpus, reports in sorted(grouped.items())
        ]

    def nights(self, corpus: str, limit: int = DEFAULT_NIGHTS) -> NightListing:
        """The ``limit`` newest reports of ``corpus`` with their headlines (one read of the
        store each, :data:`READERS` at a time); NotPublished for a corpus without any."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        groups: dict[str, list[_PublishedRun]] = {}
        for run in self._published_runs(corpus):
            groups.setdefault(run.report_id, []).append(run)
        if not groups:
            raise NotPublished(f"corpus {corpus!r} has no published report")
        ordered = sorted(groups.items(), key=lambda kv: _started(kv[1]), reverse=True)[:limit]
        # one read per night: in parallel, which is what a remote store (S3) needs
        with ThreadPoolExecutor(max_workers=min(READERS, len(ordered))) as pool:
            nights = tuple(pool.map(lambda kv: self._night(*kv), ordered))
        return NightListing(corpus=corpus, nights=nights, total=len(groups))

    def report_file(self, report_id: str, path: str = REPORT_FILE) -> ServedFile:
        """A file of the report ``report_id`` (``report.html``, a plot, ``data_docs/...``)."""
        prefix = report_prefix(_segment(report_id, "report id"))
        return self._serve(prefix, path or REPORT_FILE)

    def corpus_checks_file(self, corpus: str, snapshot_id: str, path: str = "") -> ServedFile:
        """A file of the Data Docs of a snapshot's corpus checks (made at ingest)."""
        snapshot = corpus_quality_prefix(
            _segment(corpus, "corpus"), _segment(snapshot_id, "snapshot id")
        )
        return self._serve(f"{snapshot}/{DATA_DOCS_DIR}", path or "index.html")

    # -- internals ---------------------------------------------------------------------------

    def _serve(self, prefix: str, path: str) -> ServedFile:
        key = confined_key(prefix, path)
        try:
            data = self._stores.artifacts.get_bytes(key)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise NotPublished(f"nothing is published at {key}") from None
        return ServedFile(key=key, data=data, media_type=media_type(key))

    def _published_runs(self, corpus: str | None) -> list[_PublishedRun]:
        """Runs whose report was published (publishing records its location), newest first."""
        r = t.runs
        query = select(
            r.c.run_id, r.c.corpus, r.c.status, r.c.started_at, r.c.snapshot_id, r.c.report_uri
        ).where(r.c.report_uri.is_not(None), r.c.corpus.is_not(None))
        if corpus is not None:
            query = query.where(r.c.corpus == corpus)
        with self._stores.engine.connect() as conn:
            rows = conn.execute(query.order_by(r.c.started_at.desc(), r.c.run_id)).all()
        return [
            _PublishedRun(
                run_id=row.run_id,
                corpus=row.corpus,
                status=row.status,
                started_at=utc(row.started_at),
                snapshot_id=row.snapshot_id,
                report_id=report_id_of(row.report_uri) or row.run_id,
            )
            for row in rows
        ]

    def _night(self, report_id: str, runs: Sequence[_PublishedRun]) -> Night:
        head = Night(
            report_id=report_id,
            corpus=runs[0].corpus,
            started_at=_started(runs),
            statuses=tuple(sorted({run.status for run in runs})),
            snapshot_id=next((run.snapshot_id for run in runs if run.snapshot_id), None),
        )
        key = f"{report_prefix(report_id)}/{METRICS_FILE}"
        try:
            document = json.loads(self._stores.artifacts.get_bytes(key))
            sets = _headlines(document)
        except FileNotFoundError:
            return replace(head, problem=f"{key} is missing")
        except (ValueError, ValidationError) as exc:  # JSONDecodeError is a ValueError
            return replace(head, problem=f"{key} is not a report document: {_first_line(exc)}")
        snapshot = document.get("snapshot_id") or head.snapshot_id
        return replace(head, sets=sets, snapshot_id=snapshot)


def _started(runs: Sequence[_PublishedRun]) -> datetime:
    return min(run.started_at for run in runs)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _headlines(document: object) -> tuple[SetHeadline, ...]:
    """Each set's headline from a report's ``metrics.json`` (a night's document of every set,
    or a lone run's retrieval summary)."""
    if not isinstance(document, dict):
        raise ValueError("the document is not a JSON object")
    if "sets" in document:
        night = NightDocument.from_json(document)
        return tuple(
            _headline(name, s, s.kind) for name, s in sorted(night.sets.items(), key=_set_order)
        )
    lone = RetrievalSummary.from_json(document)
    return (_headline(lone.qa_set_name or lone.qa_set, lone, None),)


def _set_order(item: tuple[str, PublishedSet]) -> tuple[bool, str]:
    """Golden sets first, by name, then the generated or file set (the order a night plans)."""
    name, published = item
    return (published.kind is not SetKind.GOLDEN, name)


def _headline(name: str, summary: RetrievalSummary, kind: SetKind | None) -> SetHeadline:
    return SetHeadline(
        name=name,
        run_id=summary.run_id,
        kind=kind,
        qa_set_version=summary.qa_set_version,
        n_questions=summary.n_questions,
        primary_metric=summary.primary_metric,
        overall=summary.best_of(INCLUSIVE),
    )


def report_id_of(report_uri: str) -> str | None:
    """The report a run's recorded location names: the folder of its ``report.html``
    (``.../reports/<report id>/report.html``, a POSIX or a Windows path); None for anything
    else."""
    for path in (PurePosixPath(report_uri), PureWindowsPath(report_uri)):
        if path.name == REPORT_FILE and path.parent.name:
            return path.parent.name
    return None


def _segment(value: str, what: str) -> str:
    """``value`` as one key segment (a corpus, report or snapshot id), else RefusedPath."""
    if not value or value in (".", "..") or any(c in value for c in "/\\\x00"):
        raise RefusedPath(f"{what} {value!r} is not a single name")
    return value


def confined_key(prefix: str, path: str) -> str:
    """The store key of the relative file ``path`` under ``prefix``; RefusedPath when ``path``
    is absolute, has an empty, ``.`` or ``..`` segment or a backslash, or would name a key
    outside ``prefix``."""
    parts = path.split("/")
    if "\\" in path or "\x00" in path or any(part in ("", ".", "..") for part in parts):
        raise RefusedPath(f"{path!r} is not a file path inside {prefix}/")
    try:
        key = normalize_key(f"{prefix}/{path}")
    except ValueError as exc:
        raise RefusedPath(str(exc)) from None
    if not key.startswith(f"{prefix}/"):
        raise RefusedPath(f"{path!r} leaves {prefix}/")
    return key


def media_type(key: str) -> str:
    """The HTTP content type of a stored file, by its name (text as UTF-8)."""
    guessed, _ = mimetypes.guess_type(key)
    if guessed is None:
        return "application/octet-stream"
    if guessed.startswith("text/") or guessed in ("application/json", "image/svg+xml"):
        return f"{guessed}; charset=utf-8"
    return guessed
