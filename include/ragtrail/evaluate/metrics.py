"""IR metrics declared as data, computed by a registry, with trec_eval semantics.

A metric is a :class:`MetricSpec` (a name plus an optional cutoff ``k``), e.g. ``recall@5``. The
computation lives in a :class:`MetricRegistry` that maps each name to a per-query function
``fn(relevant, ranking, k) -> float``. Keeping the two apart lets configs, reports and promotion
gates talk about metrics without importing any computation, and lets new metrics be added without
touching the evaluation loop.

Data shapes (shared with ranx, pytrec_eval and ir_measures):

- qrels: ``dict[qid, dict[docid, grade]]``; ``grade > 0`` means relevant, ``0`` judged
  non-relevant, negative grades are ignored (trec_eval's "unjudged in pool").
- run: ``dict[qid, dict[docid, score]]``; higher score = better.

Conformance with trec_eval (``tests/contract/test_trec_eval_conformance.py``):

- A run is ranked by score descending, ties broken by docid in *descending* lexicographic order
  (trec_eval ``form_res_rels.c``, ``comp_sim_docno``); the rank column of a run file is ignored.
- Only queries present in both qrels and run are evaluated; with ``complete=True``
  (``trec_eval -c``) qrels queries missing from the run are evaluated on an empty ranking, which
  scores 0.
- Queries in the run but not in the qrels are ignored. Queries in the qrels with no relevant
  document are evaluated and score 0 on every metric here, as in trec_eval (they count in num_q).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]
MetricFn = Callable[[Mapping[str, int], Sequence[str], int | None], float]

__all__ = [
    "REGISTRY",
    "MetricDef",
    "MetricFn",
    "MetricRegistry",
    "MetricSpec",
    "Qrels",
    "Run",
    "aggregate",
    "average_precision",
    "evaluate",
    "ndcg",
    "parse_metric",
    "per_query_value",
    "precision",
    "rank_documents",
    "recall",
    "reciprocal_rank",
    "success",
]


# --------------------------------------------------------------------------------------------------
# Metric declarations
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricSpec:
    """One metric to compute: a registry name plus an optional rank cutoff ``k``.

    Identity is ``(name, k)`` only; ``greater_is_better`` and ``description`` are informative
    (filled in by :func:`parse_metric` from the registry) and do not take part in equality.
    """

    name: str
    k: int | None = None
    greater_is_better: bool = field(default=True, compare=False)
    description: str = field(default="", compare=False)
    label: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("metric name must not be empty")
        if self.k is not None and (
            not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1
        ):
            raise ValueError(f"cutoff k must be a positive integer, got {self.k!r}")

    @property
    def id(self) -> str:
        """Canonical string id, e.g. ``recall@5``, ``P@10``, ``mrr``."""
        base = self.label or self.name
        return base if self.k is None else f"{base}@{self.k}"

    def __str__(self) -> str:
        return self.id


@dataclass(frozen=True)
class MetricDef:
    """A registered metric: its per-query function and the metadata a report or gate needs."""

    name: str
    fn: MetricFn
    label: str
    greater_is_better: bool
    description: str
    aliases: tuple[str, ...] = ()


class MetricRegistry:
    """Maps metric names (and aliases, case-insensitively) to per-query functions.

    ``register`` refuses to overwrite a name or alias that is already taken unless
    ``replace=True``, so two modules cannot silently fight over what ``ndcg`` means.
    """

    def __init__(self) -> None:
        self._defs: dict[str, MetricDef] = {}
        self._lookup: dict[str, str] = {}

    def register(
        self,
        name: str,
        fn: MetricFn,
        *,
        label: str | None = None,
        aliases: Iterable[str] = (),
        greater_is_better: bool = True,
        description: str | None = None,
        replace: bool = False,
    ) -> MetricDef:
        """Add a metric; ``description`` defaults to the first paragraph of ``fn``'s docstring."""
        if not name or "@" in name or any(c.isspace() for c in name):
            raise ValueError(f"invalid metric name {name!r}")
        canonical = name.lower()
        keys = [canonical, *(a.lower() for a in aliases)]
        if label:
            keys.append(label.lower())
        if canonical in self._lookup and not replace:
            raise ValueError(
                f"metric {name!r} is already registered; pass replace=True to overwrite it"
            )
        # replace=True only replaces the metric of the same name, never steals another's alias.
        clashes = sorted({k for k in keys if self._lookup.get(k, canonical) != canonical})
        if clashes:
            raise ValueError(f"name(s) {clashes} already belong to other metrics")
        if canonical in self._defs:
            self.unregister(canonical)
        doc = description if description is not None else _first_paragraph(fn.__doc__)
        mdef = MetricDef(
            name=canonical,
            fn=fn,
            label=label or canonical,
            greater_is_better=greater_is_better,
            description=doc,
            aliases=tuple(a.lower() for a in aliases),
        )
        self._defs[mdef.name] = mdef
        for key in keys:
            self._lookup[key] = mdef.name
        return mdef

    def unregister(self, name: str) -> None:
        """Remove a metric and all of its aliases."""
        canonical = self.get(name).name
        del self._defs[canonical]
        self._lookup = {k: v for k, v in self._lookup.items() if v != canonical}

    def get(self, name: str) -> MetricDef:
        """Resolve a name or alias; raise ``KeyError`` listing known names if unknown."""
        canonical = self._lookup.get(name.lower())
        if canonical is None:
            raise KeyError(f"unknown metric {name!r}; known: {', '.join(self.names())}")
        return self._defs[canonical]

    def names(self) -> list[str]:
        """Canonical names, sorted."""
        return sorted(self._defs)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._lookup

    def spec(self, name: str, k: int | None = None) -> MetricSpec:
        """Build a fully described :class:`MetricSpec` for a registered metric."""
        mdef = self.get(name)
        return MetricSpec(
            name=mdef.name,
            k=k,
            greater_is_better=mdef.greater_is_better,
            description=mdef.description,
            label=mdef.label,
        )

    def parse(self, metric_id: str) -> MetricSpec:
        """Parse ``name``, ``name@k`` or a trec_eval-style ``name_k`` (``P_5``, ``ndcg_cut_10``)."""
        text = metric_id.strip()
        if not text:
            raise ValueError("empty metric id")
        if "@" in text:
            name, _, cutoff = text.partition("@")
            if not name or not cutoff:
                raise ValueError(f"malformed metric id {metric_id!r}; expected 'name@k'")
            return self.spec(self._known(name, metric_id), _parse_k(cutoff, metric_id))
        if text in self:
            return self.spec(text)
        head, sep, tail = text.rpartition("_")
        if sep and head in self and tail.isascii() and tail.isdigit():
            return self.spec(head, _parse_k(tail, metric_id))
        raise ValueError(f"unknown metric {metric_id!r}; known: {', '.join(self.names())}")

    def compute(
        self, spec: MetricSpec, relevant: Mapping[str, int], ranking: Sequence[str]
    ) -> float:
        """Score one query's ranking with ``spec``."""
        return float(self.get(spec.name).fn(relevant, ranking, spec.k))

    def _known(self, name: str, metric_id: str) -> str:
        if name not in self:
            raise ValueError(f"unknown metric {metric_id!r}; known: {', '.join(self.names())}")
        return name


