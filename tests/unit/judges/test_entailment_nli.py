"""NLI entailment judges on tiny models built from a config (no NLI weights exist offline).

The tiny classifier's head makes one class win on every input with a known probability, so each
verdict and score is computed by hand; which class is "entailment" comes from id2label only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from ragtrail.judges.contract import NOT_SUPPORTED, SUPPORTED, Judge, JudgeInput, JudgeRole
from ragtrail.judges.nli import (
    CrossEncoderJudge,
    NLIClassifierJudge,
    NLIModelError,
    Seq2SeqNLIJudge,
    entailment_index,
    load_nli_judge,
)
from ragtrail.models.store import ModelFetchError
from tests.tiny_models import build_tiny_nli_classifier, build_tiny_t5

CNE = {0: "contradiction", 1: "entailment", 2: "neutral"}  # cross-encoder/nli-deberta-v3-*
ENC = {0: "entailment", 1: "neutral", 2: "contradiction"}  # MoritzLaurer/DeBERTa-v3-*-mnli
WIN3 = math.exp(5) / (math.exp(5) + 2)  # winner's softmax, bias 5 vs two zeros
LOSE3 = 1 / (math.exp(5) + 2)
PAIRS = [
    JudgeInput(premise="the cat sat on the mat.", hypothesis="a cat sat."),
    JudgeInput(premise="the dog is on the ferry.", hypothesis="the dog sat on a mat."),
    JudgeInput(premise="a ticket.", hypothesis="the ferry."),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("nli")
    return {
        "cne_win1": build_tiny_nli_classifier(root / "cne_win1", CNE, winner=1),
        "enc_win1": build_tiny_nli_classifier(root / "enc_win1", ENC, winner=1),
        "cne_win0": build_tiny_nli_classifier(root / "cne_win0", CNE, winner=0),
        "two_class": build_tiny_nli_classifier(
            root / "two_class", {0: "ENTAILMENT", 1: "not_entailment"}, winner=0, margin=1.0
        ),
        "generic": build_tiny_nli_classifier(
            root / "generic", {0: "LABEL_0", 1: "LABEL_1"}, winner=0
        ),
    }


def test_entailment_index_is_read_from_id2label() -> None:
    assert entailment_index(CNE, model="m") == 1
    assert entailment_index(ENC, model="m") == 0
    assert entailment_index({"0": "not_entailment", "1": "Entail"}, model="m") == 1
    with pytest.raises(NLIModelError, match=r"no entailment label.*LABEL_0"):
        entailment_index({0: "LABEL_0", 1: "LABEL_1"}, model="m")
    with pytest.raises(NLIModelError, match="more than one"):
        entailment_index({0: "entailment", 1: "ENTAILMENT"}, model="m")


def test_label_order_decides_the_verdict(models: dict[str, Path]) -> None:
    """Class 1 wins in both models; it is entailment in one order and neutral in the other."""
    cne = load_nli_judge(str(models["cne_win1"]))
    enc = load_nli_judge(str(models["enc_win1"]))
    assert isinstance(cne, NLIClassifierJudge) and isinstance(enc, NLIClassifierJudge)
    assert (cne.entailment_index, enc.entailment_index) == (1, 0)
    for verdict in cne.judge(PAIRS):
        assert verdict.value == SUPPORTED and verdict.ok
        assert verdict.score == pytest.approx(WIN3, abs=1e-5)
    for verdict in enc.judge(PAIRS):
        assert verdict.value == NOT_SUPPORTED
        assert verdict.score == pytest.approx(LOSE3, abs=1e-5)  # P(entailment), class 0 lost
    contradiction = load_nli_judge(str(models["cne_win0"])).judge(PAIRS[:1])[0]
    assert contradiction.value == NOT_SUPPORTED
    assert contradiction.score == pytest.approx(LOSE3, abs=1e-5)


def test_two_class_model_and_threshold(models: dict[str, Path]) -> None:
    p = math.exp(1) / (math.exp(1) + 1)  # 0.7311
    default = load_nli_judge(str(models["two_class"]))
    strict = load_nli_judge(str(models["two_class"]), threshold=0.75)
    assert [v.value for v in default.judge(PAIRS)] == [SUPPORTED] * 3
    assert [v.value for v in strict.judge(PAIRS)] == [NOT_SUPPORTED] * 3
    assert strict.judge(PAIRS)[0].score == pytest.approx(p, abs=1e-5)
    assert default.spec.version != strict.spec.version
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        load_nli_judge(str(models["two_class"]), threshold=1.5)


def test_model_without_entailment_label_is_a_load_error(models: dict[str, Path]) -> None:
    with pytest.raises(NLIModelError, match=r"LABEL_0.*LABEL_1"):
        load_nli_judge(str(models["generic"]))


def test_spec_batches_empty_inputs_and_truncation(models: dict[str, Path]) -> None:
    ref = str(models["cne_win1"])
    judge = load_nli_judge(ref, batch_size=2, max_length=16)
    assert isinstance(judge, Judge)
    spec = judge.spec
    assert (spec.name, spec.backend, spec.model, spec.role) == (
        "entailment.nli",
        "nli-classifier",
        ref,
        JudgeRole.ENTAILMENT,
    )
    assert spec.categories == (SUPPORTED, NOT_SUPPORTED) and not spec.approximate
    long_premise = " ".join(["the cat sat on the mat."] * 10)
    items = [
        PAIRS[0],
        JudgeInput(premise="", hypothesis="a cat."),
        JudgeInput(premise=long_premise, hypothesis="a cat sat."),
        JudgeInput(premise="the mat.", hypothesis="  "),
        PAIRS[1],
    ]
    verdicts = judge.judge(items)
    assert len(verdicts) == len(items)
    assert [v.ok for v in verdicts] == [True, False, True, False, True]
    assert verdicts[1].error == "empty premise" and verdicts[3].error == "empty hypothesis"
    assert verdicts[0].reason == "" and "16-token window" in verdicts[2].reason
    assert verdicts[2].score == pytest.approx(WIN3, abs=1e-5)
    assert all(v.judge == spec.ref for v in verdicts)


def test_scores_do_not_depend_on_batching(tmp_path: Path) -> None:
    """A random head (not a fixed winner): batch size and padding leave each score unchanged."""
    path = build_tiny_nli_classifier(tmp_path / "m", CNE, winner=1, margin=0.0)
    with torch.no_grad():  # give the head input-dependent weights
        from transformers import BertForSequenceClassification

        model = BertForSequenceClassification.from_pretrained(path)
        torch.manual_seed(1)
        model.classifier.weight.normal_(0, 1.0)
        model.save_pretrained(path)
    one = load_nli_judge(str(path), batch_size=1).judge(PAIRS)
    three = load_nli_judge(str(path), batch_size=3).judge(PAIRS)
    assert len({round(v.score or 0, 6) for v in one}) > 1  # the inputs do score differently
    for a, b in zip(one, three, strict=True):
        assert a.score == pytest.approx(b.score, abs=1e-5) and a.value == b.value


def test_version_tracks_the_weights(tmp_path: Path) -> None:
    a = build_tiny_nli_classifier(tmp_path / "a", CNE, winner=1)
    b = build_tiny_nli_classifier(tmp_path / "b", CNE, winner=1)
    assert load_nli_judge(str(a)).spec.version != load_nli_judge(str(b)).spec.version  # ref differs
    before = load_nli_judge(str(a)).spec.version
    assert load_nli_judge(str(a)).spec.version == before  # deterministic
    build_tiny_nli_classifier(a, ENC, winner=1)  # same path, new config
    assert load_nli_judge(str(a)).spec.version != before


def test_cross_encoder_folder(models: dict[str, Path], tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder

    folder = tmp_path / "ce"
    CrossEncoder(str(models["cne_win1"]), device="cpu").save_pretrained(str(folder))
    judge = load_nli_judge(str(folder))  # auto: config_sentence_transformers.json says CrossEncoder
    assert isinstance(judge, CrossEncoderJudge)
    assert judge.spec.backend == "cross-encoder" and judge.entailment_index == 1
    verdicts = judge.judge([*PAIRS, JudgeInput(premise="x", hypothesis="")])
    assert [v.value for v in verdicts[:3]] == [SUPPORTED] * 3
    assert verdicts[0].score == pytest.approx(WIN3, abs=1e-5)
    assert verdicts[3].error == "empty hypothesis"
    # the same folder read as a plain classifier gives the same probabilities
    plain = load_nli_judge(str(folder), kind="classifier").judge(PAIRS)
    assert [v.score for v in plain] == pytest.approx([v.score for v in verdicts[:3]], abs=1e-5)


def test_cross_encoder_reads_id2label_too(models: dict[str, Path], tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder

    folder = tmp_path / "ce_enc"
    CrossEncoder(str(models["enc_win1"]), device="cpu").save_pretrained(str(folder))
    verdict = load_nli_judge(str(folder), kind="cross-encoder").judge(PAIRS[:1])[0]
    assert verdict.value == NOT_SUPPORTED and verdict.score == pytest.approx(LOSE3, abs=1e-5)


# --------------------------------------------------------------------------- seq2seq

T5_CORPUS = [
    "premise: the cat sat on the mat. hypothesis: a cat sat.",
    "premise: the ferry ticket costs three euros. hypothesis: tickets are free.",
    "1 0 1 0 yes no entailment",
] * 4


@pytest.fixture(scope="module")
def t5_with_digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_t5(tmp_path_factory.mktemp("t5d") / "m", T5_CORPUS, dropout_rate=0.0)


def _first_step_probability(path: Path, item: JudgeInput) -> float:
    """P("1") against "0" at the first decoding step, computed here independently."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSeq2SeqLM.from_pretrained(path).eval()
    enc = tok(f"premise: {item.premise} hypothesis: {item.hypothesis}", return_tensors="pt")
    one = tok("1", add_special_tokens=False)["input_ids"][0]
    zero = tok("0", add_special_tokens=False)["input_ids"][0]
    start = torch.tensor([[model.config.decoder_start_token_id]])
    with torch.no_grad():
        logits = model(**enc, decoder_input_ids=start).logits[0, 0]
    return float(torch.softmax(torch.stack([logits[one], logits[zero]]), dim=0)[0])


