"""The evidence extractor's evaluation as a pipeline step, on the ingested sample corpus with its
golden set, the scripted doubles (not models: ``evidence.extract`` copies the sentence sharing
most words with the question, ``answer.short`` answers with the first sentence of the first
passage) and the session's tiny random Llama as the helpfulness scorer (tests/conftest.py: its
log-probabilities are real computations of a real model, their values meaningless)."""

from __future__ import annotations

import json
import shutil

import pytest

from ragtrail.paths import sample_corpus_dir, sample_qa_set
from ragtrail.pipeline.evidence.step import evaluate_evidence
from ragtrail.pipeline.evidence.views import load_evidence, queries_frame
from ragtrail.pipeline.golden import register_golden_set
from ragtrail.pipeline.night import INGEST, run_flow
from ragtrail.storage.runs_store import RunStore
from tests.scripted_llm import SPEC as SCRIPTED_SPEC
from tests.scripted_llm import as_on_an_endpoint

CORPUS = "hb"


@pytest.fixture
def rt(make_runtime, tmp_path):
    rt = make_runtime(
        generation={"llm": SCRIPTED_SPEC},
        evidence={
            "max_items": 4,
            "noise_ratios": [0, 1],
            "bootstrap_samples": 100,
        },
    )
    # a copy: on the shipped folder itself the ingest would register the sample set as
    # handbook-sample, and this test registers it under its own name
    source = shutil.copytree(sample_corpus_dir(), tmp_path / "corpus")
    state = INGEST.resolve({"corpus": CORPUS, "source": str(source)}, [], "ingest-1")
    run_flow(rt, INGEST, state)
    register_golden_set(rt, sample_qa_set(), corpus=CORPUS, name="handbook")
    return rt


def test_every_method_scored_stored_and_a_rerun_makes_no_model_call(rt) -> None:
    result = evaluate_evidence(rt, CORPUS, run_id="n1.handbook", set_name="handbook")
    json.dumps(result.to_json(), allow_nan=False)
    summary = load_evidence(rt, "n1.handbook")
    assert summary is not None and summary.items == 4
    methods = {(q.method, q.noise) for q in summary.queries}
    assert methods == {
        ("extractor", 0.0), ("extractor", 1.0), ("full", 0.0), ("full", 1.0),
        ("extractive", 0.0), ("none", 0.0),
    }  # fmt: skip
    assert "base" in summary.undefined  # the configured extractor is its own base
    for q in summary.queries:
        if q.method == "extractor" and q.noise == 1.0:
            assert q.passages == 2 * rt.settings.evidence.retrieval_k
        if q.method in ("extractor", "extractive") and q.evidence:
            # evidence is copied from the passages: it is shorter and compresses them
            assert q.evidence_tokens < q.passage_tokens and q.compression > 1
            assert 0.0 <= q.faithfulness <= 1.0
        if q.method == "extractor" and q.label != "unanswerable" and q.evidence:
            assert 0.0 < q.helpfulness < 1.0 and q.conciseness is not None
        if q.correct is None:
            assert "correct" in q.undefined  # never a silent gap
    # the extractive baseline is held to the extractor's token count on the same question
    by = {(q.qid, q.method, q.noise): q for q in summary.queries}
    for q in summary.queries:
        ex = by[(q.qid, "extractor", 0.0)]
        if q.method == "extractive" and ex.evidence_tokens:
            assert q.evidence_tokens <= ex.evidence_tokens
    roles = {j.role: j for j in summary.judges}
    assert set(roles) == {"faithfulness", "correctness"} and roles["faithfulness"].judge
    frame = queries_frame(summary)
    assert len(frame) == len(summary.queries)
    stored = RunStore(rt.engine).metrics_history("correct", evaluation="evidence")
    assert {p.run_id for p in stored} == {"n1.handbook"}
    before = rt.llm_usage.totals()
    again = evaluate_evidence(rt, CORPUS, run_id="n1.handbook", set_name="handbook")
    after = rt.llm_usage.totals()
    assert after.calls == before.calls and after.cache_hits > before.cache_hits  # all cached
    assert again.to_json() | {"evidence_uri": ""} == result.to_json() | {"evidence_uri": ""}


def test_steps_run_side_by_side_on_an_endpoint_record_what_one_by_one_records(
    rt, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where every model is an endpoint, the full-length answers are written beside the
    extraction, and the experts' local scores computed beside the answers and their judging;
    the run records what one step after another records."""
    evaluate_evidence(rt, CORPUS, run_id="n1.handbook", set_name="handbook")
    one_by_one = load_evidence(rt, "n1.handbook")
    calls_since = as_on_an_endpoint(rt, monkeypatch)  # every call made again, on threads
    evaluate_evidence(rt, CORPUS, run_id="n2.handbook", set_name="handbook")
    assert calls_since() > 0
    side_by_side = load_evidence(rt, "n2.handbook")
    assert one_by_one is not None and side_by_side is not None
    before, after = one_by_one.to_json(), side_by_side.to_json()
    for key in ("queries", "aggregates", "judges", "failures"):
        assert after[key] == before[key], key
    assert set(side_by_side.seconds) == {"contexts", "evidence", "experts and answers"}


def test_answer_from_evidence_mode_of_the_sufficiency_evaluation(make_runtime, tmp_path) -> None:
    """``sufficiency.settings`` with ``evidence``: the answerer answers from the extractor's
    evidence (one passage, cut from the retrieved chunks), which the raters rate too."""
    from ragtrail.pipeline.sufficiency.step import evaluate_sufficiency
    from ragtrail.pipeline.sufficiency.views import load_sufficiency

    rt = make_runtime(
        generation={"llm": SCRIPTED_SPEC},
        sufficiency={"max_items": 4, "settings": ["retrieved", "evidence", "none"]},
        selective={"enabled": False},
    )
    # a copy: on the shipped folder itself the ingest would register the sample set as
    # handbook-sample, and this test registers it under its own name
    source = shutil.copytree(sample_corpus_dir(), tmp_path / "corpus")
    state = INGEST.resolve({"corpus": CORPUS, "source": str(source)}, [], "ingest-1")
    run_flow(rt, INGEST, state)
    register_golden_set(rt, sample_qa_set(), corpus=CORPUS, name="handbook")
    evaluate_sufficiency(rt, CORPUS, run_id="n1.handbook", set_name="handbook", selective=False)
    summary = load_sufficiency(rt, "n1.handbook")
    assert summary is not None and summary.settings == ["retrieved", "evidence", "none"]
    rows = {(q.qid, q.setting): q for q in summary.queries}
    evidence_rows = [q for q in summary.queries if q.setting == "evidence"]
    assert len(evidence_rows) == 4
    for q in evidence_rows:
        retrieved = " ".join(rows[(q.qid, "retrieved")].passages)
        assert len(q.passages) == 1 and q.passages[0] in retrieved  # copied from the chunks
        assert q.sufficiency in ("sufficient", "insufficient")  # rated like retrieved
