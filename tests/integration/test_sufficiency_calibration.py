"""Sufficiency raters calibrated on the ingested sample corpus and its hand-written golden set.

The contains-answer baseline needs no model; the zero-shot LLM rater runs on the routed scripted
backend (a test double that calls a context sufficient when it holds at least half of the
question's content words). Expected verdicts and kappas are recomputed here independently of the
raters (string containment, word overlap, scikit-learn's kappa).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sklearn.metrics import cohen_kappa_score

from ragtrail.config import ModelRole
from ragtrail.judges.sufficiency_raters import INSUFFICIENT, SUFFICIENT
from ragtrail.paths import sample_qa_set
from ragtrail.pipeline.ingest import ingest
from ragtrail.pipeline.sufficiency.raters import (
    calibrate_sufficiency_raters,
    sufficiency_raters,
    sufficiency_references,
    token_counter,
)
from ragtrail.records import QuestionLabel
from ragtrail.storage.judge_store import JudgeStore
from ragtrail.testset.qaset import load_qa_set
from ragtrail.text import text_key
from tests.unit.generate import SUFFICIENT_OVERLAP, question_overlap, routed_backend

RATERS = ("sufficiency.llm", "sufficiency.contains_answer")
BUDGET = 200


@pytest.fixture
def rt(make_runtime, tmp_path, sample_corpus):
    corpus = tmp_path / "corpus"
    shutil.copytree(sample_corpus, corpus)
    reference = tmp_path / "extra.jsonl"
    reference.write_text(
        json.dumps(
            {"question": "Who signs?", "context": "Ana signs it.", "answer": "Ana", "label": 1}
        )
        + "\n"
        + json.dumps({"question": "When?", "context": "Ana signs it.", "label": "insufficient"})
        + "\n"
    )
    runtime = make_runtime(
        sufficiency={
            "raters": RATERS,
            "calibration_per_kind": 4,
            "max_context_tokens": BUDGET,
            "reference_file": str(reference),
        },
    )
    runtime.use_llm_backends(
        {runtime.settings.model_for(ModelRole.JUDGE): routed_backend(model_id="routed-suff-v1")}
    )
    ingest(runtime, str(corpus), "hb")
    return runtime


def _items():
    items, _ = load_qa_set(sample_qa_set())
    return items


def _expected(rater: str, detail: dict, example, counter) -> str:
    """The verdict a rater must give, computed without the rater."""
    tokens = counter.offsets(example.context)
    context = example.context
    if len(tokens) > BUDGET:
        context = context[: tokens[BUDGET - 1][1]]
    if rater == "sufficiency.contains_answer":
        found = example.answer and f" {text_key(example.answer)} " in f" {text_key(context)} "
        return SUFFICIENT if found else INSUFFICIENT
    share = question_overlap({"question": example.question, "context": context})
    return SUFFICIENT if share >= SUFFICIENT_OVERLAP else INSUFFICIENT


def test_raters_are_calibrated_stored_and_gated(rt):
    backend = rt.llm(ModelRole.JUDGE).backend
    items = _items()
    examples = sufficiency_references(rt, "hb", items)
    counter = token_counter(rt)

    report = calibrate_sufficiency_raters(rt, "hb", items)
    assert list(report) == list(RATERS)
    store = JudgeStore(rt.engine)
    for judge in sufficiency_raters(rt):
        spec, entry = judge.spec, report[judge.spec.name]
        assert entry["status"] == "calibrated" and entry["judge"] == spec.ref
        record = store.latest(spec.name, spec.version)
        assert record is not None and record.n == entry["n"] == 14
        assert record.metric == entry["metric"] == "kappa"
        details = json.loads(Path(record.details_uri).read_text())["items"]
        assert [d["item"] for d in details] == [e.example_id for e in examples]
        verdicts = [d["value"] for d in details]
        expected = [
            _expected(spec.name, d, e, counter) for d, e in zip(details, examples, strict=True)
        ]
        assert verdicts == expected
        for d, e in zip(details, examples, strict=True):
            truncated = counter.count(e.context) > BUDGET
            assert d.get("reason", "").startswith("context truncated from") == truncated
        references = [d["reference"] for d in details]
        assert references == [e.label for e in examples]
        kappa = cohen_kappa_score(references, verdicts, labels=[SUFFICIENT, INSUFFICIENT])
        assert record.value == pytest.approx(kappa)
        assert entry["value"] == pytest.approx(kappa)
        # kappa's interval is given from 20 items on (BCa), else null with the reason
        if entry["ci_low"] is None:
            assert entry["n"] < 20 and "at least 20 items" in entry["undefined"]["ci_low"]
        else:
            assert entry["ci_low"] <= kappa <= entry["ci_high"]
        gate = entry["gate"]
        assert gate["judge"] == spec.ref and gate["value"] == pytest.approx(kappa)
        assert gate["gates"] == (kappa >= rt.settings.judges.sufficiency_min_kappa)
    # the baseline cannot call an unanswerable or irrelevant context sufficient
    contains = json.loads(
        Path(store.latest(*_ref(report, "sufficiency.contains_answer")).details_uri).read_text()
    )["items"]
    assert all(
        d["value"] == INSUFFICIENT for d in contains if d["kind"] in ("unanswerable", "irrelevant")
    )
    assert any("truncated" in d.get("reason", "") for d in contains)  # the budget was hit

    calls = len(backend.calls)
    assert calls == 14  # one per reference
    again = calibrate_sufficiency_raters(rt, "hb", items)
    assert {e["status"] for e in again.values()} == {"cached"}
    assert len(backend.calls) == calls
    assert again["sufficiency.llm"]["value"] == report["sufficiency.llm"]["value"]
    assert again["sufficiency.llm"]["gate"] == report["sufficiency.llm"]["gate"]


def _ref(report: dict, name: str) -> tuple[str, str]:
    return name, report[name]["judge"].split("@")[1]


def test_references_then_a_bad_reference_file(rt):
    items = _items()
    examples = sufficiency_references(rt, "hb", items)
    kinds = [e.kind for e in examples]
    assert kinds == ["ground"] * 4 + ["unanswerable"] * 4 + ["irrelevant"] * 4 + ["file"] * 2
    by_qid = {i.qid: i for i in items}
    for e in examples[:12]:
        item = by_qid[e.example_id.split(":")[1]]
        assert (item.label == QuestionLabel.UNANSWERABLE) == (e.kind == "unanswerable")
        if e.kind == "irrelevant":  # three passages of other documents, none holding the answer
            assert e.context.count("\n\n") >= 2
            assert f" {text_key(item.answer)} " not in f" {text_key(e.context)} "
    assert examples == sufficiency_references(rt, "hb", items)  # seeded

    Path(rt.settings.sufficiency.reference_file).write_text('{"question": "q"}\n')
    report = calibrate_sufficiency_raters(rt, "hb", _items())
    entry = report["sufficiency.contains_answer"]
    assert entry["status"] == "not calibrated" and "line 1" in entry["reason"]
    assert entry["gate"]["gates"] is False and "no calibration" in entry["gate"]["reason"]


def test_a_rater_is_calibrated_by_name_like_every_registered_judge(rt):
    from ragtrail.judges.registry import CalibrationRequest
    from ragtrail.pipeline.registered_judges import calibrate_judge

    request = CalibrationRequest(sample_qa_set(), "hb")
    (record,) = calibrate_judge(rt, "sufficiency.contains_answer", request)
    assert record.judge == "sufficiency.contains_answer"
    assert record.n == len(sufficiency_references(rt, "hb", _items()))
