"""Great Expectations suites, as code, for every table ragtrail produces.

Each function returns a fresh :class:`great_expectations.ExpectationSuite` (not yet attached to
any Data Context; :class:`ragtrail.quality.runner.QualityRunner` adds it). Every expectation
carries its gate policy in ``meta``:

- ``meta["severity"] == "fail"``: a broken invariant. A failed *fail* expectation makes the
  validation unsuccessful and :func:`ragtrail.quality.runner.enforce` stops the run.
- ``meta["severity"] == "warn"``: a smell worth a look (odd sizes, thin label samples). Failed
  *warn* expectations are listed in the report and in Data Docs but never stop a run.

``meta["rationale"]`` says in one line why the expectation exists; it shows up in failure messages.

Some invariants are not row-local (chunks per document, "the interval contains the point
estimate"). They are checked on derived columns that :func:`prepare_chunks` and
:func:`prepare_retrieval_results` add, so the suites stay plain GX expectations that Data Docs can
render. Validate the *prepared* frames.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd
from great_expectations.expectations.row_conditions import Column

from ragtrail.jsonsafe import JsonObject
from ragtrail.records import DocFormat, LabelSource, QuarantineReason, QuestionLabel
from ragtrail.text import SOURCE_REFERENCE_PATTERNS, text_key

Severity = Literal["fail", "warn"]
FAIL: Final = "fail"
WARN: Final = "warn"

DOCUMENTS_SUITE: Final = "documents"
CHUNKS_SUITE: Final = "chunks"
RETRIEVAL_RESULTS_SUITE: Final = "retrieval_results"
QUARANTINE_SUITE: Final = "quarantine"

DEFAULT_MAX_TEXT_CHARS: Final = 50_000_000
"""Upper bound on extracted characters per document (warn): far above any sane document."""

DEFAULT_MAX_CHUNKS_PER_DOC: Final = 500
DEFAULT_MAX_CHUNK_CHARS: Final = 4000
"""The chunker's default character bound (``ChunkingSettings.char_limit`` with default budgets)."""
LONG_WORD_CHARS: Final = 50
"""A whitespace-separated run longer than this is no word of prose: base64, minified code or
JSON, a data dump, a hash. Such runs are single unknown tokens to the embedder."""
MAX_LONG_WORD_SHARE: Final = 0.5
"""A chunk whose text is more than this share long runs (by characters) is flagged (warn)."""
WEIGHT_DECIMALS: Final = 6
"""``text_weight`` is rounded to this many decimals before the set comparison (float noise)."""

CI_TOLERANCE: Final = 1e-9
CHUNK_KINDS: Final[tuple[str, ...]] = ("text", "table")

DOCUMENT_COLUMNS: Final = (
    "doc_id",
    "title",
    "format",
    "content_hash",
    "size_bytes",
    "n_chunks",
    "text_chars",
)
CHUNK_COLUMNS: Final = ("chunk_id", "doc_id", "ordinal", "text", "n_tokens", "kind")
RETRIEVAL_RESULT_COLUMNS: Final = (
    "label",
    "text_weight",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "n_questions",
)
QUARANTINE_COLUMNS: Final = ("reason", "detail")


def policy(severity: Severity, rationale: str) -> JsonObject:
    """The ``meta`` dict that carries an expectation's gate policy."""
    if severity not in (FAIL, WARN):
        raise ValueError(f"severity must be 'fail' or 'warn', got {severity!r}")
    return {"severity": severity, "rationale": rationale}


def severity_of(meta: JsonObject | None) -> Severity:
    """Severity recorded in an expectation's ``meta``; a missing policy counts as ``fail``."""
    value = (meta or {}).get("severity", FAIL)
    return WARN if value == WARN else FAIL


def _suite(name: str, description: str, expectations: list[gxe.Expectation]) -> gx.ExpectationSuite:
    return gx.ExpectationSuite(
        name=name,
        expectations=expectations,
        meta={"ragtrail": {"description": description}},
    )


def _columns_present(columns: Iterable[str]) -> gxe.Expectation:
    return gxe.ExpectTableColumnsToMatchSet(
        column_set=list(columns),
        exact_match=False,
        meta=policy(FAIL, "the producing stage wrote every column the suite checks"),
    )


# ------------------------------------------------------------------------------------------------
# documents
# ------------------------------------------------------------------------------------------------


