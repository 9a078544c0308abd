"""Where the test set's labels come from, whichever labeller the run used."""

from __future__ import annotations

from ragtrail.records import GateMode
from ragtrail.report.judge_notes import label_source_note
from ragtrail.summaries.judge_summary import JudgeGate, JudgeGateBar


def _gate(name: str, mode: GateMode, value: float) -> JudgeGate:
    return JudgeGate(
        judge=f"{name}@j-000000000000",
        mode=mode,
        gates=mode is GateMode.GATE,
        reason=f"{name} kappa {value:.2f} on n=30 vs bar 0.40",
        metric="kappa",
        n=30,
        bar=JudgeGateBar(role_or_judge="labeller", metric="kappa", minimum=0.4),
        value=value,
        ci_low=value - 0.1,
        ci_high=value + 0.1,
    )


def test_the_note_names_the_llm_or_the_trained_labeller():
    llm = label_source_note({"labeller": _gate("labeller", GateMode.ADVISE, 0.06)})
    assert llm.startswith("Labels are the requested ones, unverified: the labeller (labeller)")
    trained = {"critique.stand_alone": _gate("critique.stand_alone", GateMode.ADVISE, 0.5)}
    trained["labeller.trained"] = _gate("labeller.trained", GateMode.GATE, 0.62)
    assert label_source_note(trained).startswith(
        "Labels are the labeller's (labeller.trained): its calibration met the bar (kappa 0.62"
    )
    assert label_source_note({}) == "No labeller decision was recorded for this run."
