"""The local transformers backend on tiny models built here (causal Llama and seq2seq T5).

Weights are random and the tokenizer is trained on a few sentences, so the texts are gibberish:
the tests check the mechanics (batching, padding, seeding, adapters, S3, caching of the
conversion), not quality. One ``slow`` test loads the real bundled SmolLM2.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM, LogitsProcessorList

from ragtrail.llm.backends import model_store, prefix_attention, transformers_local
from ragtrail.llm.backends.base import GenerationRequest
from ragtrail.llm.backends.lazy_local import LazyLocalBackend
from ragtrail.llm.backends.transformers_local import (
    PREFILL_ALONE_PADDING,
    TransformersBackend,
    _PerRowSampler,
)
from ragtrail.llm.factory import load_llm_backend
from ragtrail.models import store as model_cache
from tests.tiny_models import build_tiny_llama, build_tiny_t5

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "retrieval augmented generation needs balanced test sets",
    "employees are reimbursed for reasonable travel costs",
    "answer with one json object and nothing else",
    "which document mentions the travel policy",
] * 4


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), CORPUS)


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_t5(tmp_path_factory.mktemp("tiny-t5"), CORPUS)


def requests(n: int = 6, **kw: object) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            messages=[
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": " ".join(CORPUS[i].split()[: 2 + i])},
            ],
            **kw,  # type: ignore[arg-type]
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("model_fixture", ["tiny_llama", "tiny_t5"])
def test_batched_equals_unbatched_greedy(
    model_fixture: str, request: pytest.FixtureRequest
) -> None:
    path = request.getfixturevalue(model_fixture)
    backend = TransformersBackend(str(path), batch_size=4)
    reqs = requests(max_new_tokens=10)
    batched = backend.generate(reqs)
    single = [backend.generate([r])[0] for r in reqs]
    assert [r.text for r in batched] == [r.text for r in single]
    assert all(r.ok and r.finish_reason in {"stop", "length"} for r in batched)
    assert all(0 < r.completion_tokens <= 10 or r.finish_reason == "stop" for r in batched)
    assert [r.prompt_tokens for r in batched] == [r.prompt_tokens for r in single]
    assert backend.generate(reqs)[0].text == batched[0].text  # repeatable


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_shared_prompt_prefix_is_computed_once_and_changes_nothing(
    tiny_llama: Path, temperature: float
) -> None:
    system = {"role": "system", "content": " ".join(CORPUS[:2])}  # a long shared system turn
    reqs = [
        GenerationRequest(
            messages=(system, {"role": "user", "content": q}),
            max_new_tokens=10,
            temperature=temperature,
            seed=5,
        )
        for q in ("which document", "the travel policy answer", "one json object")
    ]
    cached = TransformersBackend(str(tiny_llama), batch_size=2)
    plain = TransformersBackend(str(tiny_llama), batch_size=2, prefix_caching=False)
    calls: list[int] = []
    decoded_over: list[int] = []  # cache lengths of the decoding steps
    forward = cached.model.forward

    def counting(*args: object, **kwargs: object) -> object:
        ids = kwargs.get("input_ids")
        calls.append(int(ids.shape[1]) if isinstance(ids, torch.Tensor) else -1)
        if calls[-1] == 1:
            decoded_over.append(kwargs["past_key_values"].get_seq_length())  # type: ignore[union-attr]
        return forward(*args, **kwargs)

    cached.model.forward = counting  # type: ignore[method-assign]
    results = cached.generate(reqs)
    assert all(r.ok and r.text for r in results)
    with_prefix = [r.text for r in results]
    prefix = cached._shared_prefix([cached._encode(r.messages) for r in reqs])
    assert len(prefix) >= 32
    assert calls[0] == len(prefix)  # the prefix is run once, on its own ...
    assert calls.count(len(prefix)) == 1  # ... and reused by both batches
    # Batches attend to it apart (shared-prefix attention): the rows' caches leave it out.
    assert cached._prefix_attention and decoded_over and max(decoded_over) < len(prefix)
    assert with_prefix == [r.text for r in plain.generate(reqs)]
    assert with_prefix == [plain.generate([r])[0].text for r in reqs]


def test_a_lone_request_decodes_through_grouped_query_attention(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call of one request has no shared prefix; its decoding steps still take the
    grouped-query path (not transformers' SDPA with copied key/value heads), same text."""
    grouped = TransformersBackend(str(tiny_llama), batch_size=2)
    plain = TransformersBackend(str(tiny_llama), batch_size=2)
    plain._prefix_attention = False  # transformers' SDPA for every step
    taken: list[int] = []
    real = prefix_attention.grouped_decode

    def counted(*args: object) -> object:
        taken.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(prefix_attention, "grouped_decode", counted)
    req = requests(1, max_new_tokens=8, temperature=0.0)[0]
    text = grouped.generate([req])[0].text
    assert grouped._prefix_attention and taken  # every layer of every step
    steps = len(taken)
    assert plain.generate([req])[0].text == text
    assert len(taken) == steps  # the plain backend never took it


