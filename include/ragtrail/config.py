"""One typed settings object for the whole platform.

Precedence (highest first): explicit keyword arguments, ``RAGTRAIL_*`` environment variables, the
project YAML file (``RAGTRAIL_CONFIG`` or ``$RAGTRAIL_HOME/ragtrail.yaml`` or ``./ragtrail.yaml``),
then the defaults below. Secrets (database passwords, API keys, ES credentials) are only read from the
environment or Airflow connections, never from the YAML file.
"""

from __future__ import annotations

import os
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as PydanticSettingsError

from ragtrail.config_checks import (
    ConfigError,
    check_database_url,
    check_env_names,
    check_yaml_keys,
    describe_settings_error,
    read_settings_yaml,
)
from ragtrail.failures import DEFAULT_MAX_FAILED_SHARE
from ragtrail.jsonsafe import JsonObject
from ragtrail.languages import check_language_setting
from ragtrail.records import (
    DEFAULT_SUFFICIENCY_RATERS,
    DEFAULT_TEXT_WEIGHTS,
    ENTAILMENT_FALLBACKS,
    MIXTURE_TYPES,
    MODEL_KINDS,
    SCENARIOS,
    SUFFICIENCY_RATERS,
    EntailmentJudgeName,
    FusionMethod,
    ModelSpec,
    RLAlgorithm,
)

SECRET_FIELDS = frozenset({"database_url", "es_api_key", "es_password", "llm_api_key"})


def max_failed_share(items: str) -> Any:
    """The field of a step's failure threshold (README: "What ragtrail refuses and why")."""
    return Field(
        DEFAULT_MAX_FAILED_SHARE,
        ge=0.0,
        le=1.0,
        description=f"the step fails (exit code 3, its run stored as failed) when more than "
        f"this share of its {items} failed; below it failed items are counted and left out",
    )


CHARS_PER_TOKEN_BOUND = 10
"""Default character bound of a chunk per token of the larger token budget: generous for prose
(about 5 characters a token) yet small enough that no "word" the tokenizer sees as one token
(base64, minified JSON, a data dump) makes a chunk of megabytes."""


class ChunkingSettings(BaseModel):
    max_tokens: int = Field(
        200, ge=16, le=2048, description="chunk size in embedding-tokenizer tokens"
    )
    overlap_tokens: int = Field(40, ge=0, le=512)
    max_table_tokens: int = Field(
        400, ge=16, description="a table up to this size stays one chunk even above max_tokens"
    )
    max_chars: int | None = Field(
        None,
        ge=64,
        description="no chunk (text or table) is longer than this many characters: overlong "
        "tokens are split; none = 10 characters per token of the larger token budget (4000 "
        "with the defaults)",
    )

    @property
    def char_limit(self) -> int:
        """The character bound every chunk respects: ``max_chars`` or its default."""
        if self.max_chars is not None:
            return self.max_chars
        return CHARS_PER_TOKEN_BOUND * max(self.max_tokens, self.max_table_tokens)


class IngestSettings(BaseModel):
    """Guards of ``ragtrail ingest`` and the ingest DAG (README: "What ragtrail refuses and why")."""

    max_removal_share: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="an ingest that would remove more than this share of the corpus's "
        "documents stops before changing anything (removing all of them always stops)",
    )
    allow_mass_removal: bool = Field(
        False,
        description="let ingests remove more than max_removal_share of the corpus (an empty or "
        "wrong source then empties it); the CLI flag --allow-mass-removal and the DAG Param "
        "allow_mass_removal allow it for one run",
    )
    stale_after_s: int = Field(
        3600,
        ge=1,
        description="a running snapshot whose ingest has not reported for this many seconds is "
        "abandoned by the next ingest of the corpus (sooner when its process, on the same "
        "host, is gone)",
    )
    language: str = Field(
        "auto",
        description="each document's language: auto (detected offline by py3langid; 'und' "
        "when the text is too short to call) or an ISO 639-1 code that every document of the "
        "corpus is taken to be in (applies to documents added or changed from then on)",
    )

    @field_validator("language")
    @classmethod
    def _a_language(cls, v: str) -> str:
        return check_language_setting(v)


class RunSettings(BaseModel):
    """Evaluation runs (``ragtrail runs``): when a run left running counts as abandoned."""

    stale_after_s: int = Field(
        3600,
        ge=1,
        description="a running evaluation run that has not reported for this many seconds "
        "(sooner when its process, on the same host, is gone) is marked abandoned by the next "
        "command that reads the runs",
    )


