"""The README's main job and the evaluation commands, run as a user would (subprocesses)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from sqlalchemy import create_engine, text

from tests.scripted_llm import SPEC as SCRIPTED_SPEC

CLI = [sys.executable, "-m", "ragtrail.cli"]


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, check=True, capture_output=True, text=True)


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """A fresh home; the answering model of the citation step is the scripted test double (not a
    model: the bundled SmolLM2 would take minutes here; bench_nightly runs the real default)."""
    return {
        **os.environ,
        "RAGTRAIL_HOME": str(tmp_path / "home"),
        "RAGTRAIL_GENERATION__LLM": SCRIPTED_SPEC,
    }


def test_nightly_produces_reports_metrics_and_history(env, tmp_path):
    out = tmp_path / "out"
    result = json.loads(run(["nightly", "--no-generate", "--out", str(out), "--json"], env).stdout)

    # On the shipped sample corpus the shipped sample QA set is registered as a golden set.
    (golden,) = result["golden"]
    assert golden["name"] == "handbook-sample" and golden["created"] is True
    assert golden["n_items"] == 65 and golden["quality"]["success"] is True
    assert list(result["evaluation"]["sets"]) == ["handbook-sample"]
    evaluated = result["evaluation"]["sets"]["handbook-sample"]
    assert evaluated["qa_set_version"] == golden["version"]
    assert evaluated["run_id"] == f"{result['run_id']}.handbook-sample"

    report = out / result["run_id"] / "report.html"
    assert report.is_file()
    html = report.read_text()
    for label in ("fact_single", "summary", "reasoning", "unanswerable", "inclusive"):
        assert label in html
    assert "all-MiniLM-L6-v2" in html and "embedded" in html  # backends are named
    assert "QA set: handbook-sample" in html and "No previous run on this version." in html
    assert not re.search(r"\bnan\b", html, re.IGNORECASE)
    plot = report.parent / "recall_at_5_vs_text_weight.handbook-sample.png"
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert (report.parent / "data_docs" / "index.html").is_file()
    assert result["corpus_quality"]["success"] is True
    assert result["report"]["success"] is True
    cited = evaluated["citations"]  # the citation step ran on the set, model vs random
    assert set(cited["f1"]) == {"relevant+irrelevant", "relevant+seemingly", "all"}
    assert "Citations: model vs random per mixture type and label" in html
    # The first night has no drift baseline: the decision is stored and shown, nothing fires.
    drift = result["drift"]["sets"]["handbook-sample"]
    assert (drift["status"], drift["fired"], drift["baseline_run"]) == ("no_baseline", False, None)
    assert "No baseline yet for this corpus and QA-set version" in html

    metrics = json.loads((report.parent / "metrics.json").read_text())["sets"]["handbook-sample"]
    weights = sorted({m["text_weight"] for m in metrics["metrics"]})
    assert weights == [0.0, 0.05, 0.1, 0.2, 0.5, 1.0]
    assert {m["metric"] for m in metrics["metrics"]} == {
        "recall@1",
        "recall@5",
        "recall@10",
        "mrr",
        "ndcg@10",
        "P@5",
    }
    assert all(0.0 <= m["value"] <= 1.0 for m in metrics["metrics"])
    best = {row["label"]: row for row in evaluated["best"]}
    assert set(best) == {"fact_single", "summary", "reasoning", "unanswerable", "inclusive"}
    assert evaluated["change"]["previous_run"] is None
    assert evaluated["change"]["undefined"]["previous_run"] == "no previous run on this version"

    engine = create_engine(f"sqlite:///{tmp_path / 'home' / 'ragtrail.db'}")
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT count(*), count(DISTINCT label) FROM metrics_history "
                "WHERE run_id = :r AND evaluation = 'retrieval'"
            ),
            {"r": evaluated["run_id"]},
        ).one()
    engine.dispose()
    assert rows == (5 * 6 * 6, 5)  # labels x weights x metrics

    # A second night on the unchanged corpus re-embeds nothing, keeps the history per run, and
    # compares each set with the previous night: same questions, same index, so no change at all.
    again = json.loads(run(["nightly", "--no-generate", "--json"], env).stdout)
    assert again["ingest"]["unchanged"] == result["ingest"]["added"]
    assert again["ingest"]["embedded"] == 0
    assert again["golden"][0]["created"] is False
    change = again["evaluation"]["sets"]["handbook-sample"]["change"]
    assert change["previous_run"] == evaluated["run_id"]
    per_label = evaluated["questions_per_label"] | {"inclusive": 65}
    assert [row["label"] for row in change["rows"]] == list(best)
    for row in change["rows"]:
        assert row["n"] == per_label[row["label"]]
        assert row["mean_a"] == row["mean_b"] == best[row["label"]]["best_recall"]
        # no question changed: no spread, so no interval (never [0, 0]) and no MDE, with why
        assert (row["diff"], row["ci_low"], row["ci_high"]) == (0.0, None, None)
        assert row["ci_method"] == "none" and "no spread" in row["undefined"]["ci_low"]
        assert "mde" not in row and "spread" in row["undefined"]["mde"]
        assert row["text_weight"] == best[row["label"]]["best_weight"]
    drift = again["drift"]["sets"]["handbook-sample"]  # night 1 is the first run: the baseline
    assert (drift["baseline_run"], drift["baseline_kind"]) == (evaluated["run_id"], "first")
    assert drift["fired"] is False and drift["drifted"] == []


def test_eval_trec_matches_trec_eval(shared_dir, env):
    fixture = shared_dir / "reference" / "trec_eval"
    scores = json.loads(
        run(
            ["eval", "trec", str(fixture / "qrels.test"), str(fixture / "results.test"), "--json"],
            env,
        ).stdout
    )
    expected = {}
    for line in (fixture / "out.test.a").read_text().splitlines():
        name, qid, value = line.split()
        if qid == "all":
            expected[name] = value
    assert f"{scores['recall@5']:.4f}" == expected["recall_5"]
    assert f"{scores['recall@10']:.4f}" == expected["recall_10"]
    assert f"{scores['ndcg@10']:.4f}" == expected["ndcg_cut_10"]
    assert f"{scores['P@5']:.4f}" == expected["P_5"]
    assert f"{scores['map']:.4f}" == expected["map"]
    assert f"{scores['mrr']:.4f}" == expected["recip_rank"]


def test_eval_retrieval_rejects_a_bad_qa_set_clearly(env, tmp_path, sample_corpus):
    run(["ingest", str(sample_corpus), "--corpus", "hb", "--json"], env)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"qid": "1", "question": "x?", "label": "trivia", "ground_doc_ids": ["a"]}\n')
    proc = subprocess.run(
        [*CLI, "eval", "retrieval", "--corpus", "hb", "--qa-set", str(bad), "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "trivia" in proc.stderr