def _parse_k(text: str, metric_id: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise ValueError(f"cutoff in {metric_id!r} must be a positive integer, got {text!r}")
    return int(text)


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


# --------------------------------------------------------------------------------------------------
# Per-query metric functions
# --------------------------------------------------------------------------------------------------


def _top(ranking: Sequence[str], k: int | None) -> Sequence[str]:
    return ranking if k is None else ranking[:k]


def _num_relevant(relevant: Mapping[str, int]) -> int:
    return sum(1 for grade in relevant.values() if grade > 0)


def recall(relevant: Mapping[str, int], ranking: Sequence[str], k: int | None) -> float:
    """Recall@k = |relevant ∩ top-k| / |relevant|; 0 when the query has no relevant document.

    trec_eval ``recall_k``. Without ``k`` the whole ranking counts (``num_rel_ret / num_rel``).
    """
    total = _num_relevant(relevant)
    if total == 0:
        return 0.0
    hits = sum(1 for doc in _top(ranking, k) if relevant.get(doc, 0) > 0)
    return hits / total


def precision(relevant: Mapping[str, int], ranking: Sequence[str], k: int | None) -> float:
    """P@k = |relevant ∩ top-k| / k, k fixed even when fewer than k documents were retrieved.

    trec_eval ``P_k``. Without ``k`` the denominator is the ranking length (trec_eval ``set_P``).
    """
    top = _top(ranking, k)
    denominator = k if k is not None else len(top)
    if denominator == 0:
        return 0.0
    return sum(1 for doc in top if relevant.get(doc, 0) > 0) / denominator


def reciprocal_rank(relevant: Mapping[str, int], ranking: Sequence[str], k: int | None) -> float:
    """RR = 1 / rank of the first relevant document (ranks start at 1); 0 if none in the top-k.

    trec_eval ``recip_rank`` (no cutoff); its mean over queries is MRR.
    """
    for rank, doc in enumerate(_top(ranking, k), start=1):
        if relevant.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def ndcg(relevant: Mapping[str, int], ranking: Sequence[str], k: int | None) -> float:
    """nDCG@k = DCG@k / IDCG@k with DCG@k = sum_{i=1..k} grade(d_i) / log2(i + 1).

    Gain is the raw relevance grade (trec_eval's default, not 2^grade - 1); IDCG sorts all judged
    relevant grades of the query descending. 0 when there is nothing relevant. trec_eval
    ``ndcg_cut_k``; without ``k`` the whole ranking and all relevant docs count (trec_eval
    ``ndcg``).
    """
    gains = sorted((g for g in relevant.values() if g > 0), reverse=True)
    ideal = _dcg(_top(gains, k))
    if ideal == 0.0:
        return 0.0
    actual = _dcg([max(relevant.get(doc, 0), 0) for doc in _top(ranking, k)])
    return actual / ideal


def _dcg(gains: Sequence[int]) -> float:
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains) if g > 0)


