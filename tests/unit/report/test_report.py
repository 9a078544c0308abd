"""The retrieval report renders tables, a PNG plot, the quality section, and escapes everything."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from markupsafe import escape

from ragtrail import jsonsafe
from ragtrail.evaluate.retrieval.evaluator import UNDEFINED_REASONS, ScanConfig, best_strategy, scan
from ragtrail.records import INCLUSIVE, Candidates, QAItem, SearchHit
from ragtrail.report.html import (
    PLOT_FILE,
    ReportContext,
    ReportSection,
    SetView,
    render_retrieval_report,
    render_section,
    render_sets_report,
    weakest_label_sentence,
)
from ragtrail.summaries.quality_summary import ValidationResult

EVIL = "<script>alert(1)</script>"
WEIGHTS = (0.0, 0.5, 1.0)
METRICS = ("recall@1", "recall@5", "recall@10", "mrr", "ndcg@10", "P@5")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def synthetic_metrics(
    labels: tuple[str, ...] = ("fact_single", "reasoning", INCLUSIVE),
) -> pd.DataFrame:
    base = {"fact_single": 0.8, "reasoning": 0.6, INCLUSIVE: 0.7}
    rows = []
    for label in labels:
        for weight in WEIGHTS:
            for metric in METRICS:
                # best at w=0.5: fact_single 0.83, reasoning 0.63
                value = base.get(label, 0.5) + (0.03 if weight == 0.5 else 0.0)
                rows.append(
                    {
                        "label": label,
                        "text_weight": weight,
                        "metric": metric,
                        "value": value,
                        "ci_low": value - 0.05,
                        "ci_high": value + 0.05,
                        "ci_method": "bca",
                        "ci_reason": "",
                        "n_questions": 30,
                    }
                )
    return pd.DataFrame(rows)


def _validation(
    name: str,
    success: bool,
    *,
    failures: list[str] | None = None,
    warnings: list[str] | None = None,
    statistics: dict[str, int] | None = None,
) -> ValidationResult:
    return ValidationResult(
        name=name,
        success=success,
        failures=failures or [],
        warnings=warnings or [],
        statistics=statistics or {},
        suite_name=name,
        validation_name=name,
    )


def render(tmp_path: Path, metrics: pd.DataFrame, **overrides) -> str:
    kwargs = {
        "title": "Nightly retrieval",
        "metrics": metrics,
        "best": best_strategy(metrics),
        "context": ReportContext(
            run_id="run-2024-06-01",
            corpus_snapshot="snap-abc",
            qa_set_version="qa-v3",
            date="2024-06-01 02:00 UTC",
            backends={
                "index backend": "embedded (tantivy + faiss)",
                "embedding model": "all-MiniLM-L6-v2",
                "judge": "none (retrieval only)",
            },
        ),
        "quality": [
            _validation(
                "documents",
                True,
                warnings=["[warn] expect_column_values_to_not_be_null(title): 1 unexpected"],
                statistics={"evaluated": 11, "successful": 10},
            ),
            _validation(
                "chunks",
                False,
                failures=["[fail] expect_column_values_to_be_unique(chunk_id): 2 unexpected"],
                statistics={"evaluated": 9, "successful": 8},
            ),
        ],
    }
    kwargs.update(overrides)
    path = render_retrieval_report(tmp_path, **kwargs)
    assert path == tmp_path / "report.html"
    return path.read_text(encoding="utf-8")


def test_best_strategy_table_values() -> None:
    best = best_strategy(synthetic_metrics()).set_index("label")
    assert list(best.index) == ["fact_single", "reasoning", INCLUSIVE]
    assert best.loc["reasoning", "dense"] == pytest.approx(0.6)
    assert best.loc["reasoning", "lexical"] == pytest.approx(0.6)
    assert best.loc["reasoning", "best_recall"] == pytest.approx(0.63)
    assert best.loc["reasoning", "best_weight"] == 0.5
    assert best.loc["fact_single", "gap_to_best"] == pytest.approx(0.0)
    assert best.loc["reasoning", "gap_to_best"] == pytest.approx(0.2 / 0.83)


def test_weakest_label_sentence_when_labels_tie() -> None:
    best = pd.DataFrame(
        {"label": ["fact_single", "summary", "unanswerable"], "best_recall": [1.0, 1.0, 0.7]}
    )
    assert weakest_label_sentence(best) == (
        "no weakest label: fact_single, summary all reach Recall@5 1.00"
    )


def test_weakest_label_sentence() -> None:
    sentence = weakest_label_sentence(best_strategy(synthetic_metrics()))
    assert sentence == (
        "reasoning is the weakest label: Recall@5 0.63 vs 0.83 best (24.1% relative gap)"
    )


def test_report_renders_tables_plot_and_quality(tmp_path: Path) -> None:
    html = render(tmp_path, synthetic_metrics())
    for text in ("run-2024-06-01", "snap-abc", "qa-v3", "2024-06-01 02:00 UTC"):
        assert text in html
    assert "Backends and models" in html
    assert "none (retrieval only)" in html
    # best table and metric matrix rows
    assert html.count('<td class="label">fact_single</td>') == 1 + len(WEIGHTS)
    assert html.count('<td class="label">reasoning</td>') == 1 + len(WEIGHTS)
    for title in ("Recall@1", "Recall@5", "Recall@10", "MRR", "nDCG@10", "P@5"):
        assert f"<th>{title}</th>" in html
    assert "0.630" in html and "24.1%" in html
    assert "reasoning is the weakest label" in html
    # plot
    assert f'src="{PLOT_FILE}"' in html
    png = tmp_path / PLOT_FILE
    assert png.is_file()
    assert png.read_bytes()[:8] == PNG_MAGIC
    # quality section
    assert 'href="data_docs/index.html"' in html
    assert "passed with warnings" in html and "failed" in html
    assert "expect_column_values_to_be_unique(chunk_id)" in html
    assert "<link" not in html and "<script" not in html  # self-contained, no external assets


def test_report_escapes_labels_and_title(tmp_path: Path) -> None:
    metrics = synthetic_metrics(("fact_single", EVIL, INCLUSIVE))
    html = render(
        tmp_path,
        metrics,
        title=f"Report {EVIL}",
        quality=[_validation(EVIL, False, failures=[EVIL])],
    )
    assert EVIL not in html
    assert "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert (tmp_path / PLOT_FILE).read_bytes()[:8] == PNG_MAGIC


def test_extra_sections_are_inserted(tmp_path: Path) -> None:
    table = render_section("table_section.html", columns=["stage", "n"], rows=[[EVIL, 3]])
    context = ReportContext(
        run_id="r",
        extra_sections=[
            ReportSection("Test-set funnel", table),
            ReportSection(f"Citations {EVIL}", "<p>ok</p>"),
        ],
    )
    html = render(tmp_path, synthetic_metrics(), context=context)
    assert "Test-set funnel" in html
    assert "<th>stage</th>" in html  # trusted section HTML kept
    assert "<p>ok</p>" in html
    assert EVIL not in html  # fragment values and section titles still escaped


def test_undefined_values_render_as_undefined_with_their_reason(tmp_path: Path) -> None:
    """All-zero recall (gap), a scan without weights 0/1 (dense, lexical); the CI of one 0/1
    outcome is a Wilson interval and says so."""
    items = [QAItem(qid="q", question="?", label="summary", ground_doc_ids=("Z",))]
    cands = Candidates(
        lexical=(SearchHit(chunk_id="B#0", doc_id="B", score=1.0),),
        dense=(SearchHit(chunk_id="C#0", doc_id="C", score=0.5),),
    )
    config = ScanConfig(text_weights=(0.5,), metrics=("recall@5",), bootstrap_samples=0)
    result = scan(items, [cands], config)
    # as publish_retrieval_report sees them: strict-JSON records read back from metrics.json
    metrics = pd.DataFrame(json.loads(jsonsafe.dumps(result.metric_records())))
    best = pd.DataFrame(json.loads(jsonsafe.dumps(result.best_records())))
    html = render(tmp_path, metrics, best=best)
    assert not re.search(r"\bnan\b", html, re.IGNORECASE)
    for field in ("dense", "lexical", "gap_to_best"):
        assert f"undefined ({escape(UNDEFINED_REASONS[field])})" in html
    assert "Wilson" in html
    # the bare frames (NaN, no reasons attached) render the same known reasons
    html = render(tmp_path, result.metrics, best=result.best)
    assert not re.search(r"\bnan\b", html, re.IGNORECASE)
    assert f"undefined ({escape(UNDEFINED_REASONS['gap_to_best'])})" in html


def test_sets_report_has_one_part_per_set_with_its_change(tmp_path: Path) -> None:
    metrics = synthetic_metrics()
    first_night = {
        "run": "n1.golden",
        "previous_run": None,
        "undefined": {"previous_run": "no previous run on this version"},
    }
    compared = {
        "run": "n2.generated",
        "previous_run": "n1.generated",
        "previous_snapshot": "snap-0",
        "metric": "recall@5",
        "n_resamples": 200,
        "seed": 13,
        "rows": [
            {"label": "fact_single", "text_weight": 0.5, "mean_a": 0.7, "mean_b": 0.83,
             "diff": 0.13, "ci_low": 0.02, "ci_high": 0.25, "p_holm": 0.0312, "n": 30,
             "ci_method": "bca", "mde": 0.0871},
            {"label": "reasoning", "text_weight": None, "mean_a": None, "mean_b": None,
             "diff": None, "ci_low": None, "ci_high": None, "p_holm": None, "n": 0,
             "undefined": dict.fromkeys(
                 ("text_weight", "mean_a", "mean_b", "diff", "ci_low", "ci_high", "p_holm"),
                 "this run has no best weight for the label",
             )},
        ],
    }  # fmt: skip
    sets = [
        SetView(metrics, best_strategy(metrics), name="golden", change=first_night),
        SetView(
            metrics,
            best_strategy(metrics),
            name="generated",
            description="generated test set version ts-1",
            change=compared,
            sections=[ReportSection("Test-set funnel", "<p>funnel</p>")],
        ),
    ]
    path = render_sets_report(
        tmp_path, title="Night", sets=sets, context=ReportContext(run_id="n2"), quality=[]
    )
    html = path.read_text(encoding="utf-8")
    assert re.findall(r"QA set: (\w+)", html) == ["golden", "generated"]
    for anchor in ("best-strategy", "change", "plot", "metric-matrix"):
        assert f'id="{anchor}-golden"' in html and f'id="{anchor}-generated"' in html
    for name in ("golden", "generated"):
        png = tmp_path / f"recall_at_5_vs_text_weight.{name}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC and f'src="{png.name}"' in html
    assert "No previous run on this version." in html
    assert "generated test set version ts-1" in html
    row = re.search(
        r'<td class="label">fact_single</td>(.*?)</tr>', html.split("change-generated")[1], re.S
    )
    assert row is not None
    cells = re.findall(r"<td>(.*?)</td>", row.group(1))
    assert cells == [
        "0.50", "0.700", "0.830", "0.130", "[0.020, 0.250] BCa", "0.087", "0.0312", "30"
    ]  # fmt: skip
    assert "undefined (this run has no best weight for the label)" in html
    assert "ragtrail runs compare n1.generated n2.generated" in html
    assert "Test-set funnel — generated" in html and "<p>funnel</p>" in html
    assert not re.search(r"\bnan\b", html, re.IGNORECASE)
