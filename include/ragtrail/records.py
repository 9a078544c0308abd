"""Typed records that flow between ragtrail's stages.

Frozen dataclasses keep the records hashable and cheap; every stage passes these rather than dicts
so that a field rename is caught by the type checker instead of at 3 a.m. in a nightly run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from ragtrail.jsonsafe import JsonObject
from ragtrail.redact import redact


class QuestionLabel(StrEnum):
    """The question taxonomy (METHODS §1); declaration order is the display order of reports."""

    FACT_SINGLE = "fact_single"
    SUMMARY = "summary"
    REASONING = "reasoning"
    UNANSWERABLE = "unanswerable"


LABELS: tuple[str, ...] = tuple(label.value for label in QuestionLabel)
"""The label values in display order (plain strings, as stored and written to JSON)."""

ANSWERABLE_LABELS: tuple[str, ...] = tuple(lb for lb in LABELS if lb != QuestionLabel.UNANSWERABLE)
INCLUSIVE = "inclusive"
"""Pseudo-label for the evaluation over all questions, unanswerable included."""
DEFAULT_TEXT_WEIGHTS: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0)
"""The text-weight scan of METHODS §5 (0 = dense only, 1 = BM25 only)."""


def sha256_text(text: str) -> str:
    """Hex SHA-256 of UTF-8 text: the content address used for documents, chunks and caches."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_json(value: Any) -> str:
    """Hex SHA-256 of ``value``'s canonical JSON (sorted keys, no spaces, UTF-8 kept; other
    objects as ``str``): equal content, equal hash, whatever the key order."""
    return sha256_text(
        json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    )


class SetKind(StrEnum):
    """Where a QA set comes from: registered by people (golden), generated from the corpus, or a
    file given by hand."""

    GOLDEN = "golden"
    GENERATED = "generated"
    FILE = "file"


@dataclass(frozen=True)
class QASetRef:
    """A typed reference to a QA set: a golden-set version, a generated test-set version, or a
    file. Its string form (``golden:<version>``, ``testset:<version>`` or the path) is what
    travels in Params, XCom and stored run parameters; :meth:`parse` reads it back."""

    kind: SetKind
    value: str
    """The version (golden, generated) or the file path."""

    PREFIXES: ClassVar[dict[SetKind, str]] = {
        SetKind.GOLDEN: "golden:",
        SetKind.GENERATED: "testset:",
    }

    @classmethod
    def parse(cls, text: str) -> QASetRef:
        """``golden:<version>``, ``testset:<version>``, else a file path."""
        for kind, prefix in cls.PREFIXES.items():
            if text.startswith(prefix):
                version = text.removeprefix(prefix)
                if not version:
                    raise ValueError(f"QA-set reference {text!r} names no version")
                return cls(kind, version)
        if not text:
            raise ValueError("an empty QA-set reference")
        return cls(SetKind.FILE, text)

    @classmethod
    def golden(cls, version: str) -> QASetRef:
        return cls(SetKind.GOLDEN, version)

    @classmethod
    def generated(cls, version: str) -> QASetRef:
        return cls(SetKind.GENERATED, version)

    @property
    def version(self) -> str | None:
        """The version of a golden or generated set (None for a file: its content decides)."""
        return None if self.kind is SetKind.FILE else self.value

    def __str__(self) -> str:
        return self.PREFIXES.get(self.kind, "") + self.value


class ModelKind(StrEnum):
    """The ``kind`` of a model spec ``kind:model`` (how :mod:`ragtrail.llm.factory` loads it)."""

    BUILTIN = "builtin"  # a model bundled with ragtrail (``builtin:smollm2-135m-instruct``)
    HF = "hf"  # a transformers model: an HF id, a local path or an s3:// URI
    OPENAI = "openai"  # an OpenAI-compatible server: ``openai:<model>[@<base_url>]``
    VLLM = "vllm"  # in-process vLLM
    GENERATOR = "generator"  # a LoRA-tuned small generator (registered by ragtrail.train)
    REGISTRY = "registry"  # a registered model version: ``registry:<name>@<alias or number>``
    BUNDLE = "bundle"  # a model bundle directory: base model plus LoRA adapters


MODEL_KINDS: tuple[str, ...] = tuple(kind.value for kind in ModelKind)
"""The kinds a configured model spec may have (tests add ``scripted:`` doubles at load time)."""

