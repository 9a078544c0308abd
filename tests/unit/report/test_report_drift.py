"""The drift report sections render a stored decision: the verdict, the evidence table with the
drifted rows first and undefined figures as "–", and the history plot only when there is a history."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from ragtrail.config import DriftSettings
from ragtrail.report.drift_sections import drift_sections, evidence_rows
from ragtrail.summaries.drift_summary import (
    CorpusChanges,
    DriftDecision,
    DriftEvidence,
    DriftPolicyUsed,
    DriftRowEvidence,
    DriftView,
    HistoryPoint,
    QASetRetirement,
)


def _row(
    facets: dict, diff: float | None, *, drifted: bool = False, tested: bool = True
) -> DriftRowEvidence:
    defined = diff is not None
    return DriftRowEvidence(
        evaluation="retrieval",
        metric="recall@5",
        facets=facets,
        greater_is_better=True,
        n=10 if defined else 0,
        baseline=0.8 if defined else None,
        current=0.8 + diff if diff is not None else None,
        diff=diff,
        ci_low=diff - 0.1 if diff is not None else None,
        ci_high=diff + 0.1 if diff is not None else None,
        p_value=0.001 if defined else None,
        p_holm=0.002 if tested else None,
        threshold=0.05,
        direction=None if diff is None else "worse" if diff < 0 else "better",
        tested=tested,
        drifted=drifted,
        undefined={} if defined else {"diff": "no question has a value in both runs"},
    )


def _decision(rows: list[DriftRowEvidence], baseline: str | None = "n1") -> DriftDecision:
    evidence = DriftEvidence(
        fires_on="a primary metric worse by more than its threshold",
        policy=DriftPolicyUsed(**DriftSettings().model_dump(), primary_metrics=None),
        qa_set=QASetRetirement(
            version="gs-1",
            undefined={"retired": "a file"},
            kind="file",
            n_items=None,
            retired=None,
            n_retired=None,
        ),
        corpus_drift=CorpusChanges(
            baseline_snapshot="s1",
            current_snapshot="s2",
            n_baseline=20,
            n_current=17,
            added=0,
            updated=1,
            removed=3,
            unchanged=16,
            added_share=0.0,
            updated_share=0.05,
            removed_share=0.15,
            changed_share=0.2,
        ),
        rows=rows,
        drifted=[f"{r.evaluation}:{r.metric} [{r.facets_text}]" for r in rows if r.drifted],
        n_tested=sum(r.tested for r in rows),
    )
    return DriftDecision(
        decision_id="drift-abc",
        run_id="n2",
        corpus="hb",
        snapshot_id="s2",
        qa_set_version="gs-1",
        baseline_run_id=baseline,
        baseline_kind="first" if baseline else None,
        status="checked" if baseline else "no_baseline",
        fired=any(r.drifted for r in rows),
        evidence=evidence,
        created_at=datetime(2026, 11, 25, tzinfo=UTC),
    )


def test_the_evidence_table_puts_drifted_rows_first_and_shows_undefined_as_dashes() -> None:
    rows = [
        _row({"label": "summary"}, 0.1),
        _row({"label": "gone"}, None, tested=False),
        _row({"label": "inclusive"}, -0.3, drifted=True),
    ]
    table = evidence_rows(_decision(rows).evidence)
    assert [r[1] for r in table] == ["label=inclusive", "label=summary", "label=gone"]
    assert table[0][4] == "-0.300 [-0.400, -0.200] (n=10)" and table[0][-1] == "yes"
    assert table[2][2:5] == ["–", "–", "– (n=0)"] and table[2][6] == "untested"


def test_sections_render_the_verdict_changes_and_the_history(tmp_path: Path) -> None:
    decision = _decision([_row({"label": "inclusive"}, -0.3, drifted=True)])
    history = {
        "retrieval:recall@5 [label=inclusive]": [
            HistoryPoint(run_id="n1", value=0.8, ci_low=0.7, ci_high=0.9),
            HistoryPoint(run_id="n2", value=0.5, ci_low=None, ci_high=None),
        ]
    }
    view = DriftView(decision=decision, history=history)
    table, figure = drift_sections(view, tmp_path, ".gold")
    assert "DRIFT: retraining is asked for. Run n2 against n1 (first baseline)" in table.html
    assert "3 removed of 20 documents (changed share 20.0%)" in table.html
    assert "Retired QA items: unknown (a file)" in table.html
    assert (tmp_path / "drift_history.gold.png").read_bytes()[:4] == b"\x89PNG"
    assert "drift_history.gold.png" in figure.html
    assert not re.search(r"\bnan\b", table.html + figure.html, re.IGNORECASE)


def test_a_first_night_has_a_verdict_and_no_plot(tmp_path: Path) -> None:
    view = DriftView(decision=_decision([], baseline=None), history={})
    (only,) = drift_sections(view, tmp_path)
    assert "No baseline yet for this corpus and QA-set version" in only.html
    assert not list(tmp_path.glob("*.png"))


def test_a_predecessor_baseline_says_its_version_and_the_items_paired() -> None:
    from ragtrail.report.drift_sections import verdict
    from ragtrail.summaries.drift_summary import BaselineUsed, DriftHeadline

    decision = _decision([_row({"label": "inclusive"}, -0.3, drifted=True)])
    used = BaselineUsed(
        run_id="n1",
        kind="first",
        snapshot_id="s1",
        started_at="2026-11-24T00:00:00+00:00",
        qa_set_version="ts-old",
        paired=9,
    )
    decision = decision.model_copy(
        update={"evidence": decision.evidence.model_copy(update={"baseline": used})}
    )
    assert "ran on the predecessor version ts-old: compared on the 9 items both versions hold" in (
        verdict(decision)
    )
    headline = DriftHeadline.of(decision)
    assert (headline.baseline_version, headline.paired) == ("ts-old", 9)
    # on one version nothing is added to the verdict or the headline
    same = used.model_copy(update={"qa_set_version": None, "paired": None})
    decision = decision.model_copy(
        update={"evidence": decision.evidence.model_copy(update={"baseline": same})}
    )
    assert "predecessor" not in verdict(decision)
    assert "baseline_version" not in DriftHeadline.of(decision).to_json()
