"""The golden sets' runs handed over to the night's evaluation (``evaluation_sets.hand_over``).

The ``evaluate_golden_sets`` flow evaluates the golden sets on the corpus event and hands their
runs over; the evaluation of the same snapshot, golden version and settings plans them as
``reused`` and its per-set steps skip them. Anything else (another snapshot, other text weights
or settings, a newer golden version, a run that failed since) is evaluated again. While the golden
evaluation still runs, the evaluation's plan waits for its hand-over, within
``retrieval.golden_wait_s`` of its start and while none of its runs failed.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta

import pytest

from ragtrail.paths import sample_corpus_dir, sample_qa_set
from ragtrail.pipeline.evaluation_sets import (
    POLL_S,
    await_golden_runs,
    golden_evaluation_started,
    golden_sets,
    hand_over,
    handed_over_runs,
    plan_sets,
)
from ragtrail.pipeline.golden import register_golden_set
from ragtrail.pipeline.night import INGEST, run_flow
from ragtrail.pipeline.run_io import run_owner
from ragtrail.storage.runs_store import RunStore

CORPUS = "hb"
SNAPSHOT = "snap-1"


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


@pytest.fixture
def rt(make_runtime, home, tmp_path):
    """The sample corpus ingested (a copy: on the shipped folder the ingest would register the
    sample set under its own name) and the sample set as its golden set ``handbook``."""
    rt = make_runtime(home=home)
    source = shutil.copytree(sample_corpus_dir(), tmp_path / "corpus")
    run_flow(rt, INGEST, INGEST.resolve({"corpus": CORPUS, "source": str(source)}, [], "i-1"))
    register_golden_set(rt, sample_qa_set(), corpus=CORPUS, name="handbook")
    return rt


def _handed_over(rt, weights=None, night: str = "golden-1") -> str:
    """The golden flow's run ``<night>.handbook`` started and handed over; its run id."""
    (planned,) = golden_sets(rt, CORPUS, night)
    RunStore(rt.engine).start_run(planned.run_id, "evaluate_retrieval", {}, owner=run_owner(rt))
    hand_over(rt, CORPUS, SNAPSHOT, [planned], weights)
    return planned.run_id


def test_the_evaluation_of_the_same_snapshot_reuses_the_handed_over_golden_run(rt):
    run_id = _handed_over(rt, [0.0, 0.5])
    reusable = handed_over_runs(rt, CORPUS, SNAPSHOT, [0.0, 0.5])
    (planned,) = plan_sets(rt, CORPUS, "night-1", None, reusable)
    assert (planned.name, planned.run_id, planned.reused) == ("handbook", run_id, True)
    # what the night would have evaluated itself: the same set and version, under its own run
    (own,) = plan_sets(rt, CORPUS, "night-1", None)
    assert (own.run_id, own.reused, own.qa_set) == ("night-1.handbook", False, planned.qa_set)


@pytest.mark.parametrize(
    "snapshot, weights",
    [("snap-2", [0.0, 0.5]), (SNAPSHOT, [0.0, 1.0]), (SNAPSHOT, None)],
    ids=["another snapshot", "other text weights", "default text weights"],
)
def test_another_snapshot_or_other_text_weights_evaluate_again(rt, snapshot, weights):
    _handed_over(rt, [0.0, 0.5])
    assert handed_over_runs(rt, CORPUS, snapshot, weights) == {}


def test_other_settings_evaluate_again(rt, make_runtime, home):
    _handed_over(rt)
    assert handed_over_runs(rt, CORPUS, SNAPSHOT, None)  # the same settings: reused
    other = make_runtime(home=home, citations={"max_items": 2})
    assert handed_over_runs(other, CORPUS, SNAPSHOT, None) == {}


def test_a_golden_run_that_failed_since_or_a_newer_version_is_evaluated_again(rt, tmp_path):
    run_id = _handed_over(rt)
    RunStore(rt.engine).fail_run(run_id, "the sufficiency step failed")
    assert handed_over_runs(rt, CORPUS, SNAPSHOT, None) == {}

    run_id = _handed_over(rt, night="golden-2")  # the golden flow ran again
    reusable = handed_over_runs(rt, CORPUS, SNAPSHOT, None)
    assert [p.run_id for p in reusable.values()] == [run_id]
    changed = tmp_path / "handbook.jsonl"  # the golden file changed: a new version
    changed.write_text("".join(sample_qa_set().read_text().splitlines(True)[:20]))
    register_golden_set(rt, changed, corpus=CORPUS, name="handbook")
    (planned,) = plan_sets(rt, CORPUS, "night-1", None, reusable)
    assert (planned.run_id, planned.reused) == ("night-1.handbook", False)


