"""Exported embedders: a sentence-transformers model run by onnxruntime or OpenVINO on the CPU.

The model's transformer is exported once with ``torch.onnx.export`` (opset 17) into the model
cache, under a directory named by the digest of the model's files, so a changed model is
re-exported and an unchanged one never is. Pooling (mean, CLS or max, as the model's Pooling
module says) and L2 normalisation are ours, in numpy; the tokenizer is the model's own, saved next
to the graph.

Before a backend and precision are used on a model for the first time, they must agree with torch
on a fixed probe set (:data:`PROBE_TEXTS`): every probe's cosine to the torch embedding must reach
:data:`EQUIVALENCE_MIN_COSINE`, else :class:`BackendNotEquivalent` refuses the backend. The result
is recorded in the export's manifest, so the check (and loading torch) happens once per model.

The backend and precision are part of the embedder's identity
(:func:`ragtrail.embed.loading.embedder_identity`): cached
embeddings and index snapshots of one are never mixed with another's, and switching re-embeds the
corpus on its next ingest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ragtrail.embed.embedder import ModelLoadError, _l2_normalise, resolve_model_ref
from ragtrail.hardware import cpu_has_bf16
from ragtrail.models.store import hub_offline

log = logging.getLogger(__name__)

EmbeddingBackendName = Literal["torch", "onnx", "openvino"]
Precision = Literal["f32", "bf16"]

EXPORT_FORMAT_VERSION = 1
"""Bumped when the export's layout or graph changes, so older exports are redone."""
OPSET = 17
EQUIVALENCE_MIN_COSINE = 0.999
"""Least cosine, on every probe text, between an exported backend's embedding and torch's."""

PROBE_TEXTS: tuple[str, ...] = (
    "How do I request access to the shared drive?",
    "Expense reports are due within 30 days of the end of travel.",
    "The quick brown fox jumps over the lazy dog.",
    "Our team ships small changes often and reviews every pull request.",
    "What is the difference between a contractor and a federal employee?",
    "Paramètres réseau : modifiez /etc/network/interfaces puis redémarrez le service.",
    "Die Datei wird beim nächsten Start automatisch eingelesen.",
    "def add(a: int, b: int) -> int:\n    return a + b",
    '{"id": 42, "tags": ["security", "onboarding"], "active": true}',
    "SELECT name, COUNT(*) FROM users GROUP BY name HAVING COUNT(*) > 1;",
    "ok",
    "2024-03-01 12:00:00 UTC — incident resolved, root cause: expired TLS certificate.",
    "Ceci est une phrase en français sur la sauvegarde des données.",
    "日本語の文も埋め込みの確認に使います。",
    "- item one\n- item two\n- item three",
    " ".join(["Long paragraphs must be truncated exactly as torch truncates them."] * 40),
    " ".join(["Accessibility reviews check contrast, focus order, labels and keyboard use."] * 12),
    "Retention: records are kept for seven years, then destroyed under the schedule.",
    "https://example.gov/handbook/travel?section=per-diem#rates",
    "Who approves a new software license, and how long does approval take?",
)
"""Fixed, varied probe texts (lengths from one word to past truncation, several scripts)."""


class BackendNotEquivalent(ModelLoadError):
    """An exported backend's embeddings differ from torch's beyond the threshold."""


@dataclass(frozen=True)
class Equivalence:
    """How one backend/precision compared with torch on the probe set."""

    backend: str
    min_cosine: float
    mean_cosine: float
    probes: int
    threshold: float

    @property
    def passed(self) -> bool:
        return self.min_cosine >= self.threshold


@dataclass
class ExportManifest:
    """What an export holds and how the model must be run around it."""

    model_id: str
    digest: str
    dim: int
    max_seq_length: int
    pooling: str
    normalize: bool
    do_lower_case: bool
    input_names: list[str]
    prompts: dict[str, str] = field(default_factory=dict)
    export_seconds: float = 0.0
    format_version: int = EXPORT_FORMAT_VERSION
    equivalence: dict[str, dict[str, float | int | str]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> ExportManifest:
        return cls(**json.loads(path.read_text(encoding="utf-8")))

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)