LOCAL_MODEL_KINDS: frozenset[str] = frozenset({ModelKind.BUILTIN, ModelKind.HF, ModelKind.REGISTRY})
"""Kinds loaded through transformers in this process: they take the local-model options (batch
size, precision, model cache)."""

NLI_SPEC_PREFIX = f"{ModelKind.HF}:"


class ModelSpecError(ValueError):
    """A model spec that is not ``kind:model`` (or whose kind is not accepted where it is used)."""


@dataclass(frozen=True, repr=False)
class ModelSpec:
    """A typed model spec: ``kind:model`` as written in settings, flow params and CLI flags.

    ``str(spec)`` is its travelling form, with any credentials in its URL: what loads the backend
    and keys its client. What is recorded, logged or printed is :meth:`redacted` (``repr`` is
    redacted too, for tracebacks and debug output). The kind is a plain string so that kinds
    registered at run time (a test's ``scripted:`` double) parse too; :meth:`parse` refuses kinds
    outside ``kinds`` when it is given, which is how settings accept only :data:`MODEL_KINDS`.
    """

    kind: str
    model: str

    @classmethod
    def parse(cls, text: str, kinds: Collection[str] | None = MODEL_KINDS) -> ModelSpec:
        """``text`` stripped and split at its first ``:``. Raises :class:`ModelSpecError` when
        either side is empty or the kind is not one of ``kinds`` (None: any kind)."""
        spec = text.strip()
        kind, sep, model = spec.partition(":")
        if not sep or not kind or not model.strip() or (kinds is not None and kind not in kinds):
            shown = f" with kind one of {', '.join(kinds)}" if kinds is not None else ""
            raise ModelSpecError(f"LLM spec {redact(spec)!r} must be 'kind:model'{shown}")
        return cls(kind, model)

    @classmethod
    def try_parse(cls, text: str) -> ModelSpec | None:
        """A well-formed spec of any kind, else None (the caller that loads it says why)."""
        try:
            return cls.parse(text, kinds=None)
        except ModelSpecError:
            return None

    @classmethod
    def parse_nli(cls, text: str) -> ModelSpec:
        """An NLI model: ``hf:<ref>`` or the ``<ref>`` alone, where ``<ref>`` is an HF id, a local
        path or an ``s3://`` URI; always of kind ``hf``. Nothing is bundled, so no ``builtin:``."""
        spec = text.strip()
        ref = spec.removeprefix(NLI_SPEC_PREFIX)
        scheme, sep, rest = ref.partition(":")
        scheme_ok = not sep or (scheme == "s3" and rest.startswith("//") and len(rest) > 2)
        if not ref or any(ch.isspace() for ch in ref) or not scheme_ok:
            raise ModelSpecError(
                f"NLI model {redact(spec)!r} must be 'hf:<HF id, local path or s3:// URI>' or that "
                "reference alone"
            )
        return cls(ModelKind.HF, ref)

    @property
    def is_local(self) -> bool:
        """Whether the model is loaded through transformers in this process."""
        return self.kind in LOCAL_MODEL_KINDS

    def __str__(self) -> str:
        return f"{self.kind}:{self.model}"

    def redacted(self) -> str:
        """The travelling form with the credentials of its URL hidden
        (:func:`ragtrail.redact.redact`): the form to record, log or print."""
        return redact(str(self))

    def __repr__(self) -> str:
        return f"ModelSpec(kind={self.kind!r}, model={redact(self.model)!r})"


class MixtureType(StrEnum):
    """The passage mixtures of citation evaluation (METHODS §6, RAGE): the relevant passages
    with irrelevant ones, with seemingly relevant ones, or with both."""

    RELEVANT_IRRELEVANT = "relevant+irrelevant"
    RELEVANT_SEEMINGLY = "relevant+seemingly"
    ALL = "all"


MIXTURE_TYPES: tuple[str, ...] = tuple(t.value for t in MixtureType)


class Scenario(StrEnum):
    """The attributed-answer scenarios (METHODS §8, AIR), in the order a run reports them."""

    G = "G"  # closed book: generate, no retrieval
    RTG_VANILLA = "RTG-vanilla"  # retrieve with the question, then generate citing
    RTG_QUERY_GEN = "RTG-query-gen"  # retrieve with generated sub-queries, fused
    GTR = "GTR"  # generate closed book, then retrieve with the answer
    RTG_GOLD = "RTG-gold"  # generate citing the ground passages


