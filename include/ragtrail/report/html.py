"""The nightly retrieval report: one self-contained HTML page plus a PNG plot.

:func:`render_retrieval_report` writes ``report.html`` and ``recall_at_5_vs_text_weight.png``
into a run's report directory (the same directory whose ``data_docs/`` the
:class:`ragtrail.quality.runner.QualityRunner` fills). The page has inline CSS and no external
assets; every value is HTML-escaped by Jinja2's autoescape.

Later stages add sections without touching the main template: render a fragment with
:func:`render_section` (or build any trusted HTML string) and pass them as :class:`ReportSection` s (a set's ``sections``, or the context's
``extra_sections``). Section HTML is inserted as-is, so it must come from an autoescaping
template.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import pandas as pd
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ragtrail.evaluate.retrieval.evaluator import UNDEFINED_REASONS
from ragtrail.jsonsafe import UNDEFINED_KEY
from ragtrail.paths import safe_name
from ragtrail.records import ANSWERABLE_LABELS, INCLUSIVE, LABELS
from ragtrail.redact import redact
from ragtrail.stats.intervals import method_label
from ragtrail.summaries.base import Figure as SummaryFigure
from ragtrail.summaries.base import Record
from ragtrail.summaries.quality_summary import ValidationResult
from ragtrail.summaries.retrieval_summary import Change

TEMPLATES_DIR: Final = Path(__file__).parent / "templates"
REPORT_FILE: Final = "report.html"
PLOT_FILE: Final = "recall_at_5_vs_text_weight.png"
DATA_DOCS_INDEX: Final = "data_docs/index.html"

PRIMARY_METRIC: Final = "recall@5"
METRIC_ORDER: Final[tuple[str, ...]] = (
    "recall@1",
    "recall@5",
    "recall@10",
    "mrr",
    "ndcg@10",
    "P@5",
)
METRIC_TITLES: Final[dict[str, str]] = {
    "recall@1": "Recall@1",
    "recall@5": "Recall@5",
    "recall@10": "Recall@10",
    "mrr": "MRR",
    "ndcg@10": "nDCG@10",
    "p@5": "P@5",
}
LABEL_ORDER: Final[tuple[str, ...]] = (*LABELS, INCLUSIVE)
UNANSWERABLE_LABELS: Final = frozenset(LABELS) - frozenset(ANSWERABLE_LABELS)

_PALETTE: Final[tuple[str, ...]] = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
_INCLUSIVE_COLOUR: Final = "#222222"
BEST_COLUMNS: Final[tuple[str, ...]] = (
    "label",
    "n_questions",
    "dense",
    "lexical",
    "best_recall",
    "best_weight",
    "ci_low",
    "ci_high",
    "gap_to_best",
)


@dataclass(frozen=True)
class ReportSection:
    """An extra report section: a title (escaped) and pre-rendered, trusted HTML."""

    title: str
    html: str


# ------------------------------------------------------------------------------------------------
# Jinja2
# ------------------------------------------------------------------------------------------------


def figure_text(figure: SummaryFigure | None, digits: int = 2) -> str:
    """``0.62 [0.48, 0.75]``: a figure with its interval when it has one, ``–`` when undefined."""
    if figure is None or figure.value is None:
        return "–"
    low, high = figure.ci_low, figure.ci_high
    ci = f" [{low:.{digits}f}, {high:.{digits}f}]" if low is not None and high is not None else ""
    return f"{figure.value:.{digits}f}{ci}"


def _fmt(value: Any, digits: int = 3) -> str:
    """A number with ``digits`` decimals; en dash for missing values."""
    if value is None:
        return "–"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return "–" if math.isnan(number) else f"{number:.{digits}f}"


def _pct(value: Any) -> str:
    text = _fmt(None if value is None else float(value) * 100.0, 1)
    return text if text == "–" else f"{text}%"


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return False


Row = Mapping[str, Any] | Record
"""A row the report reads: a typed summary record, or a row of a pandas table."""


def _get(record: Row, field: str) -> Any:
    return record.get(field) if isinstance(record, Mapping) else getattr(record, field, None)


def undefined_reason(record: Row, field: str) -> str:
    """Why ``record``'s ``field`` has no value: its own ``undefined`` entry, else the known cause."""
    reasons = _get(record, UNDEFINED_KEY)
    if isinstance(reasons, Mapping) and reasons.get(field):
        return str(reasons[field])
    if field in ("ci_low", "ci_high") and _get(record, "ci_reason"):
        return str(_get(record, "ci_reason"))  # a table row of the retrieval scan
    return UNDEFINED_REASONS.get(field, "not computed")


