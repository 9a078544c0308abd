"""``ragtrail judge train`` end to end on a runtime: labels in, a calibrated judge registered in
MLflow as champion or challenger, served to the night by name; the label queue chooses items and
its filled file trains the next version."""

from __future__ import annotations

import pytest

from ragtrail.judges.contract import JudgeInput
from ragtrail.judges.label_queue import QueueRow, write_label_queue
from ragtrail.judges.references import ReferenceFormatError
from ragtrail.judges.registry import JUDGES
from ragtrail.judges.trained import TRAINED_KINDS
from ragtrail.models.registry import CHALLENGER, CHAMPION, current_version
from ragtrail.pipeline import label_queue as queue_module
from ragtrail.pipeline.judge_training import train_judge
from ragtrail.pipeline.judges import entailment_judge
from ragtrail.pipeline.label_queue import Candidate, label_queue
from ragtrail.storage.judge_store import JudgeStore
from ragtrail.train.judge_training import JudgeTrainingConfig
from tests.tiny_models import build_tiny_bert_encoder
from tests.unit.judges.test_label_queue import fill_labels
from tests.unit.train.test_judge_training import toy_pairs

KIND = TRAINED_KINDS["entailment"]
MODEL = KIND.registered_model


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return str(build_tiny_bert_encoder(tmp_path_factory.mktemp("tiny-bert")))


@pytest.fixture
def rt(make_runtime):
    return make_runtime(
        judges={"entailment_fallback": "entailment.trained", "bootstrap_samples": 200}
    )


def filled_queue(path, pairs):
    """The pairs as a label queue a person filled in."""
    rows = [QueueRow(p.item_id, p.group, p.first, p.second, "", 0.5) for p in pairs]
    write_label_queue(path, KIND, rows)
    fill_labels(path, [p.label for p in pairs])
    return path


def config(base: str, **fields) -> JudgeTrainingConfig:
    return JudgeTrainingConfig(
        **{
            "base_model": base,
            "epochs": 6,
            "batch_size": 8,
            "learning_rate": 5e-3,
            "max_length": 32,
            "seed": 5,
            **fields,
        }
    )


def test_trained_judges_are_promoted_only_when_better_and_served_by_name(rt, base, tmp_path):
    labels = filled_queue(tmp_path / "labels.csv", toy_pairs(60))
    weak = config(base, epochs=1, learning_rate=1e-6)

    first = train_judge(rt, "entailment", labels, corpus="hb", config=weak)
    assert first["registered"]["version"] == 1 and first["registered"]["alias"] == CHAMPION
    assert first["comparison"]["reason"] == "the first version: no champion yet"
    assert first["gate"]["mode"] == "advise"  # below the bar: it only advises

    good = train_judge(rt, "entailment", labels, corpus="hb", config=config(base))
    assert good["registered"]["alias"] == CHAMPION, good["comparison"]
    comparison = good["comparison"]
    assert comparison["promote"] and comparison["champion"] == f"{MODEL} v1"
    assert comparison["n_shared"] == good["split"]["held_out"]["pairs"]  # same queries held out
    assert comparison["kappa_difference"]["value"] > 0 and "above zero" in comparison["reason"]
    assert good["gate"]["mode"] == "gate", good["gate"]["reason"]
    held_out = good["held_out"]
    assert held_out["kappa"]["value"] >= 0.8 and held_out["balanced_accuracy"]["value"] >= 0.9
    assert set(held_out["per_class"]) == {"supported", "not_supported"}
    assert sum(good["split"][side]["queries"] for side in ("fit", "tune", "held_out")) == 60
    version = good["judge"]["version"]
    assert JudgeStore(rt.engine).latest("entailment.trained", version) is not None

    # the night's configured entailment judge is the champion, named with its registry version
    served = entailment_judge(rt)
    assert served.spec.ref == f"entailment.trained@{version}"
    assert served.spec.model == f"registry:{MODEL}@2"
    (verdict,) = served.judge([JudgeInput(premise="the cat sleeps", hypothesis="yes the cat is")])
    assert verdict.ok and verdict.judge == served.spec.ref

    lineage = rt.registry.get_version(MODEL, 2).lineage
    assert lineage["training_data"]["reference_sha256"] and lineage["seeds"]["training"] == 5
    assert lineage["held_out"]["kappa"]["value"] == held_out["kappa"]["value"]

    # a worse retrain on the same labels stays challenger; the champion keeps serving
    worse = train_judge(rt, "entailment", labels, corpus="hb", config=weak)
    assert worse["registered"]["alias"] == CHALLENGER and not worse["comparison"]["promote"]
    assert worse["comparison"]["kappa_difference"]["value"] < 0
    assert current_version(rt.registry, MODEL, CHAMPION) == 2
    assert current_version(rt.registry, MODEL, CHALLENGER) == 3
    assert JUDGES.build(rt, "entailment.trained").spec.version == version


def test_the_label_queue_puts_disagreements_first_and_its_filled_file_trains(
    rt, base, tmp_path, monkeypatch
):
    train_judge(
        rt,
        "entailment",
        filled_queue(tmp_path / "seed.csv", toy_pairs(40)),
        corpus="hb",
        config=config(base),
    )
    pool = [
        Candidate(p.item_id, p.group, JudgeInput(premise=p.first, hypothesis=p.second))
        for p in toy_pairs(30, seed=9)
    ]
    monkeypatch.setattr(queue_module, "candidates", lambda rt, kind, corpus: pool)
    kind, rows = label_queue(rt, "entailment", "hb", n=10)
    assert len(rows) == 10 and kind is KIND
    assert set(rows[0].verdicts) == {"entailment.trained", "entailment.embedding"}
    disagree = [r.why.startswith("judges disagree") for r in rows]
    assert disagree == sorted(disagree, reverse=True)  # disagreements first
    agreeing = [r.uncertainty for r, d in zip(rows, disagree, strict=True) if not d]
    assert agreeing == sorted(agreeing, reverse=True)  # then the least sure

    path = tmp_path / "queue.csv"
    write_label_queue(path, kind, rows)
    with pytest.raises(ReferenceFormatError, match="no labelled rows"):
        train_judge(rt, "entailment", path, corpus="hb", config=config(base))


def test_a_configured_trained_judge_that_was_never_trained_says_how_to_train_one(rt):
    with pytest.raises(ValueError, match="ragtrail judge train entailment --reference FILE"):
        entailment_judge(rt)


def test_judge_list_shows_the_configured_labeller(make_runtime):
    from ragtrail.pipeline.registered_judges import listed_judges

    trained = make_runtime(judges={"labeller": "labeller.trained"})
    judges, unavailable = listed_judges(trained)
    names = [j.spec.name for j in judges]
    assert "labeller" not in names  # not the LLM labeller the night does not use
    assert "ragtrail judge train labeller" in unavailable["labeller.trained"]
    llm = make_runtime(home=trained.settings.home.parent / "llm-home")
    assert "labeller" in [j.spec.name for j in listed_judges(llm)[0]]