SCENARIOS: tuple[str, ...] = tuple(s.value for s in Scenario)


class FusionMethod(StrEnum):
    """How several ranked lists of one query are fused (:mod:`ragtrail.index.rank_fusion`)."""

    COMBSUM = "combsum"
    COMBMNZ = "combmnz"
    RRF = "rrf"


FUSION_METHODS: tuple[str, ...] = tuple(m.value for m in FusionMethod)


class SufficiencyRaterName(StrEnum):
    """The sufficiency raters by name (METHODS §9), in display order."""

    LLM = "sufficiency.llm"  # an LLM, zero-shot
    LLM_1SHOT = "sufficiency.llm_1shot"  # an LLM with one worked example
    CHUNKED = "sufficiency.chunked"  # the zero-shot LLM on every window of the context
    CONTAINS_ANSWER = "sufficiency.contains_answer"  # the string baseline
    ENTAILMENT = "sufficiency.entailment"  # an entailment judge's P(gold answer)
    TRAINED = "sufficiency.trained"  # a cross-encoder trained on the team's labels (issue 26)


SUFFICIENCY_RATERS: tuple[str, ...] = tuple(r.value for r in SufficiencyRaterName)
DEFAULT_SUFFICIENCY_RATERS: tuple[str, ...] = tuple(
    r for r in SUFFICIENCY_RATERS if r != SufficiencyRaterName.TRAINED
)
"""The raters a night runs unless configured: every one but the trained rater, which exists only
once a team has trained one (``ragtrail judge train sufficiency``)."""


class EntailmentJudgeName(StrEnum):
    """The entailment judges by name; ``entailment`` stands for the configured one (the NLI
    model when one is set, else the fallback the settings name)."""

    CONFIGURED = "entailment"
    NLI = "entailment.nli"  # an NLI model
    EMBEDDING = "entailment.embedding"  # embedding similarity: approximate, works offline
    LLM = "entailment.llm"  # an LLM asked whether the premise supports the hypothesis
    TRAINED = "entailment.trained"  # a cross-encoder trained on the team's labels (issue 26)


ENTAILMENT_JUDGES: tuple[str, ...] = tuple(
    n.value for n in EntailmentJudgeName if n is not EntailmentJudgeName.CONFIGURED
)
"""The entailment judges themselves (the configured alias left out)."""
ENTAILMENT_FALLBACKS: tuple[str, ...] = (
    EntailmentJudgeName.EMBEDDING.value,
    EntailmentJudgeName.LLM.value,
    EntailmentJudgeName.TRAINED.value,
)
"""The judges that may stand in while no NLI model is configured."""


class GateMode(StrEnum):
    """What a judge's verdicts may do: reject items (its calibration met the bar) or advise."""

    GATE = "gate"
    ADVISE = "advise"


class RLAlgorithm(StrEnum):
    """The citation answerer's RL stage: PPO (RAGE's recipe; a loop of ragtrail's own), or TRL's
    GRPO or RLOO (group-relative / leave-one-out baselines, no value model)."""

    PPO = "ppo"
    GRPO = "grpo"
    RLOO = "rloo"


class DocFormat(StrEnum):
    MARKDOWN = "markdown"
    TEXT = "text"
    HTML = "html"
    PDF = "pdf"
    DOCX = "docx"


class QuarantineReason(StrEnum):
    """Why a source file was refused. Codes are stable: reports and GX suites group by them."""

    EMPTY = "empty"
    TOO_LARGE = "too_large"
    UNSUPPORTED_TYPE = "unsupported_type"
    INVALID_UTF8 = "invalid_utf8"
    BINARY_CONTENT = "binary_content"
    CORRUPT = "corrupt"
    ENCRYPTED = "encrypted"
    NO_TEXT = "no_text"
    DUPLICATE_CONTENT = "duplicate_content"
    # Entries of a local source that are never read (listed by ragtrail.ingest.sources):
    UNREADABLE = "unreadable"  # permission denied or an I/O error (a file or a whole folder)
    SPECIAL_FILE = "special_file"  # FIFO, socket or device: reading could block or never end
    BROKEN_LINK = "broken_link"  # a symbolic link whose target does not exist
    LINK_LOOP = "link_loop"  # a link that resolves to itself or to one of its own ancestors
    LINK_OUTSIDE_ROOT = "link_outside_root"  # a link leaving the source folder: never followed


class ChangeKind(StrEnum):
    ADDED = "added"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    REMOVED = "removed"


