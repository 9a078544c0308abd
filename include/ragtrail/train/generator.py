"""LoRA fine-tuning of the small generator (METHODS §4): the run, from base model to output dir.

:func:`finetune_generator` takes a base model (anything the transformers backend can load: a path,
an HF id, ``s3://`` or ``builtin:smollm2-135m-instruct``), :class:`TrainingExample` s and a
:class:`~ragtrail.train.config.GeneratorTrainingConfig`, adds the ``<a>`` token, trains LoRA
adapters plus the new token's embedding row with a plain, seeded torch loop on CPU, and writes::

    out_dir/
      adapter/         PEFT adapter (LoRA weights + the trainable ``<a>`` rows)
      tokenizer/       the base tokenizer with ``<a>`` added
      training.json    base model, data version, split sizes, hyper-parameters, losses, versions
      model_card.md    the same, for humans, with a few sample generations

The parts live by job: :mod:`.config` (the run's settings), :mod:`.lora` (LoRA targets and the
``<a>`` row), :mod:`.loop` (training), :mod:`.evaluation` (held-out loss, sample generations),
:mod:`.model_card` (training.json and the card) and :mod:`.publish` (upload).

Load the result for generation with :class:`ragtrail.train.backend.FineTunedGeneratorBackend`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from ragtrail.train.backend import (
    ADAPTER_SUBDIR,
    MODEL_CARD,
    TOKENIZER_SUBDIR,
    TRAINING_JSON,
    load_base_model,
)
from ragtrail.train.config import GeneratorTrainingConfig, ModelKind
from ragtrail.train.data import TrainingExample, data_version, split_examples
from ragtrail.train.encoding import PromptFormat
from ragtrail.train.evaluation import eval_loss, sample_generations
from ragtrail.train.loop import train_loop
from ragtrail.train.lora import (
    resolve_target_modules,
    tokenizer_with_answer_token,
    trainable_token_targets,
)
from ragtrail.train.model_card import model_card, training_record
from ragtrail.train.result import FinetuneResult

log = logging.getLogger(__name__)

DEFAULT_CONFIG = GeneratorTrainingConfig()


def _check_kind(kind: ModelKind, is_encoder_decoder: bool, spec: str) -> str:
    """The base model's actual kind; ValueError when it is not the requested one."""
    actual = "seq2seq" if is_encoder_decoder else "causal"
    if kind != "auto" and kind != actual:
        raise ValueError(f"{spec} is a {actual} model, but kind={kind!r} was requested")
    return actual


def finetune_generator(
    base_model: str,
    examples: Sequence[TrainingExample],
    *,
    out_dir: str | Path,
    config: GeneratorTrainingConfig = DEFAULT_CONFIG,
    cache_dir: str | Path | None = None,
    s3_endpoint_url: str | None = None,
) -> FinetuneResult:
    """Fine-tune ``base_model`` with LoRA on ``examples`` and save the generator to ``out_dir``.

    The examples are split by context (``config.held_out_fraction`` held out, seeded by
    ``config.seed``); the held-out part gives the eval loss before and after training. Steps run
    over seeded shuffles of the training part for ``epochs`` epochs, capped at ``max_steps``; the
    learning rate is constant (AdamW), gradients are clipped at ``max_grad_norm``. The ``<a>`` row
    is initialised from the embeddings of ``answer_token_init`` and trained at
    ``config.effective_token_lr``. ``n_samples`` greedy generations of the trained model
    (held-out inputs first) are stored in training.json and the model card: they document the
    model and let a reload be checked for identical output.
    """
    if not examples:
        raise ValueError("no training examples")
    from peft import LoraConfig, get_peft_model

    out = Path(out_dir)
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    base = load_base_model(base_model, cache_dir=cache_dir, s3_endpoint_url=s3_endpoint_url)
    actual_kind = _check_kind(config.kind, base.is_encoder_decoder, base_model)
    tokenizer, answer_id = tokenizer_with_answer_token(base, config.answer_token_init)
    fmt = PromptFormat.for_model(
        tokenizer,
        is_encoder_decoder=base.is_encoder_decoder,
        max_source_len=config.max_source_len,
        max_target_len=config.max_target_len,
    )
    target_modules = resolve_target_modules(base.model, config.target_modules)
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=target_modules,
        trainable_token_indices=trainable_token_targets(base.model, answer_id),
        task_type="SEQ_2_SEQ_LM" if base.is_encoder_decoder else "CAUSAL_LM",
    )
    model = get_peft_model(base.model, lora)
    trainable, total = model.get_nb_trainable_parameters()

    train, held_out = split_examples(
        examples, held_out_fraction=config.held_out_fraction, seed=config.seed
    )
    encode = [fmt.encode(tokenizer, ex) for ex in train]
    encode_held = [fmt.encode(tokenizer, ex) for ex in held_out]
    seq2seq = base.is_encoder_decoder
    pad_id = int(tokenizer.pad_token_id)
    bs = config.batch_size

    eval_before = eval_loss(model, encode_held, pad_id=pad_id, seq2seq=seq2seq, bs=bs)
    train_started = time.perf_counter()
    losses = train_loop(model, encode, pad_id=pad_id, seq2seq=seq2seq, config=config)
    train_seconds = time.perf_counter() - train_started
    eval_after = eval_loss(model, encode_held, pad_id=pad_id, seq2seq=seq2seq, bs=bs)

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out / ADAPTER_SUBDIR), save_embedding_layers=False)
    tokenizer.save_pretrained(str(out / TOKENIZER_SUBDIR))
    samples = sample_generations(
        model, tokenizer, fmt, [*held_out, *train][: config.n_samples], seq2seq=seq2seq
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
    record = training_record(
        result, config, target_modules, fmt, base.model_id, time.perf_counter() - started
    )
    (out / TRAINING_JSON).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    (out / MODEL_CARD).write_text(model_card(record), encoding="utf-8")
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
