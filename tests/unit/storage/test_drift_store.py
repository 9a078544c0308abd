"""Baselines, stored decisions and whole drift checks on SQLite and PostgreSQL."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import Engine

from ragtrail import jsonsafe
from ragtrail.config import DriftSettings
from ragtrail.evaluate.comparison.drift_decision import PrimaryMetric
from ragtrail.evaluation_records import QueryValue
from ragtrail.pipeline.drift.step import (
    INCOMPARABLE,
    DriftCheckError,
    check_run,
    registered_primary_metrics,
    runs_to_check,
)
from ragtrail.pipeline.drift.views import drift_history
from ragtrail.records import QAItem
from ragtrail.stats.intervals import wilson_interval
from ragtrail.storage.corpus_store import CorpusStore
from ragtrail.storage.db import upgrade
from ragtrail.storage.document_store import DocumentStore
from ragtrail.storage.drift_store import (
    CHAMPION,
    CHECKED,
    FIRST,
    NO_BASELINE,
    PINNED,
    BaselineError,
    DriftStore,
)
from ragtrail.storage.runs_store import RunStore
from ragtrail.testset.golden import GoldenSetStore

CORPUS = "hb"
PRIMARIES = {"citations": PrimaryMetric("citations", "citation_f1", True)}
SETTINGS = DriftSettings(n_resamples=2000)


@pytest.fixture
def db(engine: Engine) -> Engine:
    upgrade(engine)
    return engine


def _run(
    engine: Engine,
    run_id: str,
    per_q: list[float] | None,
    *,
    version: str = "gs-1",
    snapshot: str = "s1",
    status: str | None = "success",
    name: str | None = None,
) -> None:
    runs = RunStore(engine)
    params = {"corpus": CORPUS, "snapshot_id": snapshot, "qa_set_version": version}
    runs.start_run(run_id, "evaluate_retrieval", {**params, "qa_set_name": name})
    if per_q is not None:
        values = [
            QueryValue(f"q{i}", {"mixture": "m1"}, "citation_f1", v) for i, v in enumerate(per_q)
        ]
        runs.replace_query_results(run_id, "citations", values)
    if status is not None:
        runs.finish_run(run_id, status)


def _check(engine: Engine, run_id: str):
    return check_run(engine, run_id, SETTINGS, corpus=CORPUS, primaries=PRIMARIES)


def test_first_night_has_no_baseline_and_the_decision_is_stored(db: Engine) -> None:
    _run(db, "n1", [1.0] * 10, status=None)
    decision = _check(db, "n1")
    assert (decision.status, decision.fired, decision.baseline_run_id) == (NO_BASELINE, False, None)
    assert decision.evidence.undefined["baseline"].startswith("no pinned baseline")
    assert DriftStore(db).decisions(corpus=CORPUS) == [decision]


def test_the_first_finished_run_is_the_baseline_and_a_drop_fires_once(db: Engine) -> None:
    _run(db, "n1", [1.0] * 10)
    _run(db, "n2", [1.0] * 10, status="failed_quality")  # not successful: never a baseline
    _run(db, "n3", [0.0] * 10, status=None)
    decision = _check(db, "n3")
    assert (decision.status, decision.baseline_run_id, decision.baseline_kind) == (
        CHECKED,
        "n1",
        FIRST,
    )
    assert decision.fired and decision.evidence.drifted == ["citations:citation_f1 [mixture=m1]"]
    (row,) = decision.evidence.rows
    assert (row.baseline, row.current, row.diff) == (1.0, 0.0, -1.0)
    assert row.p_holm == pytest.approx(2 / 1024) and row.direction == "worse"
    drift = decision.evidence.corpus_drift  # the snapshot has no documents: no shares
    assert drift is not None
    assert drift.changed_share is None and "no documents" in drift.undefined["changed_share"]
    jsonsafe.dumps(decision.evidence.to_json(), "evidence")  # strict JSON
    again = _check(db, "n3")
    assert again.decision_id == decision.decision_id
    stored = DriftStore(db).decisions(run_id="n3")
    assert len(stored) == 1 and stored[0].fired and stored[0].evidence == decision.evidence


def test_pinned_beats_champion_beats_first(db: Engine) -> None:
    for run_id in ("r1", "r2", "r3"):
        _run(db, run_id, [1.0] * 10)
    _run(db, "now", [1.0] * 10, status=None)
    store = DriftStore(db)
    assert _check(db, "now").baseline_run_id == "r1"
    champion = store.record_champion_baseline(CORPUS, "r2", "citation-answerer", "3")
    assert (champion.kind, champion.qa_set_version, champion.model_version) == (
        CHAMPION,
        "gs-1",
        "3",
    )
    assert (_check(db, "now").baseline_run_id, _check(db, "now").baseline_kind) == ("r2", CHAMPION)
    store.pin("r3", note="after the reindex")
    pinned = _check(db, "now")
    assert (pinned.baseline_run_id, pinned.baseline_kind) == ("r3", PINNED)
    assert {b.kind: b.run_id for b in store.baselines(CORPUS)} == {CHAMPION: "r2", PINNED: "r3"}
    store.pin("r1")  # a new pin replaces the old one
    assert [b.run_id for b in store.baselines(CORPUS) if b.kind == PINNED] == ["r1"]
    assert store.unpin("r1") == 1 and store.unpin("r1") == 0
    assert _check(db, "now").baseline_kind == CHAMPION
    # One decision per (run, baseline): r1, r2 and r3 were checked against, three rows.
    assert len(store.decisions(run_id="now")) == 3


def test_a_baseline_is_refused_with_every_reason(db: Engine) -> None:
    store = DriftStore(db)
    with pytest.raises(BaselineError, match="no run 'nope'"):
        store.pin("nope")
    RunStore(db).start_run("bare", "evaluate_retrieval", {})
    with pytest.raises(BaselineError) as err:
        store.pin("bare")
    for part in ("no corpus", "no QA-set version", "has not finished"):
        assert part in str(err.value)
    _run(db, "r1", [1.0])
    with pytest.raises(BaselineError, match="not 'other'"):
        store.record_champion_baseline("other", "r1", "m", "1")


def test_corpus_drift_and_a_retired_golden_item_are_evidence_not_triggers(db: Engine) -> None:
    corpora, docs = CorpusStore(db), DocumentStore(db)
    for snapshot in ("s1", "s2"):
        corpora.start_snapshot(snapshot, CORPUS, "src", None, "emb", "embedded", None)
    docs.record_snapshot_documents(
        "s1",
        [
            {"doc_id": d, "change": "added", "content_hash": h, "version": 1}
            for d, h in (("a", "ha"), ("b", "hb"), ("c", "hc"), ("d", "hd"))
        ],
    )
    docs.record_snapshot_documents(
        "s2",
        [
            {"doc_id": "a", "change": "updated", "content_hash": "ha2", "version": 2},
            {"doc_id": "b", "change": "unchanged", "content_hash": "hb", "version": 1},
            {"doc_id": "c", "change": "removed", "content_hash": None, "version": None},
            {"doc_id": "d", "change": "unchanged", "content_hash": "hd", "version": 1},
            {"doc_id": "e", "change": "added", "content_hash": "he", "version": 1},
        ],
    )
    items = [
        QAItem("q1", "What is a?", "fact_single", "a", ground_doc_ids=("a",)),
        QAItem("q2", "What is c?", "fact_single", "c", ground_doc_ids=("c",)),
    ]
    version = GoldenSetStore(db).add(CORPUS, "gold", items, source="test").version.version
    _run(db, "n1", [1.0] * 10, version=version, snapshot="s1")
    _run(db, "n2", [1.0] * 10, version=version, snapshot="s2", status=None)
    decision = _check(db, "n2")
    drift = decision.evidence.corpus_drift
    assert drift is not None
    assert (drift.added, drift.updated, drift.removed, drift.unchanged) == (1, 1, 1, 2)
    assert (drift.added_share, drift.removed_share, drift.changed_share) == (0.25, 0.25, 0.75)
    qa = decision.evidence.qa_set
    assert (qa.kind, qa.n_items, qa.n_retired, qa.retired) == ("golden", 2, 1, True)
    assert qa.reasons == {"ground_document_removed": 1}
    assert not decision.fired  # the metric did not move


def test_runs_that_cannot_be_paired_are_a_stored_non_decision(db: Engine) -> None:
    _run(db, "n1", None)  # finished, but no per-query values
    _run(db, "n2", [1.0] * 10, status=None)
    decision = _check(db, "n2")
    assert (decision.status, decision.fired) == (INCOMPARABLE, False)
    assert "no per-query results" in decision.evidence.undefined["rows"]


def test_runs_to_check_picks_the_newest_night_or_the_named_one(db: Engine) -> None:
    _run(db, "lone", [1.0])
    for night in ("night-1", "night-2"):
        for name in ("gold", "generated"):
            _run(db, f"{night}.{name}", [1.0], name=name)
    assert runs_to_check(db, CORPUS) == ["night-2.generated", "night-2.gold"]
    assert runs_to_check(db, CORPUS, "night-1") == ["night-1.generated", "night-1.gold"]
    assert runs_to_check(db, CORPUS, "lone") == ["lone"]
    with pytest.raises(DriftCheckError, match="no evaluation run or night 'x'"):
        runs_to_check(db, CORPUS, "x")
    with pytest.raises(DriftCheckError, match="not 'other'"):
        check_run(db, "lone", SETTINGS, corpus="other", primaries=PRIMARIES)


def test_the_watched_metrics_come_from_the_evaluator_registry() -> None:
    primaries = registered_primary_metrics()
    assert primaries["retrieval"] == PrimaryMetric("retrieval", "recall@5", True)
    assert primaries["citations"] == PrimaryMetric("citations", "citation_f1", True)
    assert primaries["cah"] == PrimaryMetric("cah", "hallucination_rate", False)


def test_history_plots_the_pooled_cell_the_check_compared(db: Engine) -> None:
    """Per-question values carry real labels only; the check pools them into label=inclusive,
    and the history must show that same cell (no stored aggregate has it under that name)."""
    runs = RunStore(db)
    for run_id, scores in (("n1", [1.0, 1.0, 0.0, 1.0, 1.0, 1.0]), ("n2", [0.0] * 6)):
        runs.start_run(run_id, "evaluate_retrieval", {"corpus": CORPUS, "qa_set_version": "gs-1"})
        labels = ["fact_single", "summary"] * 3
        runs.replace_query_results(
            run_id,
            "citations",
            [
                QueryValue(f"q{i}", {"label": label, "mixture": "m1"}, "citation_f1", v)
                for i, (label, v) in enumerate(zip(labels, scores, strict=True))
            ],
        )
        runs.finish_run(run_id, "success")
    decision = _check(db, "n2")
    history = drift_history(db, decision)
    points = history["citations:citation_f1 [label=inclusive, mixture=m1]"]
    assert [p.run_id for p in points] == ["n1", "n2"]
    assert [p.value for p in points] == [pytest.approx(5 / 6), 0.0]
    assert points[0].ci_low is not None and points[0].ci_high is not None
    assert points[0].ci_low <= 5 / 6 <= points[0].ci_high
    # six zeros are 0/1 outcomes: the Wilson interval of 0 in 6, never [0, 0]
    assert points[1].ci_method == "wilson" and points[1].n == 6
    assert (points[1].ci_low, points[1].ci_high) == pytest.approx(wilson_interval(0, 6))


def test_runs_that_did_not_complete_are_never_checked_or_baselines(db: Engine) -> None:
    runs, store = RunStore(db), DriftStore(db)
    _run(db, "n1", [1.0] * 10)  # complete: the first baseline
    _run(db, "n1b", [1.0] * 10)
    _run(db, "failed", [0.0] * 10, status=None)
    assert runs.fail_run("failed", "citation evaluation failed: 6 of 6 answers failed")
    _run(db, "killed", [0.0] * 10, status=None)
    assert runs.fail_run("killed", "its process (pid 7 on host h) is gone", status="abandoned")
    _run(db, "now", [1.0] * 10, status=None)
    for run_id, state in (("failed", "failed (citation"), ("killed", "abandoned (its process")):
        with pytest.raises(DriftCheckError, match=rf"run '{run_id}' {re.escape(state)}"):
            _check(db, run_id)
        with pytest.raises(BaselineError, match=rf"did not complete: {re.escape(state)}"):
            store.pin(run_id)
        with pytest.raises(BaselineError, match="did not complete"):
            store.record_champion_baseline(CORPUS, run_id, "m", "1")
    # a pin whose run has failed since is passed over: the first complete run is the baseline
    store.pin("n1")
    runs.claim_run("n1", None)
    runs.fail_run("n1", "a retried step failed")
    decision = _check(db, "now")
    assert (decision.baseline_run_id, decision.baseline_kind) == ("n1b", FIRST)


def test_runs_to_check_refuses_a_night_that_did_not_complete(db: Engine) -> None:
    for name in ("gold", "generated"):
        _run(db, f"night-1.{name}", [1.0], name=name)
    _run(db, "night-2.gold", [1.0], name="gold")
    _run(db, "night-2.generated", [1.0], name="generated", status=None)  # still running
    with pytest.raises(DriftCheckError, match=r"run 'night-2.generated' still running \("):
        runs_to_check(db, CORPUS)
    assert runs_to_check(db, CORPUS, "night-1") == ["night-1.generated", "night-1.gold"]
    RunStore(db).fail_run("night-2.generated", "sufficiency evaluation failed: ...")
    with pytest.raises(DriftCheckError, match=r"failed .*complete runs only"):
        runs_to_check(db, CORPUS, "night-2")
