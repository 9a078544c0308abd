"""Builds the configured backends once per process, lazily.

Every pipeline step takes a :class:`Runtime` instead of constructing engines, stores and models
itself, so the choice between embedded and production backends lives in exactly one place.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING

from ragtrail.config import ModelRole, Settings, load_settings
from ragtrail.progress import LogProgress, ProgressSink, ProgressUpdate
from ragtrail.records import ModelKind, ModelSpec
from ragtrail.redact import redact

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from ragtrail.embed.embedder import CachedEmbedder, Embedder
    from ragtrail.index.base import HybridIndex
    from ragtrail.llm import LLMBackend, LLMClient, SqlLLMCache, UsageMeter
    from ragtrail.llm.budget import BudgetGate
    from ragtrail.llm.scoring import LogProbScorer
    from ragtrail.models.registry import ModelRegistry
    from ragtrail.storage.artifacts import ArtifactStore
    from ragtrail.storage.metadata_store import SqlMetadataStore


HEARTBEAT_EVERY_S = 30.0
"""The runs a step holds report that they are alive at most this often (on progress)."""
BATCHES_PER_CALL = 4
"""Model batches per backend call of a client: progress moves every few batches (larger batches,
e.g. on a GPU, get larger steps), and a continuously batched backend keeps its slots full for
the whole call."""


class Runtime:
    """Lazily constructed engine, stores, embedder and indices for one settings object."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or load_settings()
        self._indices: dict[str, HybridIndex] = {}
        self._models_of: Runtime | None = None
        self._llm_clients: dict[str, LLMClient] = {}
        self.progress: ProgressSink = LogProgress(logging.getLogger("ragtrail.progress"))
        """Where long steps report progress: log lines by default (Airflow task logs); the CLI
        puts a terminal bar here."""
        self.holds_runs = True
        """Whether this process runs whole evaluation runs (the CLI, ``ragtrail nightly``), so
        that its death ends them at once; an Airflow worker runs one task and sets False."""
        self._held: dict[str, tuple[str | None, float]] = {}
        self._report_lock = threading.Lock()
        self.budget_night: str | None = None
        """The night whose budgets the LLM steps count against (``ragtrail nightly`` sets its
        run id; None: an Airflow task finds its night in the ledger, ``pipeline/budgets.py``)."""

    def sibling(self) -> Runtime:
        """A runtime for one of several instances of a step run at once on threads (see
        :meth:`llm_calls_overlap`): the same settings, progress sink, night and run holding, but
        its own usage meter, budget checks and model clients, so each instance accounts for its
        own calls as it would on its own Airflow worker; the embedding model is the parent's.
        Close it after the instance (``with rt.sibling() as own: ...`` does)."""
        child = Runtime(self.settings)
        child._models_of = self
        child.progress = self.report
        child.holds_runs = self.holds_runs
        child.budget_night = self.budget_night
        return child

    def llm_calls_overlap(self) -> bool:
        """Whether independent LLM steps may run at once in this process: every role's model is
        an OpenAI-compatible endpoint, whose shared limiter (:mod:`ragtrail.llm.rate_limit`)
        holds the requests in flight. A local model computes on this machine's cores, which
        one step already keeps busy."""
        specs = {self.settings.model_for(role) for role in ModelRole}
        parsed = [ModelSpec.try_parse(spec) for spec in specs]
        return all(p is not None and p.kind == ModelKind.OPENAI for p in parsed)

    def report(self, update: ProgressUpdate) -> None:
        """Hand ``update`` to the current :attr:`progress` sink (clients built earlier too), and
        let the runs this process holds report that they are alive. Serialised: independent
        model steps may run on threads at once (:mod:`ragtrail.llm.together`)."""
        with self._report_lock:
            self.progress(update)
            self._heartbeat()

    def hold_run(self, run_id: str, night: str | None = None) -> None:
        """Send heartbeats for ``run_id`` (and every running run of its ``night``) while long
        steps report progress, until :meth:`release_run`."""
        self._held[run_id] = (night, time.monotonic())

    def release_run(self, run_id: str) -> None:
        self._held.pop(run_id, None)

    def _heartbeat(self) -> None:
        now = time.monotonic()
        due = {
            r: night for r, (night, last) in self._held.items() if now - last >= HEARTBEAT_EVERY_S
        }
        if not due:
            return
        from ragtrail.storage.runs_store import RunStore

        RunStore(self.engine).heartbeat(due, nights={n for n in due.values() if n})
        for run_id, night in due.items():
            self._held[run_id] = (night, now)

    @cached_property
    def engine(self) -> Engine:
        from ragtrail.storage.db import make_engine, upgrade

        engine = make_engine(self.settings.resolved_database_url)
        upgrade(engine)
        return engine

    @cached_property
    def store(self) -> SqlMetadataStore:
        from ragtrail.storage.metadata_store import SqlMetadataStore

        return SqlMetadataStore(self.engine)

    @cached_property
    def artifacts(self) -> ArtifactStore:
        from ragtrail.storage.artifacts import open_artifact_store

        return open_artifact_store(
            self.settings.resolved_artifact_uri, s3_endpoint_url=self.settings.s3_endpoint_url
        )

    def limit_torch_threads(self) -> None:
        """Apply ``settings.torch_threads`` (before any model runs; no-op when unset)."""
        if self.settings.torch_threads is not None:
            import torch

            torch.set_num_threads(self.settings.torch_threads)

    @cached_property
    def embedder(self) -> Embedder:
        """The embedding model, loaded on first use; a sibling uses its parent's (one model in
        memory, loaded once, however many steps run side by side: encodes take turns)."""
        if self._models_of is not None:
            return self._models_of.embedder
        from ragtrail.embed.loading import load_embedder

        self.limit_torch_threads()
        return load_embedder(self.settings)

    @cached_property
    def embedder_identity(self) -> str:
        """The embedder as index snapshots and metrics record it (model, backend, precision)."""
        from ragtrail.embed.loading import embedder_identity

        return embedder_identity(self.settings)

    @cached_property
    def llm_dtype(self) -> str:
        """The dtype local LLMs run in (``generation.llm_dtype`` with ``auto`` resolved)."""
        from ragtrail.hardware import resolve_model_dtype

        return resolve_model_dtype(self.settings.generation.llm_dtype)

    @cached_property
    def cached_embedder(self) -> CachedEmbedder:
        from ragtrail.embed.embedder import CachedEmbedder

        return CachedEmbedder(self.embedder, self.store)

    @cached_property
    def llm_cache(self) -> SqlLLMCache:
        """The content-addressed completion cache every role's client shares."""
        from ragtrail.llm import SqlLLMCache

        return SqlLLMCache(self.engine)

    @cached_property
    def llm_usage(self) -> UsageMeter:
        """The usage meter every role's client records into (one per runtime)."""
        from ragtrail.llm import UsageMeter

        return UsageMeter(prices=self.settings.model_prices())

    @cached_property
    def budget_gate(self) -> BudgetGate:
        """The budget checks every client of this runtime asks before a model call."""
        from ragtrail.llm.budget import BudgetGate

        return BudgetGate()

    def llm(self, role: ModelRole) -> LLMClient:
        """The client of ``role``'s model (``settings.model_for(role)``).

        One client, hence one loaded backend, per distinct spec: roles configured with the same
        model share it. Every client uses :attr:`llm_cache` and :attr:`llm_usage`.
        """
        return self.llm_for_spec(self.settings.model_for(role))

    def llm_for_spec(self, spec: str) -> LLMClient:
        """The client of the model ``spec`` names (e.g. ``registry:<name>@3`` when champion and
        challenger are compared), shared with any role configured with the same spec."""
        if spec not in self._llm_clients:
            self._llm_clients[spec] = self._llm_client(self._load_llm_backend(spec))
        return self._llm_clients[spec]

    @cached_property
    def registry(self) -> ModelRegistry:
        """The model registry (MLflow on ``settings.registry``; bundles in the artifact store)."""
        from ragtrail.models.mlflow_registry import MlflowModelRegistry

        return MlflowModelRegistry.from_settings(self.settings)

    @cached_property
    def scorer(self) -> LogProbScorer:
        """The fixed LM of the helpfulness expert (``settings.evidence.scorer``), its
        log-probabilities cached by content in the metadata database."""
        from ragtrail.llm.score_cache import SqlScoreCache
        from ragtrail.llm.scoring import (
            CachedLogProbScorer,
            LazyLogProbScorer,
            TransformersLogProbScorer,
            scorer_model_id,
        )

        def build() -> LogProbScorer:
            self.limit_torch_threads()
            return TransformersLogProbScorer(
                self.settings.evidence.scorer,
                cache_dir=self.settings.resolved_model_cache_dir,
                batch_size=self.settings.evidence.scorer_batch_size,
                dtype=self.llm_dtype,
            )

        # built on the first score the cache lacks: a warm night loads no scorer model
        lazy = LazyLogProbScorer(
            scorer_model_id(self.settings.evidence.scorer, self.llm_dtype), build
        )
        return CachedLogProbScorer(lazy, SqlScoreCache(self.engine))

    def use_scorer(self, scorer: LogProbScorer) -> None:
        """Serve helpfulness with an already built scorer (tests, benchmarks)."""
        self.__dict__["scorer"] = scorer

    def use_llm_backends(self, backends: Mapping[str, LLMBackend]) -> None:
        """Serve these specs with already built backends, starting a fresh usage meter.

        For tests and benchmarks: drops every client built so far (as a new process would),
        then the roles whose spec is a key of ``backends`` get that backend; other specs still
        load on first use.
        """
        self.__dict__.pop("llm_usage", None)
        self._llm_clients = {spec: self._llm_client(b) for spec, b in backends.items()}

    def _llm_client(self, backend: LLMBackend) -> LLMClient:
        from ragtrail.llm import LLMClient

        return LLMClient(
            backend,
            self.llm_cache,
            max_attempts=self.settings.generation.max_attempts,
            usage=self.llm_usage,
            progress=self.report,
            report_every=BATCHES_PER_CALL * self.settings.generation.llm_batch_size,
            gate=self.budget_gate,
        )

    def _load_llm_backend(self, spec: str) -> LLMBackend:
        """The backend of ``spec``; a plain local model (builtin or ``hf:``) loads on its first
        request the cache lacks (:mod:`ragtrail.llm.backends.lazy_local`), so a warm night loads
        no model."""
        import ragtrail.train  # noqa: F401  (registers the ``generator:`` LLM spec kind)
        from ragtrail.llm import load_llm_backend
        from ragtrail.llm.backends.lazy_local import LazyLocalBackend, planned_local_model_id

        parsed = ModelSpec.try_parse(spec)  # None: malformed, and load_llm_backend says how
        kwargs = self._llm_backend_kwargs(parsed)

        def load() -> LLMBackend:
            self.limit_torch_threads()
            return load_llm_backend(spec, **kwargs)

        if parsed is not None and parsed.kind in (ModelKind.BUILTIN, ModelKind.HF):
            return LazyLocalBackend(planned_local_model_id(spec, **kwargs), load)
        return load()

    def _llm_backend_kwargs(self, parsed: ModelSpec | None) -> dict[str, object]:
        """The constructor arguments the settings give the backend of the spec ``parsed``."""
        kwargs: dict[str, object] = {}
        if parsed is not None and parsed.is_local:
            kwargs = {
                "batch_size": self.settings.generation.llm_batch_size,
                "dtype": self.llm_dtype,
                "decode_weights": self.settings.generation.llm_decode_weights,
                "draft_tokens": self.settings.generation.llm_draft_tokens,
                "cache_dir": self.settings.resolved_model_cache_dir,
                "s3_endpoint_url": self.settings.s3_endpoint_url,
            }
        if parsed is not None and parsed.kind == ModelKind.OPENAI:
            gen = self.settings.generation
            kwargs = {
                "max_concurrency": gen.llm_max_concurrency,
                "requests_per_minute": gen.llm_requests_per_minute,
                "tokens_per_minute": gen.llm_tokens_per_minute,
                "supports_json_schema": gen.llm_json_schema,
            }
        if parsed is not None and parsed.kind == ModelKind.REGISTRY:
            kwargs["settings"] = self.settings
        return kwargs

    def llm_models(self) -> dict[str, str]:
        """The LLM of every role, one entry per distinct spec: ``{"llm": spec}`` when all roles
        share one model, else ``{"llm (generator, critic)": spec_a, "llm (labeller)": spec_b}``.

        The specs are redacted (credentials in a URL shown as ``***``): this is what runs,
        reports and metrics rows record, never what loads a model."""
        roles_of: dict[str, list[str]] = {}
        for role in ModelRole:
            roles_of.setdefault(self.settings.model_for(role), []).append(role.value)
        if len(roles_of) == 1:
            return {"llm": redact(next(iter(roles_of)))}
        return {f"llm ({', '.join(roles)})": redact(spec) for spec, roles in roles_of.items()}

    def index(self, corpus: str) -> HybridIndex:
        """The hybrid index of ``corpus``, opened once per process."""
        if corpus not in self._indices:
            from ragtrail.index.factory import open_index

            self._indices[corpus] = open_index(self.settings, corpus, self.embedder.dim)
        return self._indices[corpus]

    def backends(self) -> dict[str, str]:
        """What produced a result: written into every report and metrics row (with no
        credentials: the LLM specs are redacted, the database is named by its dialect only)."""
        s = self.settings
        return {
            "index backend": s.index_backend,
            "embedding model": self.embedder_identity,
            "metadata database": self.engine.dialect.name,
            "artifact store": "s3" if s.resolved_artifact_uri.startswith("s3://") else "local",
            **self.llm_models(),
            # named only when it differs from the float32 reference, as in the models' ids
            **({"local model dtype": self.llm_dtype} if self.llm_dtype != "float32" else {}),
            **(
                {"local decoding weights": "int8"}
                if self.settings.generation.llm_decode_weights == "int8"
                else {}
            ),
        }

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for index in self._indices.values():
            index.close()
        self._indices.clear()
        if "engine" in self.__dict__:
            self.engine.dispose()