class RetrievalEvalSettings(BaseModel):
    text_weights: tuple[float, ...] = DEFAULT_TEXT_WEIGHTS
    candidates_per_modality: int = Field(100, ge=10, le=1000)
    bootstrap_samples: int = Field(1000, ge=0)
    min_questions_per_label: int = Field(5, ge=1)
    golden_wait_s: float = Field(
        1800.0,
        ge=0.0,
        description="how long after the golden sets' evaluation of the same snapshot started "
        "the night's evaluation waits for it to hand its runs over, before evaluating the "
        "golden sets itself (0 = never wait)",
    )

    @field_validator("text_weights")
    @classmethod
    def _weights_in_unit_interval(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v or any(not 0.0 <= w <= 1.0 for w in v):
            raise ValueError("text_weights must be a non-empty list of numbers in [0, 1]")
        return tuple(sorted(set(v)))


class GenerationSettings(BaseModel):
    """Test-set generation (METHODS §2-§3). Defaults keep the nightly on 2 CPU cores with the
    135M local model under 10 minutes; raise ``per_label`` and the pool sizes for real test sets."""

    llm: str = Field(
        "builtin:smollm2-135m-instruct",
        description="'builtin:smollm2-135m-instruct', 'hf:<id or path>', 'openai:<model>@<base_url>' "
        "or 'vllm:<model>'",
    )
    llm_batch_size: int = Field(
        8,
        ge=1,
        description="requests per forward pass of a local model (builtin:, hf:, registry:); an "
        "OpenAI-compatible endpoint gets every independent request of a step at once, up to "
        "llm_max_concurrency in flight",
    )
    llm_max_concurrency: int = Field(
        8,
        ge=1,
        description="requests in flight against one OpenAI-compatible endpoint (base URL + key), "
        "all roles of the process together",
    )
    llm_requests_per_minute: float | None = Field(
        None, gt=0, description="the endpoint's requests-per-minute limit; null = none"
    )
    llm_tokens_per_minute: float | None = Field(
        None,
        gt=0,
        description="the endpoint's tokens-per-minute limit (prompt + completion, estimated "
        "before a call and corrected with the reported usage); null = none",
    )
    llm_json_schema: bool = Field(
        False,
        description="send each prompt's JSON schema as response_format (structured outputs of "
        "vLLM and OpenAI) to OpenAI-compatible endpoints; otherwise it is only in the prompt",
    )
    llm_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="precision of local models (builtin:, hf:, registry:). 'auto' is bfloat16 "
        "on a CPU with bf16 units (AVX512-BF16 or AMX), where it is about 1.6x faster, and "
        "float32 elsewhere (emulated bf16 is slower); outputs differ from float32 by rounding, "
        "and cached answers are kept apart per precision. Pin one value on a mixed fleet",
    )
    llm_decode_weights: Literal["native", "int8"] = Field(
        "native",
        description="'int8' makes local models on the CPU read their decoder layers' weights "
        "in int8 in decoding steps (prompts are still read in llm_dtype): a decoding step takes "
        "0.73-0.87x the time, but the next token differs from the native model's about 1.6x as "
        "often as bfloat16's differs from float32's (BENCHMARKS.md 'Int8 decoding weights'). "
        "Outputs change, and cached answers are kept apart per setting",
    )
    llm_draft_tokens: int = Field(
        3,
        ge=0,
        le=8,
        description="greedy decoding of local models on the CPU checks up to this many draft "
        "tokens per step, taken from what followed the reply's last tokens earlier in its "
        "prompt or itself (prompt lookup); each step keeps the drafts the model itself picks, "
        "so replies are the one-token steps' up to bf16 rounding. 0 = one token per step "
        "(BENCHMARKS.md 'Prompt-lookup drafts')",
    )
    max_attempts: int = Field(2, ge=1, le=5)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    extractive_facts: bool = Field(
        True,
        description="pick fact statements among the context's sentences (right for small local "
        "models with guided decoding); false lets a capable model reword them",
    )
    per_label: int = Field(3, ge=1, description="target accepted items per label")
    max_per_document: int = Field(2, ge=1, description="accepted items per document, all labels")
    contexts_per_round: int = Field(6, ge=1)
    max_rounds: int = Field(3, ge=1)
    rounds_at_once: int | None = Field(
        None,
        ge=1,
        description="rounds whose contexts are drafted together, before any round's items are "
        "selected; later rounds then top up as usual. Each drafted round asks for the full "
        "quotas, so more candidates (and model calls) are made than rounds that see what the "
        "earlier ones accepted, but an endpoint gets them in one go instead of one round's "
        "chain of dependent calls after another. Empty: every round (max_rounds) when every "
        "model is an OpenAI-compatible endpoint, one round on a local model, whose calls each "
        "cost this machine's time",
    )
    min_context_tokens: int = Field(60, ge=1)
    baseline_contexts: int = Field(6, ge=0, description="contexts for the single-prompt baseline")
    critique_thresholds: dict[str, int] = Field(default_factory=dict)
    min_question_statement_similarity: float = Field(
        0.26,
        ge=-1.0,
        le=1.0,
        description="model-free check: a question whose embedding cosine with the statement it "
        "was written from is lower is rejected as unrelated. Measured by "
        "benchmarks/bench_check_similarity.py (BENCHMARKS.md): the largest bar keeping 99% of 609 "
        "human question / answer-sentence pairs (sample set + HAGRID), which rejects 92-99% of "
        "mismatched pairs; -1 disables the check",
    )
    dedup_cosine: float = Field(0.92, gt=0.0, le=1.0)
    dedup_jaccard: float = Field(0.7, gt=0.0, le=1.0)
    balance_tolerance: float = Field(0.15, ge=0.0, le=1.0)
    price_per_1k_tokens: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description="model id -> (prompt, completion) USD per 1k tokens (older place of the "
        "top-level prices table, which applies to every role and wins)",
    )
    max_failed_share: float = max_failed_share("candidates (a model error or an unparseable reply)")


class ModelRole(StrEnum):
    """The jobs an LLM does; each role can run on its own model (``models.<role>``)."""

    GENERATOR = "generator"  # statements, questions and the single-prompt baseline
    LABELLER = "labeller"  # the observed label of a (context, question) pair
    CRITIC = "critic"  # the critiques that gate candidates
    ANSWERER = "answerer"  # answers with citations, in answer-side evaluation
    JUDGE = "judge"  # LLM judgements of answers (sufficiency, correctness)
    EXTRACTOR = "extractor"  # the evidence a question needs, cut from the passages (SEER)


LLM_SPEC_KINDS = MODEL_KINDS
"""The ``kind`` of an LLM spec ``kind:model`` (see :mod:`ragtrail.llm.factory`)."""


def check_llm_spec(spec: str) -> str:
    """``spec`` stripped, or ValueError when it is not ``kind:model`` with a known kind."""
    return str(ModelSpec.parse(spec, kinds=LLM_SPEC_KINDS))


def check_nli_spec(spec: str) -> str:
    """``spec`` stripped, or ValueError unless it names an NLI model (see
    :meth:`ModelSpec.parse_nli`)."""
    ModelSpec.parse_nli(spec)
    return spec.strip()


class ModelSettings(BaseModel):
    """The LLM of each :class:`ModelRole`; unset roles use ``generation.llm``.

    Roles with the same spec share one loaded model. Set e.g.
    ``RAGTRAIL_MODELS__LABELLER=openai:<model>@http://host:8000/v1`` to judge with a stronger
    model than the one that writes the questions.
    """

    generator: str | None = Field(None, description="LLM spec; default generation.llm")
    labeller: str | None = Field(None, description="LLM spec; default generation.llm")
    critic: str | None = Field(None, description="LLM spec; default generation.llm")
    answerer: str | None = Field(None, description="LLM spec; default generation.llm")
    judge: str | None = Field(None, description="LLM spec; default generation.llm")
    extractor: str | None = Field(None, description="LLM spec; default generation.llm")

    @field_validator("generator", "labeller", "critic", "answerer", "judge", "extractor")
    @classmethod
    def _valid_spec(cls, v: str | None) -> str | None:
        return None if v is None else check_llm_spec(v)