@dataclass(frozen=True)
class SourceFile:
    """Raw bytes of one file from a source, before parsing.

    ``rel_path`` is the POSIX path relative to the source root and is the document id.
    """

    rel_path: str
    uri: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class Section:
    """A contiguous block of a parsed document under one heading path.

    ``kind`` is "text" or "table"; tables are kept whole by the chunker when they fit.
    """

    text: str
    headings: tuple[str, ...] = ()
    kind: str = "text"


@dataclass(frozen=True)
class ParsedDocument:
    """A document after format-specific parsing and normalisation."""

    doc_id: str
    uri: str
    format: DocFormat
    title: str
    sections: tuple[Section, ...]
    metadata: JsonObject = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n\n".join(s.text for s in self.sections)

    @property
    def content_hash(self) -> str:
        return sha256_text(self.text)


@dataclass(frozen=True)
class Chunk:
    """One retrievable unit. ``chunk_id`` is stable for unchanged document text; ``language`` is
    its document's ISO 639-1 code (``und`` when undetermined), which picks its lexical analysis."""

    chunk_id: str
    doc_id: str
    ordinal: int
    text: str
    headings: tuple[str, ...]
    n_tokens: int
    kind: str = "text"
    language: str = "und"

    @property
    def content_hash(self) -> str:
        return sha256_text(self.text)

    def index_text(self) -> str:
        """Text given to both the lexical and the dense index: headings carried as context."""
        prefix = " > ".join(self.headings)
        return f"{prefix}\n{self.text}" if prefix else self.text


@dataclass(frozen=True)
class QuarantineRecord:
    uri: str
    rel_path: str
    reason: QuarantineReason
    detail: str
    content_hash: str | None = None


@dataclass(frozen=True)
class SearchHit:
    chunk_id: str
    doc_id: str
    score: float
    text: str = ""


@dataclass(frozen=True)
class Candidates:
    """Per-modality candidate lists for one query, fetched once and fused for every weight."""

    lexical: tuple[SearchHit, ...]
    dense: tuple[SearchHit, ...]


@dataclass(frozen=True)
class QAItem:
    """One labelled question with its ground context.

    ``ground_doc_ids`` is always set; ``ground_chunk_ids`` is set when the ground context is a chunk
    (generated test sets) and then relevance is judged per chunk, otherwise per document.
    """

    qid: str
    question: str
    label: str
    answer: str = ""
    ground_doc_ids: tuple[str, ...] = ()
    ground_chunk_ids: tuple[str, ...] = ()

    @property
    def gold(self) -> str:
        """The gold answer raters, matchers and scorers look for ("" for an unanswerable item:
        there is none, whatever its ``answer`` field holds)."""
        return "" if self.label == QuestionLabel.UNANSWERABLE else self.answer.strip()


class StatementKind(StrEnum):
    """What a candidate's question was written from (``QACandidate.statement_kind``)."""

    FACT = "fact"
    SUMMARY = "summary"
    CONCLUSION = "conclusion"
    FOREIGN = "foreign"  # a question about another chunk: unanswerable from this one
    BASELINE = "baseline"  # the single-prompt baseline: no statement, no requested label


STATEMENT_KINDS: dict[str, str] = {
    StatementKind.FACT: QuestionLabel.FACT_SINGLE,
    StatementKind.SUMMARY: QuestionLabel.SUMMARY,
    StatementKind.CONCLUSION: QuestionLabel.REASONING,
    StatementKind.FOREIGN: QuestionLabel.UNANSWERABLE,
}
"""Statement kind -> the label a question written from it is requested to have (METHODS §2)."""


class LabelSource(StrEnum):
    """Where an item's label comes from: the labeller's verdict (a labeller whose calibration
    passed its bar), or the label it was requested to have (the labeller only advised)."""

    JUDGE = "judge"
    REQUESTED = "requested"


class RejectKind(StrEnum):
    """Why the funnel rejected a candidate. The stored ``reject_reason`` is the kind, optionally
    followed by ``:`` and details (see :func:`format_reject_reason`)."""

    CHECK = "check"  # a model-free check (generate/checks.py); detail: "<check>[=<detail>]"
    LABEL_MISMATCH = "label_mismatch"  # detail: "<requested>-><observed>" (or none)
    CRITIQUE = "critique"  # detail: "<critique>=<rating><<threshold>"
    DUPLICATE_OF = "duplicate_of"  # detail: "<current|previous>#<index>"
    QUOTA_FULL = "quota_full"
    DOCUMENT_CAP = "document_cap"


