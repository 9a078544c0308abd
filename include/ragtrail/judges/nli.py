"""Entailment judges backed by NLI models: a sequence classifier, a sentence-transformers
CrossEncoder, or a seq2seq model in the TRUE / AutoAIS convention.

Which output is "entailment" is always read from the model's ``config.id2label`` (a label that
case-insensitively reads "entailment" or "entail"), never assumed: NLI checkpoints order their
labels differently. A model without such a label cannot be an entailment judge and fails to load
with the labels it does have. The probability of entailment is the softmax over all classes
(three-class and two-class models alike); the verdict is SUPPORTED when it reaches the threshold.

Long inputs: pairs are cut to the model's window (``max_length``, default the smaller of the
tokenizer's and the position embeddings' limits). Tokens are removed from the longer side first
(transformers' ``longest_first``), which in practice means the end of the premise; a verdict on a
cut input says so in its ``reason``. The seq2seq judge cuts only the premise.

All models run in eval mode under ``torch.no_grad`` with inputs in order, so verdicts are
deterministic for a given model, device and batch size. :func:`load_nli_judge` loads a model by
local path, ``s3://`` URI (mirrored into the model cache) or Hugging Face hub id (from the local
HF cache when ``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ragtrail.judges.contract import JudgeInput, JudgeSpec, Verdict, judge_version
from ragtrail.judges.entailment import (
    DEFAULT_NLI_THRESHOLD,
    NLI_JUDGE_NAME,
    check_threshold,
    entailment_spec,
    failed_verdict,
    judge_nonempty,
    score_verdict,
)
from ragtrail.models.store import COMPLETE_MARKER, ModelFetchError, hub_offline, mirror_s3_prefix
from ragtrail.records import sha256_text
from ragtrail.storage.s3uri import is_s3_uri

log = logging.getLogger(__name__)

NLIKind = Literal["auto", "classifier", "cross-encoder", "seq2seq"]
BACKENDS: dict[str, str] = {
    "classifier": "nli-classifier",
    "cross-encoder": "cross-encoder",
    "seq2seq": "seq2seq-nli",
}
"""Loader kind -> the ``JudgeSpec.backend`` it produces."""

ENTAILMENT_LABELS = frozenset({"entailment", "entail"})
DEFAULT_BATCH_SIZE = 16
SEQ2SEQ_TEMPLATE = "premise: {premise} hypothesis: {hypothesis}"
"""The TRUE / AutoAIS input format; such models answer "1" for entailed, "0" otherwise."""


class NLIModelError(ModelFetchError):
    """The model cannot serve as an entailment judge (no entailment label, unknown architecture)."""


def entailment_index(id2label: Mapping[Any, Any], *, model: str) -> int:
    """The class index whose label reads "entailment"/"entail" (case-insensitive).

    Raises :class:`NLIModelError` when there is no such label or more than one.
    """
    matches = [
        int(i) for i, label in id2label.items() if str(label).strip().lower() in ENTAILMENT_LABELS
    ]
    if len(matches) != 1:
        labels = {int(i): str(label) for i, label in id2label.items()}
        problem = "no" if not matches else "more than one"
        raise NLIModelError(
            f"model {model!r} has {problem} entailment label in config.id2label {labels}: an NLI "
            "judge needs exactly one class named 'entailment' (or 'entail'). Fix id2label in the "
            "model's config.json if the labels are generic (LABEL_0, ...)."
        )
    return matches[0]


def _window(tokenizer: Any, config: Any, max_length: int | None) -> int:
    """Tokens per input: ``max_length`` if given, else the tokenizer's / positions' limit."""
    if max_length is not None:
        if max_length < 8:
            raise ValueError(f"max_length must be >= 8, got {max_length}")
        return int(max_length)
    limits = [int(tokenizer.model_max_length)] if tokenizer.model_max_length < 1_000_000 else []
    positions = getattr(config, "max_position_embeddings", None)
    if positions:
        limits.append(int(positions))
    return min(limits, default=512)


@dataclass(frozen=True)
class _Scored:
    """One item's score from a model, or why there is none (with the model's raw output)."""

    score: float | None
    cut: bool = False
    window: int = 0
    error: str | None = None
    raw: tuple[str, ...] = ()


class _ScoringJudge(ABC):
    """Shared flow: reject empty inputs, score the rest in batches, threshold each score.

    Subclasses implement :meth:`_score_batch`, returning per item a score (or a failure message
    with raw output) and whether the input was cut; ``cut_note`` says how inputs are cut.
    """

    cut_note = "tokens beyond the window dropped from the end of the longer side (the premise)"

    def __init__(self, spec: JudgeSpec, threshold: float, batch_size: int) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._spec = spec
        self.threshold = threshold
        self.batch_size = batch_size

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        return judge_nonempty(self._spec.ref, items, self._judge_valid)

    def _judge_valid(self, items: list[JudgeInput]) -> list[Verdict]:
        import torch

        verdicts: list[Verdict] = []
        with torch.no_grad():
            for start in range(0, len(items), self.batch_size):
                batch = items[start : start + self.batch_size]
                verdicts += [self._verdict(result) for result in self._score_batch(batch)]
        return verdicts

    def _verdict(self, result: _Scored) -> Verdict:
        ref = self._spec.ref
        if result.error is not None:
            return failed_verdict(ref, result.error, result.raw)
        assert result.score is not None
        note = f"input cut to the model's {result.window}-token window: {self.cut_note}"
        return score_verdict(ref, result.score, self.threshold, note if result.cut else "")

    @abstractmethod
    def _score_batch(self, items: Sequence[JudgeInput]) -> list[_Scored]:
        """Score one batch of valid items, in order (called under ``torch.no_grad``)."""


def _pair_lengths(tokenizer: Any, items: Sequence[JudgeInput]) -> list[int]:
    """Untruncated token counts of each (premise, hypothesis) pair, special tokens included."""
    enc = tokenizer(
        [i.premise for i in items], [i.hypothesis for i in items], truncation=False, verbose=False
    )
    return [len(ids) for ids in enc["input_ids"]]


class NLIClassifierJudge(_ScoringJudge):
    """A transformers sequence classifier over (premise, hypothesis) pairs."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        ref: str,
        fingerprint: str,
        threshold: float = DEFAULT_NLI_THRESHOLD,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_length: int | None = None,
        device: str = "cpu",
    ) -> None:
        threshold = check_threshold(threshold)
        self.entailment_index = entailment_index(model.config.id2label, model=ref)
        self.window = _window(tokenizer, model.config, max_length)
        spec = _nli_spec("classifier", ref, fingerprint, threshold, self.window)
        super().__init__(spec, threshold, batch_size)
        self._model = model.to(device).eval()
        self._tokenizer = tokenizer
        self._device = device

    def _score_batch(self, items: Sequence[JudgeInput]) -> list[_Scored]:
        lengths = _pair_lengths(self._tokenizer, items)
        enc = self._tokenizer(
            [i.premise for i in items],
            [i.hypothesis for i in items],
            truncation="longest_first",
            max_length=self.window,
            padding=True,
            return_tensors="pt",
        ).to(self._device)
        logits = self._model(**enc).logits.float()
        probs = logits.softmax(dim=-1)[:, self.entailment_index].tolist()
        return [
            _Scored(p, cut=n > self.window, window=self.window)
            for p, n in zip(probs, lengths, strict=True)
        ]