@pytest.mark.parametrize("model_fixture", ["tiny_llama", "tiny_t5"])
def test_seeded_sampling_is_deterministic_and_batch_invariant(
    model_fixture: str, request: pytest.FixtureRequest
) -> None:
    path = request.getfixturevalue(model_fixture)
    backend = TransformersBackend(str(path), batch_size=3)
    reqs = requests(max_new_tokens=12, temperature=1.0, top_p=0.95, seed=123)
    a = [r.text for r in backend.generate(reqs)]
    b = [r.text for r in backend.generate(reqs)]
    solo = [backend.generate([r])[0].text for r in reqs]
    assert a == b == solo
    other = requests(max_new_tokens=12, temperature=1.0, top_p=0.95, seed=124)
    assert [r.text for r in backend.generate(other)] != a


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_single_request_decodes_as_plain_generate(tiny_llama: Path, temperature: float) -> None:
    """One request alone (how an unbatched client calls) gives what ``generate`` gives with
    transformers' own cache and prefill: the in-place cache changes no output."""
    backend = TransformersBackend(str(tiny_llama), batch_size=4)
    for req in requests(3, max_new_tokens=12, temperature=temperature, seed=9):
        ids = backend._encode(req.messages)
        sampler = _PerRowSampler(
            [req.temperature], [req.top_p], [req.effective_seed()], [req.top_k]
        )
        with torch.inference_mode():
            out = backend.model.generate(
                input_ids=torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                generation_config=backend._generation_config(12),
                logits_processor=LogitsProcessorList([sampler]),
            )
        new = out[0, len(ids) :].tolist()
        cut = next((k for k, t in enumerate(new) if t in backend.eos_ids), len(new))
        expected = backend.tokenizer.decode(new[:cut], skip_special_tokens=True)
        assert backend.generate([req])[0].text == expected


def _forward_shapes(backend: TransformersBackend) -> list[tuple[int, int]]:
    """Records (rows, tokens) of every forward pass of ``backend``'s model from now on."""
    shapes: list[tuple[int, int]] = []
    forward = backend.model.forward

    def recording(*args: object, **kwargs: object) -> object:
        shapes.append(tuple(kwargs["input_ids"].shape))  # type: ignore[union-attr]
        return forward(*args, **kwargs)

    backend.model.forward = recording  # type: ignore[method-assign]
    return shapes


def test_uneven_batch_rows_are_prefilled_alone_even_ones_in_one_pass(tiny_llama: Path) -> None:
    backend = TransformersBackend(str(tiny_llama), batch_size=3)
    words = " ".join(CORPUS[:8]).split()
    uneven = [
        GenerationRequest(
            messages=[{"role": "user", "content": " ".join(words[:n])}], max_new_tokens=5
        )
        for n in (1, 14, 28)
    ]
    ids = [backend._encode(r.messages) for r in uneven]
    assert not backend._shared_prefix(ids)
    padding = 3 * max(map(len, ids)) - sum(map(len, ids))
    assert padding > PREFILL_ALONE_PADDING * 3
    alone = [backend.generate([r])[0].text for r in uneven]
    shapes = _forward_shapes(backend)
    assert [r.text for r in backend.generate(uneven)] == alone
    # Each row but its last token alone (no padding), then the batch from the last tokens on.
    assert sorted(shapes[:3]) == sorted((1, len(row) - 1) for row in ids)
    assert shapes[3] == (3, 1)

    even = requests(3, max_new_tokens=5)  # prompts within a few tokens of each other
    shapes.clear()
    assert [r.text for r in backend.generate(even)] == [backend.generate([r])[0].text for r in even]
    width = max(len(backend._encode(r.messages)) for r in even)
    assert shapes[:2] == [(3, width - 1), (3, 1)]  # one padded pass, then decoding


