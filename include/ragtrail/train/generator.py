"""LoRA fine-tuning of the small generator (METHODS §4), its output directory, and publishing.

:func:`finetune_generator` takes a base model (anything the transformers backend can load: a path,
an HF id, ``s3://`` or ``builtin:smollm2-135m-instruct``) and :class:`TrainingExample` s, adds the
``<a>`` token, trains LoRA adapters plus the new token's embedding row with a plain, seeded torch
loop on CPU, and writes::

    out_dir/
      adapter/         PEFT adapter (LoRA weights + the trainable ``<a>`` rows)
      tokenizer/       the base tokenizer with ``<a>`` added
      training.json    base model, data version, split sizes, hyper-parameters, losses, versions
      model_card.md    the same, for humans, with a few sample generations

Why these choices: a hand-written loop is short, has no hidden state (no accelerate / Trainer
defaults that change between releases) and is exactly reproducible with a seed. The new token is
trained through PEFT's ``trainable_token_indices``, which stores only the ``<a>`` rows (a few KB)
instead of ``modules_to_save`` copies of the whole embedding matrix (113 MB for SmolLM2); it also
follows tied input/output embeddings, and an untied LM head is listed explicitly.

Load the result for generation with :class:`ragtrail.train.backend.FineTunedGeneratorBackend`.
"""

from __future__ import annotations

import json
import logging
import math
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import torch

from ragtrail.storage.artifacts import ArtifactStore
from ragtrail.train.backend import (
    ADAPTER_SUBDIR,
    MODEL_CARD,
    TOKENIZER_SUBDIR,
    TRAINING_JSON,
    FineTunedGeneratorBackend,
    fit_embeddings,
    load_base_model,
)
from ragtrail.train.data import (
    ANSWER_TOKEN,
    DEFAULT_HELD_OUT_FRACTION,
    TrainingExample,
    data_version,
    parse_generation,
    split_examples,
)
from ragtrail.train.encoding import IGNORE_INDEX, PromptFormat, add_answer_token, collate

log = logging.getLogger(__name__)

ModelKind = Literal["seq2seq", "causal", "auto"]

_T5_TYPES = frozenset({"t5", "mt5", "umt5", "longt5"})
_LLAMA_LIKE = frozenset(
    {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "olmo", "granite"}
)
_DEFAULT_TARGETS: dict[str, tuple[list[str], list[str]]] = {
    # model family -> (attention q/v only, extended: all attention + MLP projections)
    "t5": (["q", "v"], ["q", "k", "v", "o", "wi", "wi_0", "wi_1", "wo"]),
    "llama": (
        ["q_proj", "v_proj"],
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    ),
    "bart": (["q_proj", "v_proj"], ["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"]),
    "gpt2": (["c_attn"], ["c_attn", "c_proj", "c_fc"]),
}


def default_target_modules(model_type: str, *, extended: bool = False) -> list[str]:
    """LoRA target modules for an architecture (``config.model_type``).

    Default: the attention query and value projections, as in the LoRA paper (T5: ``q``, ``v``;
    Llama-like: ``q_proj``, ``v_proj``). ``extended`` adds keys, outputs and the MLP (T5: ``k``,
    ``o``, ``wi``/``wi_0``/``wi_1``, ``wo``), which raises the trainable share towards the
    paper's ~30 % at higher ranks. Unknown architectures fall back to PEFT's own mapping.
    """
    family = (
        "t5"
        if model_type in _T5_TYPES
        else "llama"
        if model_type in _LLAMA_LIKE
        else "bart"
        if model_type in {"bart", "mbart"}
        else model_type
    )
    if family in _DEFAULT_TARGETS:
        return list(_DEFAULT_TARGETS[family][1 if extended else 0])
    from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

    found = TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(model_type)
    if not found:
        raise ValueError(f"no default LoRA target modules for {model_type!r}; pass target_modules")
    return list(found)