def test_the_retrieval_sufficiency_and_evidence_steps_skip_a_reused_set(rt):
    """The golden sets' evaluation did them; the citations it leaves to the night's evaluation
    (the end-to-end DAG test checks that `cite` cites the handed-over run)."""
    from ragtrail.pipeline import tasks

    run_id = _handed_over(rt)
    (planned,) = plan_sets(
        rt, CORPUS, "night-1", None, handed_over_runs(rt, CORPUS, SNAPSHOT, None)
    )
    entry = planned.to_json()
    skipped = {"name": "handbook", "skipped": f"evaluated as {run_id}"}
    assert tasks.evaluate_set(rt, corpus=CORPUS, qa_set_entry=entry) == skipped
    for step in (tasks.evaluate_set_sufficiency, tasks.evaluate_set_evidence):
        assert step(rt, corpus=CORPUS, qa_set_entry=entry) == skipped, step.__name__
    assert RunStore(rt.engine).get_run("night-1.handbook") is None  # nothing was started


class Clock:
    """UTC time that passes only when the waiting plan sleeps; ``on_sleep`` runs at each sleep
    (the golden evaluation going on meanwhile)."""

    def __init__(self, on_sleep=None) -> None:
        self.now = datetime.now(UTC)
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep

    def __call__(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += timedelta(seconds=seconds)
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))


def _started(rt, night: str = "golden-1"):
    """The golden flow's run ``<night>.handbook`` started and recorded as started."""
    (planned,) = golden_sets(rt, CORPUS, night)
    RunStore(rt.engine).start_run(planned.run_id, "evaluate_retrieval", {}, owner=run_owner(rt))
    golden_evaluation_started(rt, CORPUS, SNAPSHOT, [planned], None)
    return planned


def _await(rt, clock):
    return await_golden_runs(rt, CORPUS, SNAPSHOT, None, clock=clock, sleep=clock.sleep)


def test_the_plan_waits_for_a_running_golden_evaluation_to_hand_over(rt):
    planned = _started(rt)

    def golden_flow_goes_on(sleeps: int) -> None:
        if sleeps == 3:  # its last per-set step ends: the hand-over
            hand_over(rt, CORPUS, SNAPSHOT, [planned], None)

    clock = Clock(golden_flow_goes_on)
    reusable, waited = _await(rt, clock)
    assert [p.run_id for p in reusable.values()] == [planned.run_id]
    assert clock.sleeps == [POLL_S] * 3 and waited == 3 * POLL_S


def test_without_a_started_golden_evaluation_the_plan_does_not_wait(rt):
    clock = Clock()
    assert _await(rt, clock) == ({}, 0.0) and clock.sleeps == []
    _handed_over(rt)  # handed over already: taken at once
    reusable, waited = _await(rt, clock)
    assert reusable and waited == 0.0 and clock.sleeps == []


def test_a_failed_golden_run_ends_the_wait_at_once(rt):
    planned = _started(rt)
    clock = Clock(lambda n: RunStore(rt.engine).fail_run(planned.run_id, "sufficiency failed"))
    assert _await(rt, clock) == ({}, POLL_S)  # one look, then its run has failed
    assert clock.sleeps == [POLL_S]


def test_the_wait_ends_golden_wait_s_after_the_golden_evaluation_started(rt, make_runtime, home):
    short = make_runtime(home=home, retrieval={"golden_wait_s": 12.0})
    _started(short)
    clock = Clock()
    reusable, waited = await_golden_runs(
        short, CORPUS, SNAPSHOT, None, clock=clock, sleep=clock.sleep
    )
    assert reusable == {} and waited == pytest.approx(sum(clock.sleeps))
    assert clock.sleeps[:2] == [POLL_S, POLL_S] and 11.9 < sum(clock.sleeps) <= 12.0
    # one started longer ago than that is not waited for at all
    late = Clock()
    late.now += timedelta(seconds=13)
    assert await_golden_runs(short, CORPUS, SNAPSHOT, None, clock=late, sleep=late.sleep) == (
        {},
        0.0,
    )
    # under other settings (another fingerprint) nothing was started
    assert _await(rt, Clock()) == ({}, 0.0)


def test_the_golden_plan_records_its_runs_as_started(rt):
    from ragtrail.pipeline import tasks

    planned = tasks.plan_golden_evaluation(rt, corpus=CORPUS, run_id="golden-9")
    (entry,) = planned["sets"]
    snapshot = planned["snapshot_id"]
    started = rt.artifacts.list(f"golden/{CORPUS}/evaluating/{snapshot}/")
    assert len(started) == 1
    clock = Clock(
        lambda n: hand_over(rt, CORPUS, snapshot, golden_sets(rt, CORPUS, "golden-9"), None)
    )
    RunStore(rt.engine).start_run(entry["run_id"], "evaluate_retrieval", {}, owner=run_owner(rt))
    reusable, _ = await_golden_runs(rt, CORPUS, snapshot, None, clock=clock, sleep=clock.sleep)
    assert [p.run_id for p in reusable.values()] == [entry["run_id"]] == ["golden-9.handbook"]
