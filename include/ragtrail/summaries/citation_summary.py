"""A QA set's citation evaluation: the answering model's citations on relevance mixtures against a
random baseline, and the attributed-answer scenarios.

:class:`CitationSummary` is the document a set's run stores (``runs/<run id>/citations.json``) and
everything the report, the CLI and the publishing step read of it; :class:`CitationHeadline` is the
compact part the night's result and the citation-metrics event carry, and :class:`CitationRun` what
the pipeline step hands on. Mixture types, systems (``model`` / ``random``) and scenario names are
plain strings here: their vocabularies live with the evaluators.
"""

from __future__ import annotations

from ragtrail.jsonsafe import JsonObject
from ragtrail.summaries.base import Estimate, Figure, Record
from ragtrail.summaries.judge_summary import JudgeGate
from ragtrail.summaries.qa_sets import SetRunRecord


def _empty(value: dict[str, str]) -> bool:
    return not value


class CitationHeadline(Record):
    """What the night's result, the citation-metrics event and the CLI line carry of a set:
    citation F1 of the model and of random citations per mixture type (answerable questions)."""

    run_id: str
    answerer: str
    f1: dict[str, dict[str, Figure]]
    """mixture type -> system (``model``, ``random``) -> F1."""


class CitationRun(CitationHeadline):
    """What the citation step hands on: the set's headline and where its full summary is."""

    citations_uri: str


# ------------------------------------------------------------------------- relevance mixtures


class MixtureAggregate(Estimate):
    """One metric of one (system, mixture type, label) group: the mean over questions with its
    bootstrap interval and n (``label`` ``answerable``: every answerable label together)."""

    metric: str
    label: str
    mixture: str
    system: str


class UnanswerableRow(Record):
    """Questions the passages cannot answer, for one mixture type and system: the share that
    cited something and the share that abstained (None: the system has no such figure)."""

    mixture: str
    system: str
    cited_any: MixtureAggregate | None
    abstained: MixtureAggregate | None


class MixtureCounts(Record):
    """How many mixtures were built and answered, and how the answers ended."""

    mixtures: int
    skipped_items: int
    answers_ok: int
    answers_failed: int
    abstained: int


class SkippedQuestion(Record):
    """A question no mixture was built for, and why."""

    qid: str
    reason: str


class RandomExpectation(Record):
    """The closed-form expected scores of random citations over a mixture type's answerable
    mixtures."""

    citation_precision: float
    citation_recall: float
    citation_f1: float
    n: int


class ShownPassage(Record):
    """A passage of a mixture, in the order the model saw it (numbered from 1)."""

    kind: str
    doc_id: str
    chunk_id: str
    text: str


class MixtureAnswer(Record):
    """One drill-down row: a question's mixture, the model's answer, its citations (``invalid``:
    numbers out of range) against the relevant numbers, and its scores (None: undefined, e.g. no
    citation or a failed answer, whose ``error`` and ``raw`` output are kept)."""

    qid: str
    label: str
    mixture: str
    question: str
    relevant_source: str
    passages: list[ShownPassage]
    answer: str
    cited: list[int]
    invalid: list[int]
    relevant: list[int]
    precision: float | None
    recall: float | None
    f1: float | None
    error: str | None
    raw: str


class MixtureView(Record):
    """The relevance-mixture evaluation as the report reads it: the spec and seed, counts,
    skipped questions, the random expectation per type, every aggregate, the unanswerable table
    and the drill-down rows."""

    spec: str
    types: list[str]
    seed: int
    baseline_repeats: int
    counts: MixtureCounts
    failed: int
    skipped: list[SkippedQuestion]
    random_expected: dict[str, RandomExpectation]
    aggregates: list[MixtureAggregate]
    unanswerable: list[UnanswerableRow]
    queries: list[MixtureAnswer]


# --------------------------------------------------------------------- attributed-answer scenarios


class ScenarioAggregate(Estimate):
    """One attribution metric of one scenario: the mean over its answers with interval and n."""

    scenario: str
    metric: str


class ScenarioRetrievalRow(Estimate):
    """One retrieval metric of the passages a scenario gave the model (macro mean, its interval
    and the interval's method; a null interval says why)."""

    scenario: str
    metric: str
    value: float


class ScenarioCounts(Record):
    """A scenario's questions and how their answers ended."""

    n: int
    n_ok: int
    n_failed: int
    n_skipped: int


class ScenarioSummary(Record):
    """The attributed-answer scenarios: their names in order, questions per scenario, the
    entailment judge's decision, attribution aggregates, the retrieval of their passages, answer
    counts and timing, metrics not computed (metric -> why) and failed judge verdicts.
    ``details`` is the scenario run's full JSON (answers, statements, sub-queries), stored for
    inspection and read by no one here."""

    names: list[str]
    items: int
    judge: JudgeGate
    aggregates: list[ScenarioAggregate]
    retrieval: list[ScenarioRetrievalRow]
    counts: dict[str, ScenarioCounts]
    seconds_per_question: dict[str, float]
    skipped: dict[str, str]
    failed_verdicts: int
    details: JsonObject


# ---------------------------------------------------------------------------------- the summary


class CitationSummary(SetRunRecord):
    """A set's citation evaluation as stored with its run: the run and QA set, the answering
    model, the text weight the passages were retrieved with (and where it came from), the mixture
    evaluation and the scenarios (None with the reason under ``undefined`` when none was run)."""

    answerer: str
    text_weight: float
    text_weight_source: str
    mixture: MixtureView
    scenarios: ScenarioSummary | None