class JudgeSettings(BaseModel):
    """Judge calibration samples and the gate bars a judge must meet before it may reject items.

    The small default samples keep the nightly on 2 CPU cores with the 135M local model under 10
    minutes; their intervals are wide, and larger samples are a setting away.
    """

    labeller_min_kappa: float = Field(
        0.4, ge=-1.0, le=1.0, description="the labeller gates when its Cohen's kappa is >= this"
    )
    critique_min_contrast: float = Field(
        0.75,
        ge=0.0,
        le=1.0,
        description="a critique gates when it rates the intact item above its perturbed twin "
        "on at least this share of contrast pairs",
    )
    entailment_min_kappa: float = Field(
        0.4, ge=-1.0, le=1.0, description="an entailment judge gates when its kappa is >= this"
    )
    sufficiency_min_kappa: float = Field(
        0.4, ge=-1.0, le=1.0, description="a sufficiency rater gates when its kappa is >= this"
    )
    correctness_min_kappa: float = Field(
        0.4, ge=-1.0, le=1.0, description="a correctness judge gates when its kappa is >= this"
    )
    entailment_fallback: str = Field(
        EntailmentJudgeName.EMBEDDING.value,
        description="the entailment judge used while nli_model is none (no NLI weights exist "
        "offline): the approximate embedding-similarity judge, the LLM judge on models.judge, "
        "or entailment.trained (the champion of `ragtrail judge train entailment`); every "
        "report names it as such",
    )
    labeller: Literal["labeller", "labeller.trained"] = Field(
        "labeller",
        description="the judge that labels generated questions: the LLM labeller on "
        "models.labeller, or labeller.trained (the champion of `ragtrail judge train labeller`)",
    )
    embedding_entailment_threshold: float | None = Field(
        None,
        ge=-1.0,
        le=1.0,
        description="cosine at which the embedding judge says 'supported'; none: the value "
        "measured on HAGRID (ragtrail.judges.embedding_entailment.DEFAULT_EMBEDDING_THRESHOLD)",
    )
    labeller_items_per_label: int = Field(
        6,
        ge=1,
        le=10_000,
        description="golden items per label the labeller is calibrated on; the small default "
        "keeps the nightly on 2 CPU cores under 10 minutes, raise it for tighter intervals",
    )
    contrast_pairs_per_criterion: int = Field(
        4,
        ge=1,
        le=10_000,
        description="contrast pairs per critique criterion; the small default keeps the nightly "
        "on 2 CPU cores under 10 minutes, raise it for tighter intervals",
    )
    bootstrap_samples: int = Field(
        1000,
        ge=0,
        le=100_000,
        description="bootstrap resamples for kappa intervals (0: no interval, null with a reason)",
    )
    max_failed_share: float = max_failed_share(
        "calibration verdicts (then nothing is stored and the judge stays uncalibrated)"
    )

    @field_validator("entailment_fallback")
    @classmethod
    def _a_fallback(cls, v: str) -> str:
        if v not in ENTAILMENT_FALLBACKS:
            raise ValueError(
                f"entailment_fallback must be one of {', '.join(ENTAILMENT_FALLBACKS)}"
            )
        return v


ANSWER_SETTINGS = ("retrieved", "evidence", "gold", "none")
"""The contexts an answer is given: the retrieved top-k, the evidence the extractor in service
cut from them (answer-from-evidence mode), the ground context, no retrieval."""
DEFAULT_ANSWER_SETTINGS = ("retrieved", "gold", "none")
"""The settings the nightly answers in unless ``sufficiency.settings`` adds ``evidence``."""


def target_mde_field() -> Any:
    """``target_mde`` of an LLM step (see :mod:`ragtrail.pipeline.sample_size`)."""
    return Field(
        None,
        gt=0.0,
        le=1.0,
        description="size the sample to detect a change this large in the step's primary "
        "metric (80% power, from the run history's spread); max_items (when not 0), the "
        "budgets and the set's size cap it; null = max_items decides",
    )


class SufficiencySettings(BaseModel):
    """Sufficient context and Correct / Abstain / Hallucinate (METHODS §9).

    The nightly rates ``max_items`` questions per golden set (spread over the labels, seeded) in
    every answer setting; ``0`` rates every question (``RAGTRAIL_SUFFICIENCY__MAX_ITEMS=0``).
    Eight is the smallest default at which the selective policy could be fitted with SmolLM2 (at
    four, every answer was hallucinated or none was, so no threshold could be learned).
    """

    enabled: bool = Field(True, description="run sufficiency and C/A/H in the nightly")
    qa_sets: Literal["golden", "all"] = Field(
        "golden", description="which QA sets of a night are rated: golden sets only, or all"
    )
    max_items: int = Field(8, ge=0, description="questions per QA set; 0 = all")
    target_mde: float | None = target_mde_field()
    retrieval_k: int = Field(3, ge=1, le=50, description="retrieved chunks per question")
    raters: tuple[str, ...] = DEFAULT_SUFFICIENCY_RATERS
    settings: tuple[str, ...] = Field(
        DEFAULT_ANSWER_SETTINGS,
        description="contexts answered in: retrieved, evidence (the extractor's evidence from "
        "the retrieved chunks: answer-from-evidence mode), gold, none",
    )
    chunk_tokens: int = Field(1600, ge=16, description="chunk size of the chunked raters")
    max_context_tokens: int = Field(
        6000, ge=16, description="contexts are truncated to this many tokens (recorded)"
    )
    entailment_threshold: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="sufficient when an NLI judge's max-over-chunks P(entailment) of the gold "
        "answer reaches this",
    )
    calibration_per_kind: int = Field(
        2,
        ge=1,
        description="golden references per kind (ground context, unanswerable, irrelevant "
        "passages) each rater is calibrated on, and per class (correct, incorrect) for the "
        "correctness judge",
    )
    reference_file: Path | None = Field(
        None,
        description="a labelled JSONL (question, context, label[, answer]) raters are "
        "also calibrated on",
    )
    # A guided {"answer", "abstain"} reply fits in 128 tokens; at 64, 10 of the sample night's 56
    # answers were cut off (digits are one token each) and retried or left unscored.
    max_new_tokens: int = Field(128, ge=8, le=2048, description="answer token budget")
    rater_max_new_tokens: int = Field(
        96,
        ge=16,
        le=2048,
        description="token budget of an LLM rater's reply (a short reason, then the decision)",
    )
    bootstrap_samples: int = Field(1000, ge=0)
    max_failed_share: float = max_failed_share(
        "primary rater's verdicts, answers, correctness verdicts or confidence scores"
    )

    @field_validator("raters")
    @classmethod
    def _known_raters(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(v) - set(SUFFICIENCY_RATERS))
        if unknown or not v:
            raise ValueError(f"raters must be a non-empty subset of {SUFFICIENCY_RATERS}")
        return tuple(r for r in SUFFICIENCY_RATERS if r in v)

    @field_validator("settings")
    @classmethod
    def _known_settings(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(v) - set(ANSWER_SETTINGS))
        if unknown or not v:
            raise ValueError(f"settings must be a non-empty subset of {ANSWER_SETTINGS}")
        return tuple(s for s in ANSWER_SETTINGS if s in v)