def _undefined_html(reason: str) -> Markup:
    return Markup('<span class="undefined" title="{0}">undefined ({0})</span>').format(reason)


def _value(record: Row | None, field: str, digits: int = 3) -> Markup:
    """``record``'s ``field`` formatted, or "undefined (reason)" when it is null/NaN."""
    if record is None:
        return Markup("–")
    value = _get(record, field)
    if _is_missing(value):
        return _undefined_html(undefined_reason(record, field))
    return escape(_fmt(value, digits))


def _percent(record: Row, field: str) -> Markup:
    value = _get(record, field)
    if _is_missing(value):
        return _undefined_html(undefined_reason(record, field))
    return escape(_pct(value))


def _interval(record: Row | None) -> Markup:
    """``[low, high] method``, or one "undefined (reason)" when no interval was computed (or
    none is valid at the record's n)."""
    if record is None:
        return Markup("–")
    low, high = _get(record, "ci_low"), _get(record, "ci_high")
    if _is_missing(low) or _is_missing(high):
        return _undefined_html(
            undefined_reason(record, "ci_low" if _is_missing(low) else "ci_high")
        )
    method = _get(record, "ci_method")
    label = method_label(method) if isinstance(method, str) else ""
    return escape(f"[{_fmt(low)}, {_fmt(high)}]" + (f" {label}" if label else ""))


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES_DIR),
        autoescape=select_autoescape(enabled_extensions=("html",), default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = _fmt
    env.filters["pct"] = _pct
    env.globals.update(value=_value, percent=_percent, interval=_interval)
    return env


_ENV: Final = _environment()


def render_section(template: str, **values: Any) -> Markup:
    """Render a fragment template from ``report/templates`` (autoescaped) into safe HTML."""
    return Markup(_ENV.get_template(template).render(**values))


def _sections(items: Iterable[ReportSection]) -> list[ReportSection]:
    """Extra sections with their HTML marked safe (it must be pre-escaped)."""
    return [ReportSection(title=item.title, html=Markup(item.html)) for item in items]


# ------------------------------------------------------------------------------------------------
# Data shaping
# ------------------------------------------------------------------------------------------------


def metric_title(metric: str) -> str:
    """Display name of a metric id (``recall@5`` -> ``Recall@5``)."""
    return METRIC_TITLES.get(metric.lower(), metric)


def ordered_labels(labels: Iterable[str]) -> list[str]:
    """Taxonomy order first (then ``inclusive``), unknown labels after, alphabetically."""
    present = list(dict.fromkeys(str(label) for label in labels))
    known = [label for label in LABEL_ORDER if label in present]
    return known + sorted(label for label in present if label not in LABEL_ORDER)


def ordered_metrics(metrics: Iterable[str]) -> list[str]:
    """Report metrics in :data:`METRIC_ORDER` (case-insensitive), unknown ones after."""
    present = list(dict.fromkeys(str(m) for m in metrics))
    lowered = {m.lower(): m for m in present}
    known = [lowered[m.lower()] for m in METRIC_ORDER if m.lower() in lowered]
    return known + sorted(m for m in present if m not in known)


def _primary_rows(metrics: pd.DataFrame, metric: str) -> pd.DataFrame:
    rows = metrics[metrics["metric"].astype(str).str.lower() == metric.lower()]
    return rows.sort_values(["label", "text_weight"])


def with_gap_to_best(best: pd.DataFrame) -> pd.DataFrame:
    """Add ``gap_to_best`` (relative to the best ``best_recall`` of all labels) if missing."""
    if "gap_to_best" in best.columns or best.empty:
        return best
    out = best.copy()
    top = float(out["best_recall"].max())
    out["gap_to_best"] = (top - out["best_recall"]) / top if top > 0 else math.nan
    return out


def weakest_label_sentence(best: pd.DataFrame, metric: str = PRIMARY_METRIC) -> str | None:
    """E.g. "reasoning is the weakest label: Recall@5 0.61 vs 0.83 best (26.5% relative gap)".

    Only answerable labels compete (not ``inclusive``, not ``unanswerable``, whose recall is 0 by
    construction). None when fewer than two labels or the best value is 0. When every label
    reaches the best value there is no weakest one, and the sentence says they tie.
    """
    if best.empty or "best_recall" not in best.columns:
        return None
    eligible = best[~best["label"].isin({INCLUSIVE, *UNANSWERABLE_LABELS})].dropna(
        subset=["best_recall"]
    )
    if len(eligible) < 2:
        return None
    top = float(eligible["best_recall"].max())
    worst = eligible.loc[eligible["best_recall"].idxmin()]
    if top <= 0:
        return None
    gap = (top - float(worst["best_recall"])) / top
    if gap == 0:
        labels = ", ".join(str(label) for label in eligible["label"])
        return f"no weakest label: {labels} all reach {metric_title(metric)} {top:.2f}"
    return (
        f"{worst['label']} is the weakest label: {metric_title(metric)} "
        f"{float(worst['best_recall']):.2f} vs {top:.2f} best ({gap * 100:.1f}% relative gap)"
    )


@dataclass(frozen=True)
class MatrixRow:
    """One (label, text weight) row of the metric matrix: one cell per metric (the metrics
    table's row, with value, CI and undefined reasons; None where the metric is missing)."""

    label: str
    text_weight: float
    n_questions: int | None
    cells: dict[str, Mapping[str, object] | None]


def metric_matrix(metrics: pd.DataFrame) -> tuple[list[str], list[MatrixRow]]:
    """Rows per (label, text_weight) with one ``{value, ci_low, ci_high}`` cell per metric."""
    names = ordered_metrics(metrics["metric"])
    rows: list[MatrixRow] = []
    for label in ordered_labels(metrics["label"]):
        sub = metrics[metrics["label"] == label]
        for weight in sorted(sub["text_weight"].unique()):
            at = sub[sub["text_weight"] == weight]
            cells = {}
            for name in names:
                hit = at[at["metric"] == name]
                cells[name] = hit.iloc[0].to_dict() if len(hit) else None
            rows.append(
                MatrixRow(
                    label=label,
                    text_weight=float(weight),
                    n_questions=_int_or_none(at["n_questions"].max()),
                    cells=cells,
                )
            )
    return names, rows


def _int_or_none(value: Any) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


# ------------------------------------------------------------------------------------------------
# Plot
# ------------------------------------------------------------------------------------------------


def label_colours(labels: Sequence[str]) -> dict[str, str]:
    """Fixed colour per label: taxonomy labels keep theirs across runs; inclusive is near-black."""
    colours: dict[str, str] = {}
    extra = 0
    for label in labels:
        if label == INCLUSIVE:
            colours[label] = _INCLUSIVE_COLOUR
        elif label in LABELS:
            colours[label] = _PALETTE[LABELS.index(label)]
        else:
            colours[label] = _PALETTE[(len(LABELS) + extra) % len(_PALETTE)]
            extra += 1
    return colours


def _mpl_text(text: str) -> str:
    """Keep matplotlib from reading ``$...$`` in a label as mathtext."""
    return text.replace("$", r"\$")


def plot_metric_vs_weight(metrics: pd.DataFrame, path: Path, metric: str = PRIMARY_METRIC) -> Path:
    """PNG of ``metric`` against ``text_weight``, one line per label with a CI band.

    Draws on a bare :class:`Figure` with the Agg canvas: no pyplot global state, no display, and
    the process-wide matplotlib backend is left alone.
    """
    rows = _primary_rows(metrics, metric)
    labels = ordered_labels(rows["label"])
    colours = label_colours(labels)
    fig = Figure(figsize=(9.0, 4.8), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label in labels:
        group = rows[rows["label"] == label].sort_values("text_weight")
        x = group["text_weight"].astype(float).to_numpy()
        y = group["value"].astype(float).to_numpy()
        low = group["ci_low"].astype(float).to_numpy()
        high = group["ci_high"].astype(float).to_numpy()
        style = "--" if label == INCLUSIVE else "-"
        ax.plot(x, y, style, marker="o", color=colours[label], label=_mpl_text(label))
        ax.fill_between(x, low, high, color=colours[label], alpha=0.15, linewidth=0)
    if not labels:
        ax.text(0.5, 0.5, f"no {metric} rows", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("text_weight (0 = dense only, 1 = lexical only)")
    ax.set_ylabel(metric_title(metric))
    ax.set_title(f"{metric_title(metric)} vs text weight (band: 95% CI)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(0.0, 1.02)
    ax.grid(True, alpha=0.3)
    if labels:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Software": None})
    return path


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportContext:
    """What the report's header and shared sections show: the run, snapshot and QA-set versions,
    when it was made (now when None), which backends and models produced it, extra sections after
    the sets, and where the Data Docs are."""

    run_id: str = "–"
    corpus_snapshot: str = "–"
    qa_set_version: str = "–"
    date: str | None = None
    backends: Mapping[str, str] = field(default_factory=dict)
    extra_sections: Sequence[ReportSection] = ()
    data_docs_href: str = DATA_DOCS_INDEX

    def header(self) -> dict[str, str]:
        date = self.date or datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        return {
            "run_id": self.run_id,
            "corpus_snapshot": self.corpus_snapshot,
            "qa_set_version": self.qa_set_version,
            "date": date,
        }


@dataclass(frozen=True)
class SetView:
    """One QA set's results as a report shows them.

    ``metrics`` and ``best`` are the frames :func:`render_retrieval_report` describes. ``name``
    heads the set's part of a multi-set report (None: a single-set report, no heading);
    ``description`` is one line under it. ``change`` is the comparison with the previous run on
    the same QA-set version (see :func:`ragtrail.pipeline.evaluation_sets.change_since_previous`;
    None: not shown). ``sections`` are extra sections of this set (e.g. its generation funnel).
    """

    metrics: pd.DataFrame
    best: pd.DataFrame
    name: str | None = None
    description: str = ""
    change: Change | None = None
    sections: Sequence[ReportSection] = ()

    @property
    def plot_file(self) -> str:
        """The set's plot: :data:`PLOT_FILE`, or ``recall_at_5_vs_text_weight.<name>.png``."""
        if self.name is None:
            return PLOT_FILE
        stem, _, suffix = PLOT_FILE.rpartition(".")
        return f"{stem}.{safe_name(self.name)}.{suffix}"

    @property
    def anchor(self) -> str:
        """Suffix that keeps element ids unique per set ("" for a single-set report)."""
        return "" if self.name is None else f"-{safe_name(self.name)}"


def render_retrieval_report(
    out_dir: Path,
    *,
    title: str,
    metrics: pd.DataFrame,
    best: pd.DataFrame,
    context: ReportContext,
    quality: Sequence[ValidationResult],
) -> Path:
    """Write ``out_dir/report.html`` and its plot ``out_dir/recall_at_5_vs_text_weight.png``.

    ``metrics`` is long format (label, text_weight, metric, value, ci_low, ci_high, n_questions);
    ``best`` has :data:`BEST_COLUMNS` (``gap_to_best`` is computed when absent; see
    :func:`best_strategy`). ``quality`` are the run's Great Expectations validations. Returns the
    HTML path.
    """
    return render_sets_report(
        out_dir, title=title, sets=[SetView(metrics, best)], context=context, quality=quality
    )


def render_sets_report(
    out_dir: Path,
    *,
    title: str,
    sets: Sequence[SetView],
    context: ReportContext,
    quality: Sequence[ValidationResult],
) -> Path:
    """Write ``out_dir/report.html`` with one part per QA set (best strategy per label, change
    since the previous run, plot, all metrics), one plot PNG per set, and the shared header,
    backends, data-quality and the context's extra sections. Returns the HTML path.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = []
    for view in sets:
        plot_metric_vs_weight(view.metrics, out_dir / view.plot_file)
        best = with_gap_to_best(view.best)
        names, rows = metric_matrix(view.metrics)
        parts.append(
            {
                "name": view.name,
                "anchor": view.anchor,
                "description": view.description,
                "best_rows": best.to_dict(orient="records"),
                "weakest": weakest_label_sentence(best),
                "metric_names": names,
                "metric_titles": {name: metric_title(name) for name in names},
                "matrix_rows": rows,
                "plot_src": view.plot_file,
                "change": view.change,
                "sections": _sections(view.sections),
            }
        )
    html = _ENV.get_template("retrieval_report.html").render(
        title=title,
        header=context.header(),
        backends={str(k): redact(str(v)) for k, v in context.backends.items()},  # no credentials
        sets=parts,
        primary_title=metric_title(PRIMARY_METRIC),
        quality=list(quality),
        data_docs_href=context.data_docs_href,
        extra_sections=_sections(context.extra_sections),
    )
    path = out_dir / REPORT_FILE
    path.write_text(html, encoding="utf-8")
    return path