def _resolve_targets(model: Any, target_modules: Sequence[str] | str | None) -> list[str] | str:
    """``None`` -> per-architecture default, ``"extended"`` -> the wider default, ``"all-linear"``
    passes through to PEFT, a list is used as given (only names present in the model are kept)."""
    model_type = str(getattr(model.config, "model_type", ""))
    if target_modules is None:
        wanted: list[str] | str = default_target_modules(model_type)
    elif target_modules == "extended":
        wanted = default_target_modules(model_type, extended=True)
    elif isinstance(target_modules, str):
        return target_modules
    else:
        wanted = list(target_modules)
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    kept = [t for t in wanted if t in present]
    if not kept:
        raise ValueError(f"none of the LoRA target modules {wanted} exist in {model_type!r}")
    return kept


def _trainable_token_targets(model: Any, token_id: int) -> dict[str, list[int]]:
    """PEFT ``trainable_token_indices`` for the ``<a>`` row: the input embedding, plus the LM head
    when it is a separate matrix (tied heads follow the embedding automatically)."""
    names = {id(module): name for name, module in model.named_modules()}
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    targets = {names[id(emb)]: [token_id]}
    if head is not None and head.weight is not emb.weight and id(head) in names:
        targets[names[id(head)]] = [token_id]
    return targets


ANSWER_TOKEN_INIT = " Answer:"
"""Text whose token embeddings, averaged, initialise a newly added ``<a>`` row."""


@torch.no_grad()
def init_token_rows(model: Any, token_id: int, hint_ids: Sequence[int]) -> None:
    """Set a new token's input (and untied output) row to the mean row of ``hint_ids``.

    A brand-new row starts as noise and its output logit is then far from ever being the argmax;
    starting from tokens that mean "answer follows" lets a few steps of training make the model
    emit the separator. Deterministic, unlike the random (mean/covariance) resize init.
    """
    if not hint_ids:
        return
    index = torch.tensor(list(hint_ids), dtype=torch.long)
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    for matrix in {id(m.weight): m.weight for m in (emb, head) if m is not None}.values():
        matrix[token_id] = matrix[index].mean(dim=0)


@dataclass
class FinetuneResult:
    """What a fine-tuning run produced (everything is also in ``out_dir/training.json``)."""

    out_dir: Path
    adapter_dir: Path
    tokenizer_dir: Path
    base_model: str
    kind: str
    data_version: str
    n_train: int
    n_held_out: int
    train_losses: list[float]
    eval_loss_before: float | None
    eval_loss_after: float | None
    trainable_params: int
    total_params: int
    steps: int
    seconds: float
    samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def trainable_share(self) -> float:
        """Trainable parameters / all parameters (LoRA + ``<a>`` rows over base + adapter)."""
        return self.trainable_params / self.total_params if self.total_params else 0.0

    @property
    def train_loss_first(self) -> float:
        return self.train_losses[0] if self.train_losses else math.nan

    @property
    def train_loss_last(self) -> float:
        return self.train_losses[-1] if self.train_losses else math.nan


@dataclass(frozen=True)
class _Hyper:
    """Hyper-parameters of one run (recorded verbatim in training.json)."""

    lora_r: int
    lora_alpha: int
    lora_dropout: float
    target_modules: list[str] | str
    epochs: int
    lr: float
    token_lr: float
    answer_token_init: str | None
    batch_size: int
    max_steps: int | None
    seed: int
    max_source_len: int
    max_target_len: int
    held_out_fraction: float
    weight_decay: float
    max_grad_norm: float


def _check_kind(kind: ModelKind, is_encoder_decoder: bool, spec: str) -> str:
    actual = "seq2seq" if is_encoder_decoder else "causal"
    if kind not in ("seq2seq", "causal", "auto"):
        raise ValueError(f"kind must be 'seq2seq', 'causal' or 'auto', got {kind!r}")
    if kind != "auto" and kind != actual:
        raise ValueError(f"{spec} is a {actual} model, but kind={kind!r} was requested")
    return actual