def test_repeated_prompts_share_one_prefill(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two samples each of three prompts, every row prefilled alone, in 2 slots: each prompt is
    prefilled once (twins admitted together, and a twin admitted after its sibling's row ended),
    and every text is the one the request gets alone."""
    backend = TransformersBackend(str(tiny_llama), batch_size=2)
    words = " ".join(CORPUS[:8]).split()
    reqs = [
        GenerationRequest(
            messages=[{"role": "user", "content": " ".join(words[:n])}],
            max_new_tokens=new,
            temperature=1.0,
            seed=seed,
        )
        for n, news in ((3, (4, 4)), (14, (2, 7)), (28, (5, 9)))
        for seed, new in zip((3, 4), news, strict=True)
    ]
    ids = [backend._encode(r.messages) for r in reqs]
    assert len({tuple(i) for i in ids}) == 3
    alone = [backend.generate([r])[0].text for r in reqs]
    monkeypatch.setattr(transformers_local, "PREFILL_ALONE_PADDING", -1)  # every row alone
    shapes = _forward_shapes(backend)
    assert [r.text for r in backend.generate(reqs)] == alone
    prefix = len(backend._shared_prefix(ids))
    prefills = sorted(tokens for _, tokens in shapes if tokens > 1)
    assert prefills == sorted(len(i) - 1 - prefix for i in ids[::2])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_ended_rows_leave_the_batch(tiny_llama: Path, temperature: float) -> None:
    backend = TransformersBackend(str(tiny_llama), batch_size=4)
    reqs = [
        GenerationRequest(
            messages=r.messages,
            max_new_tokens=40,
            temperature=temperature,
            seed=seed,
            json_schema={
                "type": "object",
                "properties": {"a": {"type": "string", "maxLength": length}},
                "required": ["a"],
            },
        )
        for seed, (r, length) in enumerate(zip(requests(4), (2, 20, 6, 12), strict=True))
    ]
    alone = [backend.generate([q])[0].text for q in reqs]
    shapes = _forward_shapes(backend)
    batched = backend.generate(reqs)
    assert all(r.ok and r.finish_reason == "stop" for r in batched)
    assert [json.loads(r.text)["a"] is not None for r in batched] == [True] * 4
    rows = [n for n, width in shapes if width == 1]  # decoding steps
    assert rows[0] == 4 and rows == sorted(rows, reverse=True) and rows[-1] < 4
    assert len(set(rows)) > 2  # rows left at different steps
    assert [r.text for r in batched] == alone


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_waiting_requests_take_the_slots_of_ended_rows(
    tiny_llama: Path, temperature: float
) -> None:
    """Continuous batching: with 2 slots and 5 requests of different answer lengths, the batch
    decodes at full width until the queue is empty, each waiting request prefilled as a slot
    frees and written into the batch's storage in place; texts are those of each alone."""
    backend = TransformersBackend(str(tiny_llama), batch_size=2)
    words = " ".join(CORPUS).split()
    reqs = [
        GenerationRequest(
            messages=[{"role": "user", "content": " ".join(words[: 3 + 4 * k])}],
            max_new_tokens=40,
            temperature=temperature,
            seed=k,
            json_schema={
                "type": "object",
                "properties": {"a": {"type": "string", "maxLength": length}},
                "required": ["a"],
            },
        )
        for k, length in enumerate((2, 20, 6, 12, 4))
    ]
    alone = [backend.generate([q])[0].text for q in reqs]
    shapes = _forward_shapes(backend)
    joins: list[bool] = []
    join = transformers_local.join_batch

    def recording_join(*args: object) -> object:
        joined = join(*args)  # type: ignore[arg-type]
        joins.append(joined is not None)
        return joined

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transformers_local, "join_batch", recording_join)
        batched = backend.generate(reqs)
    assert [r.text for r in batched] == alone
    assert all(r.ok and r.finish_reason == "stop" for r in batched)
    prefills = [k for k, (_, width) in enumerate(shapes) if width > 1]
    # The two longest prompts (close in length) in one padded pass, then each newcomer alone.
    assert [shapes[k][0] for k in prefills] == [2, 1, 1, 1]
    steps_before_last_admission = [rows for rows, width in shapes[: prefills[-1]] if width == 1]
    assert steps_before_last_admission and set(steps_before_last_admission) == {2}
    assert joins == [True] * 3  # the newcomers joined the batch's storage in place
    assert len({r.latency_s for r in batched}) == 5  # each request timed from its admission


def test_a_request_failing_mid_batch_fails_alone(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error while decoding a continuous batch is retried request by request: the request
    that raises gets a failure with the error, the others their usual texts."""
    backend = TransformersBackend(str(tiny_llama), batch_size=2)
    reqs = requests(4, max_new_tokens=8)
    alone = [backend.generate([r])[0].text for r in reqs]
    poisoned = backend._encode(reqs[2].messages)
    prefill = backend._prefill_row

    def failing(row: list[int], prefix: list[int]) -> object:
        if row == poisoned:
            raise RuntimeError("out of memory in this row")
        return prefill(row, prefix)

    monkeypatch.setattr(backend, "_prefill_row", failing)
    monkeypatch.setattr(transformers_local, "PREFILL_ALONE_PADDING", -1)  # every row alone
    results = backend.generate(reqs)
    assert not results[2].ok and "out of memory in this row" in (results[2].error or "")
    assert [r.text for k, r in enumerate(results) if k != 2] == alone[:2] + alone[3:]
    assert all(r.ok for k, r in enumerate(results) if k != 2)


def test_causal_uses_left_padding_and_chat_template(tiny_llama: Path) -> None:
    backend = TransformersBackend(str(tiny_llama))
    assert backend.tokenizer.padding_side == "left" and not backend.is_encoder_decoder
    rendered = backend.render_prompt([{"role": "user", "content": "hi"}])
    assert rendered == "<|user|>hi<eos><|assistant|>"
    # Guided decoding changes outputs, so it is part of the id that cache keys use.
    assert backend.model_id == f"{tiny_llama}+guided:200" and backend.name == "transformers"
    assert TransformersBackend(str(tiny_llama), guided_json=False).model_id == str(tiny_llama)


def test_seq2seq_is_detected(tiny_t5: Path) -> None:
    backend = TransformersBackend(str(tiny_t5))
    assert backend.is_encoder_decoder and backend.tokenizer.padding_side == "right"
    assert "T5ForConditionalGeneration" in type(backend.model).__name__
    assert backend.render_prompt([{"role": "user", "content": "hi"}]) == "user: hi"


def test_too_long_prompt_fails_alone(tiny_llama: Path) -> None:
    backend = TransformersBackend(str(tiny_llama), max_input_tokens=40)
    short = GenerationRequest(messages=[{"role": "user", "content": "fox"}], max_new_tokens=4)
    long = GenerationRequest(
        messages=[{"role": "user", "content": CORPUS[1] * 3}], max_new_tokens=4
    )
    res = backend.generate([short, long, short])
    assert [r.ok for r in res] == [True, False, True]
    assert "at most 40" in (res[1].error or "") and res[1].finish_reason == "error"
    assert res[0].text == res[2].text


def test_lora_adapter_changes_model_id_and_outputs(tiny_llama: Path, tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model

    base = LlamaForCausalLM.from_pretrained(tiny_llama)
    torch.manual_seed(1)
    lora = get_peft_model(
        base,
        LoraConfig(
            r=4, lora_alpha=64, target_modules=["q_proj", "v_proj"], init_lora_weights=False
        ),
    )
    adapter_dir = tmp_path / "adapter"
    lora.save_pretrained(adapter_dir)

    plain = TransformersBackend(str(tiny_llama))
    tuned = TransformersBackend(str(tiny_llama), adapter_path=adapter_dir)
    assert tuned.model_id.startswith(f"{tiny_llama}+adapter:")
    assert tuned.model_id != plain.model_id
    reqs = requests(4, max_new_tokens=8)
    assert [r.text for r in tuned.generate(reqs)] != [r.text for r in plain.generate(reqs)]
    unmerged = TransformersBackend(str(tiny_llama), adapter_path=adapter_dir, merge_adapter=False)
    assert [r.text for r in unmerged.generate(reqs)] == [r.text for r in tuned.generate(reqs)]


def test_precision_is_loaded_and_named_in_the_model_id(tiny_llama: Path) -> None:
    reference = TransformersBackend(str(tiny_llama))
    half = TransformersBackend(str(tiny_llama), dtype="bfloat16")
    assert next(half.model.parameters()).dtype == torch.bfloat16
    assert reference.model_id == f"{tiny_llama}+guided:200"  # float32 ids are unchanged
    assert half.model_id == f"{tiny_llama}+dtype:bfloat16+guided:200"
    named = TransformersBackend(str(tiny_llama), dtype=torch.float16, model_id="registry:m@v1")
    assert named.model_id == "registry:m@v1+dtype:float16+guided:200"
    results = half.generate(requests(4, max_new_tokens=6))
    assert all(r.ok and r.completion_tokens > 0 for r in results)
    with pytest.raises(ValueError, match=r"unknown model dtype 'int8'.*bfloat16"):
        TransformersBackend(str(tiny_llama), dtype="int8")


def test_runtime_loads_local_models_in_the_configured_precision(
    tiny_llama: Path, tmp_path: Path
) -> None:
    from ragtrail.config import ModelRole, load_settings
    from ragtrail.runtime import Runtime

    settings = load_settings(
        home=tmp_path / "home", generation={"llm": f"hf:{tiny_llama}", "llm_dtype": "bfloat16"}
    )
    rt = Runtime(settings)
    try:
        lazy = rt.llm(ModelRole.ANSWERER).backend
        assert isinstance(lazy, LazyLocalBackend)
        backend = lazy.load()
        assert isinstance(backend, TransformersBackend)
        assert next(backend.model.parameters()).dtype == torch.bfloat16
        assert "+dtype:bfloat16" in backend.model_id
        assert rt.backends()["local model dtype"] == "bfloat16"
    finally:
        rt.close()
    plain = Runtime(load_settings(home=tmp_path / "plain", generation={"llm": f"hf:{tiny_llama}"}))
    try:
        assert "local model dtype" not in plain.backends()
    finally:
        plain.close()


def test_model_from_s3_is_downloaded_once(
    tiny_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    boto3 = pytest.importorskip("boto3")
    moto = pytest.importorskip("moto")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with moto.mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="models")
        for f in tiny_llama.iterdir():
            s3.upload_file(str(f), "models", f"llm/tiny/{f.name}")
        uri = "s3://models/llm/tiny"
        backend = TransformersBackend(uri, cache_dir=tmp_path)
        assert backend.model_id.startswith(f"{uri}@")
        local, digest = model_cache.mirror_s3_prefix(uri, tmp_path)
        assert (local / "config.json").is_file()
        assert (local / model_cache.COMPLETE_MARKER).is_file()
        assert backend.model_id == f"{uri}@{digest[:12]}+guided:200"
        mtime = (local / "config.json").stat().st_mtime_ns
        model_cache.mirror_s3_prefix(uri, tmp_path)  # unchanged listing: no new download
        assert (local / "config.json").stat().st_mtime_ns == mtime
        ref = TransformersBackend(str(tiny_llama))
        reqs = requests(2, max_new_tokens=6)
        assert [r.text for r in backend.generate(reqs)] == [r.text for r in ref.generate(reqs)]


def test_factory_hf_spec(tiny_llama: Path) -> None:
    backend = load_llm_backend(f"hf:{tiny_llama}", batch_size=2)
    assert isinstance(backend, TransformersBackend) and backend.batch_size == 2
    with pytest.raises(ValueError):
        load_llm_backend("builtin:nope")
    with pytest.raises(ValueError):
        load_llm_backend("mystery:model")


def test_builtin_conversion_is_locked_and_done_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two concurrent callers: one converts, the other waits and reuses; failures publish nothing."""
    calls: list[int] = []
    fake_gguf = tmp_path / "fake.gguf"
    fake_gguf.write_bytes(b"gguf")
    monkeypatch.setattr(model_store, "smollm2_gguf_path", lambda: fake_gguf)

    def slow_convert(gguf: Path, out_dir: Path) -> None:
        calls.append(1)
        (out_dir / "config.json").write_text("{}")
        time.sleep(0.3)
        (out_dir / "model.safetensors").write_bytes(b"weights")

    monkeypatch.setattr(model_store, "_convert_gguf", slow_convert)
    cache = tmp_path / "models"
    debris = cache / f".{model_store.SMOLLM2_DIRNAME}.tmp-crashed"
    debris.mkdir(parents=True)  # left by a process killed mid-conversion
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(model_store.ensure_builtin_smollm2(cache)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(results) == 2 and results[0] == results[1]
    target = cache / model_store.SMOLLM2_DIRNAME
    assert (target / "model.safetensors").read_bytes() == b"weights"
    marker = json.loads((target / model_cache.COMPLETE_MARKER).read_text())
    assert marker["source_bytes"] == 4
    assert not [p for p in cache.iterdir() if p.name.startswith(f".{target.name}.tmp-")]

    def broken_convert(gguf: Path, out_dir: Path) -> None:
        (out_dir / "partial").write_text("x")
        raise RuntimeError("disk full")

    monkeypatch.setattr(model_store, "_convert_gguf", broken_convert)
    other = tmp_path / "other"
    with pytest.raises(RuntimeError, match="disk full"):
        model_store.ensure_builtin_smollm2(other)
    assert not (other / model_store.SMOLLM2_DIRNAME).exists()
    assert not [p for p in other.iterdir() if p.name.startswith(".smollm2") and "tmp" in p.name]


def test_vllm_backend_missing_gives_install_hint() -> None:
    pytest.importorskip("ragtrail.llm.backends.vllm_inprocess")
    try:
        import vllm  # noqa: F401

        pytest.skip("vllm is installed here")
    except ImportError:
        pass
    with pytest.raises(ImportError, match=r"pip install ragtrail\[vllm\] \(CUDA only\)"):
        load_llm_backend("vllm:some/model")


@pytest.mark.slow
def test_builtin_smollm2_generates(tmp_path: Path) -> None:
    """The real bundled SmolLM2: converted once into a cache dir, then answers a question."""
    pytest.importorskip("gguf")
    cache = Path(os.environ.get("RAGTRAIL_TEST_MODEL_CACHE") or tmp_path)
    backend = load_llm_backend("builtin:smollm2-135m-instruct", cache_dir=cache)
    assert (cache / model_store.SMOLLM2_DIRNAME / "model.safetensors").is_file()
    (res,) = backend.generate(
        [
            GenerationRequest(
                messages=[{"role": "user", "content": "What is the capital of France?"}],
                max_new_tokens=24,
            )
        ]
    )
    assert res.ok and res.completion_tokens > 0
    assert "paris" in res.text.lower()
    again = load_llm_backend("builtin:smollm2-135m-instruct", cache_dir=cache)
    assert again.load_seconds < 30  # type: ignore[attr-defined]


@pytest.mark.slow
def test_builtin_smollm2_guided_answer_decodes_as_plain_generate(tmp_path: Path) -> None:
    """On the real model and a real-sized guided prompt (~600 tokens), one request alone gives
    what ``generate`` gives with transformers' own cache and prefill."""
    pytest.importorskip("gguf")
    from ragtrail.evaluate.attribution.cited_answers import CITED_ANSWER_PROMPT, CitedAnswerInput

    cache = Path(os.environ.get("RAGTRAIL_TEST_MODEL_CACHE") or tmp_path)
    backend = load_llm_backend("builtin:smollm2-135m-instruct", cache_dir=cache)
    assert isinstance(backend, TransformersBackend)
    inp = CitedAnswerInput(
        question="When is the fire alarm tested?",
        passages=[
            "The fire alarm is tested every Tuesday at 11:00. Staff stay inside.",
            "Visitors sign in at reception and wear a badge at all times.",
        ],
    )
    req = GenerationRequest(
        messages=CITED_ANSWER_PROMPT.render(inp),
        max_new_tokens=24,
        json_schema=CITED_ANSWER_PROMPT.guided_schema(inp),
        avoid_copying=CITED_ANSWER_PROMPT.example_texts(),
    )
    ids = backend._encode(req.messages)
    processors = LogitsProcessorList(
        [backend._constrained_rows([req], len(ids)), _PerRowSampler([0.0], [1.0], [0], [0])]
    )
    with torch.inference_mode():
        out = backend.model.generate(
            input_ids=torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            generation_config=backend._generation_config(24),
            logits_processor=processors,
        )
    expected = backend.tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True)
    assert expected.startswith('{"sentences":[{"text":"')
    assert backend.generate([req])[0].text == expected