class CrossEncoderJudge(_ScoringJudge):
    """A ``sentence_transformers.CrossEncoder`` NLI model (``predict(apply_softmax=True)``).

    The CrossEncoder cuts pairs to its ``max_seq_length`` itself (longest side first).
    """

    def __init__(
        self,
        cross_encoder: Any,
        *,
        ref: str,
        fingerprint: str,
        threshold: float = DEFAULT_NLI_THRESHOLD,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        threshold = check_threshold(threshold)
        config = cross_encoder.config
        self.entailment_index = entailment_index(config.id2label, model=ref)
        self.window = int(
            cross_encoder.max_seq_length or _window(cross_encoder.tokenizer, config, None)
        )
        spec = _nli_spec("cross-encoder", ref, fingerprint, threshold, self.window)
        super().__init__(spec, threshold, batch_size)
        self._model = cross_encoder
        self._model.eval()

    def _score_batch(self, items: Sequence[JudgeInput]) -> list[_Scored]:
        lengths = _pair_lengths(self._model.tokenizer, items)
        probs = self._model.predict(
            [(i.premise, i.hypothesis) for i in items],
            batch_size=len(items),
            apply_softmax=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return [
            _Scored(float(row[self.entailment_index]), cut=n > self.window, window=self.window)
            for row, n in zip(probs, lengths, strict=True)
        ]


class Seq2SeqNLIJudge(_ScoringJudge):
    """A seq2seq model asked ``"premise: P hypothesis: H"`` that answers "1" when entailed.

    Score: when "1" and "0" each encode to one known token, the probability of "1" against "0"
    at the first decoding step (``softmax`` over those two logits), thresholded like any NLI
    probability (``score_mode == "token-probability"``). Otherwise the greedy decode is read:
    "1" scores 1.0, "0" scores 0.0 and any other text is a failed verdict with that text
    (``score_mode == "greedy-decode"``). Only the premise is cut to fit the window.
    """

    cut_note = "the end of the premise dropped"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        ref: str,
        fingerprint: str,
        threshold: float = DEFAULT_NLI_THRESHOLD,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_length: int | None = None,
        device: str = "cpu",
    ) -> None:
        threshold = check_threshold(threshold)
        self.window = _window(tokenizer, model.config, max_length)
        self._answer_ids = _single_token_ids(tokenizer, ("1", "0"))
        self.score_mode = "token-probability" if self._answer_ids else "greedy-decode"
        start = model.config.decoder_start_token_id
        if start is None:
            raise NLIModelError(
                f"seq2seq model {ref!r} has no decoder_start_token_id in its config"
            )
        self._decoder_start = int(start)
        spec = _nli_spec("seq2seq", ref, fingerprint, threshold, self.window, self.score_mode)
        super().__init__(spec, threshold, batch_size)
        self._model = model.to(device).eval()
        self._tokenizer = tokenizer
        self._device = device

    def encode(self, item: JudgeInput) -> tuple[list[int], bool]:
        """Token ids of the prompt for ``item`` and whether the premise had to be cut.

        An over-long prompt loses premise tokens from the end (cut at a token boundary of the
        premise text, then re-tokenized; repeated while boundary effects leave it too long). If
        the hypothesis alone overflows, the tokenizer's own truncation cuts the prompt's end.
        """
        tok = self._tokenizer
        premise, cut = item.premise, False
        for _ in range(4):
            prompt = SEQ2SEQ_TEMPLATE.format(premise=premise, hypothesis=item.hypothesis)
            ids = list(tok(prompt, verbose=False)["input_ids"])
            excess = len(ids) - self.window
            if excess <= 0:
                return ids, cut
            if not premise:
                break
            offsets = tok(premise, add_special_tokens=False, return_offsets_mapping=True)[
                "offset_mapping"
            ]
            keep = len(offsets) - excess
            premise = premise[: offsets[keep - 1][1]] if keep > 0 else ""
            cut = True
        prompt = SEQ2SEQ_TEMPLATE.format(premise=premise, hypothesis=item.hypothesis)
        return list(tok(prompt, truncation=True, max_length=self.window)["input_ids"]), True

    def _score_batch(self, items: Sequence[JudgeInput]) -> list[_Scored]:
        encoded = [self.encode(i) for i in items]
        batch = self._tokenizer.pad(
            {"input_ids": [ids for ids, _ in encoded]}, padding=True, return_tensors="pt"
        ).to(self._device)
        if self._answer_ids:
            scores = self._first_token_probability(batch)
            return [
                _Scored(s, cut=cut, window=self.window)
                for s, (_, cut) in zip(scores, encoded, strict=True)
            ]
        texts = self._greedy_texts(batch)
        return [
            _decoded_answer(text, cut=cut, window=self.window)
            for text, (_, cut) in zip(texts, encoded, strict=True)
        ]

    def _first_token_probability(self, batch: Any) -> list[float]:
        import torch

        decoder_input = torch.full(
            (batch["input_ids"].shape[0], 1),
            self._decoder_start,
            dtype=torch.long,
            device=self._device,
        )
        logits = self._model(**batch, decoder_input_ids=decoder_input).logits[:, 0, :].float()
        one, zero = self._answer_ids
        pair = torch.stack([logits[:, one], logits[:, zero]], dim=-1)
        return pair.softmax(dim=-1)[:, 0].tolist()

    def _greedy_texts(self, batch: Any) -> list[str]:
        out = self._model.generate(**batch, max_new_tokens=4, do_sample=False, num_beams=1)
        return [t.strip() for t in self._tokenizer.batch_decode(out, skip_special_tokens=True)]


def _decoded_answer(text: str, *, cut: bool, window: int) -> _Scored:
    """Read a greedy seq2seq answer: "1" -> 1.0, "0" -> 0.0, anything else is a failure."""
    if text == "1":
        return _Scored(1.0, cut=cut, window=window)
    if text == "0":
        return _Scored(0.0, cut=cut, window=window)
    return _Scored(None, error=f"the model answered {text!r}, not '1' or '0'", raw=(text,))


def _single_token_ids(tokenizer: Any, texts: Sequence[str]) -> tuple[int, ...]:
    """The ids of ``texts`` when each is exactly one known (non-unknown) token, else ()."""
    ids: list[int] = []
    for text in texts:
        encoded = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(encoded) != 1 or encoded[0] == tokenizer.unk_token_id:
            return ()
        ids.append(int(encoded[0]))
    return tuple(ids)


def _nli_spec(
    kind: str, ref: str, fingerprint: str, threshold: float, window: int, mode: str = ""
) -> JudgeSpec:
    backend = BACKENDS[kind]
    version = judge_version(
        backend=backend,
        model=ref,
        weights=fingerprint,
        threshold=threshold,
        max_length=window,
        score_mode=mode,
    )
    description = f"NLI {kind} {ref}: supported when P(entailment) >= {threshold}"
    return entailment_spec(
        name=NLI_JUDGE_NAME, version=version, backend=backend, model=ref, description=description
    )


# --------------------------------------------------------------------------- loading


def resolve_nli_ref(
    ref: str, *, cache_dir: Path | str | None = None, s3_endpoint_url: str | None = None
) -> str:
    """What to hand to ``from_pretrained`` for ``ref``: a local directory or a hub id.

    Order: an existing local directory; ``s3://`` (mirrored into the model cache); a path-like
    ref that does not exist is an error; anything else is a Hugging Face hub id.
    """
    if ref.startswith("builtin:"):
        raise ModelFetchError(
            f"no builtin NLI model is bundled ({ref!r}); give a local path, s3:// URI or hub id"
        )
    local = Path(ref).expanduser()
    if local.is_dir():
        return str(local.resolve())
    if ref.startswith(("/", "./", "../", "~")):
        raise ModelFetchError(f"NLI model directory not found: {local}")
    if is_s3_uri(ref):
        return str(mirror_s3_prefix(ref, cache_dir, endpoint_url=s3_endpoint_url).path)
    return ref


def weights_fingerprint(target: str, config: Any) -> str:
    """A cheap identity of the weights: for a directory, config.json's hash plus every file's
    name and size; for a hub id, the resolved commit (else the config)."""
    root = Path(target)
    if root.is_dir():
        files = sorted(
            (p.relative_to(root).as_posix(), p.stat().st_size)
            for p in root.rglob("*")
            if p.is_file() and p.name != COMPLETE_MARKER and not p.name.startswith(".")
        )
        config_file = root / "config.json"
        config_hash = sha256_text(config_file.read_text("utf-8")) if config_file.is_file() else ""
        material = json.dumps({"config": config_hash, "files": files})
    else:
        material = getattr(config, "_commit_hash", None) or config.to_json_string()
    return sha256_text(material)[:16]


def detect_kind(target: str, config: Any) -> str:
    """The loader kind a model calls for: a sentence-transformers CrossEncoder folder, an
    encoder-decoder (seq2seq), or a sequence classifier; anything else is an NLIModelError."""
    st_config = Path(target) / "config_sentence_transformers.json"
    if st_config.is_file():
        try:
            st_type = json.loads(st_config.read_text("utf-8")).get("model_type")
        except ValueError:
            st_type = None
        if st_type == "CrossEncoder":
            return "cross-encoder"
    architectures = list(getattr(config, "architectures", None) or [])
    if getattr(config, "is_encoder_decoder", False) or any(
        a.endswith(("ForConditionalGeneration", "Seq2SeqLM")) for a in architectures
    ):
        return "seq2seq"
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        return "classifier"
    raise NLIModelError(
        f"cannot tell what kind of NLI model {target!r} is (architectures {architectures}); "
        "pass kind='classifier', 'cross-encoder' or 'seq2seq'"
    )


def _loading(ref: str, fn: Callable[[], Any]) -> Any:
    """Run a loader; its failures become a ModelFetchError naming the ways to supply a model."""
    try:
        return fn()
    except ModelFetchError:
        raise
    except Exception as exc:  # transformers raises OSError, ValueError, HF hub errors...
        mode = "offline (HF_HUB_OFFLINE=1)" if hub_offline() else "online"
        raise ModelFetchError(
            f"cannot load NLI model {ref!r} ({mode}): {type(exc).__name__}: {exc}\n"
            "Give a local model directory, an s3://bucket/prefix holding one, or a hub id present "
            "in the Hugging Face cache (HF_HOME)."
        ) from exc


def load_nli_judge(
    ref: str,
    *,
    kind: NLIKind = "auto",
    cache_dir: Path | str | None = None,
    device: str = "cpu",
    threshold: float = DEFAULT_NLI_THRESHOLD,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_length: int | None = None,
    s3_endpoint_url: str | None = None,
) -> NLIClassifierJudge | CrossEncoderJudge | Seq2SeqNLIJudge:
    """Load an NLI entailment judge from a local path, ``s3://`` URI or hub id.

    ``kind="auto"`` reads the model: a folder saved by sentence-transformers as a CrossEncoder
    (``config_sentence_transformers.json``) -> ``cross-encoder``; an encoder-decoder ->
    ``seq2seq``; a ``*ForSequenceClassification`` -> ``classifier``. Every load failure is a
    :class:`~ragtrail.models.store.ModelFetchError` (:class:`NLIModelError` when the model loads
    but cannot judge entailment). The spec's model is ``ref`` as given; its version covers the
    backend, ``ref``, a weights fingerprint, the threshold and the token window.
    """
    from transformers import AutoConfig

    threshold = check_threshold(threshold)
    target = resolve_nli_ref(ref, cache_dir=cache_dir, s3_endpoint_url=s3_endpoint_url)
    local_only = hub_offline()
    config = _loading(ref, lambda: AutoConfig.from_pretrained(target, local_files_only=local_only))
    chosen = detect_kind(target, config) if kind == "auto" else kind
    if chosen not in BACKENDS:
        raise ValueError(f"kind must be 'auto' or one of {sorted(BACKENDS)}, got {kind!r}")
    fingerprint = weights_fingerprint(target, config)
    log.info("loading NLI judge %s as %s from %s", ref, chosen, target)
    if chosen == "cross-encoder":
        from sentence_transformers import CrossEncoder

        window = {"max_length": max_length} if max_length is not None else {}
        cross_encoder = _loading(
            ref, lambda: CrossEncoder(target, device=device, local_files_only=local_only, **window)
        )
        return CrossEncoderJudge(
            cross_encoder,
            ref=ref,
            fingerprint=fingerprint,
            threshold=threshold,
            batch_size=batch_size,
        )
    from transformers import (
        AutoModelForSeq2SeqLM,
        AutoModelForSequenceClassification,
        AutoTokenizer,
    )

    tokenizer = _loading(
        ref, lambda: AutoTokenizer.from_pretrained(target, local_files_only=local_only)
    )
    auto = AutoModelForSeq2SeqLM if chosen == "seq2seq" else AutoModelForSequenceClassification
    model = _loading(ref, lambda: auto.from_pretrained(target, local_files_only=local_only))
    judge_cls = Seq2SeqNLIJudge if chosen == "seq2seq" else NLIClassifierJudge
    return judge_cls(
        model,
        tokenizer,
        ref=ref,
        fingerprint=fingerprint,
        threshold=threshold,
        batch_size=batch_size,
        max_length=max_length,
        device=device,
    )