def finetune_generator(
    base_model: str,
    examples: Sequence[TrainingExample],
    *,
    out_dir: str | Path,
    kind: ModelKind = "auto",
    lora_r: int = 16,
    lora_alpha: int = 32,
    lora_dropout: float = 0.05,
    target_modules: Sequence[str] | str | None = None,
    epochs: int = 3,
    lr: float = 3e-4,
    token_lr: float | None = None,
    answer_token_init: str | None = ANSWER_TOKEN_INIT,
    batch_size: int = 8,
    max_steps: int | None = None,
    seed: int = 0,
    max_source_len: int = 384,
    max_target_len: int = 96,
    held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION,
    weight_decay: float = 0.0,
    max_grad_norm: float = 1.0,
    n_samples: int = 4,
    cache_dir: str | Path | None = None,
    s3_endpoint_url: str | None = None,
) -> FinetuneResult:
    """Fine-tune ``base_model`` with LoRA on ``examples`` and save the generator to ``out_dir``.

    The examples are split by context (``held_out_fraction`` held out, seeded by ``seed``); the
    held-out part gives the eval loss before and after training. Steps run over seeded shuffles
    of the training part for ``epochs`` epochs, capped at ``max_steps``; the learning rate is
    constant (AdamW), gradients are clipped at ``max_grad_norm``. The ``<a>`` row is initialised
    from the embeddings of ``answer_token_init`` (``None``: random resize init) and trained at
    ``token_lr`` (default ``10 * lr``: it is one row that starts from scratch, and at the LoRA rate
    it would barely move in a short run). ``n_samples`` greedy generations
    of the trained model (held-out inputs first) are stored in training.json and the model card:
    they document the model and let a reload be checked for identical output.
    """
    if not examples:
        raise ValueError("no training examples")
    if batch_size < 1 or epochs < 1 or (max_steps is not None and max_steps < 1):
        raise ValueError("batch_size, epochs and max_steps must be >= 1")
    from peft import LoraConfig, get_peft_model

    out = Path(out_dir)
    started = time.perf_counter()
    torch.manual_seed(seed)
    base = load_base_model(base_model, cache_dir=cache_dir, s3_endpoint_url=s3_endpoint_url)
    actual_kind = _check_kind(kind, base.is_encoder_decoder, base_model)
    tokenizer, answer_id = _tokenizer_with_answer_token(base, answer_token_init)
    fmt = PromptFormat.for_model(
        tokenizer,
        is_encoder_decoder=base.is_encoder_decoder,
        max_source_len=max_source_len,
        max_target_len=max_target_len,
    )
    hyper = _Hyper(
        lora_r=lora_r,
        lora_alpha=lora_alpha,
        lora_dropout=lora_dropout,
        target_modules=_resolve_targets(base.model, target_modules),
        epochs=epochs,
        lr=lr,
        token_lr=token_lr if token_lr is not None else 10 * lr,
        answer_token_init=answer_token_init,
        batch_size=batch_size,
        max_steps=max_steps,
        seed=seed,
        max_source_len=max_source_len,
        max_target_len=max_target_len,
        held_out_fraction=held_out_fraction,
        weight_decay=weight_decay,
        max_grad_norm=max_grad_norm,
    )
    lora = LoraConfig(
        r=lora_r,
        lora_alpha=lora_alpha,
        lora_dropout=lora_dropout,
        target_modules=hyper.target_modules,
        trainable_token_indices=_trainable_token_targets(base.model, answer_id),
        task_type="SEQ_2_SEQ_LM" if base.is_encoder_decoder else "CAUSAL_LM",
    )
    model = get_peft_model(base.model, lora)
    trainable, total = model.get_nb_trainable_parameters()

    train, held_out = split_examples(examples, held_out_fraction=held_out_fraction, seed=seed)
    encode = [fmt.encode(tokenizer, ex) for ex in train]
    encode_held = [fmt.encode(tokenizer, ex) for ex in held_out]
    seq2seq = base.is_encoder_decoder
    pad_id = int(tokenizer.pad_token_id)

    eval_before = _eval_loss(model, encode_held, pad_id=pad_id, seq2seq=seq2seq, bs=batch_size)
    train_started = time.perf_counter()
    losses = _train_loop(model, encode, pad_id=pad_id, seq2seq=seq2seq, hyper=hyper)
    train_seconds = time.perf_counter() - train_started
    eval_after = _eval_loss(model, encode_held, pad_id=pad_id, seq2seq=seq2seq, bs=batch_size)

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out / ADAPTER_SUBDIR), save_embedding_layers=False)
    tokenizer.save_pretrained(str(out / TOKENIZER_SUBDIR))
    samples = _sample_generations(
        model, tokenizer, fmt, [*held_out, *train][:n_samples], seq2seq=seq2seq
    )

    result = FinetuneResult(
        out_dir=out,
        adapter_dir=out / ADAPTER_SUBDIR,
        tokenizer_dir=out / TOKENIZER_SUBDIR,
        base_model=base_model,
        kind=actual_kind,
        data_version=data_version(examples),
        n_train=len(train),
        n_held_out=len(held_out),
        train_losses=losses,
        eval_loss_before=eval_before,
        eval_loss_after=eval_after,
        trainable_params=int(trainable),
        total_params=int(total),
        steps=len(losses),
        seconds=train_seconds,
        samples=samples,
    )
    record = _training_record(result, hyper, fmt, base.model_id, time.perf_counter() - started)
    (out / TRAINING_JSON).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    (out / MODEL_CARD).write_text(_model_card(record), encoding="utf-8")
    log.info(
        "fine-tuned %s: %d steps in %.1f s, loss %.3f -> %.3f, trainable %.2f%%",
        base_model,
        result.steps,
        train_seconds,
        result.train_loss_first,
        result.train_loss_last,
        100 * result.trainable_share,
    )
    return result


