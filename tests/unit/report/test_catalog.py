"""The published-reports catalog: corpora and nights from the metadata database, headlines from
each report's metrics.json, files confined to the report and Data Docs prefixes; on a local
artifact folder and on S3 (moto_server, when RAGTRAIL_TEST_S3_ENDPOINT is set). The index pages
escape what they show and link to the routes they define. One test publishes for real
(:func:`publish_sets`, GX included) and finds the night and its files."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urljoin

import pytest

from ragtrail.config import load_settings
from ragtrail.records import SetKind
from ragtrail.report.catalog import (
    NotPublished,
    RefusedPath,
    ReportCatalog,
    confined_key,
    media_type,
    report_id_of,
)
from ragtrail.report.catalog_pages import (
    history_series,
    render_corpus,
    render_index,
    render_problem,
)
from ragtrail.runtime import Runtime
from tests.unit.report._published import (
    SNAPSHOT,
    publish_corpus_checks,
    publish_lone_run,
    publish_night,
)

S3_SKIP = "moto_server not configured: set RAGTRAIL_TEST_S3_ENDPOINT (make test starts one)"


def _local(tmp_path: Path) -> Runtime:
    return Runtime(load_settings(home=tmp_path / "home"))


def _s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Runtime:
    endpoint = os.environ.get("RAGTRAIL_TEST_S3_ENDPOINT")
    if not endpoint:
        pytest.skip(S3_SKIP)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    bucket = f"rt-catalog-{uuid.uuid4().hex[:12]}"
    rt = Runtime(
        load_settings(
            home=tmp_path / "home",
            artifact_uri=f"s3://{bucket}/team/ragtrail",
            s3_endpoint_url=endpoint,
        )
    )
    rt.artifacts.client.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    return rt


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def rt(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Runtime]:
    runtime = _local(tmp_path) if request.param == "local" else _s3(tmp_path, monkeypatch)
    yield runtime
    runtime.close()


@pytest.fixture
def published(rt: Runtime) -> Runtime:
    """Three nights of handbook (two sets each, the newest failed a GX check), a lone run, and
    one night of another corpus."""
    publish_night(rt, "retrieval-n1", {"handbook-sample": 0.5, "generated": 0.3})
    publish_night(rt, "retrieval-n2", {"handbook-sample": 0.6, "generated": 0.4})
    publish_lone_run(rt, "eval-20250101T000000", 0.7)
    publish_night(
        rt, "retrieval-n3", {"handbook-sample": 0.8, "generated": 0.2}, status="failed_quality"
    )
    publish_night(rt, "retrieval-x1", {"golden": 0.9}, corpus="faq")
    publish_corpus_checks(rt)
    return rt


def test_corpora_and_nights_come_newest_first_with_their_headlines(published: Runtime) -> None:
    catalog = ReportCatalog(published)
    assert [(c.corpus, c.reports) for c in catalog.corpora()] == [("faq", 1), ("handbook", 4)]
    listing = catalog.nights("handbook")
    assert listing.total == 4
    assert [n.report_id for n in listing.nights] == [
        "retrieval-n3",
        "eval-20250101T000000",
        "retrieval-n2",
        "retrieval-n1",
    ]
    newest = listing.nights[0]
    assert newest.statuses == ("failed_quality",) and newest.snapshot_id == SNAPSHOT
    assert newest.problem is None
    # golden sets first, then the generated one; the headline is the inclusive best row
    assert [(s.name, s.kind) for s in newest.sets] == [
        ("handbook-sample", SetKind.GOLDEN),
        ("generated", SetKind.GENERATED),
    ]
    best = newest.sets[0].overall
    assert best is not None
    assert (best.best_recall, best.ci_low, best.ci_high, best.n_questions) == (0.8, 0.7, 0.9, 10)
    assert newest.sets[0].run_id == "retrieval-n3.handbook-sample"
    lone = listing.nights[1]
    assert [(s.name, s.kind, s.overall.best_recall) for s in lone.sets if s.overall] == [
        ("golden:v1", None, 0.7)
    ]
    assert [n.report_id for n in catalog.nights("handbook", limit=2).nights] == [
        "retrieval-n3",
        "eval-20250101T000000",
    ]


def test_an_unpublished_corpus_and_an_unreadable_document(published: Runtime) -> None:
    catalog = ReportCatalog(published)
    with pytest.raises(NotPublished, match="nope"):
        catalog.nights("nope")
    published.artifacts.put_bytes("runs/retrieval-n2/report/metrics.json", b"{not json")
    published.artifacts.delete_prefix("runs/retrieval-n1/report/metrics.json")
    nights = {n.report_id: n for n in catalog.nights("handbook").nights}
    assert nights["retrieval-n2"].sets == ()
    assert "not a report document" in (nights["retrieval-n2"].problem or "")
    assert "missing" in (nights["retrieval-n1"].problem or "")
    assert nights["retrieval-n3"].problem is None


def test_files_of_a_report_its_data_docs_and_the_corpus_checks(published: Runtime) -> None:
    catalog = ReportCatalog(published)
    page = catalog.report_file("retrieval-n2", "report.html")
    assert page.data == b"<html>report retrieval-n2</html>"
    assert page.media_type == "text/html; charset=utf-8"
    assert catalog.report_file("retrieval-n2", "").data == page.data  # the report by default
    plot = catalog.report_file("retrieval-n2", "recall_at_5_vs_text_weight.png")
    assert plot.media_type == "image/png"
    docs = catalog.report_file("retrieval-n2", "data_docs/index.html")
    assert docs.data == b"<html>data docs</html>"
    checks = catalog.corpus_checks_file("handbook", SNAPSHOT, "index.html")
    assert checks.data == b"<html>corpus checks</html>"
    assert checks.key == f"corpora/handbook/snapshots/{SNAPSHOT}/quality/data_docs/index.html"


def test_a_missing_report_or_file_is_not_published(published: Runtime) -> None:
    catalog = ReportCatalog(published)
    with pytest.raises(NotPublished):
        catalog.report_file("retrieval-n9", "report.html")
    with pytest.raises(NotPublished):
        catalog.report_file("retrieval-n2", "data_docs/nothing.html")
    with pytest.raises(NotPublished):
        catalog.corpus_checks_file("handbook", "snap-9", "index.html")


@pytest.mark.parametrize(
    "path",
    [
        "../metrics.json",
        "../../../corpora/handbook/snapshots/snap-1/manifest.json",
        "data_docs/../../metrics.json",
        "/etc/passwd",
        "./report.html",
        "data_docs//index.html",
        "..\\metrics.json",
        "report.html\x00",
    ],
)
def test_paths_that_leave_the_report_are_refused(published: Runtime, path: str) -> None:
    catalog = ReportCatalog(published)
    with pytest.raises(RefusedPath):
        catalog.report_file("retrieval-n2", path)
    with pytest.raises(RefusedPath):
        catalog.corpus_checks_file("handbook", SNAPSHOT, path)


@pytest.mark.parametrize("report_id", ["..", ".", "retrieval-n2/..", "a/b", "", "a\\b"])
def test_ids_that_are_not_one_name_are_refused(published: Runtime, report_id: str) -> None:
    catalog = ReportCatalog(published)
    with pytest.raises(RefusedPath):
        catalog.report_file(report_id, "report.html")
    with pytest.raises(RefusedPath):
        catalog.corpus_checks_file(report_id or "..", SNAPSHOT, "index.html")
    with pytest.raises(RefusedPath):
        catalog.corpus_checks_file("handbook", report_id, "index.html")


def test_confined_keys_and_media_types() -> None:
    assert confined_key("runs/r/report", "data_docs/a b.html") == "runs/r/report/data_docs/a b.html"
    with pytest.raises(RefusedPath, match=r"leave|not a file path"):
        confined_key("runs/r/report", "x/../../y")
    assert media_type("a/b.css") == "text/css; charset=utf-8"
    assert media_type("a/b.json") == "application/json; charset=utf-8"
    assert media_type("a/b.weird-thing") == "application/octet-stream"
    assert report_id_of("/home/x/.ragtrail/reports/retrieval-n1/report.html") == "retrieval-n1"
    assert report_id_of(r"C:\ragtrail\reports\night-2\report.html") == "night-2"
    assert report_id_of("s3://bucket/runs/r/report/other.html") is None


def _links(html: str) -> list[str]:
    return re.findall(r'href="([^"]+)"', html)


def test_pages_link_to_every_night_and_escape_what_they_show(published: Runtime) -> None:
    publish_night(published, "retrieval-<b>x", {"<script>alert(1)</script>": 0.5})
    catalog = ReportCatalog(published)
    index = render_index(catalog.corpora(), source=catalog.source)
    assert 'href="corpora/handbook"' in index and 'href="corpora/faq"' in index
    listing = catalog.nights("handbook")
    page = render_corpus(listing, source=catalog.source)
    assert "<script>" not in page and "<b>x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    base = "http://h/ragtrail/corpora/handbook"
    links = {urljoin(base, link) for link in _links(page)}
    assert "http://h/ragtrail/runs/retrieval-n2/report.html" in links
    assert "http://h/ragtrail/runs/retrieval-n2/data_docs/index.html" in links
    assert f"http://h/ragtrail/corpora/handbook/snapshots/{SNAPSHOT}/data_docs/index.html" in links
    assert "http://h/ragtrail/runs/retrieval-%3Cb%3Ex/report.html" in links
    assert "http://h/ragtrail/" in links  # back to the corpora
    assert "<svg" in page and page.count("<circle") == sum(len(n.sets) for n in listing.nights)
    assert "0.80" in page and "[0.700, 0.900]" in page  # the newest golden headline and its CI
    problem = render_problem("Not found", "<i>nothing</i> here", root="../../")
    assert "&lt;i&gt;nothing&lt;/i&gt;" in problem and 'href="../../"' in problem


def test_history_goes_oldest_left_one_line_per_set(published: Runtime) -> None:
    listing = ReportCatalog(published).nights("handbook")
    series = {s.name: s for s in history_series(listing.nights)}
    golden = series["handbook-sample"]
    # oldest first: 0.5, 0.6, (lone run: another set), 0.8 -> y falls as recall rises
    ys = [d.y for d in golden.dots]
    xs = [d.x for d in golden.dots]
    assert len(golden.dots) == 3 and xs == sorted(xs) and ys == sorted(ys, reverse=True)
    assert all(d.high <= d.y <= d.low for d in golden.dots)  # the interval spans the point
    assert "retrieval-n1" in golden.dots[0].title and "0.50 [0.40, 0.60]" in golden.dots[0].title
    assert set(series) == {"handbook-sample", "generated", "golden:v1"}


def test_a_real_publication_is_found_and_served(tmp_path: Path) -> None:
    """publish_sets (GX, the HTML report, metrics.json, the upload) on a hand-made stored run:
    the catalog lists it under its night and serves its report and Data Docs."""
    from ragtrail.artifact_keys import run_summary_key
    from ragtrail.pipeline.publish import SetToPublish, publish_sets
    from ragtrail.storage.runs_store import RunStore
    from tests.unit.report._published import retrieval_summary

    rt = _local(tmp_path)
    try:
        run = "night-7.golden"
        RunStore(rt.engine).start_run(run, "evaluate_retrieval", {}, corpus="handbook")
        summary = retrieval_summary(run, 0.6, corpus="handbook", name="golden")
        rt.artifacts.put_bytes(run_summary_key(run), summary.dumps().encode())
        publish_sets(
            rt, "night-7", [SetToPublish(run, name="golden", kind=SetKind.GOLDEN)], compare=False
        )
        catalog = ReportCatalog(rt)
        (night,) = catalog.nights("handbook").nights
        assert night.report_id == "night-7" and night.problem is None
        assert [(s.name, s.overall.best_recall) for s in night.sets if s.overall] == [
            ("golden", 0.6)
        ]
        assert b"ragtrail retrieval evaluation" in catalog.report_file("night-7").data
        docs = catalog.report_file("night-7", "data_docs/index.html")
        assert docs.media_type.startswith("text/html") and b"<html" in docs.data.lower()
    finally:
        rt.close()
