"""Training a cross-encoder judge: the split by query, threshold tuning, a toy set it must learn,
and a weights digest that follows the weights."""

from __future__ import annotations

import random
import shutil

import pytest

from ragtrail.judges.calibration import calibrate_categorical
from ragtrail.judges.contract import JudgeInput
from ragtrail.judges.trained import (
    MODEL_SUBDIR,
    TRAINED_KINDS,
    LabelledPair,
    load_trained_judge,
    weights_digest,
)
from ragtrail.train.judge_training import (
    JudgeTrainingConfig,
    split_by_group,
    split_pairs,
    train_cross_encoder,
    tune_threshold,
)
from tests.tiny_models import build_tiny_bert_encoder

ENTAILMENT = TRAINED_KINDS["entailment"]


def toy_pairs(n_queries: int, seed: int = 0, *, shuffle_labels: bool = False) -> list[LabelledPair]:
    """Three pairs per query; the hypothesis says "yes" exactly when the pair is supported."""
    rng = random.Random(seed)
    pairs = []
    for q in range(n_queries):
        for j in range(3):
            animal = rng.choice(["cat", "dog", "bird", "fish"])
            place = rng.choice(["garden", "house"])
            supported = rng.random() < 0.5
            hypothesis = f"{'yes' if supported else 'no'} the {animal} is there"
            pairs.append(
                LabelledPair(
                    f"q{q}:{j}",
                    f"q{q}",
                    f"the {animal} sleeps in the {place}",
                    hypothesis,
                    "supported" if supported else "not_supported",
                )
            )
    if shuffle_labels:
        labels = [p.label for p in pairs]
        rng.shuffle(labels)
        pairs = [
            LabelledPair(p.item_id, p.group, p.first, p.second, lb)
            for p, lb in zip(pairs, labels, strict=True)
        ]
    return pairs


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return str(build_tiny_bert_encoder(tmp_path_factory.mktemp("tiny-bert")))


def test_split_never_puts_a_query_on_both_sides_and_is_stable_under_new_labels():
    pairs = toy_pairs(60)
    config = JudgeTrainingConfig(seed=3)
    split = split_pairs(pairs, config, tune=True)
    sides = [{p.group for p in part} for part in (split.fit, split.tune, split.held_out)]
    assert all(a.isdisjoint(b) for i, a in enumerate(sides) for b in sides[i + 1 :])
    assert sum(len(s) for s in sides) == 60 and len(split.train) + len(split.held_out) == 180
    # more labels later: every query that was held out stays held out, none moves to training
    grown = split_pairs(pairs + toy_pairs(90, seed=1)[180:], config, tune=True)
    assert {p.group for p in split.held_out} <= {p.group for p in grown.held_out}
    assert {p.group for p in split.train}.isdisjoint({p.group for p in grown.held_out})


def test_a_split_with_an_empty_side_is_refused():
    with pytest.raises(ValueError, match="label more queries"):
        split_by_group(toy_pairs(1), 0.5, seed=0)


def test_threshold_is_tuned_for_balanced_accuracy():
    # positives score 0.3 and 0.4, negatives 0.1 and 0.2: any threshold in (0.2, 0.3] separates
    # them; ties go to the threshold nearest 0.5
    assert tune_threshold([0.3, 0.4, 0.1, 0.2], [True, True, False, False]) == 0.3
    # a rare positive class is not sacrificed for accuracy (always-negative would score 0.9)
    probs = [0.6] + [0.5] * 9
    assert tune_threshold(probs, [True] + [False] * 9) == 0.51


def test_a_tiny_cross_encoder_learns_a_separable_toy_set_and_its_digest_follows_the_weights(
    base, tmp_path
):
    config = JudgeTrainingConfig(
        base_model=base, epochs=6, batch_size=8, learning_rate=5e-3, max_length=32, seed=5
    )
    split = split_pairs(toy_pairs(60), config, tune=True)
    training = train_cross_encoder(ENTAILMENT, split, config, tmp_path / "judge")
    assert training.threshold is not None and training.pairs_per_second > 0
    judge = load_trained_judge(tmp_path / "judge", model_ref="toy")
    calibration, verdicts = calibrate_categorical(
        judge,
        [p.judge_input(ENTAILMENT) for p in split.held_out],
        [p.label for p in split.held_out],
        positive="supported",
        n_resamples=200,
        seed=1,
    )
    assert calibration.kappa.value is not None and calibration.kappa.value >= 0.8
    assert all(v.judge == judge.spec.ref and v.score is not None for v in verdicts)

    # same weights copied elsewhere: same digest (the generated model card does not count)
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "judge", copy)
    (copy / MODEL_SUBDIR / "README.md").write_text("another card", encoding="utf-8")
    assert weights_digest(copy / MODEL_SUBDIR) == judge.digest
    # one changed weight: a new digest, hence a new judge version
    weights = copy / MODEL_SUBDIR / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    changed = load_trained_judge(copy, model_ref="toy")
    assert changed.digest != judge.digest and changed.spec.version != judge.spec.version


def test_the_labeller_kind_takes_the_most_probable_label(base, tmp_path):
    kind = TRAINED_KINDS["labeller"]
    words = {
        "fact_single": "what",
        "summary": "summary",
        "reasoning": "why",
        "unanswerable": "maybe",
    }
    pairs = [
        LabelledPair(f"{label}{i}", f"{label}{i}", f"{word} is the cat", "the cat sleeps", label)
        for label, word in words.items()
        for i in range(16)
    ]
    config = JudgeTrainingConfig(
        base_model=base, epochs=20, batch_size=8, learning_rate=5e-3, max_length=32, seed=2
    )
    split = split_pairs(pairs, config, tune=False)
    training = train_cross_encoder(kind, split, config, tmp_path / "labeller")
    assert training.threshold is None
    judge = load_trained_judge(tmp_path / "labeller", model_ref="toy")
    verdicts = judge.judge([p.judge_input(kind) for p in split.held_out])
    right = sum(v.value == p.label for v, p in zip(verdicts, split.held_out, strict=True))
    assert right / len(verdicts) >= 0.8
    assert judge.judge([JudgeInput(question="", context="x")])[0].error == "empty question"
