"""The small fine-tuned generator (METHODS §4) on tiny models built here (T5 and Llama).

No weights exist offline, so the base models are random tiny configs with a byte-level BPE
tokenizer trained on the examples' own text, saved to a directory whose PATH is the base model
(exercising the same path loading as real models). The tests check the mechanics: export rules,
the added ``<a>`` token, LoRA wiring, loss masking, learning on an overfit set, save / reload
fidelity, determinism and publishing — not generation quality.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
)

from ragtrail.llm.backends.base import LLMBackend
from ragtrail.records import CandidateStatus, Context, QACandidate
from ragtrail.storage.artifacts import LocalArtifactStore
from ragtrail.train import (
    ANSWER_TOKEN,
    FineTunedGeneratorBackend,
    FinetuneResult,
    GeneratorTrainingConfig,
    TrainingExample,
    data_version,
    default_target_modules,
    export_training_examples,
    finetune_generator,
    format_input,
    format_target,
    generator_request,
    parse_generation,
    publish_generator,
    read_jsonl,
    split_examples,
    write_jsonl,
)
from ragtrail.train.encoding import IGNORE_INDEX, PromptFormat, add_answer_token, collate
from ragtrail.train.lora import init_token_rows
from tests.tiny_models import build_tiny_llama, build_tiny_t5

# --------------------------------------------------------------------------- tiny data

FACTS = [
    ("Annual leave is 27 days for full time staff.", "How many days of annual leave?", "27 days"),
    ("The on call rotation hands over every Tuesday.", "When does on call hand over?", "Tuesday"),
    ("Merge requests should stay under 400 lines.", "How big can a merge request be?", "400 lines"),
    ("Relay messages are kept for 18 months.", "How long are Relay messages kept?", "18 months"),
    ("The learning budget is 1200 pounds a year.", "What is the learning budget?", "1200 pounds"),
    ("Report incidents on extension 4444.", "Which extension reports incidents?", "4444"),
]


def _examples() -> list[TrainingExample]:
    out = []
    for i, (ctx, q, a) in enumerate(FACTS):
        label = "fact_single" if i % 2 == 0 else "summary"
        out.append(
            TrainingExample(
                input=format_input(label, ctx),
                target=format_target(label, q, a),
                label=label,
                context_id=f"doc{i}.md#0000",
                candidate_id=f"c{i}",
                doc_id=f"doc{i}.md",
            )
        )
    return out


EXAMPLES = _examples()


def _corpus() -> list[str]:
    return [t for ex in EXAMPLES for t in (ex.input, ex.target)] * 3


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_t5(
        tmp_path_factory.mktemp("tiny-t5"), _corpus(), vocab_size=400, dropout_rate=0.0
    )


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The default initializer_range 0.02 gives near-uniform logits that frozen layers + LoRA
    # cannot sharpen.
    return build_tiny_llama(
        tmp_path_factory.mktemp("tiny-llama"),
        _corpus(),
        vocab_size=400,
        max_positions=256,
        initializer_range=0.2,
    )


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny matmuls are dominated by thread hand-offs (40x slower with 2 threads on a busy box)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


TRAIN_KW = {
    "epochs": 100,
    "max_steps": 30,
    "batch_size": 4,
    "lr": 1e-2,
    "lora_r": 8,
    "lora_alpha": 16,
    "lora_dropout": 0.0,
    "held_out_fraction": 0.2,
    "max_source_len": 48,
    "max_target_len": 32,
    "n_samples": 3,
    "seed": 7,
}


@pytest.fixture(scope="module")
def t5_run(tiny_t5: Path, tmp_path_factory: pytest.TempPathFactory) -> FinetuneResult:
    out = tmp_path_factory.mktemp("t5-gen")
    config = GeneratorTrainingConfig(kind="seq2seq", **TRAIN_KW)
    return finetune_generator(str(tiny_t5), EXAMPLES, out_dir=out, config=config)


@pytest.fixture(scope="module")
def llama_run(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> FinetuneResult:
    out = tmp_path_factory.mktemp("llama-gen")
    config = GeneratorTrainingConfig(kind="auto", **TRAIN_KW)
    return finetune_generator(str(tiny_llama), EXAMPLES, out_dir=out, config=config)


# --------------------------------------------------------------------------- export


def _cand(
    cid: str,
    *,
    chunk: str = "a.md#0000",
    kind: str = "fact",
    requested: str = "fact_single",
    observed: str | None = "fact_single",
    status: CandidateStatus = CandidateStatus.ACCEPTED,
    question: str = "What is it?",
    answer: str = "It.",
) -> QACandidate:
    ctx = Context(
        corpus="c",
        snapshot_id="s1",
        doc_id=chunk.split("#")[0],
        doc_content_hash="h",
        chunk_id=chunk,
        chunk_hash="ch",
        text=f"  Text of {chunk}.  ",
    )
    return QACandidate(
        candidate_id=cid,
        context=ctx,
        statement_kind=kind,
        requested_label=requested,
        question=question,
        answer=answer,
        observed_label=observed,
        status=status,
    )


def test_export_keeps_accepted_matching_statement_items_one_per_context_and_label() -> None:
    cands = [
        _cand("c9", question="Later id?"),  # same chunk+label as c2: c2 wins (smaller id)
        _cand("c2", question="Which one?", answer="This one."),
        _cand("c3", kind="summary", requested="summary", observed="summary", question="Sum?"),
        _cand("c4", kind="conclusion", requested="reasoning", observed="fact_single"),  # mismatch
        _cand("c5", status=CandidateStatus.REJECTED, chunk="b.md#0001"),
        _cand("c6", kind="foreign", requested="unanswerable", observed="unanswerable"),
        _cand("c7", kind="baseline", chunk="b.md#0001"),
        _cand(
            "c8", chunk="b.md#0001", kind="conclusion", requested="reasoning", observed="reasoning"
        ),
        _cand("c1", chunk="b.md#0001", observed=None),  # never labelled
    ]
    examples = export_training_examples(cands)
    assert [(e.context_id, e.label, e.candidate_id) for e in examples] == [
        ("a.md#0000", "fact_single", "c2"),
        ("a.md#0000", "summary", "c3"),
        ("b.md#0001", "reasoning", "c8"),
    ]
    first = examples[0]
    assert first.input == "<<fact_single>> Text of a.md#0000."
    assert first.target == "<<fact_single>> Which one? <a> This one."
    assert first.doc_id == "a.md"
    # Input order does not matter.
    assert export_training_examples(list(reversed(cands))) == examples


def test_jsonl_roundtrip_and_content_version(tmp_path: Path) -> None:
    version = write_jsonl(EXAMPLES, tmp_path / "d" / "train.jsonl")
    assert version == data_version(EXAMPLES)
    assert len(version) == 16
    assert read_jsonl(tmp_path / "d" / "train.jsonl") == EXAMPLES
    changed = [replace(EXAMPLES[0], target=EXAMPLES[0].target + "!"), *EXAMPLES[1:]]
    assert data_version(changed) != version
    (tmp_path / "bad.jsonl").write_text('{"input": 1}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1"):
        read_jsonl(tmp_path / "bad.jsonl")


def test_split_is_seeded_and_holds_out_whole_contexts() -> None:
    many = [
        replace(ex, context_id=f"ctx{i // 2}", candidate_id=f"c{i}")
        for i, ex in enumerate(EXAMPLES * 5)
    ]  # 15 contexts, two labels each
    train, held = split_examples(many, held_out_fraction=0.2, seed=3)
    assert split_examples(many, held_out_fraction=0.2, seed=3) == (train, held)
    assert split_examples(many, held_out_fraction=0.2, seed=4) != (train, held)
    held_ctx = {e.context_id for e in held}
    assert len(held_ctx) == 3  # 20% of 15 contexts
    assert held_ctx.isdisjoint({e.context_id for e in train})
    assert len(train) + len(held) == len(many)
    assert split_examples(many, held_out_fraction=0.0)[1] == []


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<<fact_single>> How long? <a> 18 months", ("fact_single", "How long?", "18 months")),
        (
            "junk <<summary>>  What   is it? <a>  A thing </s><pad>",
            ("summary", "What is it?", "A thing"),
        ),
        ("<<reasoning>> Why? <a> Because.<|im_end|>", ("reasoning", "Why?", "Because.")),
        ("<<fact_single>> Q? <a> A <a> more", ("fact_single", "Q?", "A")),
        ("<<fact_single>> Q? <a> A <<summary>> Q2 <a> A2", ("fact_single", "Q?", "A")),
        ("<<bogus>> x <<summary>> Q? <a> A", ("summary", "Q?", "A")),
        ("<<fact_single>> <<fact_single>> Q? <a> A", ("fact_single", "Q?", "A")),
        ("<<fact_single>> no separator", None),
        ("<<fact_single>>  <a> answer only", None),
        ("<<fact_single>> question only <a>  ", None),
        ("Q? <a> A", None),
        ("<<bogus>> Q? <a> A", None),
        ("", None),
    ],
)
def test_parse_generation(text: str, expected: tuple[str, str, str] | None) -> None:
    assert parse_generation(text) == expected


def test_parse_generation_inverts_format_target() -> None:
    for ex in EXAMPLES:
        label, question, answer = parse_generation(ex.target) or ("", "", "")
        assert format_target(label, question, answer) == ex.target


# --------------------------------------------------------------------------- encoding


def test_default_target_modules() -> None:
    assert default_target_modules("t5") == ["q", "v"]
    assert default_target_modules("llama") == ["q_proj", "v_proj"]
    assert {"k", "o", "wi", "wo"} <= set(default_target_modules("t5", extended=True))
    assert "down_proj" in default_target_modules("llama", extended=True)


def test_causal_encoding_masks_the_prompt(tiny_llama: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    add_answer_token(tok)
    for style in ("chat", "plain"):
        fmt = PromptFormat(style, max_source_len=64, max_target_len=32)
        ids, labels = fmt.encode(tok, EXAMPLES[0])
        n_prompt = len(fmt.prompt_ids(tok, EXAMPLES[0].input))
        assert labels[:n_prompt] == [IGNORE_INDEX] * n_prompt
        assert labels[n_prompt:] == ids[n_prompt:]
        assert ids[-1] == tok.eos_token_id
        # lstrip folds the space before <a> into it: "...?<a> 27 days" parses the same.
        assert parse_generation(tok.decode(ids[n_prompt:-1])) == parse_generation(
            EXAMPLES[0].target
        )
        assert ids.count(tok.convert_tokens_to_ids(ANSWER_TOKEN)) == 1
    chat = PromptFormat("chat").render_prompt(tok, "<<summary>> ctx")
    assert chat == "<|user|><<summary>> ctx<eos><|assistant|>"
    assert PromptFormat("plain").render_prompt(tok, "<<summary>> ctx") == "<<summary>> ctx\n"
    batch = collate([fmt.encode(tok, ex) for ex in EXAMPLES[:3]], pad_id=0, seq2seq=False)
    assert batch["input_ids"].shape == batch["labels"].shape
    assert ((batch["attention_mask"] == 0) <= (batch["labels"] == IGNORE_INDEX)).all()


def test_new_token_rows_start_from_the_hint_embeddings() -> None:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=20,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    model = LlamaForCausalLM(cfg)
    init_token_rows(model, 19, [3, 5])
    for matrix in (model.get_input_embeddings().weight, model.get_output_embeddings().weight):
        assert torch.allclose(matrix[19], (matrix[3] + matrix[5]) / 2)


def test_truncation_keeps_the_label_and_caps_the_target(tiny_t5: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_t5)
    add_answer_token(tok)
    fmt = PromptFormat("seq2seq", max_source_len=4, max_target_len=5)
    src, tgt = fmt.encode(tok, EXAMPLES[0])
    assert len(tok(fmt.truncate_source(tok, EXAMPLES[0].input))["input_ids"]) <= 4
    assert tok.decode(src).startswith("<<")
    assert len(tgt) == 5 and tgt[-1] == tok.eos_token_id


# --------------------------------------------------------------------------- fine-tuning


def _label_context(generator_input: str) -> tuple[str, str]:
    """Invert :func:`format_input`."""
    tag, context = generator_input.split(" ", 1)
    return tag.strip("<>"), context


def _saved_tokenizer_has_answer_token(result: FinetuneResult) -> None:
    tok = AutoTokenizer.from_pretrained(result.tokenizer_dir)
    assert ANSWER_TOKEN in tok.get_vocab()
    answer_id = tok.convert_tokens_to_ids(ANSWER_TOKEN)
    ids = tok("why <a> because", add_special_tokens=False)["input_ids"]
    assert ids.count(answer_id) == 1
    # Generation backends decode with skip_special_tokens=True: the separator must survive.
    assert ANSWER_TOKEN in tok.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("run", ["t5_run", "llama_run"])
def test_finetune_trains_lora_and_the_answer_token(
    run: str, request: pytest.FixtureRequest
) -> None:
    result: FinetuneResult = request.getfixturevalue(run)
    _saved_tokenizer_has_answer_token(result)
    assert 0.0 < result.trainable_share < 1.0
    assert result.steps == 30 == len(result.train_losses)
    first, last = result.train_losses[:5], result.train_losses[-5:]
    assert sum(last) / 5 < 0.75 * sum(first) / 5, result.train_losses
    assert result.n_train + result.n_held_out == len(EXAMPLES) and result.n_held_out >= 1
    assert result.eval_loss_before is not None and result.eval_loss_after is not None
    adapter = json.loads((result.adapter_dir / "adapter_config.json").read_text())
    assert adapter["r"] == 8 and adapter["trainable_token_indices"]
    # Only the <a> rows are stored, not whole embedding matrices.
    assert (result.adapter_dir / "adapter_model.safetensors").stat().st_size < 200_000


def test_t5_uses_q_v_and_llama_untied_head_gets_its_token_row(
    t5_run: FinetuneResult, llama_run: FinetuneResult
) -> None:
    t5_cfg = json.loads((t5_run.adapter_dir / "adapter_config.json").read_text())
    assert sorted(t5_cfg["target_modules"]) == ["q", "v"]
    llama_cfg = json.loads((llama_run.adapter_dir / "adapter_config.json").read_text())
    assert sorted(llama_cfg["target_modules"]) == ["q_proj", "v_proj"]
    assert set(llama_cfg["trainable_token_indices"]) == {"model.embed_tokens", "lm_head"}


def test_training_json_and_model_card(t5_run: FinetuneResult, tiny_t5: Path) -> None:
    record = json.loads((t5_run.out_dir / "training.json").read_text())
    assert record["base_model"] == str(tiny_t5)
    assert record["kind"] == "seq2seq"
    assert record["data_version"] == data_version(EXAMPLES)
    assert (record["n_train"], record["n_held_out"]) == (t5_run.n_train, t5_run.n_held_out)
    hp = record["hyperparameters"]
    assert hp["token_lr"] == 0.1 and hp["answer_token_init"] == " Answer:"
    assert (hp["lora_r"], hp["lora_alpha"], hp["lr"], hp["batch_size"], hp["seed"]) == (
        8,
        16,
        1e-2,
        4,
        7,
    )
    assert hp["max_steps"] == 30 and hp["target_modules"] == ["q", "v"]
    assert record["prompt_format"] == {
        "style": "seq2seq",
        "max_source_len": 48,
        "max_target_len": 32,
    }
    assert len(record["train_losses"]) == 30
    assert record["train_loss_last"] == pytest.approx(t5_run.train_loss_last, abs=1e-5)
    assert 0 < record["trainable_share"] < 1
    assert record["train_seconds"] > 0
    assert {"torch", "transformers", "peft", "tokenizers"} <= set(record["library_versions"])
    assert len(record["samples"]) == 3
    card = (t5_run.out_dir / "model_card.md").read_text()
    assert str(tiny_t5) in card and record["data_version"] in card
    assert "<<{label}>> {question} <a> {answer}" in card
    assert "r=8, alpha=16" in card and "Sample generations" in card


@pytest.mark.parametrize("run", ["t5_run", "llama_run"])
@pytest.mark.parametrize("merge", [False, True])
def test_reloaded_adapter_reproduces_greedy_generations(
    run: str, merge: bool, request: pytest.FixtureRequest
) -> None:
    result: FinetuneResult = request.getfixturevalue(run)
    backend = FineTunedGeneratorBackend(result.out_dir, merge_adapter=merge, batch_size=2)
    assert isinstance(backend, LLMBackend)
    assert (
        backend.model_id.endswith(tuple("0123456789abcdef")) and "+generator:" in backend.model_id
    )
    reqs = [
        generator_request(*_label_context(s["input"]), max_new_tokens=32) for s in result.samples
    ]
    outs = backend.generate(reqs)
    assert all(o.ok for o in outs)
    assert [o.text for o in outs] == [s["generated"] for s in result.samples]


def test_same_seed_same_losses(tiny_t5: Path, tmp_path: Path) -> None:
    config = GeneratorTrainingConfig(**{**TRAIN_KW, "max_steps": 6, "n_samples": 0})
    a = finetune_generator(str(tiny_t5), EXAMPLES, out_dir=tmp_path / "a", config=config)
    b = finetune_generator(str(tiny_t5), EXAMPLES, out_dir=tmp_path / "b", config=config)
    c = finetune_generator(
        str(tiny_t5), EXAMPLES, out_dir=tmp_path / "c", config=replace(config, seed=8)
    )
    assert a.train_losses == b.train_losses
    assert a.eval_loss_after == b.eval_loss_after
    assert c.train_losses != a.train_losses


def test_kind_mismatch_is_refused(tiny_llama: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="causal model"):
        finetune_generator(
            str(tiny_llama),
            EXAMPLES,
            out_dir=tmp_path,
            config=GeneratorTrainingConfig(kind="seq2seq"),
        )


def test_publish_to_local_artifact_store(t5_run: FinetuneResult, tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    uri = publish_generator(t5_run, store, "generators/t5-tiny")
    keys = store.list("generators/t5-tiny")
    for rel in (
        "adapter/adapter_config.json",
        "adapter/adapter_model.safetensors",
        "tokenizer/tokenizer.json",
        "training.json",
        "model_card.md",
    ):
        assert f"generators/t5-tiny/{rel}" in keys
    backend = FineTunedGeneratorBackend(uri, merge_adapter=False)
    sample = t5_run.samples[0]
    [out] = backend.generate(
        [generator_request(*_label_context(sample["input"]), max_new_tokens=32)]
    )
    assert out.text == sample["generated"]


def test_factory_builds_the_finetuned_generator_backend(t5_run: FinetuneResult) -> None:
    from ragtrail.llm import load_llm_backend

    backend = load_llm_backend(f"generator:{t5_run.out_dir}", merge_adapter=False, batch_size=2)
    assert isinstance(backend, FineTunedGeneratorBackend)
    [result] = backend.generate([generator_request("fact_single", "Receipts are required.")])
    assert result.error is None
