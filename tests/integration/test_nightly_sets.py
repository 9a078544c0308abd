"""The night evaluates every QA set of the corpus: golden sets and the generated test set.

Two nights of :func:`run_nightly` on the shipped sample corpus, in process, with the generation LLM
being the scripted test double (``tests/scripted_llm.py``; not a model) and the real embedder and
index. The second night changes nothing, so each set's change since the previous night is exactly
zero on every label, with the previous night's run as the baseline.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from ragtrail.paths import sample_corpus_dir, sample_qa_set
from ragtrail.pipeline.evaluation_sets import plan_sets
from ragtrail.pipeline.nightly import run_nightly
from ragtrail.storage.drift_store import DriftStore
from ragtrail.storage.runs_store import RunStore
from tests.scripted_llm import SPEC as SCRIPTED_SPEC

SETS = ["handbook-sample", "team-qa", "generated"]


@pytest.fixture
def team_file(tmp_path: Path) -> Path:
    """A second golden set: the first 12 questions of the sample set, in a file named 'Team QA'."""
    lines = sample_qa_set().read_text().splitlines()[:12]
    path = tmp_path / "Team QA.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def rt(make_runtime):
    return make_runtime(
        generation={"llm": SCRIPTED_SPEC, "per_label": 2, "contexts_per_round": 8},
        retrieval={"bootstrap_samples": 200},
    )


def night(rt, run_id: str, team_file: Path):
    lines: list[str] = []
    result = run_nightly(
        rt,
        source=str(sample_corpus_dir()),
        corpus="handbook",
        golden=[team_file],
        run_id=run_id,
        log=lines.append,
    )
    return result, lines


def test_two_nights_evaluate_every_set_and_compare_each_with_its_previous_run(
    rt, team_file, caplog
):
    caplog.set_level(logging.INFO, logger="ragtrail.pipeline.tasks")
    first, log = night(rt, "night-1", team_file)
    # the golden sets' evaluation (beside the generation) handed its runs over, and the night's
    # evaluation took them over instead of evaluating the golden sets again
    assert (
        "[3/4] evaluate_golden_sets" in log
        and "evaluate_golden_sets.hand_over" in first.step_seconds
    )
    assert len(rt.artifacts.list("golden/handbook/evaluated/")) == 1
    planned = next(
        r.getMessage() for r in caplog.records if "evaluating 3 QA sets" in r.getMessage()
    )
    assert planned.endswith(
        "handbook-sample (evaluated by night-1.handbook-sample), "
        "team-qa (evaluated by night-1.team-qa), generated"
    ), planned
    assert [(g.name, g.n_items, g.created) for g in first.golden] == [
        ("handbook-sample", 65, True),
        ("team-qa", 12, True),
    ]
    assert any("golden set team-qa" in line for line in log)
    sets = first.sets
    assert list(sets) == SETS
    assert first.generation is not None
    assert sets["generated"].qa_set_version == first.generation.version
    assert sets["handbook-sample"].qa_set_version == first.golden[0].version
    assert sets["team-qa"].n_questions == 12
    runs = RunStore(rt.engine)
    for name, summary in sets.items():
        assert summary.run_id == f"night-1.{name}"
        stored = runs.get_run(summary.run_id)
        assert stored is not None and stored.status == "success"
        assert stored.qa_set_version == summary.qa_set_version
        assert stored.params["qa_set_name"] == name
        assert summary.change is not None and summary.change.previous_run is None
        assert summary.change.reason("previous_run") == "no previous run on this version"
    assert sets["handbook-sample"].kind == "golden" and sets["generated"].kind == "generated"

    report = Path(first.report.report_path)
    html = report.read_text()
    assert [m for m in re.findall(r"QA set: ([\w.-]+)", html)] == SETS
    assert html.count("No previous run on this version.") == 3
    assert "funnel" in html.lower()  # the generated set's sections
    assert html.count("Citations: model vs random per mixture type and label") == 3
    assert html.count("Attributed answers: scenarios") == 3
    cited = json.loads(rt.artifacts.get_bytes("runs/night-1/citation_metrics.json"))
    assert list(cited["sets"]) == SETS
    for name, summary in sets.items():  # the night's result carries each set's headline
        assert summary.citations is not None
        assert summary.citations.to_json() == cited["sets"][name]
    for name in SETS:  # every set's citation checks ran and passed
        assert f"citation_queries.{name}" in html and f"citation_metrics.{name}" in html
    assert not re.search(r"\bnan\b", html, re.IGNORECASE)
    document = json.loads((report.parent / "metrics.json").read_text())
    assert list(document["sets"]) == SETS and document["run_id"] == "night-1"
    for summary in document["sets"].values():  # (labels present + inclusive) x weights x metrics
        labels = sum(1 for n in summary["questions_per_label"].values() if n) + 1
        assert len(summary["metrics"]) == labels * 6 * 6
    assert document["sets"]["team-qa"]["questions_per_label"]["fact_single"] == 12
    stored_metrics = json.loads(rt.artifacts.get_bytes("runs/night-1/metrics.json"))
    assert stored_metrics == document
    # The first night has no baseline: stored as such for every set, nothing announced.
    assert first.drift is not None and first.drift.fired is False
    assert list(first.drift.sets) == SETS
    assert {d.status for d in first.drift.sets.values()} == {"no_baseline"}
    assert len(DriftStore(rt.engine).decisions(corpus="handbook")) == 3
    assert html.count("No baseline yet for this corpus and QA-set version") == 3

    second, _ = night(rt, "night-2", team_file)
    assert [g.created for g in second.golden] == [False, False]
    assert second.generation is not None
    assert second.generation.regenerated is False  # unchanged corpus: the version is reused
    for name, summary in second.sets.items():
        change = summary.change
        assert change is not None and change.previous_run == f"night-1.{name}"
        best = {row.label: row for row in summary.best}
        per_label = summary.questions_per_label | {"inclusive": summary.n_questions}
        assert change.rows is not None and [row.label for row in change.rows] == list(best)
        for row in change.rows:
            label = row.label
            if best[label].best_recall is None:  # a label the set lacks
                assert row.diff is None and row.undefined["diff"]
                continue
            assert row.n == per_label[label]
            assert row.mean_a == row.mean_b == best[label].best_recall
            # nothing changed: no spread, so no interval (never a zero-width one) and no MDE
            assert (row.diff, row.ci_low, row.ci_high, row.mde) == (0.0, None, None, None)
            assert row.ci_method == "none" and "no spread" in row.undefined["ci_low"]
    # Nothing changed: each set is checked against night 1 (its first run) and nothing drifts.
    assert second.drift is not None
    for name, decision in second.drift.sets.items():
        assert (decision.baseline_run, decision.baseline_kind) == (f"night-1.{name}", "first")
        assert decision.status == "checked" and decision.n_tested > 0
        assert not decision.fired and decision.drifted == []
    html = Path(second.report.report_path).read_text()
    assert html.count("No drift. Run night-2.") == 3 and "DRIFT:" not in html
    assert (Path(second.report.report_path).parent / "drift_history.team-qa.png").is_file()
    assert "No previous run on this version." not in html
    assert "ragtrail runs compare night-1.team-qa night-2.team-qa" in html

    # What the planner makes of other inputs, on the same stores.
    assert [s.name for s in plan_sets(rt, "handbook", "r", None)] == SETS[:2]
    clash = plan_sets(rt, "handbook", "r", "/data/handbook-sample.jsonl")[-1]
    assert (clash.name, clash.kind, clash.run_id) == (
        "handbook-sample-file",
        "file",
        "r.handbook-sample-file",
    )
    (fallback,) = plan_sets(rt, "other", "r", None)
    assert (fallback.name, str(fallback.qa_set)) == ("handbook_qa", str(sample_qa_set()))