REJECT_DETAIL_SEPARATOR = ":"
REJECT_REASONS_SEPARATOR = "; "
"""Several reasons of one candidate (e.g. two failed critiques) are joined with this."""


def format_reject_reason(kind: RejectKind, detail: str | None = None) -> str:
    """The stored form of a reason: ``"kind"`` or ``"kind:detail"`` (a plain string)."""
    kind = RejectKind(kind)
    return f"{kind.value}{REJECT_DETAIL_SEPARATOR}{detail}" if detail else kind.value


def parse_reject_reason(reason: str) -> tuple[RejectKind, str | None]:
    """Inverse of :func:`format_reject_reason` for one reason (the first of a joined list).

    Raises ValueError for a reason of no known kind.
    """
    first = reason.split(REJECT_REASONS_SEPARATOR, 1)[0]
    kind, sep, detail = first.partition(REJECT_DETAIL_SEPARATOR)
    return RejectKind(kind), (detail if sep else None)


def reject_kind(reason: str | None) -> RejectKind | None:
    """The kind of a stored reason; None when there is none or its kind is not known."""
    if not reason:
        return None
    try:
        return parse_reject_reason(reason)[0]
    except ValueError:
        return None


class CandidateStatus(StrEnum):
    PENDING = "pending"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    FAILED = "failed"
    RETIRED = "retired"


@dataclass(frozen=True)
class Context:
    """A chunk offered to the generator as ground context, with its lineage and its document's
    language (``und`` when unknown, e.g. read back from a stored candidate)."""

    corpus: str
    snapshot_id: str
    doc_id: str
    doc_content_hash: str
    chunk_id: str
    chunk_hash: str
    text: str
    headings: tuple[str, ...] = ()
    language: str = "und"


@dataclass
class QACandidate:
    """One generated (context, question, answer) on its way through the acceptance funnel.

    Mutable on purpose: each stage (labelling, critiques, dedup, quotas) fills its fields; the final
    status is always one of accepted / rejected (with ``reject_reason``) / failed (with
    ``failure_cause`` and the raw model output) — nothing is dropped silently.
    ``candidate_id`` is a content address of the inputs that determine it, so a rerun with the same
    seed and cache regenerates the same ids.
    """

    candidate_id: str
    context: Context
    statement_kind: str  # a StatementKind
    requested_label: str
    theme: str = ""
    statement: str = ""
    question: str = ""
    answer: str = ""
    source_chunk_id: str | None = None  # unanswerable: the chunk the question was written from
    observed_label: str | None = None
    label_reason: str = ""
    label_source: str | None = None  # a LabelSource once labelled
    label_judge: str | None = None  # the labeller's "name@version"
    critiques: dict[str, JsonObject] = field(default_factory=dict)  # name -> rating, evaluation
    status: CandidateStatus = CandidateStatus.PENDING
    reject_reason: str | None = None
    failure_cause: str | None = None
    raw_outputs: list[str] = field(default_factory=list)
    generator: JsonObject = field(default_factory=dict)  # backend, model, prompt versions, seed

    def to_json(self) -> JsonObject:
        """The candidate as strict JSON, its context's language included (what a step hands
        the next one; the candidate store does not keep the language)."""
        out = asdict(self)
        out["context"]["headings"] = list(self.context.headings)
        out["status"] = CandidateStatus(self.status).value
        return out

    @classmethod
    def from_json(cls, data: JsonObject) -> QACandidate:
        context = dict(data["context"])
        context["headings"] = tuple(context.get("headings") or ())
        return cls(
            **{
                **data,
                "context": Context(**context),
                "status": CandidateStatus(data["status"]),
            }
        )

    @property
    def effective_label(self) -> str:
        """The label the item stands for: the observed one when the labeller decides labels,
        else (advisory labeller, or not labelled yet) the requested one."""
        if self.label_source == LabelSource.REQUESTED:
            return self.requested_label
        return self.observed_label or self.requested_label

    @property
    def label_matches(self) -> bool:
        """Whether the item may stand for its requested label: the labeller (deciding) agreed,
        or the label is the requested one because the labeller only advised."""
        if self.label_source == LabelSource.REQUESTED:
            return True
        return self.observed_label is not None and self.observed_label == self.requested_label