def test_seq2seq_token_probability(t5_with_digits: Path) -> None:
    judge = load_nli_judge(str(t5_with_digits))  # auto: encoder-decoder
    assert isinstance(judge, Seq2SeqNLIJudge)
    assert judge.score_mode == "token-probability" and judge.spec.backend == "seq2seq-nli"
    verdicts = judge.judge(PAIRS)
    for item, verdict in zip(PAIRS, verdicts, strict=True):
        expected = _first_step_probability(t5_with_digits, item)
        assert verdict.score == pytest.approx(expected, abs=1e-5)
        assert verdict.value == (SUPPORTED if expected >= 0.5 else NOT_SUPPORTED)
    everything = load_nli_judge(str(t5_with_digits), threshold=0.0).judge(PAIRS)
    assert {v.value for v in everything} == {SUPPORTED}
    batched = load_nli_judge(str(t5_with_digits), batch_size=1).judge(PAIRS)
    assert [v.score for v in batched] == pytest.approx([v.score for v in verdicts], abs=1e-5)


def test_seq2seq_cuts_only_the_premise(t5_with_digits: Path) -> None:
    judge = load_nli_judge(str(t5_with_digits), max_length=40)
    assert isinstance(judge, Seq2SeqNLIJudge)
    item = JudgeInput(premise=" ".join(["the cat sat on the mat."] * 30), hypothesis="a cat sat.")
    ids, cut = judge.encode(item)
    assert cut and len(ids) <= 40
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(t5_with_digits)
    text = tok.decode(ids, skip_special_tokens=True)
    assert text.startswith("premise: the cat sat") and text.endswith(" hypothesis: a cat sat.")
    short, short_cut = judge.encode(PAIRS[0])  # fits: the plain tokenization of the prompt
    assert not short_cut
    assert short == tok("premise: the cat sat on the mat. hypothesis: a cat sat.")["input_ids"]
    verdict = judge.judge([item])[0]
    assert verdict.ok and "40-token window" in verdict.reason