class SelectiveSettings(BaseModel):
    """Selective generation: confidence features and the abstention policy (METHODS §9).

    The paper samples 20 answers and asks 5 times (``p_true_samples=20``, ``p_true_asks=5``);
    the nightly's defaults are smaller so the default night stays under 15 minutes on 2 cores.
    """

    enabled: bool = Field(True, description="compute confidence and fit the policy nightly")
    p_true_samples: int = Field(1, ge=1, le=100, description="sampled answers shown per P(True)")
    p_true_asks: int = Field(2, ge=1, le=50, description="times the model is asked per P(True)")
    sample_temperature: float = Field(0.7, gt=0.0, le=2.0)
    p_correct: bool = Field(True, description="also ask for answers with probabilities")
    search_iterations: int = Field(100, ge=1, description="random hyperparameter search draws")
    test_share: float = Field(0.5, gt=0.0, lt=1.0, description="questions held out to evaluate")
    target_coverage: float = Field(0.8, gt=0.0, le=1.0, description="coverage the threshold is for")
    bootstrap_samples: int = Field(1000, ge=0)


class CitationSettings(BaseModel):
    """Citation evaluation: relevance mixtures (RAGE) and attributed-answer scenarios (AIR).

    The nightly answers ``max_items`` questions per QA set (spread over the labels, seeded) in
    every mixture type, and runs the scenarios on ``scenario_items`` of them. Measured with the
    bundled 135M model on 2 CPU cores, 4 questions x 3 types plus 2 questions x 5 scenarios took
    293 s for one set; the defaults keep the whole default night under 15 minutes, and their
    intervals are correspondingly wide. ``0`` evaluates every question: the full-size run is one
    setting away (``RAGTRAIL_CITATIONS__MAX_ITEMS=0``).
    """

    enabled: bool = Field(True, description="run citation evaluation in the nightly")
    mixture: str = Field("1-3/3/3", description="relevant min-max / irrelevant / seemingly")
    mixture_types: tuple[str, ...] = MIXTURE_TYPES
    exclude_ground_documents: bool = Field(
        True,
        description="never use other chunks of a ground document as seemingly relevant "
        "(overlapping windows can carry the answer)",
    )
    max_items: int = Field(4, ge=0, description="questions per QA set; 0 = all")
    target_mde: float | None = target_mde_field()
    scenario_items: int = Field(1, ge=0, description="questions per set for scenarios; 0 = all")
    scenarios: tuple[str, ...] = SCENARIOS
    scenario_k: int = Field(3, ge=1, le=20, description="passages per RTG answer")
    subqueries: int = Field(3, ge=1, le=8, description="sub-queries RTG-query-gen writes")
    fusion: FusionMethod = FusionMethod.RRF
    baseline_repeats: int = Field(200, ge=1, description="random-citation draws per mixture")
    bootstrap_samples: int = Field(1000, ge=0)
    max_new_tokens: int = Field(160, ge=16, le=2048, description="answer token budget")
    max_invalid_share: float = Field(
        0.05, ge=0.0, le=1.0, description="warn when more citations than this are out of range"
    )
    max_failed_share: float = max_failed_share(
        "mixture answers, scenario answers or entailment verdicts"
    )

    @field_validator("mixture_types")
    @classmethod
    def _known_types(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(v) - set(MIXTURE_TYPES))
        if unknown or not v:
            raise ValueError(f"mixture_types must be a non-empty subset of {MIXTURE_TYPES}")
        return tuple(t for t in MIXTURE_TYPES if t in v)

    @field_validator("scenarios")
    @classmethod
    def _known_scenarios(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(v) - set(SCENARIOS))
        if unknown:
            raise ValueError(f"unknown scenarios {unknown}; known: {SCENARIOS}")
        return tuple(s for s in SCENARIOS if s in v)


class RegistrySettings(BaseModel):
    """The model registry (MLflow): where versions, aliases and bundles are kept.

    Bundles are written by ragtrail into the artifact store (content-addressed under
    ``<artifact_uri>/<prefix>/<model>/bundles/<digest>/``) and registered in MLflow with that
    URI as their source, so S3 works with ragtrail's own credentials and endpoint; MLflow itself
    stores only names, versions, aliases, tags and the lineage run. Give a PostgreSQL tracking
    store its own database: MLflow and ragtrail both keep an ``alembic_version`` table.
    """

    tracking_uri: str | None = Field(
        None,
        description="MLflow backend store (a SQLAlchemy URL: sqlite:///..., "
        "postgresql+psycopg://...); default sqlite:///$RAGTRAIL_HOME/registry/mlflow.db",
    )
    artifact_uri: str | None = Field(
        None, description="where bundles are stored; default: the project's artifact store"
    )
    prefix: str = Field("registry", description="key prefix of the registry in the artifact store")
    cache_dir: Path | None = Field(
        None, description="downloaded bundles, one directory per version; default the model cache"
    )
    experiment: str = Field(
        "ragtrail-model-lineage", description="MLflow experiment of the lineage runs"
    )
    citation_model_name: str = Field("ragtrail-citation", description="the citation answerer")
    generator_model_name: str = Field("ragtrail-generator", description="the question generator")
    extractor_model_name: str = Field(
        "ragtrail-extractor", description="the evidence extractor (SEER)"
    )