def average_precision(relevant: Mapping[str, int], ranking: Sequence[str], k: int | None) -> float:
    """AP = (1/R) * sum over ranks i <= k holding a relevant doc of P@i; R = all relevant docs.

    Relevant documents never retrieved contribute 0, so AP is divided by R, not by the hits.
    trec_eval ``map`` (mean over queries); with ``k`` it is trec_eval ``map_cut_k``.
    """
    total = _num_relevant(relevant)
    if total == 0:
        return 0.0
    hits = 0
    summed = 0.0
    for rank, doc in enumerate(_top(ranking, k), start=1):
        if relevant.get(doc, 0) > 0:
            hits += 1
            summed += hits / rank
    return summed / total


def success(relevant: Mapping[str, int], ranking: Sequence[str], k: int | None) -> float:
    """Success@k = 1 if at least one relevant document is in the top-k, else 0 (hit rate).

    trec_eval ``success_k``.
    """
    return 1.0 if any(relevant.get(doc, 0) > 0 for doc in _top(ranking, k)) else 0.0


def _default_registry() -> MetricRegistry:
    registry = MetricRegistry()
    registry.register("recall", recall, aliases=("r",))
    registry.register("precision", precision, label="P", aliases=("prec",))
    registry.register("mrr", reciprocal_rank, aliases=("recip_rank", "rr"))
    registry.register("ndcg", ndcg, aliases=("ndcg_cut",))
    registry.register("map", average_precision, aliases=("ap", "map_cut"))
    registry.register("success", success, aliases=("hit_rate",))
    return registry