def test_seq2seq_greedy_decode_when_digits_are_not_tokens(tmp_path: Path) -> None:
    """No "1"/"0" token: the greedy decode is read; a non-answer is a failure with its text."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    corpus = ["premise: the cat sat on the mat. hypothesis: a cat sat. yes no"] * 4
    path = build_tiny_t5(tmp_path / "m", corpus, byte_alphabet=False, dropout_rate=0.0)
    judge = load_nli_judge(str(path))
    assert isinstance(judge, Seq2SeqNLIJudge) and judge.score_mode == "greedy-decode"
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSeq2SeqLM.from_pretrained(path).eval()
    for item, verdict in zip(PAIRS, judge.judge(PAIRS), strict=True):
        enc = tok(f"premise: {item.premise} hypothesis: {item.hypothesis}", return_tensors="pt")
        out = model.generate(**enc, max_new_tokens=4, do_sample=False, num_beams=1)
        text = tok.decode(out[0], skip_special_tokens=True).strip()
        assert text not in ("0", "1")  # the vocabulary cannot spell them
        assert not verdict.ok and verdict.value is None
        assert verdict.raw == (text,) and repr(text) in (verdict.error or "")


def test_greedy_answers_map_to_scores() -> None:
    from ragtrail.judges.nli import _decoded_answer

    assert _decoded_answer("1", cut=False, window=9).score == 1.0
    assert _decoded_answer("0", cut=True, window=9).score == 0.0
    failed = _decoded_answer("yes", cut=False, window=9)
    assert failed.score is None and failed.raw == ("yes",)


# --------------------------------------------------------------------------- loading


def test_bad_references_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelFetchError, match="not found"):
        load_nli_judge(str(tmp_path / "missing"))
    with pytest.raises(ModelFetchError, match="no builtin NLI model"):
        load_nli_judge("builtin:nli")
    with pytest.raises(ModelFetchError, match="cannot load NLI model"):
        load_nli_judge("no-such-org/no-such-nli-model")  # offline, not in the HF cache
    with pytest.raises(ValueError, match="kind must be"):
        load_nli_judge(str(build_tiny_nli_classifier(tmp_path / "m", CNE, winner=1)), kind="x")  # type: ignore[arg-type]


@pytest.fixture
def s3_bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    moto = pytest.importorskip("moto")
    boto3 = pytest.importorskip("boto3")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with moto.mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="models")
        yield s3


def test_load_from_s3(models: dict[str, Path], s3_bucket: Any, tmp_path: Path) -> None:
    source = models["cne_win1"]
    for f in source.rglob("*"):
        if f.is_file():
            s3_bucket.upload_file(str(f), "models", f"nli/v1/{f.relative_to(source).as_posix()}")
    judge = load_nli_judge("s3://models/nli/v1", cache_dir=tmp_path / "cache")
    assert judge.spec.model == "s3://models/nli/v1"
    verdict = judge.judge(PAIRS[:1])[0]
    assert verdict.value == SUPPORTED and verdict.score == pytest.approx(WIN3, abs=1e-5)
    assert any((tmp_path / "cache" / "s3" / "models").iterdir())
