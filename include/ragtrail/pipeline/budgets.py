"""Cost and time budgets of the night's LLM steps: estimates, affordable n, and a clean stop.

Before a budgeted step instance runs (one QA set's citations, sufficiency or evidence; a
generation run; the judges' calibration), :func:`estimate_step` predicts what one item costs
from the run history (the ``step_usage`` rows of earlier nights: model calls, cache hits,
tokens and wall seconds per item) and the cache (a step whose inputs are the same as an earlier
finished run's replays every call from the content-addressed cache), with documented defaults
where there is no history. :func:`affordable_items` turns the estimate and what the budgets
leave (:func:`remaining_budgets`) into the largest n that fits. :func:`budgeted_step` runs the
instance on that n, asks the budgets again before every model call (the runtime's
:class:`~ragtrail.llm.budget.BudgetGate`), records what it spent in the ledger
(:class:`~ragtrail.storage.budget_store.BudgetStore`), and marks it partial with the reason when
a budget bounded it. A night's usage is read back from the ledger, so a per-night budget holds
across Airflow tasks too.

Airflow-free; the estimate types are what a sizing policy (``target_mde``) caps its n with.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ragtrail.config import BUDGETED_STEPS, BudgetLimits
from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.budget import BudgetExhausted, cost_usd
from ragtrail.llm.usage import Price, UsageCounters, UsageKey
from ragtrail.pipeline.run_io import SetRun, sample_items
from ragtrail.runtime import Runtime
from ragtrail.storage.budget_store import COMPLETE, PARTIAL, RUNNING, BudgetStore, StepUsage
from ragtrail.storage.db import utcnow
from ragtrail.summaries.budget_summary import StepBudgetNote

log = logging.getLogger(__name__)
T = TypeVar("T")

WARM_SECONDS_SHARE = 0.1
"""Without history of a cached rerun, a fully cached item takes this share of a cold item's
seconds (the step's model-free work: retrieval, scoring, storing)."""
SAME_INPUTS_CACHED_SHARE = 1.0
"""The cached share of a step whose inputs fingerprint equals a finished earlier run's with at
least as many items: every request is the same, so every call replays from the cache."""


# ------------------------------------------------------------------------------- estimates


@dataclass(frozen=True)
class StepEstimate:
    """What one budgeted step instance is expected to cost, per item and for ``items`` items.

    ``calls_per_item`` counts requests (cached or not), ``cached_share`` the share of them the
    cache serves (free), so the model calls sent per item are
    ``calls_per_item * (1 - cached_share)``. ``cost_per_call`` is None when a model of the step
    has no price (an endpoint without a ``prices`` entry). ``source`` says where the numbers come
    from (``history (k runs)``, ``same inputs as <night>``, ``default``)."""

    step: str
    scope: str
    items: int
    calls_per_item: float
    cached_share: float
    tokens_per_call: float
    cost_per_call: float | None
    seconds_per_item: float
    source: str

    @property
    def model_calls_per_item(self) -> float:
        return self.calls_per_item * (1.0 - self.cached_share)

    @property
    def tokens_per_item(self) -> float:
        return self.model_calls_per_item * self.tokens_per_call

    @property
    def cost_per_item(self) -> float | None:
        if self.cost_per_call is None:
            return None
        return self.model_calls_per_item * self.cost_per_call

    def for_items(self, n: int) -> JsonObject:
        """Totals for ``n`` items: model calls, tokens, cost (None: unpriced), minutes."""
        cost = self.cost_per_item
        return {
            "items": n,
            "calls": round(n * self.model_calls_per_item, 1),
            "tokens": round(n * self.tokens_per_item),
            "cost_usd": None if cost is None else round(n * cost, 6),
            "minutes": round(n * self.seconds_per_item / 60.0, 3),
        }

    def to_json(self) -> JsonObject:
        totals = self.for_items(self.items)
        out: JsonObject = {
            "step": self.step,
            "scope": self.scope,
            "calls_per_item": round(self.calls_per_item, 3),
            "cached_share": round(self.cached_share, 3),
            "tokens_per_call": round(self.tokens_per_call, 1),
            "cost_per_call": None if self.cost_per_call is None else round(self.cost_per_call, 8),
            "seconds_per_item": round(self.seconds_per_item, 3),
            "source": self.source,
            **totals,
        }
        if totals["cost_usd"] is None:
            out["undefined"] = {"cost_usd": "a model of the step has no price (prices)"}
        return out


@dataclass(frozen=True)
class Remaining:
    """What the budgets leave for one step instance now (None: no ceiling), and which scope
    (night or step) each ceiling comes from."""

    calls: float | None = None
    tokens: float | None = None
    cost_usd: float | None = None
    minutes: float | None = None
    source: Mapping[str, str] = field(default_factory=dict)

    def is_bounded(self) -> bool:
        return any(v is not None for v in (self.calls, self.tokens, self.cost_usd, self.minutes))


def affordable_items(estimate: StepEstimate, budgets: Remaining) -> int | None:
    """The largest n whose estimated calls, tokens, cost and minutes all fit ``budgets``; None
    when no ceiling applies. A ceiling whose per-item use is 0 (everything cached, a local
    model's cost) never binds (None when none binds); an unknown cost against a cost ceiling
    binds at 0 (no spending without a price)."""
    bounds: list[float] = []
    per_item = {
        "calls": estimate.model_calls_per_item,
        "tokens": estimate.tokens_per_item,
        "cost_usd": estimate.cost_per_item,
        "minutes": estimate.seconds_per_item / 60.0,
    }
    for name, per in per_item.items():
        left = getattr(budgets, name)
        if left is None:
            continue
        if per is None:  # unpriced model under a cost ceiling
            bounds.append(0.0)
        elif per > 0:
            bounds.append(max(0.0, left) / per)
        elif left < 0:
            bounds.append(0.0)
    return math.floor(min(bounds) + 1e-9) if bounds else None


def binding_reason(estimate: StepEstimate, budgets: Remaining, n: int) -> str:
    """Which ceiling limits ``estimate`` to ``n`` items, in words."""
    per_item = {
        "calls": (estimate.model_calls_per_item, "model calls"),
        "tokens": (estimate.tokens_per_item, "tokens"),
        "cost_usd": (estimate.cost_per_item, "USD"),
        "minutes": (estimate.seconds_per_item / 60.0, "minutes"),
    }
    best: tuple[float, str] | None = None
    for name, (per, unit) in per_item.items():
        left = getattr(budgets, name)
        if left is None or (per is not None and per <= 0 and left >= 0):
            continue
        fits = 0.0 if per is None or per <= 0 else max(0.0, left) / per
        scope = budgets.source.get(name, "")
        text = (
            f"{scope} {name} budget: {max(0.0, left):.4g} {unit} left, about "
            f"{per if per is not None else float('nan'):.3g} per item"
            if per is not None
            else f"{scope} cost budget: a model of the step has no price"
        )
        if best is None or fits < best[0]:
            best = (fits, text.strip())
    return (best[1] if best else "budget") + f" -> n={n} of {estimate.items}"


def step_fingerprint(step: str, **inputs: Any) -> str:
    """A hash of what a step instance's requests depend on (snapshot, QA-set version, models,
    seed, n, the step's settings): equal fingerprints ask the same requests."""
    text = json.dumps({"step": step, **inputs}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def generation_fingerprint(
    rt: Runtime, corpus: str, snapshot_id: str | None, seed: int | None
) -> str:
    """What a generation run's requests depend on (the quota aside)."""
    settings = rt.settings.generation.model_dump(mode="json")
    settings.pop("per_label", None)
    return step_fingerprint(
        "generation",
        corpus=corpus,
        snapshot=snapshot_id,
        seed=rt.settings.seed if seed is None else seed,
        models=step_models(rt, "generation"),
        settings=settings,
    )


def estimate_step(
    rt: Runtime,
    step: str,
    *,
    corpus: str,
    scope: str,
    items: int,
    fingerprint: str | None = None,
    night: str | None = None,
) -> StepEstimate:
    """The estimate of one instance of ``step`` on ``items`` items (see the module docstring).

    History: the last ``budgets.history_nights`` finished instances of the step on the corpus
    (any corpus when it has none), other than ``night``'s. Reruns (a fingerprint seen before)
    give the seconds of a cached item; first runs give calls, tokens, cost per call, the seconds
    of a cold item and the cached share of new inputs. Without history: the ``budgets.default_*``
    settings and a cached share of 0."""
    bs = rt.settings.budgets
    store = BudgetStore(rt.engine)
    rows = store.history(step, corpus=corpus, before_night=night, limit=200) or store.history(
        step, before_night=night, limit=200
    )
    done = [r for r in _instances(rows) if r.items_done > 0]
    first, reruns = _first_runs_and_reruns(done)
    same = next(
        (
            r
            for r in done
            if fingerprint is not None and r.fingerprint == fingerprint and r.items_done >= items
        ),
        None,
    )
    prices = rt.llm_usage.prices
    if not first and not reruns:
        return StepEstimate(
            step=step,
            scope=scope,
            items=items,
            calls_per_item=bs.default_calls_per_item.get(step, 10.0),
            cached_share=SAME_INPUTS_CACHED_SHARE if same else 0.0,
            tokens_per_call=float(bs.default_tokens_per_call),
            cost_per_call=_default_cost_per_call(rt, step, prices, bs.default_tokens_per_call),
            seconds_per_item=bs.default_seconds_per_item.get(step, 30.0),
            source="default (no history)",
        )
    recent_first = _newest_nights(first, bs.history_nights)
    recent_reruns = _newest_nights(reruns, bs.history_nights)
    basis = recent_first or recent_reruns
    requests = sum(r.calls + r.cache_hits for r in basis)
    n_done = sum(r.items_done for r in basis)
    calls = sum(r.calls for r in basis)
    calls_per_item = requests / n_done if n_done else 0.0
    tokens_per_call = sum(r.tokens for r in basis) / calls if calls else 0.0
    costs = [r.cost_usd for r in basis if r.calls]
    cost_per_call = (
        None
        if any(c is None for c in costs)
        else (sum(c or 0.0 for c in costs) / calls if calls else 0.0)
    )
    if not calls:  # history made no model call: price what the step would send
        cost_per_call = _default_cost_per_call(rt, step, prices, int(tokens_per_call))
    new_share = (
        sum(r.cache_hits for r in recent_first)
        / max(1, sum(r.calls + r.cache_hits for r in recent_first))
        if recent_first
        else 0.0
    )
    cached_share = SAME_INPUTS_CACHED_SHARE if same else new_share
    cold = _seconds_per_item(recent_first)
    warm = _seconds_per_item(recent_reruns)
    if cold is None:
        cold = bs.default_seconds_per_item.get(step, 30.0)
    if warm is None:
        warm = cold * WARM_SECONDS_SHARE
    # a first run's seconds already include its own cache hits (at share new_share)
    cold_uncached = (
        (cold - new_share * warm) / max(1e-9, 1.0 - new_share) if new_share < 1 else cold
    )
    seconds = (1.0 - cached_share) * max(cold_uncached, warm) + cached_share * warm
    source = f"history ({len(recent_first)} first runs, {len(recent_reruns)} reruns)"
    if same:
        source += f"; same inputs as night {same.night}: every call cached"
    return StepEstimate(
        step=step,
        scope=scope,
        items=items,
        calls_per_item=calls_per_item,
        cached_share=cached_share,
        tokens_per_call=tokens_per_call,
        cost_per_call=cost_per_call,
        seconds_per_item=seconds,
        source=source,
    )


def _instances(rows: Sequence[StepUsage]) -> list[StepUsage]:
    """Rows of one instance summed: a scope ``<run>/<part>`` (a generation run's plan, shards
    and finalize, each a task) counts as the instance ``<run>``. Newest first."""
    grouped: dict[tuple[str, str], list[StepUsage]] = {}
    for row in rows:
        grouped.setdefault((row.night, row.scope.split("/", 1)[0]), []).append(row)
    out = []
    for (_night, scope), parts in grouped.items():
        first = parts[-1]
        costs = [p.cost_usd for p in parts]
        out.append(
            replace(
                first,
                scope=scope,
                fingerprint=next((p.fingerprint for p in parts if p.fingerprint), None),
                status=PARTIAL if any(p.partial for p in parts) else first.status,
                started_at=min(p.started_at for p in parts),
                items_planned=max(p.items_planned for p in parts),
                items_run=max(p.items_run for p in parts),
                items_done=max(p.items_done for p in parts),
                calls=sum(p.calls for p in parts),
                cache_hits=sum(p.cache_hits for p in parts),
                failures=sum(p.failures for p in parts),
                prompt_tokens=sum(p.prompt_tokens for p in parts),
                completion_tokens=sum(p.completion_tokens for p in parts),
                cost_usd=None if any(c is None for c in costs) else sum(c or 0.0 for c in costs),
                seconds=sum(p.seconds for p in parts),
            )
        )
    return sorted(out, key=lambda r: r.started_at, reverse=True)


def _first_runs_and_reruns(rows: Sequence[StepUsage]) -> tuple[list[StepUsage], list[StepUsage]]:
    """Rows whose fingerprint appeared in an earlier row are reruns (their calls replay from the
    cache); the others are first runs. ``rows`` newest first; returned newest first."""
    seen: set[str] = set()
    first, reruns = [], []
    for row in reversed(rows):
        if row.fingerprint is not None and row.fingerprint in seen:
            reruns.append(row)
        else:
            first.append(row)
            if row.fingerprint is not None:
                seen.add(row.fingerprint)
    return first[::-1], reruns[::-1]


def _newest_nights(rows: Sequence[StepUsage], nights: int) -> list[StepUsage]:
    keep: list[str] = []
    for row in rows:
        if row.night not in keep:
            keep.append(row.night)
    kept = set(keep[:nights])
    return [r for r in rows if r.night in kept]


def _seconds_per_item(rows: Sequence[StepUsage]) -> float | None:
    n = sum(r.items_done for r in rows)
    return sum(r.seconds for r in rows) / n if n else None


def _default_cost_per_call(
    rt: Runtime, step: str, prices: Mapping[str, Price], tokens: int
) -> float | None:
    """The price of a call of ``tokens`` tokens (half prompt, half completion) to the models of
    ``step``'s roles; None when one of them is an endpoint without a price."""
    from ragtrail.llm.budget import price_of

    worst = 0.0
    for spec in step_models(rt, step):
        backend = "openai" if spec.startswith("openai:") else "local"
        price = price_of(backend, _model_id_of(spec), prices)
        if price is None:
            return None
        worst = max(worst, (tokens / 2) * (price.prompt_per_1k + price.completion_per_1k) / 1000)
    return worst


def step_models(rt: Runtime, step: str) -> list[str]:
    from ragtrail.config import ModelRole

    roles = {
        "calibration": (ModelRole.LABELLER, ModelRole.CRITIC),
        "generation": (ModelRole.GENERATOR, ModelRole.LABELLER, ModelRole.CRITIC),
        "citations": (ModelRole.ANSWERER, ModelRole.JUDGE),
        "sufficiency": (ModelRole.ANSWERER, ModelRole.JUDGE),
        "evidence": (ModelRole.ANSWERER, ModelRole.EXTRACTOR),
    }.get(step, ())
    return sorted({rt.settings.model_for(role) for role in roles})


def _model_id_of(spec: str) -> str:
    """The model id an ``openai:<model>@<url>`` spec reports (what the price table is keyed by)."""
    return spec.removeprefix("openai:").split("@", 1)[0]


# -------------------------------------------------------------------------------- the night


def night_of(rt: Runtime, corpus: str) -> str:
    """The night whose budget a step counts against.

    ``ragtrail nightly`` sets ``rt.budget_night`` (its run id). An Airflow task (its own
    process, no such attribute) joins the corpus's newest night started within
    ``budgets.night_window_hours``, or opens one named after the hour it starts."""
    night = getattr(rt, "budget_night", None)
    store = BudgetStore(rt.engine)
    if night:
        store.open_night(night, corpus)
        return str(night)
    now = utcnow()
    window = timedelta(hours=rt.settings.budgets.night_window_hours)
    found = store.latest_night_since(corpus, now - window)
    if found:
        return found
    night = f"{corpus}@{now:%Y%m%dT%H}"
    store.open_night(night, corpus, started_at=now)
    return night


def remaining_budgets(
    rt: Runtime,
    step: str,
    night: str,
    *,
    exclude: tuple[str, str] | None = None,
    live: UsageCounters | None = None,
    live_cost: float | None = 0.0,
    step_started: float | None = None,
) -> Remaining:
    """What the night's and the step's ceilings leave now: each ceiling minus the ledger's rows
    of the night (of the step) and the ``live`` usage of the instance asking (not yet in the
    ledger), the tighter of the two; minutes from the night's start (less
    ``budgets.reserve_minutes``) and the step's first instance's start."""
    bs = rt.settings.budgets
    limits: BudgetLimits = getattr(bs.steps, step) if step in BUDGETED_STEPS else BudgetLimits()
    store = BudgetStore(rt.engine)
    live = live or UsageCounters()
    live_tokens = live.prompt_tokens + live.completion_tokens
    out: dict[str, float | None] = {
        "calls": None,
        "tokens": None,
        "cost_usd": None,
        "minutes": None,
    }
    source: dict[str, str] = {}

    def tighten(name: str, value: float | None, scope: str) -> None:
        if value is None:
            return
        if out[name] is None or value < (out[name] or 0.0):
            out[name], source[name] = value, scope

    now = utcnow()
    for scope, ceiling, spent in (
        ("night", bs.night, store.spent(night, exclude=exclude)),
        (f"step {step}", limits, store.spent(night, step, exclude=exclude)),
    ):
        if not ceiling.is_set():
            continue
        if ceiling.max_calls is not None:
            tighten("calls", ceiling.max_calls - spent.calls - live.calls, scope)
        if ceiling.max_tokens is not None:
            tighten("tokens", ceiling.max_tokens - spent.tokens - live_tokens, scope)
        if ceiling.max_cost_usd is not None:
            used = (
                None if spent.cost_usd is None or live_cost is None else spent.cost_usd + live_cost
            )
            # unknown spending under a cost ceiling: nothing more may be spent
            tighten("cost_usd", -1.0 if used is None else ceiling.max_cost_usd - used, scope)
        if ceiling.max_minutes is not None:
            if scope == "night":
                start = spent.started_at or now
                elapsed = (now - start).total_seconds() / 60.0
                left = ceiling.max_minutes - bs.reserve_minutes - elapsed
            else:
                first = _step_start(store, night, step)
                mine = (time.monotonic() - step_started) / 60.0 if step_started is not None else 0.0
                elapsed = (now - first).total_seconds() / 60.0 if first else mine
                left = ceiling.max_minutes - max(elapsed, mine)
            tighten("minutes", left, scope)
    return Remaining(**out, source=source)


def _step_start(store: BudgetStore, night: str, step: str) -> datetime | None:
    rows = [r for r in store.night_rows(night) if r.step == step]
    return min((r.started_at for r in rows), default=None)


def exhausted_reason(remaining: Remaining) -> str | None:
    """Why no further model call may be made (a ceiling at or below 0), or None."""
    for name, unit in (
        ("calls", "model calls"),
        ("tokens", "tokens"),
        ("cost_usd", "USD"),
        ("minutes", "minutes"),
    ):
        left = getattr(remaining, name)
        if left is not None and left <= 0:
            return f"{remaining.source.get(name, '')} {name} budget used up ({unit})".strip()
    return None


# ------------------------------------------------------------------------ a budgeted step


@dataclass
class Allowance:
    """What :func:`budgeted_step` lets an instance do: ``items`` to run (``items_planned``
    asked), why fewer (``reason``), and :meth:`done` to report what it finished."""

    step: str
    scope: str
    items_planned: int
    items: int
    estimate: StepEstimate
    reason: str | None = None
    items_done: int = 0
    note: StepBudgetNote | None = None
    start_counts: UsageCounters = field(default_factory=UsageCounters)
    start_snapshot: Mapping[UsageKey, UsageCounters] = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic)
    night: str = ""
    corpus: str = ""
    aside: UsageCounters = field(default_factory=UsageCounters)
    aside_seconds: float = 0.0
    aside_cost: float | None = 0.0

    @contextmanager
    def calibrating(self, rt: Runtime, what: str) -> Iterator[None]:
        """Account a one-off judge calibration made inside the step (cached once done) to the
        ``calibration`` step, not to this one: its calls would skew this step's per-item
        estimate for the nights after, which find it calibrated. It still counts against the
        night's budget (its own ledger row)."""
        before, snap, t0, started = (
            rt.llm_usage.totals(),
            rt.llm_usage.snapshot(),
            time.monotonic(),
            utcnow(),
        )
        try:
            yield
        finally:
            used = _delta(rt.llm_usage.totals(), before)
            seconds = time.monotonic() - t0
            cost = _cost_since(rt, snap)
            self.aside = _sum(self.aside, used)
            self.aside_seconds += seconds
            self.aside_cost = (
                None if cost is None or self.aside_cost is None else self.aside_cost + cost
            )
            BudgetStore(rt.engine).record(
                StepUsage(
                    night=self.night,
                    corpus=self.corpus,
                    step="calibration",
                    scope=f"{self.scope}/{self.step}-{what}",
                    status=COMPLETE,
                    started_at=started,
                    finished_at=utcnow(),
                    calls=used.calls,
                    cache_hits=used.cache_hits,
                    failures=used.failures,
                    prompt_tokens=used.prompt_tokens,
                    completion_tokens=used.completion_tokens,
                    cost_usd=cost,
                    seconds=seconds,
                )
            )

    @property
    def partial(self) -> bool:
        return self.reason is not None

    def done(self, n: int) -> None:
        self.items_done = n

    def note_now(self, rt: Runtime) -> StepBudgetNote:
        """The instance's note so far (for a summary written before the step ends)."""
        used = _delta(_delta(rt.llm_usage.totals(), self.start_counts), self.aside)
        return StepBudgetNote(
            step=self.step,
            scope=self.scope,
            items_planned=self.items_planned,
            items_run=self.items,
            items_done=self.items_done,
            partial=self.partial,
            reason=self.reason,
            calls=used.calls,
            cache_hits=used.cache_hits,
            tokens=used.prompt_tokens + used.completion_tokens,
            cost_usd=_less(_cost_since(rt, self.start_snapshot), self.aside_cost),
            seconds=round(time.monotonic() - self.t0 - self.aside_seconds, 3),
        )


@contextmanager
def budgeted_step(
    rt: Runtime,
    step: str,
    *,
    corpus: str,
    scope: str,
    planned: int,
    fingerprint: str | None = None,
    gate: bool = True,
) -> Iterator[Allowance]:
    """Run one instance of ``step`` under the budgets (see the module docstring).

    Yields the :class:`Allowance` (run ``allowance.items`` items; 0 means the budgets afford
    none: raise nothing, run nothing). While the body runs, every model call first asks the
    budgets; one that is used up raises :class:`~ragtrail.llm.budget.BudgetExhausted`, which is
    recorded (partial, the reason) and goes on to the caller, who keeps what was finished. The
    instance's row in the ledger is written at the start (``running``) and at the end.
    ``gate=False`` records without stopping model calls (a part that cannot stop half-way)."""
    night = night_of(rt, corpus)
    store = BudgetStore(rt.engine)
    key = (step, scope)
    estimate = estimate_step(
        rt, step, corpus=corpus, scope=scope, items=planned, fingerprint=fingerprint, night=night
    )
    left = remaining_budgets(rt, step, night, exclude=key)
    fits = affordable_items(estimate, left)
    run = planned if fits is None else max(0, min(planned, fits))
    allowance = Allowance(step, scope, planned, run, estimate)
    if run < planned:
        allowance.reason = binding_reason(estimate, left, run)
        log.warning("%s %s: %s", step, scope, allowance.reason)
    started_at, t0 = utcnow(), time.monotonic()
    start_counts = rt.llm_usage.totals()
    start_snapshot = rt.llm_usage.snapshot()
    allowance.start_counts, allowance.start_snapshot, allowance.t0 = (
        start_counts,
        start_snapshot,
        t0,
    )
    allowance.night, allowance.corpus = night, corpus

    def row(status: str) -> StepUsage:
        used = _delta(_delta(rt.llm_usage.totals(), start_counts), allowance.aside)
        return StepUsage(
            night=night,
            corpus=corpus,
            step=step,
            scope=scope,
            status=status,
            started_at=started_at,
            finished_at=None if status == RUNNING else utcnow(),
            items_planned=allowance.items_planned,
            items_run=allowance.items,
            items_done=allowance.items_done,
            calls=used.calls,
            cache_hits=used.cache_hits,
            failures=used.failures,
            prompt_tokens=used.prompt_tokens,
            completion_tokens=used.completion_tokens,
            cost_usd=_less(_cost_since(rt, start_snapshot), allowance.aside_cost),
            seconds=time.monotonic() - t0 - allowance.aside_seconds,
            fingerprint=fingerprint,
            reason=allowance.reason,
        )

    def check() -> str | None:
        # what the calibrations inside spent is in the ledger already (their own rows)
        used = _delta(_delta(rt.llm_usage.totals(), start_counts), allowance.aside)
        now_left = remaining_budgets(
            rt,
            step,
            night,
            exclude=key,
            live=used,
            live_cost=_less(_cost_since(rt, start_snapshot), allowance.aside_cost),
            step_started=t0,
        )
        return exhausted_reason(now_left)

    store.record(row(RUNNING))
    if gate:
        rt.budget_gate.push(check)
    try:
        yield allowance
    except BudgetExhausted as exc:
        allowance.reason = (
            f"{exc.reason}; stopped after {allowance.items_done} of {allowance.items} items "
            "(its model calls are cached)"
            if allowance.items > 0
            else exc.reason
        )
        stopped = row(PARTIAL)
        store.record(stopped)
        allowance.note = exc.note = _note(stopped)
        raise
    finally:
        rt.budget_gate.pop(check)
    final = row(PARTIAL if allowance.partial else COMPLETE)
    store.record(final)
    allowance.note = _note(final)


def _note(u: StepUsage) -> StepBudgetNote:
    return StepBudgetNote(
        step=u.step,
        scope=u.scope,
        items_planned=u.items_planned,
        items_run=u.items_run,
        items_done=u.items_done,
        partial=u.partial,
        reason=u.reason,
        calls=u.calls,
        cache_hits=u.cache_hits,
        tokens=u.tokens,
        cost_usd=u.cost_usd,
        seconds=round(u.seconds, 3),
    )


def _delta(now: UsageCounters, start: UsageCounters) -> UsageCounters:
    return UsageCounters(
        calls=now.calls - start.calls,
        cache_hits=now.cache_hits - start.cache_hits,
        failures=now.failures - start.failures,
        prompt_tokens=now.prompt_tokens - start.prompt_tokens,
        completion_tokens=now.completion_tokens - start.completion_tokens,
    )


def _sum(a: UsageCounters, b: UsageCounters) -> UsageCounters:
    return _delta(a, _delta(UsageCounters(), b))


def _less(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 6)


def _cost_since(rt: Runtime, start: Mapping[UsageKey, UsageCounters]) -> float | None:
    now = rt.llm_usage.snapshot()
    diff = {k: _delta(v, start.get(k, UsageCounters())) for k, v in now.items()}
    return cost_usd(diff, rt.llm_usage.prices)


def night_budget_notes(rt: Runtime, night: str) -> list[StepBudgetNote]:
    """Every budgeted step instance of ``night`` as a note (for the report and the CLI)."""
    return [_note(u) for u in BudgetStore(rt.engine).night_rows(night)]


def keep_finished(allowance: Allowance, attempt: Callable[[int], T]) -> T:
    """``attempt(allowance.items)``; when a budget stops it mid-way, keep what it finished.

    Everything a stopped attempt received from the model is cached, and a smaller sample is a
    prefix of a larger one, so the largest n whose every call is cached is found by running the
    attempt again on fewer items (a binary search; the budget stays used up, so an attempt that
    needs one more model call stops at once). That n is then run once more, cleanly, so what is
    stored is one consistent result, marked partial with the reason. Nothing finished: the
    budget's exception goes on."""
    try:
        return attempt(allowance.items)
    except BudgetExhausted as exc:
        stopped = exc
    low, high = 0, allowance.items  # attempt(high) stopped; attempt(low) is the best that ran
    while high - low > 1:
        mid = (low + high) // 2
        try:
            attempt(mid)
            low = mid
        except BudgetExhausted:
            high = mid
    if low == 0:
        raise stopped
    asked = allowance.items
    allowance.items = low
    allowance.reason = (
        f"{stopped.reason}; kept the {low} of {asked} items finished before it (replayed from "
        "the cache)"
    )
    log.warning("%s %s: %s", allowance.step, allowance.scope, allowance.reason)
    return attempt(low)


def budget_stop(exc: BudgetExhausted) -> JsonObject:
    """A task's result for an instance a budget stopped: partial, the reason and its note."""
    note = exc.note.to_json() if isinstance(exc.note, StepBudgetNote) else None
    return {"partial": True, "budget_reason": exc.reason, "budget": note}


@contextmanager
def budgeted_set_step(
    rt: Runtime,
    step: str,
    opened: SetRun,
    *,
    max_items: int,
    seed: int,
    settings: Mapping[str, Any],
) -> Iterator[Allowance]:
    """:func:`budgeted_step` for one QA set's answer-side evaluation (citations, sufficiency,
    evidence): the planned n is the set's sample (``max_items``, 0 = all), the instance is the
    set's run, and its fingerprint the snapshot, QA-set version, models, seed and the step's
    settings (``max_items`` aside: a smaller sample is a prefix of a larger one, so its calls are
    cached). Raises :class:`~ragtrail.llm.budget.BudgetExhausted` (recorded as partial) when the
    budgets afford no item."""
    planned = len(sample_items(opened.items, max_items, seed))
    fingerprint = step_fingerprint(
        step,
        corpus=opened.corpus,
        snapshot=opened.snapshot_id,
        qa_set_version=opened.qa_version,
        seed=seed,
        models=step_models(rt, step),
        settings={k: v for k, v in settings.items() if k != "max_items"},
    )
    with budgeted_step(
        rt,
        step,
        corpus=opened.corpus,
        scope=opened.run_id,
        planned=planned,
        fingerprint=fingerprint,
    ) as allowance:
        if allowance.items <= 0:
            raise BudgetExhausted(allowance.reason or "no budget left")
        yield allowance
