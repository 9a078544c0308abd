"""Exported embedders (onnxruntime, OpenVINO) against torch on a tiny sentence-transformers model:
equivalence, the export cache and its identity, refusals, and the embedder identity settings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from ragtrail.config import Settings
from ragtrail.embed import exported
from ragtrail.embed.embedder import (
    CachedEmbedder,
    Embedder,
    ModelLoadError,
    SentenceTransformerEmbedder,
)
from ragtrail.embed.exported import BackendNotEquivalent, ExportedEmbedder, model_digest
from ragtrail.embed.loading import embedder_identity, load_embedder
from ragtrail.hardware import cpu_has_bf16
from ragtrail.ingest.chunk import as_token_counter
from tests.tiny_models import build_tiny_sentence_encoder
from tests.unit.test_embedder import DictCache

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEXTS = [
    "the cat sleeps in the garden",
    "a dog runs",
    "",
    "where is the bird? " * 20,  # past the tiny model's 48-token limit: truncated alike
    "what is the reason",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_sentence_encoder(tmp_path_factory.mktemp("tiny") / "encoder")


@pytest.fixture(scope="module")
def torch_vectors(tiny: Path) -> np.ndarray:
    return SentenceTransformerEmbedder(str(tiny)).encode(TEXTS)


@pytest.mark.parametrize(("backend", "precision"), [("onnx", "f32"), ("openvino", "f32")])
def test_exported_backend_matches_torch(
    tiny: Path, torch_vectors: np.ndarray, tmp_path: Path, backend: str, precision: str
) -> None:
    emb = ExportedEmbedder(
        str(tiny), backend=backend, precision=precision, batch_size=2, cache_dir=tmp_path
    )
    vectors = emb.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), emb.dim) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(vectors, torch_vectors, atol=1e-4)  # row order kept too
    assert emb.equivalence.passed and emb.equivalence.probes == len(exported.PROBE_TEXTS)
    assert emb.model_id == f"{tiny.resolve()}@{backend}-{precision}"
    assert emb.encode([]).shape == (0, emb.dim)
    np.testing.assert_allclose(emb.encode_queries(TEXTS[:2]), torch_vectors[:2], atol=1e-4)


def test_batches_hold_rows_of_like_token_counts_padded_to_a_multiple_of_eight(
    tiny: Path, torch_vectors: np.ndarray, tmp_path: Path
) -> None:
    """Rows are batched by their exact token counts, longest first, each batch padded to a
    multiple of 8 (never past the model's limit); the vectors do not depend on the batching."""
    emb = ExportedEmbedder(str(tiny), backend="onnx", batch_size=2, cache_dir=tmp_path)
    tokenizer, run = emb._graph()
    widths: list[tuple[int, list[int]]] = []

    def recording(feeds: dict[str, np.ndarray]) -> np.ndarray:
        widths.append((feeds["input_ids"].shape[1], feeds["attention_mask"].sum(axis=1).tolist()))
        return run(feeds)

    emb._loaded = (tokenizer, recording)
    texts = ["a b c d e f g h i j", "a", "a b c", *TEXTS]
    vectors = emb.encode(texts)
    counts = [
        len(ids) for ids in tokenizer.encode(texts, max_length=emb.max_seq_length)["input_ids"]
    ]
    batched = [n for _, lengths in widths for n in lengths]
    assert batched == sorted(counts, reverse=True)
    limit = emb.max_seq_length
    for width, lengths in widths:
        assert width == max(max(lengths), min(-(-max(lengths) // 8) * 8, limit))
    assert any(width > max(lengths) for width, lengths in widths)  # some batch was padded
    one_by_one = ExportedEmbedder(str(tiny), backend="onnx", batch_size=1, cache_dir=tmp_path)
    np.testing.assert_allclose(vectors, one_by_one.encode(texts), atol=1e-5)
    np.testing.assert_allclose(vectors[3:], torch_vectors, atol=1e-4)


def test_padding_follows_the_tokenizer_side(tiny: Path, tmp_path: Path) -> None:
    emb = ExportedEmbedder(str(tiny), backend="onnx", cache_dir=tmp_path)
    tokenizer = exported.FileTokenizer(emb.export_dir / "tokenizer")
    pad = tokenizer.pad_id
    rows = {"input_ids": [[5, 6, 7], [9]], "attention_mask": [[1, 1, 1], [1]]}
    tokenizer.padding_side = "right"
    right = exported._padded(tokenizer, rows, max_length=512)
    assert right["input_ids"].tolist() == [[5, 6, 7] + [pad] * 5, [9] + [pad] * 7]
    assert right["input_ids"].dtype == np.int64
    tokenizer.padding_side = "left"
    left = exported._padded(tokenizer, rows, max_length=6)
    assert left["input_ids"].tolist() == [[pad] * 3 + [5, 6, 7], [pad] * 5 + [9]]
    assert left["attention_mask"].tolist() == [[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 1]]
    long = {"input_ids": [list(range(10))], "attention_mask": [[1] * 10]}
    assert exported._padded(tokenizer, long, max_length=4)["input_ids"].shape == (1, 10)


def test_the_file_tokenizer_encodes_and_pads_as_the_hugging_face_one(
    tiny: Path, tmp_path: Path, embedder: Embedder
) -> None:
    """The encoder's tokenizer read with ``tokenizers`` alone gives the Hugging Face tokenizer's
    ids, masks and type ids (truncated alike past the limit) and pads as it does, on the tiny
    model and the real MiniLM."""
    from transformers import AutoTokenizer

    texts = [*TEXTS, "Élan vital, naïve café — «déjà vu» 42 % of 3.5 kB", "Tabs\tand\nlines  "]
    real = [
        e for e in (embedder, getattr(embedder, "inner", None)) if isinstance(e, ExportedEmbedder)
    ]
    for emb in [ExportedEmbedder(str(tiny), backend="onnx", cache_dir=tmp_path), *real]:
        folder = emb.export_dir / "tokenizer"
        hf, own = AutoTokenizer.from_pretrained(str(folder)), exported.FileTokenizer(folder)
        for limit in (8, emb.max_seq_length):
            theirs = hf(texts, truncation="longest_first", max_length=limit)
            ours = own.encode(texts, max_length=limit)
            for name in emb.manifest.input_names:
                assert ours[name] == theirs[name], (name, limit)
            width = max(len(ids) for ids in ours["input_ids"]) + 3
            padded = hf.pad(theirs, padding="max_length", max_length=width, return_tensors="np")
            rows = {n: ours[n] for n in emb.manifest.input_names}
            for name, grid in own.pad(rows, width).items():
                np.testing.assert_array_equal(grid, padded[name])


def test_bf16_runs_only_where_the_cpu_has_the_units(
    tiny: Path, torch_vectors: np.ndarray, tmp_path: Path
) -> None:
    if not cpu_has_bf16():
        with pytest.raises(ValueError, match="bf16 units"):
            exported.resolve_precision("openvino", "bf16")
        assert exported.resolve_precision("openvino", "auto") == "f32"
        return
    assert exported.resolve_precision("openvino", "auto") == "bf16"
    emb = ExportedEmbedder(str(tiny), backend="openvino", precision="bf16", cache_dir=tmp_path)
    cosines = np.sum(emb.encode(TEXTS) * torch_vectors, axis=1)
    assert cosines.min() > 0.99


def test_precision_rules() -> None:
    assert exported.resolve_precision("torch", "auto") == "f32"
    assert exported.resolve_precision("onnx", "auto") == "f32"
    with pytest.raises(ValueError, match="openvino backend only"):
        exported.resolve_precision("onnx", "bf16")


def test_export_is_cached_by_the_model_digest(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = ExportedEmbedder(str(tiny), backend="onnx", cache_dir=tmp_path)
    exports = list((tmp_path / "exports").iterdir())
    assert exports == [first.export_dir]
    assert first.manifest.digest == model_digest(tiny)
    assert first.export_dir.name.endswith(f"{model_digest(tiny)[:16]}-v1")

    # A second load reuses the export and its recorded check: no export, no torch model.
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("re-exported or reloaded torch for an unchanged model")

    monkeypatch.setattr(exported, "export_model", forbidden)
    monkeypatch.setattr(exported, "_torch_model", forbidden)
    again = ExportedEmbedder(str(tiny), backend="onnx", cache_dir=tmp_path)
    assert again.export_dir == first.export_dir
    np.testing.assert_array_equal(again.encode(TEXTS), first.encode(TEXTS))


def test_an_exported_model_counts_tokens_as_its_own_tokenizer_and_loads_its_graph_lazily(
    tiny: Path, tmp_path: Path, embedder: Embedder
) -> None:
    """The chunker's counts from ``tokenizer.json`` alone equal the Hugging Face tokenizer's, on
    the tiny model and the real MiniLM; a reloaded export compiles nothing until it encodes."""
    from transformers import AutoTokenizer

    texts = [*TEXTS, "Élan vital, naïve café — «déjà vu» 42 % of 3.5 kB", "Tabs\tand\nlines  "]
    first = ExportedEmbedder(str(tiny), backend="onnx", cache_dir=tmp_path)
    real = [
        e for e in (embedder, getattr(embedder, "inner", None)) if isinstance(e, ExportedEmbedder)
    ]
    for emb in [first, *real]:
        hf = as_token_counter(AutoTokenizer.from_pretrained(str(emb.export_dir / "tokenizer")))
        own = as_token_counter(emb.tokenizer)
        assert [own.encode(t) for t in texts] == [hf.encode(t) for t in texts]
        assert [own.offsets(t) for t in texts] == [hf.offsets(t) for t in texts]
        assert own.count_batch(texts) == hf.count_batch(texts)

    again = ExportedEmbedder(str(tiny), backend="onnx", cache_dir=tmp_path)
    assert again.tokenizer is not None and again._loaded is None  # counted, nothing compiled
    np.testing.assert_array_equal(again.encode(TEXTS), first.encode(TEXTS))
    assert again._loaded is not None


def test_a_changed_model_is_exported_again(tiny: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    import shutil

    shutil.copytree(tiny, model)
    before = ExportedEmbedder(str(model), backend="onnx", cache_dir=tmp_path / "cache")
    from safetensors.torch import load_file, save_file

    weights = load_file(model / "model.safetensors")
    name = next(k for k in weights if k.endswith("word_embeddings.weight"))
    weights[name] = weights[name] * 2.0
    save_file(weights, model / "model.safetensors")
    after = ExportedEmbedder(str(model), backend="onnx", cache_dir=tmp_path / "cache")
    assert after.manifest.digest != before.manifest.digest
    assert after.export_dir != before.export_dir
    fresh = SentenceTransformerEmbedder(str(model)).encode(TEXTS)
    np.testing.assert_allclose(after.encode(TEXTS), fresh, atol=1e-4)


def test_a_backend_that_disagrees_with_torch_is_refused(tiny: Path, tmp_path: Path) -> None:
    emb = ExportedEmbedder(str(tiny), backend="onnx", cache_dir=tmp_path)
    # Corrupt the recipe the export runs with: CLS pooling where the model pools by mean.
    manifest = json.loads((emb.export_dir / "manifest.json").read_text())
    manifest["pooling"] = "cls"
    manifest["equivalence"] = {}
    (emb.export_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BackendNotEquivalent, match="disagrees with torch") as err:
        ExportedEmbedder(str(tiny), backend="onnx", cache_dir=tmp_path)
    assert "embedding_backend=torch" in str(err.value)
    # The failed check is recorded too: the next load refuses without running torch again.
    recorded = json.loads((emb.export_dir / "manifest.json").read_text())["equivalence"]
    assert recorded["onnx-f32"]["min_cosine"] < exported.EQUIVALENCE_MIN_COSINE


def test_unsupported_module_stacks_are_refused(tmp_path: Path) -> None:
    model = build_tiny_sentence_encoder(tmp_path / "dense", dense=True)
    with pytest.raises(ModelLoadError, match="Transformer \\+ Pooling"):
        ExportedEmbedder(str(model), backend="onnx", cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache" / "exports").glob("*/manifest.json"))


def test_identity_names_backend_and_precision(tmp_path: Path) -> None:
    ref = "builtin:all-MiniLM-L6-v2"
    torch_settings = Settings(home=tmp_path, embedding_backend="torch")
    onnx_settings = Settings(home=tmp_path, embedding_backend="onnx")
    ov_f32 = Settings(home=tmp_path, embedding_backend="openvino", embedding_precision="f32")
    assert embedder_identity(torch_settings) == ref  # unchanged for indices built before
    assert embedder_identity(onnx_settings) == f"{ref}@onnx-f32"
    assert embedder_identity(ov_f32) == f"{ref}@openvino-f32"
    with pytest.raises(ValueError, match="openvino backend only"):
        load_embedder(
            Settings(home=tmp_path, embedding_backend="torch", embedding_precision="bf16")
        )


def test_cached_vectors_of_two_backends_never_mix(
    tiny: Path, torch_vectors: np.ndarray, tmp_path: Path
) -> None:
    cache = DictCache()
    torch_cached = CachedEmbedder(SentenceTransformerEmbedder(str(tiny)), cache)
    onnx_cached = CachedEmbedder(
        ExportedEmbedder(str(tiny), backend="onnx", cache_dir=tmp_path), cache
    )
    torch_cached.encode(TEXTS)
    onnx_cached.encode(TEXTS)
    assert onnx_cached.encoded == len(set(TEXTS))  # nothing served from torch's entries
    assert {model for model, _ in cache.data} == {torch_cached.model_id, onnx_cached.model_id}


def test_the_digest_is_remembered_until_a_file_changes(tiny: Path, tmp_path: Path) -> None:
    import os
    import shutil

    model, memo = tmp_path / "model", tmp_path / "memo"
    shutil.copytree(tiny, model)
    digest = model_digest(model, memo_dir=memo)
    assert digest == model_digest(model) and len(list(memo.iterdir())) == 1
    # Same size and modification time: the memo answers without reading the bytes.
    config = model / "config.json"
    stat = config.stat()
    data = bytearray(config.read_bytes())
    data[-1:] = b" " if data[-1:] != b" " else b"\n"
    config.write_bytes(bytes(data))
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert model_digest(model, memo_dir=memo) == digest
    # A newer modification time: hashed again, and the new digest remembered.
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    changed = model_digest(model, memo_dir=memo)
    assert changed == model_digest(model) != digest
    assert model_digest(model, memo_dir=memo) == changed


def test_one_compiled_session_per_model_file_and_settings_serves_every_embedder(
    tiny: Path, tmp_path: Path
) -> None:
    """Two embedders of one export (two runtimes, two Airflow tasks) share its compiled graph,
    which is never released (OpenVINO can hang destroying an infer request); a file rewritten in
    place, or another thread count, is compiled again."""
    first = ExportedEmbedder(str(tiny), backend="openvino", precision="f32", cache_dir=tmp_path)
    second = ExportedEmbedder(str(tiny), backend="openvino", precision="f32", cache_dir=tmp_path)
    assert second._graph()[1] is first._graph()[1]
    np.testing.assert_array_equal(first.encode(TEXTS), second.encode(TEXTS))
    other = ExportedEmbedder(
        str(tiny), backend="openvino", precision="f32", cache_dir=tmp_path, threads=1
    )
    assert other._graph()[1] is not first._graph()[1]
    onnx = first.export_dir / "model.onnx"
    onnx.write_bytes(onnx.read_bytes())  # rewritten: a new modification time
    third = ExportedEmbedder(str(tiny), backend="openvino", precision="f32", cache_dir=tmp_path)
    assert third._graph()[1] is not first._graph()[1]
    np.testing.assert_array_equal(third.encode(TEXTS), first.encode(TEXTS))