class PromotionSettings(BaseModel):
    """The champion/challenger gate (:mod:`ragtrail.evaluate.comparison.promotion`).

    The challenger is promoted only if ``primary_metric`` improves with a paired ``confidence``
    bootstrap interval entirely above zero and no guarded metric regresses by more than its
    tolerance (observed mean difference, in the metric's own unit). Without a champion the first
    challenger must beat the random citation baseline the same way.
    """

    primary_metric: Literal["citation_f1", "citation_precision", "citation_recall"] = "citation_f1"
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    n_resamples: int = Field(9999, ge=100, description="bootstrap resamples of the paired CI")
    seed: int = 13
    max_invalid_citation_rate_increase: float = Field(
        0.02, ge=0.0, le=1.0, description="guard: out-of-range citations / citations"
    )
    max_answer_words_increase: float = Field(
        5.0, ge=0.0, description="guard: mean answer length, in words"
    )
    max_failure_rate_increase: float = Field(
        0.02, ge=0.0, le=1.0, description="guard: share of answers that failed (unparseable)"
    )
    max_mixture_f1_decrease: float = Field(
        0.05, ge=0.0, le=1.0, description="guard: citation F1 of each mixture type"
    )
    generator_max_parse_rate_decrease: float = Field(0.05, ge=0.0, le=1.0)
    generator_max_acceptance_rate_decrease: float = Field(0.05, ge=0.0, le=1.0)
    generator_min_parse_rate: float = Field(
        0.5, ge=0.0, le=1.0, description="the first generator's parse rate must reach this"
    )


class DriftSettings(BaseModel):
    """Drift detection: each nightly run against its baseline, paired per question.

    A primary metric (the evaluator's ``primary_metric``) drifts in one facet cell when it gets
    worse by more than its practical threshold (absolute, in the metric's own units) *and* its
    Holm-corrected p-value, over every tested cell of the decision, is below ``alpha``. Corpus
    changes and retired QA items are recorded beside the decision but never fire it.
    """

    enabled: bool = Field(True, description="run the drift check at the end of the nightly")
    alpha: float = Field(
        0.05, gt=0.0, lt=1.0, description="family-wise error rate of the Holm-corrected tests"
    )
    threshold: float = Field(
        0.05,
        ge=0.0,
        description="default practical threshold: how much worse (absolute, in the metric's "
        "units) a primary metric must get to count as drift",
    )
    thresholds: dict[str, float] = Field(
        default_factory=dict,
        description="per-metric thresholds, keyed by '<evaluation>:<metric>' or '<metric>' "
        "(the first wins), e.g. {'retrieval:recall@5': 0.1}",
    )
    min_n: int = Field(
        5, ge=1, description="fewest paired questions a cell needs to be tested at all"
    )
    exclude_facets: dict[str, list[str]] = Field(
        default_factory=lambda: {
            "system": ["random"],
            "method": ["base", "extractive", "full", "none"],
        },
        description="facet values never tested (the random-citation baseline and the evidence "
        "evaluation's references: base model, extractive baseline, full passages, no context; "
        "they are references, not the models under watch)",
    )
    n_resamples: int = Field(
        9999, ge=1, description="bootstrap and permutation resamples of the paired statistics"
    )
    seed: int = Field(13, description="seed of the bootstrap and the permutation test")

    @field_validator("thresholds")
    @classmethod
    def _non_negative(cls, v: dict[str, float]) -> dict[str, float]:
        bad = sorted(k for k, x in v.items() if not (x >= 0.0 and x < float("inf")))
        if bad:
            raise ValueError(f"drift thresholds must be finite and >= 0: {bad}")
        return v


class CitationTrainingSettings(BaseModel):
    """Retraining of the citation answerer (issue 11, METHODS §7): data split, SFT targets,
    SFT and RL stages, LoRA shape.

    The defaults are a CPU budget for the bundled SmolLM2-135M (a few optimiser steps per stage,
    a handful of prompts); a GPU pool raises the step and prompt counts. Every field is
    overridable as ``RAGTRAIL_CITATION_TRAINING__<FIELD>``.
    """

    seed: int = Field(13, description="seed of the split, sampling, LoRA init and trainers")
    eval_share: float = Field(
        0.25, gt=0.0, lt=1.0, description="share of questions held out for evaluation"
    )
    max_train_prompts: int = Field(
        16, ge=0, description="training prompts used (seeded sample); 0 = all of them"
    )
    teacher: str | None = Field(
        None,
        description="LLM spec of the teacher that writes SFT targets; none: best-of-N "
        "self-distillation from the current answerer",
    )
    best_of_n: int = Field(4, ge=1, le=64, description="answers sampled per prompt (no teacher)")
    sample_temperature: float = Field(
        0.8, gt=0.0, le=2.0, description="temperature of the best-of-N samples"
    )
    reward_threshold: float = Field(
        0.5, ge=0.0, le=1.0, description="least reward a target needs to be trained on"
    )
    target_max_new_tokens: int = Field(160, ge=16, le=2048, description="target token budget")
    lora_r: int = Field(16, ge=1, le=256)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.05, ge=0.0, lt=1.0)
    sft_steps: int = Field(8, ge=1, description="SFT optimiser steps")
    sft_batch_size: int = Field(2, ge=1)
    sft_lr: float = Field(2e-4, gt=0.0)
    max_length: int = Field(
        2048, ge=64, description="SFT sequences (prompt + target) are cut at this many tokens"
    )
    rl_algorithm: RLAlgorithm = Field(
        RLAlgorithm.PPO,
        description="RL stage: ppo (RAGE's recipe, our loop), grpo or rloo (TRL); BENCHMARKS.md "
        "'Citation RL: PPO vs GRPO vs RLOO' is the measurement behind the default",
    )
    rl_steps: int = Field(
        4, ge=1, description="RL iterations: one rollout batch (and its updates) each"
    )
    num_generations: int = Field(
        4,
        ge=2,
        le=64,
        description="completions per RL iteration: GRPO/RLOO sample them for one "
        "prompt, PPO for as many prompts (one each)",
    )
    rl_lr: float = Field(1e-5, gt=0.0)
    beta: float = Field(
        0.04,
        gt=0.0,
        description="weight of the KL penalty to the SFT model (must be > 0); PPO's initial "
        "coefficient when target_kl is set",
    )
    max_completion_length: int = Field(
        256,
        ge=8,
        le=2048,
        description="cap on RL completion tokens; the stage fits its length to the SFT targets "
        "below this cap (fit_completion_length)",
    )
    fit_completion_length: bool = Field(
        True,
        description="RL completions get 1.5x the longest SFT target's tokens (+ end of turn), at "
        "least 16, at most max_completion_length",
    )
    rl_temperature: float = Field(0.8, gt=0.0, le=2.0, description="RL sampling temperature")
    rl_patience: int = Field(
        2,
        ge=1,
        description="RL stops after this many iterations in a row whose rewards have no spread",
    )
    ppo_epochs: int = Field(4, ge=1, description="PPO passes over each rollout batch")
    ppo_minibatch_size: int = Field(2, ge=1, description="PPO sequences per update")
    cliprange: float = Field(0.2, gt=0.0, lt=1.0, description="PPO policy-ratio clip")
    cliprange_value: float = Field(0.2, gt=0.0, description="PPO value clip around the old value")
    vf_coef: float = Field(0.1, gt=0.0, description="weight of PPO's value loss")
    gamma: float = Field(1.0, gt=0.0, le=1.0, description="PPO discount")
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0, description="PPO GAE lambda")
    target_kl: float | None = Field(
        6.0,
        gt=0.0,
        description="PPO adaptive KL: sequence KL the coefficient steers to (none = fixed beta)",
    )
    kl_horizon: int = Field(10000, ge=1, description="PPO adaptive KL horizon")
    max_grad_norm: float = Field(1.0, gt=0.0, description="PPO gradient clipping")
    max_failed_share: float = max_failed_share(
        "SFT target answers, or answers of either model at the promotion gate"
    )