def backend_key(backend: str, precision: str) -> str:
    """The suffix that names a backend and precision in identities and manifests."""
    return f"{backend}-{precision}"


def resolve_precision(backend: str, precision: str) -> Precision:
    """Turn ``auto`` into the precision that will run: bf16 for OpenVINO on a CPU with bf16
    units, float32 everywhere else. An explicit request is checked, not silently changed."""
    if precision == "auto":
        return "bf16" if backend == "openvino" and cpu_has_bf16() else "f32"
    if precision == "bf16" and backend != "openvino":
        raise ValueError(
            f"embedding precision bf16 is supported by the openvino backend only, not {backend}"
        )
    if precision == "bf16" and not cpu_has_bf16():
        raise ValueError(
            "embedding precision bf16 needs a CPU with bf16 units (AVX512-BF16 or AMX)"
        )
    if precision not in ("f32", "bf16"):
        raise ValueError(f"unknown embedding precision {precision!r}: use auto, f32 or bf16")
    return precision  # type: ignore[return-value]


def model_digest(model_dir: Path, memo_dir: Path | None = None) -> str:
    """sha256 over the model directory's files (relative path and bytes), exports excluded.

    With ``memo_dir`` the digest is remembered there with each file's size and modification
    time, and reused while none of them changed: a worker loading a multi-GB model then stats
    its files instead of reading them all.
    """
    files = [
        (rel, path)
        for path in sorted(p for p in model_dir.rglob("*") if p.is_file())
        if (rel := path.relative_to(model_dir).as_posix()).split("/", 1)[0] not in _NOT_MODEL_FILES
    ]
    stats = [path.stat() for _, path in files]
    signature = [
        [rel, st.st_size, st.st_mtime_ns] for (rel, _), st in zip(files, stats, strict=True)
    ]
    memo = None
    if memo_dir is not None:
        where = hashlib.sha256(str(model_dir.resolve()).encode()).hexdigest()[:24]
        memo = memo_dir / f"{where}.json"
        try:
            known = json.loads(memo.read_text(encoding="utf-8"))
            if known.get("files") == signature:
                return str(known["digest"])
        except (OSError, ValueError, KeyError):
            pass  # no memo, or an unreadable one: hash the files
    h = hashlib.sha256()
    for rel, path in files:
        h.update(rel.encode() + b"\0")
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    digest = h.hexdigest()
    if memo is not None:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"files": signature, "digest": digest}), encoding="utf-8")
        os.replace(tmp, memo)
    return digest


_NOT_MODEL_FILES = frozenset({"onnx", "openvino", ".git", ".cache"})


def local_model_dir(target: str) -> Path:
    """The directory the model's files are in (a hub id is looked up in the HF cache)."""
    path = Path(target)
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(target, local_files_only=hub_offline()))
    except Exception as exc:  # every hub failure means "cannot export"
        raise ModelLoadError(f"cannot find the files of embedding model {target!r}: {exc}") from exc


def _torch_model(target: str) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(target, device="cpu", local_files_only=hub_offline())


def _describe(st_model: Any, model_ref: str) -> tuple[str, bool, bool]:
    """(pooling mode, normalize?, do_lower_case) of a Transformer+Pooling[+Normalize] model.

    Other module stacks (Dense layers, routers, prompt-excluding pooling) are refused rather
    than approximated: they need the torch backend.
    """
    names = [type(m).__name__ for m in st_model]
    if names[:2] != ["Transformer", "Pooling"] or names[2:] not in ([], ["Normalize"]):
        raise ModelLoadError(
            f"embedding model {model_ref!r} has modules {names}; the onnx and openvino backends "
            "run Transformer + Pooling [+ Normalize] models only: use embedding_backend=torch"
        )
    pool_cfg = st_model[1].get_config_dict()
    mode = str(pool_cfg.get("pooling_mode", "mean"))
    if mode not in ("mean", "cls", "max"):
        raise ModelLoadError(
            f"pooling mode {mode!r} of {model_ref!r} is not supported by the exported backends"
        )
    prompts = {k: v for k, v in (getattr(st_model, "prompts", None) or {}).items() if v}
    if prompts and not pool_cfg.get("include_prompt", True):
        raise ModelLoadError(
            f"{model_ref!r} pools without its prompt tokens; use embedding_backend=torch"
        )
    return mode, len(names) == 3, bool(getattr(st_model[0], "do_lower_case", False))


