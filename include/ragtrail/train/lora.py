"""LoRA targeting and the trainable ``<a>`` token of the generator.

Which modules get LoRA adapters per architecture, and how the added ``<a>`` token is made
trainable: through PEFT's ``trainable_token_indices``, which stores only the ``<a>`` rows (a few
KB) instead of ``modules_to_save`` copies of the whole embedding matrix (113 MB for SmolLM2); it
also follows tied input/output embeddings, and an untied LM head is listed explicitly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ragtrail.train.backend import fit_embeddings
from ragtrail.train.data import ANSWER_TOKEN
from ragtrail.train.encoding import add_answer_token

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


def resolve_target_modules(
    model: Any, target_modules: Sequence[str] | str | None
) -> list[str] | str:
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


def trainable_token_targets(model: Any, token_id: int) -> dict[str, list[int]]:
    """PEFT ``trainable_token_indices`` for the ``<a>`` row: the input embedding, plus the LM head
    when it is a separate matrix (tied heads follow the embedding automatically)."""
    names = {id(module): name for name, module in model.named_modules()}
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    targets = {names[id(emb)]: [token_id]}
    if head is not None and head.weight is not emb.weight and id(head) in names:
        targets[names[id(head)]] = [token_id]
    return targets


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


def tokenizer_with_answer_token(base: Any, answer_token_init: str | None) -> tuple[Any, int]:
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