NOISE_RATIOS = (0.0, 1.0, 2.0, 4.0)
"""Irrelevant passages added per retrieved one in the robustness test (0-400%, METHODS §10)."""


class EvidenceSettings(BaseModel):
    """The nightly evaluation of the evidence extractor (METHODS §10, SEER).

    ``max_items`` questions per QA set (spread over the labels, seeded) are given the top
    ``retrieval_k`` chunks at the set's best text weight; the extractor in service, its base
    model zero-shot and the model-free extractive baseline each write evidence, and the answerer
    answers from it, from the full passages and from nothing. Noise ratios above 0 add that many
    irrelevant chunks per retrieved one (the extractor only). CPU defaults: a handful of items.
    """

    enabled: bool = Field(True, description="evaluate the evidence extractor in the nightly")
    qa_sets: Literal["golden", "all"] = Field(
        "golden", description="which QA sets of a night are evaluated: golden sets only, or all"
    )
    max_items: int = Field(4, ge=0, description="questions per QA set; 0 = all")
    target_mde: float | None = target_mde_field()
    retrieval_k: int = Field(3, ge=1, le=50, description="retrieved chunks per question")
    noise_ratios: tuple[float, ...] = Field(
        NOISE_RATIOS, description="irrelevant chunks added per retrieved chunk (0 = none)"
    )
    # Budgets a first reply rarely outgrows: a reply cut off at the limit costs a retry (a second
    # prompt with the cut-off reply echoed), which costs more than the tokens it saved.
    max_new_tokens: int = Field(256, ge=16, le=2048, description="evidence token budget")
    answer_max_new_tokens: int = Field(128, ge=8, le=2048, description="answer token budget")
    scorer: str = Field(
        "builtin:smollm2-135m-instruct",
        description="the fixed causal LM whose log-probabilities define helpfulness "
        "(builtin:..., hf:<id or path>, a local path or s3:// URI); it runs in "
        "generation.llm_dtype, and a precision other than float32 is part of its id",
    )
    scorer_batch_size: int = Field(4, ge=1, le=256)
    bootstrap_samples: int = Field(1000, ge=0)
    max_failed_share: float = max_failed_share(
        "evidence extractions, answers, faithfulness verdicts or helpfulness scores"
    )

    @field_validator("noise_ratios")
    @classmethod
    def _ratios(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v or any(not (0.0 <= r <= 10.0) for r in v):
            raise ValueError("noise_ratios must be a non-empty list of numbers in [0, 10]")
        return tuple(sorted(set(v)))


class EvidenceTrainingSettings(BaseModel):
    """Self-alignment of the evidence extractor (SEER, METHODS §10): self-sampling, three
    experts, smoothed CoV weighting, and LPO (lambda-weighted pairwise preferences) with LoRA.

    The paper's training parameters are lr 1e-5, warmup 1.5%, cosine, batch 16, gradient
    accumulation 2, 2 epochs; the defaults here keep the schedule and scale the budget to the
    bundled SmolLM2-135M on a CPU (a few prompts, a few steps, a larger learning rate). A GPU
    pool raises ``max_train_prompts``, ``samples`` and ``max_steps``.
    """

    seed: int = Field(13, description="seed of the split, sampling, LoRA init and the loop")
    eval_share: float = Field(0.3, gt=0.0, lt=1.0, description="questions held out for the gate")
    max_train_prompts: int = Field(8, ge=0, description="training prompts used; 0 = all")
    max_eval_items: int = Field(
        0, ge=0, description="held-out questions the gate compares on (seeded sample); 0 = all"
    )
    samples: int = Field(10, ge=2, le=64, description="M: evidence samples per prompt")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(80, ge=0, description="0 = no top-k cut")
    temperature: float = Field(1.0, gt=0.0, le=2.0)
    dedup_threshold: float = Field(
        0.8, gt=0.0, le=1.0, description="samples this similar (word-trigram Jaccard) are dropped"
    )
    tau: float = Field(1.0, gt=0.0, description="temperature of the CoV expert weighting")
    weighting: Literal["cov", "equal"] = Field("cov", description="how expert scores combine")
    pair_weighting: Literal["lambda", "uniform"] = Field(
        "lambda", description="LPO pair weights: lambda (MRR gain of a swap) or uniform"
    )
    beta: float = Field(0.1, gt=0.0, description="strength of the preference (DPO beta)")
    lr: float = Field(2e-4, gt=0.0, description="the paper: 1e-5 over 2 epochs of its data")
    warmup_ratio: float = Field(0.015, ge=0.0, lt=1.0)
    pairs_per_batch: int = Field(4, ge=1, description="the paper: 16")
    grad_accum: int = Field(2, ge=1)
    epochs: int = Field(2, ge=1)
    max_steps: int = Field(
        4, ge=0, description="optimiser steps; 0 = run the epochs (the paper's setting)"
    )
    lora_r: int = Field(8, ge=1, le=256)
    lora_alpha: int = Field(16, ge=1)
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    max_length: int = Field(1024, ge=64, description="prompt + evidence tokens (prompt cut)")
    max_failed_share: float = max_failed_share(
        "evidence samples or expert scores, or answers of either extractor at the gate"
    )
    max_faithfulness_decrease: float = Field(
        0.05, ge=0.0, le=1.0, description="gate guard: mean faithfulness of the evidence"
    )
    max_compression_decrease: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="gate guard: relative drop of the mean compression (0.25 = a quarter)",
    )