REGISTRY = _default_registry()


def parse_metric(metric_id: str, registry: MetricRegistry = REGISTRY) -> MetricSpec:
    """Parse ``"recall@5"``, ``"P@10"``, ``"mrr"``, ``"ndcg_cut_10"``... into a :class:`MetricSpec`.

    Raises ``ValueError`` for an empty id, an unknown name or a cutoff that is not a positive int.
    """
    return registry.parse(metric_id)


# --------------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------------


def rank_documents(scores: Mapping[str, float]) -> list[str]:
    """Doc ids by score descending, ties by doc id descending (trec_eval's ``comp_sim_docno``)."""
    for doc, score in scores.items():
        if math.isnan(score):
            raise ValueError(f"score of document {doc!r} is NaN")
    return [doc for doc, _ in sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]


def per_query_value(
    metric: str | MetricSpec,
    relevant: Mapping[str, int],
    ranking: Sequence[str],
    registry: MetricRegistry = REGISTRY,
) -> float:
    """Score one already-ranked query with one metric id or spec.

    For callers that build rankings themselves (fusion scans) instead of a run's score dict, e.g.
    ``per_query_value("recall@5", {"d1": 1}, ["d3", "d1"]) == 1.0``.
    """
    spec = registry.parse(metric) if isinstance(metric, str) else metric
    return registry.compute(spec, relevant, ranking)


def _resolve(
    metrics: Sequence[str | MetricSpec] | str | MetricSpec, registry: MetricRegistry
) -> list[MetricSpec]:
    if isinstance(metrics, str | MetricSpec):
        metrics = [metrics]
    specs: list[MetricSpec] = []
    for metric in metrics:
        if isinstance(metric, MetricSpec):
            spec = registry.spec(metric.name, metric.k)
        else:
            spec = registry.parse(metric)
        if spec not in specs:
            specs.append(spec)
    if not specs:
        raise ValueError("no metrics requested")
    return specs


def evaluate(
    qrels: Qrels,
    run: Run,
    metrics: Sequence[str | MetricSpec],
    *,
    complete: bool = False,
    registry: MetricRegistry = REGISTRY,
) -> dict[str, dict[str, float]]:
    """Per-query scores: ``{qid: {metric_id: value}}``, qids in sorted order.

    Evaluates the queries present in both ``qrels`` and ``run`` (trec_eval's default). With
    ``complete=True`` (``trec_eval -c``) every qrels query is evaluated, those missing from the run
    on an empty ranking, so they score 0 and pull the mean down. Run-only queries are ignored.
    """
    specs = _resolve(metrics, registry)
    qids = sorted(qrels) if complete else sorted(q for q in qrels if q in run)
    per_query: dict[str, dict[str, float]] = {}
    for qid in qids:
        judged = qrels[qid]
        ranking = rank_documents(run.get(qid, {}))
        per_query[qid] = {spec.id: registry.compute(spec, judged, ranking) for spec in specs}
    return per_query


def aggregate(
    per_query: Mapping[str, Mapping[str, float]], metrics: Sequence[str] | None = None
) -> dict[str, float]:
    """Macro mean over queries for each metric id (all ids of the first query by default).

    Raises ``ValueError`` when there is no query (trec_eval: "No queries with both results and
    relevance info") or when a query lacks a requested metric.
    """
    if not per_query:
        raise ValueError("no queries to aggregate (none in both qrels and run?)")
    ids = list(metrics) if metrics is not None else list(next(iter(per_query.values())))
    means: dict[str, float] = {}
    for metric_id in ids:
        values = []
        for qid, scores in per_query.items():
            if metric_id not in scores:
                raise ValueError(f"query {qid!r} has no value for metric {metric_id!r}")
            values.append(scores[metric_id])
        means[metric_id] = math.fsum(values) / len(values)
    return means
