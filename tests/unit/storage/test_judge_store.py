"""Judge calibrations on SQLite and PostgreSQL, and migration 0005 on a database with 0003 data."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Engine, inspect, text

from ragtrail.judges.calibration import calibrate_categorical
from ragtrail.judges.contract import JudgeInput, JudgeRole, JudgeSpec, VerdictType
from ragtrail.judges.gate import bar_for, decide, default_bars
from ragtrail.judges.recording import store_calibration
from ragtrail.storage import tables
from ragtrail.storage.db import alembic_config, upgrade, utcnow
from ragtrail.storage.judge_store import CalibrationRecord, JudgeStore
from tests.unit.judges._scripted_judges import ScriptedJudge


@pytest.fixture
def store(engine: Engine) -> JudgeStore:
    upgrade(engine)
    return JudgeStore(engine)


def _spec(version: str = "j-aaaaaaaaaaaa", name: str = "labeller") -> dict[str, Any]:
    return JudgeSpec(
        name=name,
        version=version,
        role=JudgeRole.LABELLER,
        backend="llm",
        model="builtin:smollm2-135m-instruct",
        verdict_type=VerdictType.CATEGORY,
        categories=("fact_single", "summary"),
    ).as_dict()


def _record(store: JudgeStore, **fields: Any) -> CalibrationRecord:
    args: dict[str, Any] = {
        "spec": _spec(),
        "kind": "categorical",
        "reference": "golden:gs-1",
        "n": 24,
        "metric": "kappa",
        "value": 0.5,
        "ci_low": 0.3,
        "ci_high": 0.7,
        "metrics": {"kappa": {"value": 0.5}},
    }
    args.update(fields)
    return store.record(**args)


def test_record_has_exactly_the_table_columns() -> None:
    assert [f.name for f in dataclasses.fields(CalibrationRecord)] == list(
        tables.judge_calibrations.c.keys()
    )


def test_record_and_read_back(store: JudgeStore) -> None:
    recorded = _record(store, details_uri="s3://b/judges/labeller.jsonl")
    assert recorded.id >= 1 and recorded.judge_ref == "labeller@j-aaaaaaaaaaaa"
    latest = store.latest("labeller", "j-aaaaaaaaaaaa")
    assert latest == recorded
    assert (latest.role, latest.kind, latest.metric, latest.n) == (
        "labeller",
        "categorical",
        "kappa",
        24,
    )
    assert latest.spec["categories"] == ["fact_single", "summary"]
    assert latest.details_uri == "s3://b/judges/labeller.jsonl"
    assert latest.created_at.tzinfo is not None


def test_latest_is_per_exact_version(store: JudgeStore) -> None:
    _record(store, value=0.2)
    newer = _record(store, value=0.6, reference="golden:gs-2")
    other_version = _record(store, spec=_spec("j-bbbbbbbbbbbb"), value=0.9)
    assert store.latest("labeller", "j-aaaaaaaaaaaa") == newer
    assert store.latest("labeller", "j-bbbbbbbbbbbb") == other_version
    assert store.latest("labeller", "j-cccccccccccc") is None
    assert store.latest("critique.stand_alone", "j-aaaaaaaaaaaa") is None


def test_history_newest_first_filtered_and_limited(store: JudgeStore) -> None:
    a = _record(store, value=0.1)
    b = _record(store, spec=_spec(name="entailment.nli"), value=0.2)
    c = _record(store, value=0.3)
    assert [r.id for r in store.history()] == [c.id, b.id, a.id]
    assert [r.id for r in store.history("labeller")] == [c.id, a.id]
    assert [r.id for r in store.history(limit=1)] == [c.id]


def test_undefined_figures_need_a_reason(store: JudgeStore) -> None:
    reasons = {"value": "chance agreement is 1", "ci_low": "x", "ci_high": "x"}
    rec = _record(store, value=None, ci_low=None, ci_high=None, undefined=reasons)
    assert store.latest("labeller", "j-aaaaaaaaaaaa").undefined == reasons
    assert rec.value is None


def test_bad_records_list_every_problem_and_write_nothing(store: JudgeStore) -> None:
    with pytest.raises(ValueError) as err:
        _record(store, kind="vibes", reference=" ", n=-1, value=None, ci_low=float("nan"))
    message = str(err.value)
    for problem in (
        "value is None without a reason",
        "ci_low is nan",
        "kind 'vibes'",
        "reference is empty",
        "n is -1",
    ):
        assert problem in message
    with pytest.raises(ValueError, match="lacks"):
        _record(store, spec={"name": "labeller"})
    with pytest.raises(ValueError, match="non-finite"):
        _record(store, metrics={"kappa": float("inf")})
    assert store.history() == []


def test_store_a_calibration_and_decide_from_it(store: JudgeStore) -> None:
    judge = ScriptedJudge(
        {"q1": "summary", "q2": "fact_single"}, categories=("fact_single", "summary")
    )
    inputs = [JudgeInput(context="c", question=q) for q in ("q1", "q2", "q1", "q2")]
    references = ["summary", "fact_single", "summary", "summary"]
    cal, _ = calibrate_categorical(judge, inputs, references, n_resamples=100, seed=1)
    rec = store_calibration(store, judge.spec, cal, reference="file:abc123def456")
    # p_o = 3/4; reference summary 3/4, fact 1/4; predicted 1/2 each: p_e = 1/2, kappa = 1/2
    assert rec.value == pytest.approx(0.5) and rec.n == 4 and rec.metric == "kappa"
    assert rec.kind == "categorical" and rec.metrics == json.loads(json.dumps(cal.as_dict()))
    latest = store.latest(judge.spec.name, judge.spec.version)
    decision = decide(judge.spec, latest, bar_for(judge.spec, default_bars()))
    assert decision.gates and decision.n == 4


def test_migration_0005_on_0003_data(engine: Engine) -> None:
    upgrade(engine, "0003")
    now = utcnow()
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO qa_candidates (candidate_id, corpus, snapshot_id, doc_id, "
                "doc_content_hash, chunk_id, chunk_hash, context_text, context_headings, "
                "statement_kind, requested_label, theme, statement, question, answer, "
                "label_reason, critiques, status, raw_outputs, generator, run_id, created_at) "
                "VALUES ('c1', 'hb', 's1', 'd.md', 'h', 'd.md#0', 'ch', 'ctx', '[]', 'fact', "
                "'fact_single', 't', 'st', 'q?', 'a', '', '{}', 'accepted', '[]', '{}', 'r1', :t)"
            ),
            {"t": now},
        )
    upgrade(engine)
    columns = [c["name"] for c in inspect(engine).get_columns("qa_candidates")]
    assert columns[-2:] == ["label_source", "label_judge"]
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT candidate_id, question, label_source, label_judge FROM qa_candidates")
        ).one()
    assert tuple(row) == ("c1", "q?", None, None)
    store = JudgeStore(engine)
    assert _record(store).id >= 1
    # and back: downgrade to 0003 removes the table and columns, keeps the candidate
    with engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0003")
    insp = inspect(engine)
    assert "judge_calibrations" not in insp.get_table_names()
    assert "label_source" not in [c["name"] for c in insp.get_columns("qa_candidates")]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT candidate_id FROM qa_candidates")).scalar_one() == "c1"