class BudgetLimits(BaseModel):
    """Ceilings of one scope (a night, or one step over all its QA sets); None = no ceiling.

    ``max_calls`` counts requests sent to a model (cache hits are free), ``max_tokens`` prompt
    plus completion tokens, ``max_cost_usd`` uses the ``prices`` table (local models cost 0),
    ``max_minutes`` wall-clock minutes (a night's from its start, a step's from its start)."""

    max_calls: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=0)
    max_cost_usd: float | None = Field(None, ge=0.0)
    max_minutes: float | None = Field(None, ge=0.0)

    def is_set(self) -> bool:
        """Whether any ceiling is set."""
        return any(v is not None for v in self.model_dump().values())


BUDGETED_STEPS = ("calibration", "generation", "citations", "sufficiency", "evidence")
"""The night's LLM steps a budget applies to (``budgets.<step>``)."""


class StepBudgets(BaseModel):
    """One :class:`BudgetLimits` per LLM step (all its QA sets together)."""

    calibration: BudgetLimits = BudgetLimits()
    generation: BudgetLimits = BudgetLimits()
    citations: BudgetLimits = BudgetLimits()
    sufficiency: BudgetLimits = BudgetLimits()
    evidence: BudgetLimits = BudgetLimits()


class BudgetSettings(BaseModel):
    """Cost and time budgets of the nightly (README "Budgets").

    Before an LLM step runs, its cost per item is estimated from the run history (the
    ``step_usage`` rows of earlier nights) and the number of items it runs on is cut to what the
    remaining budgets afford; a step that still reaches a ceiling stops, is marked partial with
    the reason, and the night goes on. ``reserve_minutes`` of the night's time are kept for the
    steps after the LLM steps (retrieval, drift, report). The ``default_*`` values estimate a
    step that has no history yet."""

    night: BudgetLimits = BudgetLimits()
    steps: StepBudgets = StepBudgets()
    reserve_minutes: float = Field(
        1.0, ge=0.0, description="minutes of a night's time budget kept for the non-LLM steps"
    )
    default_calls_per_item: dict[str, float] = Field(
        default_factory=lambda: {
            "calibration": 1.0,
            "generation": 12.0,
            "citations": 8.0,
            "sufficiency": 12.0,
            "evidence": 14.0,
        },
        description="model calls per item of a step without history",
    )
    default_seconds_per_item: dict[str, float] = Field(
        default_factory=lambda: {
            "calibration": 3.0,
            "generation": 30.0,
            "citations": 25.0,
            "sufficiency": 30.0,
            "evidence": 40.0,
        },
        description="wall seconds per item of a step without history (2 CPU cores, SmolLM2)",
    )
    default_tokens_per_call: int = Field(
        600, ge=0, description="prompt + completion tokens per model call without history"
    )
    history_nights: int = Field(
        5, ge=1, description="earlier runs of a step whose usage the estimate averages"
    )
    night_window_hours: float = Field(
        24.0,
        gt=0.0,
        description="under Airflow, one night's budget covers the steps run within this many "
        "hours of its first budgeted step (ragtrail nightly: its own run id)",
    )