def documents_suite(
    max_bytes: int, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
) -> gx.ExpectationSuite:
    """Suite over the documents of one snapshot (columns :data:`DOCUMENT_COLUMNS`).

    fail: columns present; ``doc_id`` not null and unique; ``content_hash`` not null, 64 lowercase
    hex characters; ``format`` a known :class:`DocFormat`; ``n_chunks >= 1``;
    ``size_bytes <= max_bytes``.
    warn: ``1 <= text_chars <= max_text_chars``; ``title`` not null.
    """
    expectations: list[gxe.Expectation] = [
        _columns_present(DOCUMENT_COLUMNS),
        gxe.ExpectColumnValuesToNotBeNull(
            column="doc_id", meta=policy(FAIL, "doc_id is the primary key")
        ),
        gxe.ExpectColumnValuesToBeUnique(
            column="doc_id", meta=policy(FAIL, "doc_id is the primary key")
        ),
        gxe.ExpectColumnValuesToNotBeNull(
            column="content_hash", meta=policy(FAIL, "caches and change detection key on it")
        ),
        gxe.ExpectColumnValueLengthsToEqual(
            column="content_hash", value=64, meta=policy(FAIL, "content_hash is a SHA-256 hex")
        ),
        gxe.ExpectColumnValuesToMatchRegex(
            column="content_hash",
            regex=r"^[0-9a-f]{64}$",
            meta=policy(FAIL, "content_hash is a lowercase SHA-256 hex digest"),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="format",
            value_set=[f.value for f in DocFormat],
            meta=policy(FAIL, "only parsers for these formats exist"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="n_chunks",
            min_value=1,
            meta=policy(FAIL, "a document without chunks can never be retrieved"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="size_bytes",
            max_value=max_bytes,
            meta=policy(FAIL, "larger files must have been quarantined as too_large"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="text_chars",
            min_value=1,
            max_value=max_text_chars,
            meta=policy(WARN, "extracted text is empty or implausibly long"),
        ),
        gxe.ExpectColumnValuesToNotBeNull(
            column="title", meta=policy(WARN, "reports and citations show the title")
        ),
    ]
    return _suite(DOCUMENTS_SUITE, "documents of one corpus snapshot", expectations)


# ------------------------------------------------------------------------------------------------
# chunks
# ------------------------------------------------------------------------------------------------


def long_word_share(text: str) -> float:
    """Share of the non-space characters of ``text`` in runs longer than
    :data:`LONG_WORD_CHARS` (0.0 for prose, near 1.0 for base64 or minified JSON)."""
    words = text.split()
    total = sum(len(w) for w in words)
    if not total:
        return 0.0
    return sum(len(w) for w in words if len(w) > LONG_WORD_CHARS) / total


def prepare_chunks(chunks: pd.DataFrame) -> pd.DataFrame:
    """Copy of ``chunks`` with ``chunks_in_doc`` (number of chunks of the row's document) and
    ``long_word_share`` (:func:`long_word_share` of the row's text)."""
    out = chunks.copy()
    out["chunks_in_doc"] = out.groupby("doc_id", dropna=False)["doc_id"].transform("size")
    out["long_word_share"] = out["text"].map(
        lambda text: long_word_share(text) if isinstance(text, str) else 0.0
    )
    return out


def chunks_suite(
    max_tokens: int,
    max_table_tokens: int,
    max_chunks_per_doc: int = DEFAULT_MAX_CHUNKS_PER_DOC,
    max_chars: int = DEFAULT_MAX_CHUNK_CHARS,
) -> gx.ExpectationSuite:
    """Suite over chunks prepared by :func:`prepare_chunks` (:data:`CHUNK_COLUMNS` +
    chunks_in_doc + long_word_share).

    fail: columns present; ``chunk_id`` not null and unique; ``text`` not null and non-empty;
    ``len(text) <= max_chars``; ``1 <= n_tokens <= max(max_tokens, max_table_tokens)``; text
    chunks ``n_tokens <= max_tokens``; ``kind`` in {text, table}.
    warn: ``1 <= chunks_in_doc <= max_chunks_per_doc``; ``long_word_share <=``
    :data:`MAX_LONG_WORD_SHARE` (a chunk made of base64, minified code or a data dump).
    """
    expectations: list[gxe.Expectation] = [
        _columns_present((*CHUNK_COLUMNS, "chunks_in_doc", "long_word_share")),
        gxe.ExpectColumnValuesToNotBeNull(
            column="chunk_id", meta=policy(FAIL, "chunk_id is the primary key")
        ),
        gxe.ExpectColumnValuesToBeUnique(
            column="chunk_id", meta=policy(FAIL, "chunk_id is the primary key")
        ),
        gxe.ExpectColumnValuesToNotBeNull(
            column="text", meta=policy(FAIL, "an empty chunk cannot be retrieved")
        ),
        gxe.ExpectColumnValueLengthsToBeBetween(
            column="text", min_value=1, meta=policy(FAIL, "an empty chunk cannot be retrieved")
        ),
        gxe.ExpectColumnValueLengthsToBeBetween(
            column="text",
            max_value=max_chars,
            meta=policy(
                FAIL,
                "chunks respect chunking.max_chars: a search result or an LLM prompt never "
                "carries megabytes of one overlong token",
            ),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="n_tokens",
            min_value=1,
            max_value=max(max_tokens, max_table_tokens),
            meta=policy(FAIL, "no chunk may exceed the table budget (embedder truncates)"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="n_tokens",
            max_value=max_tokens,
            row_condition=Column("kind") == "text",
            meta=policy(FAIL, "text chunks respect chunking.max_tokens"),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="kind",
            value_set=list(CHUNK_KINDS),
            meta=policy(FAIL, "the chunker only emits text and table chunks"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="chunks_in_doc",
            min_value=1,
            max_value=max_chunks_per_doc,
            meta=policy(WARN, "very long documents dominate the index"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="long_word_share",
            max_value=MAX_LONG_WORD_SHARE,
            meta=policy(
                WARN,
                f"a chunk mostly made of runs over {LONG_WORD_CHARS} characters (base64, "
                "minified code or JSON, a data dump) is noise to search and to an LLM",
            ),
        ),
    ]
    return _suite(CHUNKS_SUITE, "chunks of one corpus snapshot", expectations)


# ------------------------------------------------------------------------------------------------
# retrieval results
# ------------------------------------------------------------------------------------------------


def round_weight(weight: float) -> float:
    """Canonical form of a ``text_weight`` for set comparisons."""
    return round(float(weight), WEIGHT_DECIMALS)


def prepare_retrieval_results(metrics: pd.DataFrame) -> pd.DataFrame:
    """Copy of a long-format metrics frame with rounded ``text_weight`` and ``ci_contains_value``.

    ``ci_contains_value`` is True when ``ci_low <= value <= ci_high`` (within
    :data:`CI_TOLERANCE`) or when either bound is missing (no interval was computed: null with
    its reason in the records' ``undefined`` mapping, which is dropped here as it is no column
    GX can check).
    """
    out = metrics.drop(columns=["undefined"], errors="ignore")
    out["text_weight"] = pd.to_numeric(out["text_weight"]).round(WEIGHT_DECIMALS)
    value = pd.to_numeric(out["value"])
    low = pd.to_numeric(out["ci_low"])
    high = pd.to_numeric(out["ci_high"])
    out["ci_contains_value"] = interval_holds(value, low, high)
    return out


def interval_holds(value: pd.Series, low: pd.Series, high: pd.Series) -> pd.Series:
    """``low <= value <= high`` (within :data:`CI_TOLERANCE`), or True where a bound is missing
    (no interval was computed; its reason travels in the records, not in a column)."""
    missing = low.isna() | high.isna()
    inside = (low <= value + CI_TOLERANCE) & (value <= high + CI_TOLERANCE)
    return (missing | inside).astype(bool)


def retrieval_results_suite(
    labels: Iterable[str], weights: Iterable[float], min_questions_per_label: int
) -> gx.ExpectationSuite:
    """Suite over a metrics frame prepared by :func:`prepare_retrieval_results`.

    fail: columns present; ``value`` not null and in [0, 1]; ``ci_contains_value`` is True; every
    expected label and every expected text weight occurs.
    warn: ``n_questions >= min_questions_per_label``.
    """
    expectations: list[gxe.Expectation] = [
        _columns_present((*RETRIEVAL_RESULT_COLUMNS, "ci_contains_value")),
        gxe.ExpectColumnValuesToNotBeNull(
            column="value", meta=policy(FAIL, "every (label, weight, metric) cell was computed")
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="value",
            min_value=0.0,
            max_value=1.0,
            meta=policy(FAIL, "all reported IR metrics are proportions"),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="ci_contains_value",
            value_set=[True],
            meta=policy(FAIL, "a bootstrap interval must contain its point estimate"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="n_questions",
            min_value=min_questions_per_label,
            meta=policy(WARN, "too few questions make a label's numbers noise"),
        ),
        gxe.ExpectColumnDistinctValuesToContainSet(
            column="label",
            value_set=list(labels),
            meta=policy(FAIL, "every label of the taxonomy is reported"),
        ),
        gxe.ExpectColumnDistinctValuesToContainSet(
            column="text_weight",
            value_set=sorted({round_weight(w) for w in weights}),
            meta=policy(FAIL, "every configured text weight was evaluated"),
        ),
    ]
    return _suite(RETRIEVAL_RESULTS_SUITE, "per-label retrieval metrics", expectations)


# ------------------------------------------------------------------------------------------------
# quarantine
# ------------------------------------------------------------------------------------------------


def quarantine_suite() -> gx.ExpectationSuite:
    """Suite over quarantine rows (:data:`QUARANTINE_COLUMNS`).

    fail: columns present; ``reason`` not null and a known :class:`QuarantineReason`; ``detail``
    not null. An empty frame passes (nothing was quarantined).
    """
    expectations: list[gxe.Expectation] = [
        _columns_present(QUARANTINE_COLUMNS),
        gxe.ExpectColumnValuesToNotBeNull(
            column="reason", meta=policy(FAIL, "reports group quarantined files by reason")
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="reason",
            value_set=[r.value for r in QuarantineReason],
            meta=policy(FAIL, "reason codes are a stable enum"),
        ),
        gxe.ExpectColumnValuesToNotBeNull(
            column="detail", meta=policy(FAIL, "an operator needs to know what went wrong")
        ),
    ]
    return _suite(QUARANTINE_SUITE, "files refused at ingestion", expectations)


# ------------------------------------------------------------------------------------------------
# test sets
# ------------------------------------------------------------------------------------------------

TESTSET_SUITE: Final = "testset"
TESTSET_BALANCE_SUITE: Final = "testset_balance"
TESTSET_COLUMNS: Final = (
    "qid",
    "question",
    "label",
    "answer",
    "candidate_id",
    "corpus",
    "snapshot_id",
    "doc_id",
    "doc_content_hash",
    "chunk_id",
    "chunk_hash",
    "statement_kind",
    "requested_label",
    "label_source",
    "generator",
    "critiques",
)
LINEAGE_COLUMNS: Final = TESTSET_COLUMNS[4:13]
CONTEXT_REFERENCE = "|".join(SOURCE_REFERENCE_PATTERNS)
"""Questions that lean on an unseen context cannot be asked of a search system (the patterns the
generation check ``mentions_passage`` rejects on, so accepted items pass this suite)."""


def prepare_testset(items: pd.DataFrame, expected_critiques: Iterable[int]) -> pd.DataFrame:
    """Add the derived columns the test-set suite checks.

    ``question_key`` (:func:`ragtrail.text.text_key`, the key dedup uses; must be unique),
    ``mentions_context``, ``answer_ok`` (answerable labels need a non-empty answer), ``critiques_complete`` (every
    critique that applies to the item — row-aligned ``expected_critiques`` — has a rating) and flat
    lineage columns from the ground ids.
    """
    import json

    out = items.copy()
    out["doc_id"] = out["ground_doc_ids"].map(lambda ids: ids[0] if len(ids) else None)
    out["chunk_id"] = out["ground_chunk_ids"].map(lambda ids: ids[0] if len(ids) else None)
    out["question_key"] = out["question"].map(text_key)
    out["mentions_context"] = out["question"].str.contains(
        CONTEXT_REFERENCE, case=False, regex=True
    )
    out["answer_ok"] = (out["label"] == QuestionLabel.UNANSWERABLE.value) | (
        out["answer"].str.strip().str.len() > 0
    )

    def rated(raw: str) -> int:
        # a rating, or the recorded failure of an advisory critique (a failed *gating* critique
        # fails its item, which then never reaches a version)
        scores = json.loads(raw) if isinstance(raw, str) else raw
        return sum(
            1 for v in (scores or {}).values() if isinstance(v.get("rating"), int) or v.get("error")
        )

    expected = list(expected_critiques)
    out["critiques_complete"] = [
        n > 0 and rated(raw) >= n for raw, n in zip(out["critiques"], expected, strict=True)
    ]
    return out


def testset_suite() -> gx.ExpectationSuite:
    """Suite over the items of one test-set version (validate :func:`prepare_testset` output).

    fail: columns present; unique qids and questions; known labels; no question that refers to
    "the context/passage/document"; answerable items have answers; complete lineage (snapshot,
    document + content hash, chunk + hash, generator); every critique left a verdict.
    warn: labels not verified by a calibrated labeller (``label_source`` other than "judge").
    """
    from ragtrail.records import LABELS

    lineage = [
        gxe.ExpectColumnValuesToNotBeNull(
            column=col, meta=policy(FAIL, "every item traces back to the text it was made from")
        )
        for col in LINEAGE_COLUMNS
    ]
    expectations: list[gxe.Expectation] = [
        _columns_present(TESTSET_COLUMNS),
        gxe.ExpectColumnValuesToBeUnique(column="qid", meta=policy(FAIL, "qids key the results")),
        gxe.ExpectColumnValuesToBeUnique(
            column="question_key", meta=policy(FAIL, "duplicate questions double-count a context")
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="label",
            value_set=list(LABELS),
            meta=policy(FAIL, "the label taxonomy is closed"),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="mentions_context",
            value_set=[False],
            meta=policy(
                FAIL, "a user never sees 'the passage'; such questions are not stand-alone"
            ),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="answer_ok",
            value_set=[True],
            meta=policy(FAIL, "an answerable question without an answer cannot be graded"),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="critiques_complete",
            value_set=[True],
            meta=policy(FAIL, "every critique that applies left its verdict on the item"),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="label_source",
            value_set=[LabelSource.JUDGE.value],
            meta=policy(
                WARN,
                "labels are unverified: the labeller's calibration did not meet its bar, so "
                "items carry the label they were requested to have",
            ),
        ),
        *lineage,
    ]
    return _suite(TESTSET_SUITE, "the items of one test-set version", expectations)


def testset_balance_suite(tolerance: float) -> gx.ExpectationSuite:
    """Suite over per-label counts (columns label, achieved, target, share, target_share).

    warn: each label's share is within ``tolerance`` of its target share, and each target is met.
    Warn, not fail: a small or homogeneous corpus can legitimately run out of contexts that support
    summary or reasoning questions (METHODS §2); the report shows achieved vs target.
    """
    expectations: list[gxe.Expectation] = [
        _columns_present(
            ("label", "achieved", "target", "share", "target_share", "deviation", "shortfall")
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="deviation",
            min_value=0.0,
            max_value=tolerance,
            meta=policy(WARN, "label balance is the point of the generator"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="shortfall",
            min_value=0,
            max_value=0,
            meta=policy(WARN, "quota not met: candidate pool exhausted"),
        ),
    ]
    return _suite(TESTSET_BALANCE_SUITE, "label shares vs quotas", expectations)


def balance_frame(achieved: dict[str, int], targets: dict[str, int]) -> pd.DataFrame:
    """Per-label achieved vs target counts and shares, for :func:`testset_balance_suite`."""
    total = sum(achieved.values()) or 1
    total_target = sum(targets.values()) or 1
    rows = []
    for label, target in targets.items():
        got = achieved.get(label, 0)
        share, target_share = got / total, target / total_target
        rows.append(
            {
                "label": label,
                "achieved": got,
                "target": target,
                "share": share,
                "target_share": target_share,
                "deviation": abs(share - target_share),
                "shortfall": max(0, target - got),
            }
        )
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------
# golden (human-written) QA sets
# ------------------------------------------------------------------------------------------------

GOLDEN_SET_SUITE: Final = "golden_set"
GOLDEN_SET_COLUMNS: Final = (
    "qid",
    "question",
    "label",
    "answer",
    "ground_doc_ids",
    "ground_chunk_ids",
)


def prepare_golden_set(items: pd.DataFrame) -> pd.DataFrame:
    """Add the derived columns the golden-set suite checks (one row per item, columns
    :data:`GOLDEN_SET_COLUMNS`; the id columns hold sequences).

    ``question_chars`` (length of the stripped question), ``question_key`` (the dedup key of
    :func:`ragtrail.text.text_key`), ``n_ground_ids`` (document plus chunk ids) and ``answer_ok``
    (unanswerable, or a non-blank answer).
    """
    out = items.copy()
    question = out["question"].fillna("").astype(str)
    out["question_chars"] = question.str.strip().str.len()
    out["question_key"] = question.map(text_key)
    out["n_ground_ids"] = out["ground_doc_ids"].map(len) + out["ground_chunk_ids"].map(len)
    answer = out["answer"].fillna("").astype(str).str.strip()
    out["answer_ok"] = (out["label"] == QuestionLabel.UNANSWERABLE.value) | (answer.str.len() > 0)
    return out


def golden_set_suite() -> gx.ExpectationSuite:
    """Suite over one golden set (validate :func:`prepare_golden_set` output).

    fail: columns present; qids not null and unique; a non-empty question; a known label; at least
    one ground document or chunk id.
    warn: answerable items carry an answer (retrieval does not need it, answer grading does); no
    two questions with the same dedup key; every label of the taxonomy has questions.
    """
    labels = [label.value for label in QuestionLabel]
    expectations: list[gxe.Expectation] = [
        _columns_present(GOLDEN_SET_COLUMNS),
        gxe.ExpectColumnValuesToNotBeNull(
            column="qid", meta=policy(FAIL, "qids key per-question results and comparisons")
        ),
        gxe.ExpectColumnValuesToBeUnique(
            column="qid", meta=policy(FAIL, "a repeated qid would merge two questions' results")
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="question_chars",
            min_value=1,
            meta=policy(FAIL, "an empty question cannot be searched"),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="label", value_set=labels, meta=policy(FAIL, "the label taxonomy is closed")
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="n_ground_ids",
            min_value=1,
            meta=policy(FAIL, "recall needs the ground documents or chunks"),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="answer_ok",
            value_set=[True],
            meta=policy(WARN, "an answerable question without a reference answer cannot be graded"),
        ),
        gxe.ExpectColumnValuesToBeUnique(
            column="question_key",
            meta=policy(WARN, "the same question twice weighs its label's score twice"),
        ),
        gxe.ExpectColumnDistinctValuesToContainSet(
            column="label",
            value_set=labels,
            meta=policy(WARN, "a label without questions is not measured on this set"),
        ),
    ]
    return _suite(GOLDEN_SET_SUITE, "the items of one golden QA set", expectations)


# ------------------------------------------------------------------------------------------------
# citations
# ------------------------------------------------------------------------------------------------

CITATION_QUERIES_SUITE: Final = "citation_queries"
CITATION_METRICS_SUITE: Final = "citation_metrics"

CITATION_QUERY_COLUMNS: Final = ("qid", "label", "mixture", "system", "precision", "recall", "f1")
CITATION_METRIC_COLUMNS: Final = (
    "evaluation",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "n",
    "value_in_range",
    "ci_contains_value",
)
INVALID_CITATION_RATE: Final = "invalid_citation_rate"

UNBOUNDED_METRICS: Final = frozenset({"distinct_citations", "answer_words", "n_citations"})
"""Citation metrics that are counts (>= 0); every other one is a proportion in [0, 1]..."""
SIGNED_METRICS: Final = frozenset({"auc_gain", "kappa"})
"""... except these differences and agreements beyond chance, which lie in [-1, 1]."""


def prepare_citation_metrics(
    aggregates: pd.DataFrame,
    *,
    unbounded: Iterable[str] = UNBOUNDED_METRICS,
    signed: Iterable[str] = SIGNED_METRICS,
) -> pd.DataFrame:
    """Copy of a long aggregates frame (evaluation, metric, value, ci_low, ci_high, n, facets…)
    with ``value_in_range`` (proportions in [0, 1], ``unbounded`` metrics >= 0, ``signed`` ones
    in [-1, 1]; a null value — undefined, with its reason kept elsewhere — is in range) and
    ``ci_contains_value`` (as for retrieval). Other evaluations pass their own metric families."""
    out = aggregates.drop(columns=["undefined"], errors="ignore").copy()
    value = pd.to_numeric(out["value"], errors="coerce")
    low = pd.to_numeric(out["ci_low"], errors="coerce")
    high = pd.to_numeric(out["ci_high"], errors="coerce")
    is_count = out["metric"].isin(list(unbounded))
    is_signed = out["metric"].isin(list(signed))
    low_end = is_signed.map({True: -1.0, False: 0.0}).astype(float)
    in_range = value.isna() | ((value >= low_end) & (is_count | (value <= 1)))
    out["value_in_range"] = in_range.astype(bool)
    out["ci_contains_value"] = (value.isna() | interval_holds(value, low, high)).astype(bool)
    return out


def citation_queries_suite() -> gx.ExpectationSuite:
    """Suite over per-query citation rows (one per question, mixture type and system).

    fail: columns present; one row per (qid, mixture, system); precision, recall and F1 in [0, 1]
    where defined; system is "model" or "random".
    """
    expectations: list[gxe.Expectation] = [
        _columns_present(CITATION_QUERY_COLUMNS),
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=["qid", "mixture", "system"],
            meta=policy(FAIL, "each question is answered once per mixture type and system"),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="system",
            value_set=["model", "random"],
            meta=policy(FAIL, "every table reads model vs random"),
        ),
        *[
            gxe.ExpectColumnValuesToBeBetween(
                column=col,
                min_value=0.0,
                max_value=1.0,
                meta=policy(FAIL, "citation precision, recall and F1 are proportions"),
            )
            for col in ("precision", "recall", "f1")
        ],
    ]
    return _suite(CITATION_QUERIES_SUITE, "per-query citation scores", expectations)


def _aggregate_checks(*, in_range: str, interval: str, counted: str) -> list[gxe.Expectation]:
    """The fail checks of an aggregates frame prepared by :func:`prepare_citation_metrics`:
    columns present, values in range, intervals containing their estimate, n >= 0 (``counted``
    names what n counts); the arguments are the rationales shown in Data Docs."""
    return [
        _columns_present(CITATION_METRIC_COLUMNS),
        gxe.ExpectColumnValuesToBeInSet(
            column="value_in_range", value_set=[True], meta=policy(FAIL, in_range)
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="ci_contains_value", value_set=[True], meta=policy(FAIL, interval)
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="n",
            min_value=0,
            meta=policy(FAIL, f"every figure says over how many {counted} it was computed"),
        ),
    ]


def citation_metrics_suite(max_invalid_share: float) -> gx.ExpectationSuite:
    """Suite over citation aggregates prepared by :func:`prepare_citation_metrics`.

    fail: columns present; every value in its range; every interval contains its estimate; n >= 0
    (an undefined figure has n = 0 and a null value).
    warn: the model's invalid-citation rate is at most ``max_invalid_share``.
    """
    expectations: list[gxe.Expectation] = [
        *_aggregate_checks(
            in_range="proportions lie in [0, 1] and counts are never negative",
            interval="a bootstrap interval must contain its point estimate",
            counted="questions",
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="value",
            max_value=max_invalid_share,
            row_condition=Column("metric") == INVALID_CITATION_RATE,
            meta=policy(
                WARN,
                "citations outside 1..n mean the model does not follow the numbering "
                "(local models decode under a schema that forbids them)",
            ),
        ),
    ]
    return _suite(CITATION_METRICS_SUITE, "citation metrics with intervals", expectations)


# ------------------------------------------------------------------- sufficiency and C/A/H

SUFFICIENCY_QUERIES_SUITE: Final = "sufficiency_queries"
SUFFICIENCY_METRICS_SUITE: Final = "sufficiency_metrics"

SUFFICIENCY_QUERY_COLUMNS: Final = (
    "qid",
    "label",
    "setting",
    "sufficiency",
    "outcome",
    "unscored_reason",
    "p_true",
    "p_correct",
)
OUTCOMES: Final = ("correct", "abstain", "hallucinate")
SUFFICIENCY_STRATA: Final = ("sufficient", "insufficient", "unrated", "no context")


def _outcome_checks() -> list[gxe.Expectation]:
    """Per-answer rows (C/A/H, evidence): a known outcome, and a reason for every unscored one."""
    return [
        gxe.ExpectColumnValuesToBeInSet(
            column="outcome",
            value_set=[*OUTCOMES, "unscored"],
            meta=policy(FAIL, "an answer is correct, an abstention, a hallucination or unscored"),
        ),
        gxe.ExpectColumnValuesToNotBeNull(
            column="unscored_reason",
            row_condition=Column("outcome") == "unscored",
            meta=policy(FAIL, "an unscored answer carries its reason"),
        ),
    ]


def sufficiency_queries_suite(settings: Iterable[str]) -> gx.ExpectationSuite:
    """Suite over the per-(question, setting) rows of a sufficiency evaluation.

    fail: columns present; one row per (qid, setting); known settings, strata and outcomes; an
    unscored row says why (no silent gaps); confidences are probabilities where defined.
    warn: the model answers (hallucinates on) unanswerable questions.
    """
    expectations: list[gxe.Expectation] = [
        _columns_present(SUFFICIENCY_QUERY_COLUMNS),
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=["qid", "setting"],
            meta=policy(FAIL, "each question is answered once per setting"),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="setting",
            value_set=list(settings),
            meta=policy(FAIL, "answers come from the configured settings only"),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="sufficiency",
            value_set=list(SUFFICIENCY_STRATA),
            meta=policy(FAIL, "every row falls in one sufficiency stratum"),
        ),
        *_outcome_checks(),
        *[
            gxe.ExpectColumnValuesToBeBetween(
                column=col,
                min_value=0.0,
                max_value=1.0,
                meta=policy(FAIL, "self-rated confidence is a probability"),
            )
            for col in ("p_true", "p_correct")
        ],
        gxe.ExpectColumnValuesToNotBeInSet(
            column="outcome",
            value_set=["hallucinate"],
            row_condition=Column("label") == QuestionLabel.UNANSWERABLE.value,
            meta=policy(WARN, "answering an unanswerable question is a hallucination"),
        ),
    ]
    return _suite(SUFFICIENCY_QUERIES_SUITE, "per-question C/A/H and confidence", expectations)


def sufficiency_metrics_suite() -> gx.ExpectationSuite:
    """Suite over sufficiency, C/A/H and selective aggregates (prepared like the citation ones by
    :func:`prepare_citation_metrics`).

    fail: columns present; every value in its range (rates in [0, 1]; the policy's AUC gain in
    [-1, 1] is checked apart); every interval contains its estimate; n >= 0.
    """
    expectations = _aggregate_checks(
        in_range="rates and areas lie in [0, 1], a gain in [-1, 1]",
        interval="an interval must contain its point estimate",
        counted="answers",
    )
    return _suite(SUFFICIENCY_METRICS_SUITE, "sufficiency and C/A/H figures", expectations)


# ------------------------------------------------------------------- evidence extractor (SEER)

EVIDENCE_QUERIES_SUITE: Final = "evidence_queries"
EVIDENCE_METRICS_SUITE: Final = "evidence_metrics"

EVIDENCE_QUERY_COLUMNS: Final = (
    "qid",
    "label",
    "method",
    "noise",
    "passages",
    "evidence_tokens",
    "passage_tokens",
    "compression",
    "faithfulness",
    "silver_faithfulness",
    "helpfulness",
    "conciseness",
    "outcome",
    "correct",
    "unscored_reason",
)
"""The columns of ``evidence_queries.parquet`` (one row per question, method and noise level)."""
EVIDENCE_SCORES: Final = ("faithfulness", "silver_faithfulness", "helpfulness")
"""The experts' per-row scores in [0, 1] (conciseness, a cosine, lies in [-1, 1])."""
EVIDENCE_SIGNED: Final = frozenset({"conciseness"})
"""Evidence figures that may be negative: conciseness is a cosine between two embeddings."""
MIN_EXTRACTOR_FAITHFULNESS: Final = 0.5
"""Below this the extractor's evidence is mostly not entailed by its passages (warn)."""
EVIDENCE_UNBOUNDED: Final = frozenset({"compression", "evidence_tokens", "passage_tokens"})
"""Evidence aggregates that are ratios or token counts (>= 0; compression > 0 apart)."""
DIFF_MARKER: Final = "_diff_vs_"
"""Paired differences (``correct_diff_vs_full``, ``correct_diff_vs_none``…) lie in [-1, 1]."""


def prepare_evidence_metrics(aggregates: pd.DataFrame) -> pd.DataFrame:
    """:func:`prepare_citation_metrics` with the evidence families: compression and token
    counts unbounded above, paired differences, conciseness (a cosine) and judges' kappa in
    [-1, 1], every other figure (rates, scores) in [0, 1]."""
    names = aggregates["metric"].dropna().astype(str) if "metric" in aggregates else []
    diffs = {m for m in names if DIFF_MARKER in m}
    return prepare_citation_metrics(
        aggregates, unbounded=EVIDENCE_UNBOUNDED, signed=SIGNED_METRICS | EVIDENCE_SIGNED | diffs
    )


def evidence_queries_suite(
    methods: Iterable[str], noise_ratios: Iterable[float]
) -> gx.ExpectationSuite:
    """Suite over the per-(question, method, noise) rows of an evidence evaluation.

    fail: columns present; one row per (qid, method, noise); known methods and noise levels;
    known outcomes, an unscored row says why; faithfulness and helpfulness in [0, 1],
    conciseness (a cosine) in [-1, 1]; compression > 0;
    evidence tokens >= 0 (null scores are undefined, with their reason in the summary).
    warn: a row of the extractor whose evidence is mostly unfaithful to its passages.
    """
    expectations: list[gxe.Expectation] = [
        _columns_present(EVIDENCE_QUERY_COLUMNS),
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=["qid", "method", "noise"],
            meta=policy(FAIL, "each question is evaluated once per method and noise level"),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="method",
            value_set=list(methods),
            meta=policy(FAIL, "evidence comes from the evaluated methods only"),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="noise",
            value_set=sorted({float(r) for r in noise_ratios}),
            meta=policy(FAIL, "noise levels are the configured ratios"),
        ),
        *_outcome_checks(),
        *[
            gxe.ExpectColumnValuesToBeBetween(
                column=col,
                min_value=0.0,
                max_value=1.0,
                meta=policy(FAIL, "faithfulness and helpfulness are scores in [0, 1]"),
            )
            for col in EVIDENCE_SCORES
        ],
        gxe.ExpectColumnValuesToBeBetween(
            column="conciseness",
            min_value=-1.0,
            max_value=1.0,
            meta=policy(FAIL, "conciseness is a cosine between two embeddings, in [-1, 1]"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="compression",
            min_value=0.0,
            strict_min=True,
            meta=policy(FAIL, "compression is passage tokens over evidence tokens, both positive"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="evidence_tokens",
            min_value=0,
            meta=policy(FAIL, "a token count is never negative"),
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="faithfulness",
            min_value=MIN_EXTRACTOR_FAITHFULNESS,
            row_condition=Column("method") == "extractor",
            meta=policy(WARN, "the extractor's evidence is mostly not entailed by its passages"),
        ),
    ]
    return _suite(EVIDENCE_QUERIES_SUITE, "per-question evidence scores and answers", expectations)


def evidence_metrics_suite() -> gx.ExpectationSuite:
    """Suite over evidence aggregates prepared by :func:`prepare_evidence_metrics`.

    fail: columns present; every value in its range (rates and scores in [0, 1], compression and
    token counts >= 0, paired differences and agreements in [-1, 1]); compression > 0; every
    interval contains its estimate; n >= 0.
    """
    expectations: list[gxe.Expectation] = [
        *_aggregate_checks(
            in_range="rates and scores lie in [0, 1], differences in [-1, 1], token counts >= 0",
            interval="an interval must contain its point estimate",
            counted="questions",
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="value",
            min_value=0.0,
            strict_min=True,
            row_condition=Column("metric") == "compression",
            meta=policy(
                FAIL, "compression is passage tokens over evidence tokens: a positive ratio"
            ),
        ),
    ]
    return _suite(EVIDENCE_METRICS_SUITE, "evidence extractor figures", expectations)
