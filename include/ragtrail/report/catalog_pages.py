"""The index pages of the published reports: the corpora, and per corpus its nights with the
headline metric's history (an inline SVG) and links to each night's report and Data Docs.

The pages are rendered with the report's Jinja environment (:func:`ragtrail.report.html.render_section`,
autoescaped: every corpus name, run id and reason is escaped). Their links are relative, so the
pages work under any URL prefix; the URL layout they link to is defined here once
(:data:`CORPUS_ROUTE`, :data:`REPORT_FILE_ROUTE`, :data:`CHECKS_FILE_ROUTE`), and a web adapter
serves exactly those routes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from markupsafe import Markup

from ragtrail.report.catalog import CorpusReports, Night, NightListing, SetHeadline
from ragtrail.report.html import (
    DATA_DOCS_INDEX,
    PRIMARY_METRIC,
    REPORT_FILE,
    figure_text,
    label_colours,
    metric_title,
    render_section,
)
from ragtrail.summaries.base import Figure

INDEX_ROUTE: Final = "/"
CORPUS_ROUTE: Final = "/corpora/{corpus}"
REPORT_FILE_ROUTE: Final = "/runs/{report_id}/{path:path}"
CHECKS_FILE_ROUTE: Final = "/corpora/{corpus}/snapshots/{snapshot_id}/data_docs/{path:path}"
"""The routes of the pages and files, relative to where the view is mounted."""

_SVG_WIDTH: Final = 720
_SVG_HEIGHT: Final = 220
_PAD_LEFT, _PAD_RIGHT, _PAD_TOP, _PAD_BOTTOM = 44, 16, 12, 28


def _href(route: str, path: str = "", **segments: str) -> str:
    """``route`` with its ``{name}`` segments (each quoted as one segment) and its
    ``{path:path}`` (quoted, slashes kept) filled in, relative to the view's root."""
    for name, value in segments.items():
        route = route.replace(f"{{{name}}}", quote(value, safe=""))
    return route.replace("{path:path}", quote(path)).lstrip("/")


def corpus_href(corpus: str) -> str:
    """A corpus page, relative to the view's root."""
    return _href(CORPUS_ROUTE, corpus=corpus)


def report_href(report_id: str, path: str = REPORT_FILE) -> str:
    """A file of a published report, relative to the view's root."""
    return _href(REPORT_FILE_ROUTE, path, report_id=report_id)


def checks_href(corpus: str, snapshot_id: str) -> str:
    """The Data Docs of a snapshot's corpus checks, relative to the view's root."""
    return _href(CHECKS_FILE_ROUTE, "index.html", corpus=corpus, snapshot_id=snapshot_id)


def headline_figure(headline: SetHeadline) -> Figure | None:
    """A set's best value over all labels as a figure with its interval and n."""
    row = headline.overall
    if row is None:
        return None
    return Figure(
        value=row.best_recall,
        ci_low=row.ci_low,
        ci_high=row.ci_high,
        n=row.n_questions,
        ci_method=row.ci_method,
    )


@dataclass(frozen=True)
class _Dot:
    x: float
    y: float
    low: float
    high: float
    title: str


@dataclass(frozen=True)
class _Series:
    name: str
    colour: str
    points: str
    dots: tuple[_Dot, ...]


def history_series(nights: Sequence[Night]) -> list[_Series]:
    """The SVG geometry of each set's headline over ``nights`` (newest first, as listed):
    one polyline per set name, oldest night left, with a whisker per interval."""
    ordered = list(reversed(nights))
    names = list(dict.fromkeys(s.name for night in ordered for s in night.sets))
    colours = label_colours(names)
    width = _SVG_WIDTH - _PAD_LEFT - _PAD_RIGHT
    height = _SVG_HEIGHT - _PAD_TOP - _PAD_BOTTOM
    step = width / max(len(ordered) - 1, 1)

    def y_of(value: float) -> float:
        return round(_PAD_TOP + (1.0 - min(max(value, 0.0), 1.0)) * height, 1)

    series = []
    for name in names:
        dots = []
        for i, night in enumerate(ordered):
            headline = next((s for s in night.sets if s.name == name), None)
            figure = headline_figure(headline) if headline else None
            if headline is None or figure is None or figure.value is None:
                continue
            low = figure.ci_low if figure.ci_low is not None else figure.value
            high = figure.ci_high if figure.ci_high is not None else figure.value
            title = (
                f"{night.report_id} — {name} (QA set {headline.qa_set_version}): "
                f"{metric_title(headline.primary_metric)} {figure_text(figure)}, "
                f"n={figure.n}"
            )
            x = round(_PAD_LEFT + i * step, 1)
            dots.append(_Dot(x, y_of(figure.value), y_of(low), y_of(high), title))
        points = " ".join(f"{d.x},{d.y}" for d in dots)
        series.append(_Series(name, colours[name], points, tuple(dots)))
    return series


def render_index(corpora: Sequence[CorpusReports], *, source: str) -> str:
    """The list of corpora with published reports."""
    rows = [(c, corpus_href(c.corpus)) for c in corpora]
    return str(render_section("catalog_index.html", rows=rows, source=source, root=""))


def render_corpus(listing: NightListing, *, source: str) -> str:
    """A corpus's nights, newest first: the headline metric's history and a table with each
    night's sets and links."""
    series = history_series(listing.nights)
    metrics = {s.primary_metric for night in listing.nights for s in night.sets}
    metric = metric_title(metrics.pop() if len(metrics) == 1 else PRIMARY_METRIC)
    rows = [
        {
            "night": night,
            "report": report_href(night.report_id),
            "data_docs": report_href(night.report_id, DATA_DOCS_INDEX),
            "checks": checks_href(night.corpus, night.snapshot_id) if night.snapshot_id else None,
            "sets": [(s, headline_figure(s)) for s in night.sets],
        }
        for night in listing.nights
    ]
    svg = _history_svg(series, metric) if any(s.dots for s in series) else None
    return str(
        render_section(
            "catalog_corpus.html",
            listing=listing,
            rows=rows,
            metric=metric,
            svg=svg,
            legend=series,
            source=source,
            root="../",
        )
    )


def render_problem(title: str, message: str, *, root: str = "") -> str:
    """A page that says why a request could not be served (not found, refused, misconfigured)."""
    return str(render_section("catalog_problem.html", title=title, message=message, root=root))


def _history_svg(series: Sequence[_Series], metric: str) -> Markup:
    grid = [
        (value, round(_PAD_TOP + (1.0 - value) * (_SVG_HEIGHT - _PAD_TOP - _PAD_BOTTOM), 1))
        for value in (0.0, 0.25, 0.5, 0.75, 1.0)
    ]
    return render_section(
        "catalog_history.svg.html",
        series=series,
        grid=grid,
        metric=metric,
        width=_SVG_WIDTH,
        height=_SVG_HEIGHT,
        left=_PAD_LEFT,
        right=_SVG_WIDTH - _PAD_RIGHT,
    )