class Settings(BaseSettings):
    """Settings for one ragtrail installation. Build with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix="RAGTRAIL_", env_nested_delimiter="__", extra="ignore"
    )

    home: Path = Field(default_factory=lambda: Path.cwd() / ".ragtrail")
    database_url: str | None = Field(
        None, description="SQLAlchemy URL; default sqlite:///$RAGTRAIL_HOME/ragtrail.db"
    )
    artifact_uri: str | None = Field(
        None, description="local path or s3://bucket/prefix; default $RAGTRAIL_HOME/artifacts"
    )
    s3_endpoint_url: str | None = None
    reports_url: str | None = Field(
        None,
        description="base URL under which the artifact store is browsable (a static site, an "
        "S3 website or console, a proxy): each run's report is then linked as "
        "<reports_url>/runs/<run id>/report/report.html from the Airflow UI (asset events, "
        "task results) and the CLI",
    )

    index_backend: Literal["embedded", "elasticsearch"] = "embedded"
    es_url: str | None = None
    es_api_key: str | None = None
    es_username: str | None = None
    es_password: str | None = None
    es_bulk_chunk_size: int = 500

    embedding_model: str = Field(
        "builtin:all-MiniLM-L6-v2",
        description="'builtin:all-MiniLM-L6-v2' (bundled), a local path, an HF id or an s3:// URI",
    )
    embedding_batch_size: int = Field(
        16,
        ge=1,
        description="texts per model call when embedding; batches group texts of like length. "
        "16 beat 64 on the 18F handbook's chunks on a 2-core CPU (every backend, torch included)",
    )
    embedding_backend: Literal["torch", "onnx", "openvino"] = Field(
        "openvino",
        description="what runs the embedding model: 'torch' (sentence-transformers), or the "
        "model exported once to ONNX and run by 'onnx' (onnxruntime) or 'openvino'; an exported "
        "backend must match torch on a probe set before it is used (ragtrail.embed.exported). "
        "Part of the embedder's identity: switching re-embeds the corpus on its next ingest",
    )
    embedding_precision: Literal["auto", "f32", "bf16"] = Field(
        "auto",
        description="'auto': bf16 for openvino on a CPU with bf16 units (AVX512-BF16, AMX), "
        "float32 otherwise; 'f32' pins float32 (e.g. for a fleet of mixed CPUs, whose "
        "identities would otherwise differ); 'bf16' is openvino only",
    )
    model_cache_dir: Path | None = Field(
        None, description="downloaded/converted models; default $RAGTRAIL_HOME/models"
    )
    device: str = "cpu"
    torch_threads: int | None = Field(
        None,
        ge=1,
        description="cap on torch's intra-op threads in this process (default: one per core); "
        "set it when several workers share the cores — oversubscribed OpenMP threads slow "
        "every model several times",
    )

    max_file_bytes: int = Field(20 * 1024 * 1024, ge=1)
    golden_sets: dict[str, list[str]] = Field(
        default_factory=dict,
        description="corpus -> golden-set files (.jsonl, .csv, .parquet) or folders of them, "
        "registered by every ingest of that corpus (its `golden` step; name: the file stem), so "
        "judges calibrate and drift has a baseline from the DAGs alone; the shipped sample set "
        "is added for the shipped sample corpus",
    )
    chunking: ChunkingSettings = ChunkingSettings()
    ingest: IngestSettings = IngestSettings()
    runs: RunSettings = RunSettings()
    retrieval: RetrievalEvalSettings = RetrievalEvalSettings()
    generation: GenerationSettings = GenerationSettings()
    models: ModelSettings = ModelSettings()
    judges: JudgeSettings = JudgeSettings()
    citations: CitationSettings = CitationSettings()
    sufficiency: SufficiencySettings = SufficiencySettings()
    selective: SelectiveSettings = SelectiveSettings()
    registry: RegistrySettings = RegistrySettings()
    promotion: PromotionSettings = PromotionSettings()
    drift: DriftSettings = DriftSettings()
    citation_training: CitationTrainingSettings = CitationTrainingSettings()
    evidence: EvidenceSettings = EvidenceSettings()
    evidence_training: EvidenceTrainingSettings = EvidenceTrainingSettings()
    prices: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description="model id -> (prompt, completion) USD per 1k tokens, for every role; local "
        "models cost 0 unless listed; generation.price_per_1k_tokens is still read (this wins)",
    )
    budgets: BudgetSettings = BudgetSettings()
    nli_model: str | None = Field(
        None,
        description="NLI model for entailment judges: 'hf:<HF id, local path or s3:// URI>'; "
        "none by default (no NLI weights exist offline)",
    )
    seed: int = 13

    @field_validator("nli_model")
    @classmethod
    def _valid_nli_model(cls, v: str | None) -> str | None:
        return None if v is None else check_nli_spec(v)

    def model_prices(self) -> dict[str, tuple[float, float]]:
        """The price table of every role: ``generation.price_per_1k_tokens`` (older setting)
        overridden by the top-level ``prices``."""
        return {**self.generation.price_per_1k_tokens, **self.prices}

    def model_for(self, role: ModelRole | str) -> str:
        """The LLM spec of ``role``: its ``models.<role>`` setting, else ``generation.llm``."""
        return getattr(self.models, ModelRole(role).value) or self.generation.llm

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'ragtrail.db'}"

    @property
    def resolved_artifact_uri(self) -> str:
        return self.artifact_uri or str(self.home / "artifacts")

    @property
    def resolved_model_cache_dir(self) -> Path:
        return self.model_cache_dir or self.home / "models"

    @property
    def resolved_registry_uri(self) -> str:
        return self.registry.tracking_uri or f"sqlite:///{self.home / 'registry' / 'mlflow.db'}"

    @property
    def resolved_registry_artifact_uri(self) -> str:
        return self.registry.artifact_uri or self.resolved_artifact_uri

    @property
    def resolved_registry_cache_dir(self) -> Path:
        return self.registry.cache_dir or self.resolved_model_cache_dir / "registry"

    @cached_property
    def index_dir(self) -> Path:
        return self.home / "indices"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        check_env_names(os.environ, settings_cls)  # a typo'd variable must not run on defaults
        return (init_settings, env_settings, _YamlSource(settings_cls))


class _YamlSource(PydanticBaseSettingsSource):
    """Reads pipeline settings from the project YAML file; refuses secrets there."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> JsonObject:
        path = _config_path()
        if path is None:
            return {}
        data = read_settings_yaml(path)
        leaked = SECRET_FIELDS & data.keys()
        if leaked:
            raise ConfigError(f"{path}: secrets {sorted(leaked)} belong in env vars, not in YAML")
        check_yaml_keys(data, self.settings_cls, path)
        return data


def _config_path() -> Path | None:
    explicit = os.environ.get("RAGTRAIL_CONFIG")
    if explicit:
        path = Path(explicit)
        if path.exists() and not path.is_file():
            kind = "a directory" if path.is_dir() else "something other than a file"
            raise ConfigError(f"RAGTRAIL_CONFIG points at {kind}, not a YAML file: {path}")
        if not path.is_file():
            raise FileNotFoundError(f"RAGTRAIL_CONFIG points at a missing file: {path}")
        return path
    candidates = []
    if home := os.environ.get("RAGTRAIL_HOME"):
        candidates.append(Path(home) / "ragtrail.yaml")
    candidates.append(Path.cwd() / "ragtrail.yaml")
    return next((p for p in candidates if p.is_file()), None)


def load_settings(**overrides: Any) -> Settings:
    """Build settings from overrides, environment and YAML; create the home directory.

    Every problem is a :class:`~ragtrail.config_checks.ConfigError` of one line naming the
    setting and where it came from (an unknown key, unreadable YAML, a value of the wrong type).
    """
    try:
        settings = Settings(**overrides)
    except (ValidationError, PydanticSettingsError) as exc:
        path = _config_path()
        raise describe_settings_error(exc, Settings, os.environ, path, overrides) from exc
    check_database_url(settings.database_url)
    try:
        settings.home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the ragtrail home {settings.home} ({exc.strerror or exc}); "
            "set RAGTRAIL_HOME to a writable directory"
        ) from exc
    return settings