def _tokenizer_with_answer_token(base: Any, answer_token_init: str | None) -> tuple[Any, int]:
    """Load the base tokenizer, add ``<a>``, fit the embeddings and initialise the new row."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base.source)
    is_new_token = ANSWER_TOKEN not in tokenizer.get_vocab()
    answer_id = add_answer_token(tokenizer)
    fit_embeddings(base.model, tokenizer, mean_resizing=answer_token_init is None)
    if is_new_token and answer_token_init:
        hint = tokenizer(answer_token_init, add_special_tokens=False)["input_ids"]
        init_token_rows(base.model, answer_id, hint)
    return tokenizer, answer_id


def _batches(n: int, batch_size: int, generator: torch.Generator) -> list[list[int]]:
    order = torch.randperm(n, generator=generator).tolist()
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def _train_loop(
    model: Any,
    encoded: Sequence[tuple[list[int], list[int]]],
    *,
    pad_id: int,
    seq2seq: bool,
    hyper: _Hyper,
) -> list[float]:
    """Plain AdamW loop over seeded epoch shuffles; returns the loss of every step."""
    if not encoded:
        raise ValueError("the split left no training examples")
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    token_params = [p for n, p in named if "trainable_tokens_delta" in n]
    lora_params = [p for n, p in named if "trainable_tokens_delta" not in n]
    params = [p for _, p in named]
    groups = [
        {"params": lora_params, "lr": hyper.lr},
        {"params": token_params, "lr": hyper.token_lr, "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(
        [g for g in groups if g["params"]], lr=hyper.lr, weight_decay=hyper.weight_decay
    )
    order_rng = torch.Generator().manual_seed(hyper.seed)
    limit = hyper.max_steps if hyper.max_steps is not None else math.inf
    losses: list[float] = []
    model.train()
    for _epoch in range(hyper.epochs):
        for idx in _batches(len(encoded), hyper.batch_size, order_rng):
            if len(losses) >= limit:
                break
            batch = collate([encoded[i] for i in idx], pad_id=pad_id, seq2seq=seq2seq)
            loss = model(**batch).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, hyper.max_grad_norm)
            optimizer.step()
            losses.append(float(loss.detach()))
            if len(losses) % 10 == 0:
                log.info("step %d: loss %.4f", len(losses), losses[-1])
    model.eval()
    return losses


@torch.no_grad()
def _eval_loss(
    model: Any,
    encoded: Sequence[tuple[list[int], list[int]]],
    *,
    pad_id: int,
    seq2seq: bool,
    bs: int,
) -> float | None:
    """Token-weighted mean loss over the held-out examples (``None`` if there are none)."""
    if not encoded:
        return None
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    for i in range(0, len(encoded), bs):
        batch = collate(encoded[i : i + bs], pad_id=pad_id, seq2seq=seq2seq)
        # Causal models predict token t+1 from t: the first label position is never scored.
        labels = batch["labels"] if seq2seq else batch["labels"][:, 1:]
        n = int((labels != IGNORE_INDEX).sum())
        total += float(model(**batch).loss) * n
        tokens += n
    model.train(was_training)
    return total / tokens if tokens else None


def _sample_generations(
    model: Any,
    tokenizer: Any,
    fmt: PromptFormat,
    examples: Sequence[TrainingExample],
    *,
    seq2seq: bool,
) -> list[dict[str, Any]]:
    """Greedy generations of the in-memory model for a few inputs (recorded in training.json)."""
    if not examples:
        return []
    from ragtrail.llm.backends.base import GenerationRequest

    backend = FineTunedGeneratorBackend.from_loaded(
        model,
        tokenizer,
        is_encoder_decoder=seq2seq,
        prompt_format=fmt,
        model_id="in-memory",
    )
    requests = [
        GenerationRequest(
            messages=({"role": "user", "content": ex.input},), max_new_tokens=fmt.max_target_len
        )
        for ex in examples
    ]
    outputs = backend.generate(requests)
    return [
        {
            "input": ex.input,
            "target": ex.target,
            "generated": res.text if res.ok else f"<error: {res.error}>",
            "parsed": parse_generation(res.text) is not None,
        }
        for ex, res in zip(examples, outputs, strict=True)
    ]


# --------------------------------------------------------------------------- records


def _library_versions() -> dict[str, str]:
    import peft
    import tokenizers
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "tokenizers": tokenizers.__version__,
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def _training_record(
    result: FinetuneResult,
    hyper: _Hyper,
    fmt: PromptFormat,
    resolved_base: str,
    total_seconds: float,
) -> dict[str, Any]:
    return {
        "format_version": 1,
        "task": "ragtrail.generator",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "base_model": result.base_model,
        "base_model_id": resolved_base,
        "kind": result.kind,
        "answer_token": ANSWER_TOKEN,
        "input_format": "<<{label}>> {context}",
        "target_format": "<<{label}>> {question} <a> {answer}",
        "prompt_format": fmt.to_json(),
        "data_version": result.data_version,
        "n_train": result.n_train,
        "n_held_out": result.n_held_out,
        "hyperparameters": {
            "lora_r": hyper.lora_r,
            "lora_alpha": hyper.lora_alpha,
            "lora_dropout": hyper.lora_dropout,
            "target_modules": hyper.target_modules,
            "epochs": hyper.epochs,
            "lr": hyper.lr,
            "token_lr": hyper.token_lr,
            "answer_token_init": hyper.answer_token_init,
            "batch_size": hyper.batch_size,
            "max_steps": hyper.max_steps,
            "seed": hyper.seed,
            "max_source_len": hyper.max_source_len,
            "max_target_len": hyper.max_target_len,
            "held_out_fraction": hyper.held_out_fraction,
            "weight_decay": hyper.weight_decay,
            "max_grad_norm": hyper.max_grad_norm,
            "optimizer": "AdamW, constant learning rate",
        },
        "steps": result.steps,
        "train_losses": [_round(x) for x in result.train_losses],
        "train_loss_first": _round(result.train_loss_first),
        "train_loss_last": _round(result.train_loss_last),
        "eval_loss_before": _round(result.eval_loss_before),
        "eval_loss_after": _round(result.eval_loss_after),
        "trainable_params": result.trainable_params,
        "total_params": result.total_params,
        "trainable_share": round(result.trainable_share, 6),
        "train_seconds": round(result.seconds, 3),
        "total_seconds": round(total_seconds, 3),
        "library_versions": _library_versions(),
        "samples": result.samples,
    }


def _fmt_loss(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _model_card(record: dict[str, Any]) -> str:
    """A human-readable summary of ``training.json``."""
    hp = record["hyperparameters"]
    lines = [
        "# ragtrail QA generator (LoRA)",
        "",
        f"Fine-tuned from `{record['base_model']}` ({record['kind']}) to write one question of a",
        "requested type about a context, in the format of METHODS §4:",
        "",
        f"- input: `{record['input_format']}`",
        f"- output: `{record['target_format']}` (`{record['answer_token']}` is an added token)",
        "",
        "## Training",
        "",
        "| | |",
        "|---|---|",
        f"| data version | `{record['data_version']}` |",
        f"| examples (train / held-out) | {record['n_train']} / {record['n_held_out']} |",
        f"| LoRA | r={hp['lora_r']}, alpha={hp['lora_alpha']}, dropout={hp['lora_dropout']}, "
        f"targets={hp['target_modules']} |",
        f"| trainable parameters | {record['trainable_params']:,} of {record['total_params']:,} "
        f"({100 * record['trainable_share']:.2f}%) |",
        f"| optimisation | {hp['optimizer']}, lr={hp['lr']} (`<a>` row: {hp['token_lr']}), "
        f"batch={hp['batch_size']}, "
        f"epochs={hp['epochs']}, max_steps={hp['max_steps']}, seed={hp['seed']} |",
        f"| steps / train seconds | {record['steps']} / {record['train_seconds']:.1f} |",
        f"| train loss first → last | {_fmt_loss(record['train_loss_first'])} → "
        f"{_fmt_loss(record['train_loss_last'])} |",
        f"| held-out loss before → after | {_fmt_loss(record['eval_loss_before'])} → "
        f"{_fmt_loss(record['eval_loss_after'])} |",
        f"| prompt | {record['prompt_format']} |",
        f"| libraries | {', '.join(f'{k} {v}' for k, v in record['library_versions'].items())} |",
        "",
        "## Usage",
        "",
        "```python",
        "from ragtrail.train import FineTunedGeneratorBackend, generator_request, parse_generation",
        "backend = FineTunedGeneratorBackend('<this directory or its s3:// URI>')",
        "[out] = backend.generate([generator_request('fact_single', context)])",
        "label, question, answer = parse_generation(out.text)",
        "```",
    ]
    if record["samples"]:
        lines += ["", "## Sample generations (greedy)", ""]
        for s in record["samples"]:
            shown = s["input"] if len(s["input"]) <= 160 else s["input"][:157] + "..."
            lines += [
                f"- input: `{shown}`",
                f"  - generated: `{s['generated']}`",
                f"  - reference: `{s['target']}`",
            ]
    return "\n".join(lines) + "\n"


def publish_generator(result: FinetuneResult, artifacts: ArtifactStore, key_prefix: str) -> str:
    """Upload the whole output directory under ``key_prefix``; return the store's URI for it.

    The URI (a local path or ``s3://bucket/prefix``) can be passed straight to
    :class:`~ragtrail.train.backend.FineTunedGeneratorBackend`.
    """
    for required in (TRAINING_JSON, ADAPTER_SUBDIR, TOKENIZER_SUBDIR):
        if not (result.out_dir / required).exists():
            raise FileNotFoundError(f"{result.out_dir} has no {required}: not a generator output")
    return artifacts.put_tree(key_prefix, result.out_dir)