def _transformer_only(auto_model: Any, input_names: list[str]) -> Any:
    """A module taking the inputs positionally and returning the last hidden state (what is
    exported; torch is imported only when an export is needed)."""
    import torch

    class TransformerOnly(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = auto_model

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.inner(**dict(zip(input_names, inputs, strict=True)))[0]

    return TransformerOnly().eval()


def export_model(st_model: Any, model_id: str, digest: str, out_dir: Path, model_ref: str) -> None:
    """Write ``model.onnx``, the tokenizer and ``manifest.json`` for ``st_model`` into out_dir."""
    import torch

    pooling, normalize, lower = _describe(st_model, model_ref)
    transformer = st_model[0]
    tokenizer = st_model.tokenizer
    sample = tokenizer(
        ["probe text", "a second, longer probe text"], padding=True, return_tensors="pt"
    )
    input_names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]
    started = time.perf_counter()
    auto_model = transformer.auto_model
    if hasattr(auto_model, "set_attn_implementation"):
        # Eager attention exports as plain MatMul/Softmax, which OpenVINO and onnxruntime fuse
        # better than the traced SDPA path (measured: BENCHMARKS.md, ingest section).
        auto_model.set_attn_implementation("eager")
    wrapper = _transformer_only(auto_model, input_names)
    dynamic = {n: {0: "batch", 1: "sequence"} for n in input_names}
    dynamic["last_hidden_state"] = {0: "batch", 1: "sequence"}
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on constant shapes, not errors
        torch.onnx.export(
            wrapper,
            tuple(sample[n] for n in input_names),
            str(out_dir / "model.onnx"),
            input_names=input_names,
            output_names=["last_hidden_state"],
            dynamic_axes=dynamic,
            opset_version=OPSET,
            dynamo=False,
        )
    tokenizer.save_pretrained(str(out_dir / "tokenizer"))
    ExportManifest(
        model_id=model_id,
        digest=digest,
        dim=int(st_model.get_embedding_dimension()),
        max_seq_length=int(st_model.max_seq_length),
        pooling=pooling,
        normalize=normalize,
        do_lower_case=lower,
        input_names=input_names,
        prompts={k: v for k, v in (getattr(st_model, "prompts", None) or {}).items() if v},
        export_seconds=round(time.perf_counter() - started, 2),
    ).write(out_dir / "manifest.json")


def _pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    m = mask[..., None].astype(np.float32)
    if mode == "cls":
        return hidden[:, 0]
    if mode == "max":
        return np.where(m > 0, hidden, -1e9).max(axis=1)
    return (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)


class ExportedEmbedder:
    """Embeds with an exported graph; same contract as the torch embedder (unit-norm float32).

    ``model_id`` is the embedder's identity: the model id plus ``@<backend>-<precision>``.
    """

    def __init__(
        self,
        model_ref: str,
        *,
        backend: Literal["onnx", "openvino"],
        precision: Precision = "f32",
        batch_size: int = 64,
        cache_dir: Path | None = None,
        s3_endpoint_url: str | None = None,
        threads: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if backend == "onnx" and precision != "f32":
            raise ValueError("the onnx backend runs float32 only")
        target, base_id = resolve_model_ref(
            model_ref, cache_dir=cache_dir, s3_endpoint_url=s3_endpoint_url
        )
        self.model_ref = model_ref
        self.backend = backend
        self.precision = precision
        self.batch_size = batch_size
        self.model_id = f"{base_id}@{backend_key(backend, precision)}"
        root = (cache_dir or Path(tempfile.gettempdir()) / "ragtrail-models") / "exports"
        self.export_dir, self.manifest, torch_model = _ensure_export(
            model_ref, target, base_id, root
        )
        self.dim = self.manifest.dim
        self._threads = threads
        self._loaded: tuple[Any, Callable[[dict[str, np.ndarray]], np.ndarray]] | None = None
        self._load_lock = threading.Lock()
        # one encode at a time: the tokenizer holds state between calls, and the steps of a
        # night that run side by side share one embedder (the shared session takes turns too)
        self._encode_lock = threading.Lock()
        key = backend_key(backend, precision)
        if key not in self.manifest.equivalence:
            torch_model = torch_model or _torch_model(target)
            result = check_equivalence(self, torch_model)
            self.manifest.equivalence[key] = asdict(result)
            self.manifest.write(self.export_dir / "manifest.json")
        result = Equivalence(**self.manifest.equivalence[key])  # type: ignore[arg-type]
        if not result.passed:
            raise BackendNotEquivalent(
                f"embedding backend {key} disagrees with torch on {model_ref!r}: least cosine "
                f"{result.min_cosine:.5f} over {result.probes} probe texts, below "
                f"{result.threshold}; use embedding_backend=torch (or precision f32)"
            )
        self.equivalence = result

    def _graph(self) -> tuple[Any, Callable[[dict[str, np.ndarray]], np.ndarray]]:
        """The tokenizer and the compiled graph, loaded on the first use: a night whose
        embeddings all come from the cache imports no transformers and compiles nothing."""
        with self._load_lock:
            if self._loaded is None:
                tokenizer = FileTokenizer(self.export_dir / "tokenizer")
                run = _shared_session(
                    self.export_dir / "model.onnx", self.backend, self.precision, self._threads
                )
                self._loaded = (tokenizer, run)
            return self._loaded

    @cached_property
    def tokenizer(self) -> Any:
        """The model's fast tokenizer as a ``tokenizers.Tokenizer`` (what the chunker and the
        context budgets count with), read from its ``tokenizer.json``: no transformers import,
        so a night whose embeddings are all cached still cuts contexts in seconds."""
        from tokenizers import Tokenizer

        path = self.export_dir / "tokenizer" / "tokenizer.json"
        return Tokenizer.from_file(str(path)) if path.is_file() else self._graph()[0]

    @property
    def max_seq_length(self) -> int:
        return self.manifest.max_seq_length

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed documents in length-sorted batches (least padding), returned in input order."""
        return self._encode(texts, self.manifest.prompts.get("document", ""))

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, self.manifest.prompts.get("query", ""))

    def _encode(self, texts: Sequence[str], prompt: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._encode_lock:
            return self._encode_now(texts, prompt)

    def _encode_now(self, texts: Sequence[str], prompt: str) -> np.ndarray:
        prepared = [prompt + str(t).strip() for t in texts]
        if self.manifest.do_lower_case:
            prepared = [t.lower() for t in prepared]
        tokenizer, run = self._graph()
        limit = self.manifest.max_seq_length
        enc = tokenizer.encode(prepared, max_length=limit)
        counts = [len(ids) for ids in enc["input_ids"]]
        # Batches of rows of nearly equal token counts: the characters of a text say little
        # about its tokens (code, URLs, tables), and every padded position costs a full row.
        order = sorted(range(len(prepared)), key=lambda i: counts[i], reverse=True)
        out = np.empty((len(prepared), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            rows = {n: [enc[n][i] for i in idx] for n in self.manifest.input_names}
            feeds = _padded(tokenizer, rows, limit)
            hidden = run(feeds)
            out[np.asarray(idx)] = _pool(hidden, feeds["attention_mask"], self.manifest.pooling)
        return _l2_normalise(out)


PAD_MULTIPLE = 8
"""Batches are padded to a multiple of this many tokens: the CPU kernels run faster on such shapes
(OpenVINO bf16: 5% on the handbook's chunks), and padded positions are masked out of pooling."""


class FileTokenizer:
    """The model's own fast tokenizer read from its saved files (``tokenizer.json`` and
    ``tokenizer_config.json``) with the ``tokenizers`` library alone: the same token ids, masks,
    type ids and padding as the Hugging Face tokenizer loaded from that folder, without
    importing transformers (which imports torch: seconds, on the path of every first encode)."""

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.no_padding()
        self._truncation_side = str(config.get("truncation_side") or "right")
        pad = config.get("pad_token")
        pad = pad.get("content") if isinstance(pad, dict) else pad
        pad_id = self._tokenizer.token_to_id(pad) if isinstance(pad, str) else None
        self.pad_id = 0 if pad_id is None else int(pad_id)
        self.pad_type_id = int(config.get("pad_token_type_id") or 0)
        self.padding_side = str(config.get("padding_side") or "right")

    def encode(self, texts: Sequence[str], *, max_length: int) -> dict[str, list[list[int]]]:
        """Token ids, attention masks and type ids of each text, special tokens added, cut to
        ``max_length`` tokens (the longest-first truncation of one sequence)."""
        self._tokenizer.enable_truncation(max_length, direction=self._truncation_side)
        encodings = self._tokenizer.encode_batch(list(texts))
        return {
            "input_ids": [e.ids for e in encodings],
            "attention_mask": [e.attention_mask for e in encodings],
            "token_type_ids": [e.type_ids for e in encodings],
        }

    def pad(self, rows: dict[str, list[list[int]]], width: int) -> dict[str, np.ndarray]:
        """``rows`` padded to ``width`` tokens on the tokenizer's side: pad ids, type ids and a
        zero attention mask on the padded positions."""
        fill = {"input_ids": self.pad_id, "attention_mask": 0, "token_type_ids": self.pad_type_id}
        out = {}
        for name, values in rows.items():
            grid = np.full((len(values), width), fill.get(name, 0), dtype=np.int64)
            for i, row in enumerate(values):
                if self.padding_side == "left":
                    grid[i, width - len(row) :] = row
                else:
                    grid[i, : len(row)] = row
            out[name] = grid
        return out


def _padded(
    tokenizer: FileTokenizer, rows: dict[str, list[list[int]]], max_length: int
) -> dict[str, np.ndarray]:
    """``rows`` (token arrays by input name) padded by the tokenizer, on its side and with its
    pad ids, to the longest row rounded up to :data:`PAD_MULTIPLE`, but never past
    ``max_length`` (or the longest row, when that is longer)."""
    longest = max(len(ids) for ids in rows["input_ids"])
    width = max(longest, min(-(-longest // PAD_MULTIPLE) * PAD_MULTIPLE, max_length))
    return tokenizer.pad(rows, width)


_SESSIONS: dict[tuple[str, str, str, int], Callable[[dict[str, np.ndarray]], np.ndarray]] = {}
_SESSIONS_LOCK = threading.Lock()


def _shared_session(
    onnx_path: Path, backend: str, precision: str, threads: int | None
) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """:func:`_session`, compiled once per process for each model file, backend, precision and
    thread count, and never released: every runtime (each Airflow task, each test) reuses it.

    Never releasing is deliberate. OpenVINO's CPU plugin can spin forever in an infer request's
    destructor when the garbage collector runs it while the GIL is held (seen in a CI run: the
    main thread spun for over 15 minutes in ``~IAsyncInferRequest`` called from a collection;
    openvinotoolkit/openvino#24722 and #32877 describe hangs in that destructor while the GIL is
    held), so a request must outlive the interpreter's collections, including the one at exit.
    Calls of one session take turns: an infer request serves one call at a time."""
    threads = threads or os.cpu_count() or 1  # unset and the machine's count: one session
    stat = onnx_path.stat()  # a file rewritten in place is compiled again
    key = (f"{onnx_path}:{stat.st_mtime_ns}:{stat.st_size}", backend, precision, threads)
    with _SESSIONS_LOCK:
        if key not in _SESSIONS:
            run = _session(onnx_path, backend, precision, threads)
            turn = threading.Lock()

            def in_turn(feeds: dict[str, np.ndarray]) -> np.ndarray:
                with turn:
                    return run(feeds)

            _never_released(run)
            _SESSIONS[key] = in_turn
        return _SESSIONS[key]


def _never_released(obj: object) -> None:
    """Take one reference to ``obj`` that is never given back, so that neither a collection nor
    the interpreter's shutdown destroys it (see :func:`_shared_session`)."""
    import ctypes

    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def _session(
    onnx_path: Path, backend: str, precision: str, threads: int
) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """A function from input arrays to the float32 last hidden state."""
    if backend == "onnx":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        return lambda feeds: np.asarray(sess.run(None, feeds)[0], dtype=np.float32)
    import openvino as ov

    core = ov.Core()
    config = {
        "INFERENCE_NUM_THREADS": threads,
        "INFERENCE_PRECISION_HINT": "bf16" if precision == "bf16" else "f32",
        "PERFORMANCE_HINT": "LATENCY",
    }
    compiled = core.compile_model(core.read_model(str(onnx_path)), "CPU", config)
    request = compiled.create_infer_request()

    def run(feeds: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(request.infer(feeds)[0], dtype=np.float32)

    return run


def _ensure_export(
    model_ref: str, target: str, model_id: str, root: Path
) -> tuple[Path, ExportManifest, Any]:
    """The export directory for the model's current files, exporting it on a miss.

    Returns the torch model too when it had to be loaded (so the equivalence check reuses it).
    An export is written to a temporary directory and renamed into place, so concurrent workers
    never see half an export.
    """
    digest = model_digest(local_model_dir(target), memo_dir=root.parent / "model-digests")
    slug = model_id.replace("/", "--").replace(":", "-")[-80:]
    final = root / f"{slug}-{digest[:16]}-v{EXPORT_FORMAT_VERSION}"
    manifest_path = final / "manifest.json"
    if manifest_path.is_file():
        manifest = ExportManifest.read(manifest_path)
        if manifest.digest == digest and manifest.format_version == EXPORT_FORMAT_VERSION:
            return final, manifest, None
        shutil.rmtree(final, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    log.info("exporting embedding model %s to ONNX (opset %d) in %s", model_id, OPSET, final)
    st_model = _torch_model(target)
    work = Path(tempfile.mkdtemp(prefix=f".{slug}-", dir=root))
    try:
        export_model(st_model, model_id, digest, work, model_ref)
        try:
            os.replace(work, final)
        except OSError:  # another worker finished first: use theirs
            shutil.rmtree(work, ignore_errors=True)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return final, ExportManifest.read(manifest_path), st_model


def check_equivalence(exported: ExportedEmbedder, torch_model: Any) -> Equivalence:
    """Cosine between the exported backend's and torch's embeddings of :data:`PROBE_TEXTS`."""
    reference = torch_model.encode(
        list(PROBE_TEXTS),
        convert_to_numpy=True,
        normalize_embeddings=True,
        batch_size=8,
        show_progress_bar=False,
    )
    mine = exported.encode(list(PROBE_TEXTS))
    cosines = np.sum(_l2_normalise(reference) * mine, axis=1)
    result = Equivalence(
        backend=backend_key(exported.backend, exported.precision),
        min_cosine=round(float(cosines.min()), 6),
        mean_cosine=round(float(cosines.mean()), 6),
        probes=len(PROBE_TEXTS),
        threshold=EQUIVALENCE_MIN_COSINE,
    )
    log.info(
        "embedding backend %s vs torch on %s: least cosine %.6f, mean %.6f (%d probes)",
        result.backend,
        exported.model_ref,
        result.min_cosine,
        result.mean_cosine,
        result.probes,
    )
    return result
