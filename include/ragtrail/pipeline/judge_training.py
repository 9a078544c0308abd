"""``ragtrail judge train KIND``: a team's labels become a judge that is measured, versioned and
promoted like every other model.

One run: read the labelled pairs of the reference, split them by query, fine-tune the
cross-encoder on the training side (:mod:`ragtrail.train.judge_training`), calibrate the new judge
on the held-out side with the calibration every judge gets (kappa with its interval, accuracy,
balanced accuracy, per-class precision and recall; stored with the judge's version, so the gate
reads it at once), and register it as the next version of ``ragtrail-judge-<kind>`` with its
lineage (reference file digest, split, seed, configuration, metrics).

Champion or challenger: the first version becomes champion. A later one is compared with the
champion on the held-out items they share (the new held-out part minus any query the champion
trained on; splits by query hash keep the champion's held-out queries held out), both judging
the same items: it is promoted only when the paired difference in kappa has a 95% interval above
zero, else it stays challenger with the reason. With no shared item there is nothing paired to
compare, and it stays challenger until someone promotes it by hand.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragtrail import jsonsafe
from ragtrail.input_files import check_input_file
from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.calibration import (
    Estimate,
    balanced_accuracy,
    calibrate_categorical,
    class_figures,
    cohen_kappa,
)
from ragtrail.judges.contract import Judge
from ragtrail.judges.label_queue import is_label_queue, read_label_queue
from ragtrail.judges.reference_files import (
    entailment_pairs,
    sufficiency_example_pairs,
    sufficiency_pairs,
)
from ragtrail.judges.trained import (
    JUDGE_FILE,
    MODEL_SUBDIR,
    LabelledPair,
    TrainedKind,
    load_trained_judge,
    trained_kind,
)
from ragtrail.models.bundle import write_bundle
from ragtrail.models.bundle_store import file_sha256
from ragtrail.models.registry import (
    CHALLENGER,
    CHAMPION,
    ModelVersion,
    RegistryError,
    current_version,
    settle_challenger,
)
from ragtrail.pipeline.champion_judges import trained_judge
from ragtrail.pipeline.judges import (
    CalibrationError,
    gate_decision,
    labeller_examples,
    reference_id,
    store_calibration_run,
)
from ragtrail.pipeline.sufficiency.raters import sufficiency_references
from ragtrail.runtime import Runtime
from ragtrail.stats.intervals import NO_SPREAD, agreement_interval
from ragtrail.storage.judge_store import CalibrationRecord
from ragtrail.testset.qaset import load_qa_set
from ragtrail.text import text_key
from ragtrail.train.judge_training import (
    JudgeTrainingConfig,
    Split,
    split_pairs,
    train_cross_encoder,
)

log = logging.getLogger(__name__)

SPLIT_FILE = "split.json"
"""In the bundle: the queries of each side, so a later challenger is compared on what this
version never trained on."""


# ------------------------------------------------------------------------------- references


def reference_pairs(rt: Runtime, kind: TrainedKind, path: Path, corpus: str) -> list[LabelledPair]:
    """The labelled pairs of ``path`` for ``kind``.

    entailment: HAGRID CSV, label queue or JSONL; sufficiency: label queue, labelled JSONL, or a
    QA set (its golden sufficiency kinds with their contexts in ``corpus``); labeller: label
    queue or a QA set (its items' labels with their ground contexts in ``corpus``)."""
    check_input_file(path, "reference file")
    if kind.kind == "entailment":
        return entailment_pairs(path)
    if is_label_queue(path, kind):
        return read_label_queue(path, kind).pairs
    if kind.kind == "sufficiency" and _is_sufficiency_jsonl(path):
        return sufficiency_pairs(path)
    items, _ = load_qa_set(path)
    if kind.kind == "sufficiency":
        references = sufficiency_references(rt, corpus, items, per_kind=len(items))
        return sufficiency_example_pairs(references)
    examples, skipped = labeller_examples(rt, corpus, items, per_label=len(items), seed=0)
    if skipped:
        log.warning(
            "%d labelled items have no context in %s: %s", len(skipped), corpus, skipped[:3]
        )
    return [
        LabelledPair(e.item_id, text_key(e.question), e.question, e.context, e.label)
        for e in examples
    ]


def _is_sufficiency_jsonl(path: Path) -> bool:
    """A JSONL whose first row has a ``context`` (a QA set's rows have none)."""
    if path.suffix.lower() not in (".jsonl", ".json"):
        return False
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError:
                    return True  # let the reader report it
                return isinstance(row, dict) and "context" in row
    return False


# ------------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Comparison:
    """The challenger against the champion on the held-out items they share."""

    champion: str | None
    n_shared: int
    champion_kappa: float | None
    challenger_kappa: float | None
    difference: Estimate | None
    promote: bool
    reason: str

    def as_dict(self) -> JsonObject:
        return {
            "champion": self.champion,
            "n_shared": self.n_shared,
            "champion_kappa": self.champion_kappa,
            "challenger_kappa": self.challenger_kappa,
            "kappa_difference": self.difference.as_dict() if self.difference else None,
            "promote": self.promote,
            "reason": self.reason,
        }


def _champion(rt: Runtime, kind: TrainedKind) -> int | None:
    try:
        return current_version(rt.registry, kind.registered_model, CHAMPION)
    except RegistryError:
        return None  # no version registered yet


def compare_with_champion(
    rt: Runtime,
    kind: TrainedKind,
    held_out: Sequence[LabelledPair],
    challenger_verdicts: Sequence[str | None],
) -> Comparison:
    """Run the champion on the challenger's held-out items it never trained on and compare the
    two kappas, paired (BCa over the shared items)."""
    version = _champion(rt, kind)
    if version is None:
        return Comparison(None, 0, None, None, None, True, "the first version: no champion yet")
    champion = trained_judge(rt, kind.judge_name, version)
    _, bundle = rt.registry.download_bundle(kind.registered_model, version)
    trained_on = set(json.loads((bundle / SPLIT_FILE).read_text("utf-8"))["train_queries"])
    shared = [i for i, p in enumerate(held_out) if p.group not in trained_on]
    name = f"{kind.registered_model} v{version}"
    if not shared:
        return Comparison(
            name, 0, None, None, None, False,
            f"no held-out item is unseen by {name}: nothing paired to compare; promote by hand "
            "(ragtrail models promote) if it should serve",
        )  # fmt: skip
    refs = [held_out[i].label for i in shared]
    mine = [challenger_verdicts[i] for i in shared]
    verdicts = champion.judge([held_out[i].judge_input(kind) for i in shared])
    theirs = [str(v.value) if v.ok else None for v in verdicts]
    categories = kind.categories

    def kappa(predicted: Sequence[str | None], idx: np.ndarray) -> float | None:
        return cohen_kappa([refs[i] for i in idx], [predicted[i] for i in idx], categories)

    def delta(idx: np.ndarray) -> float | None:
        a, b = kappa(mine, idx), kappa(theirs, idx)
        return None if a is None or b is None else a - b

    everything = np.arange(len(shared))
    settings = rt.settings
    interval = agreement_interval(
        len(shared), delta, n_resamples=settings.judges.bootstrap_samples, seed=settings.seed
    )
    difference = Estimate.of(delta(everything), interval, "a kappa is undefined on these items")
    figure = (
        f"kappa {kappa(mine, everything) or 0:.3f} vs {kappa(theirs, everything) or 0:.3f} "
        f"on {len(shared)} shared held-out items"
    )
    point = difference.value
    constant = interval.reason == NO_SPREAD and point is not None
    better = (interval.low is not None and interval.low > 0) or (constant and point > 0)
    if better:
        where = "is the same on every resample" if constant else "has a 95% interval"
        reason = f"{figure}: the paired difference {where} above zero"
    elif constant:
        reason = f"{figure}: the paired difference is {point:+.3f} on every resample"
    elif not interval.defined:
        reason = f"{figure}: no paired interval ({interval.reason}), so no promotion"
    else:
        reason = f"{figure}: the paired difference's interval includes zero or less"
    return Comparison(
        name,
        len(shared),
        kappa(theirs, everything),
        kappa(mine, everything),
        difference,
        better,
        reason,
    )


# --------------------------------------------------------------------------------- training


def _held_out_figures(
    rt: Runtime, kind: TrainedKind, held_out: Sequence[LabelledPair], verdicts: Sequence[str | None]
) -> JsonObject:
    refs = [p.label for p in held_out]
    settings = rt.settings
    balanced = balanced_accuracy(
        refs,
        verdicts,
        kind.categories,
        n_resamples=settings.judges.bootstrap_samples,
        seed=settings.seed,
    )
    return {
        "balanced_accuracy": balanced.as_dict(),
        "per_class": {
            category: {name: est.as_dict() for name, est in figures.items()}
            for category, figures in class_figures(refs, verdicts, kind.categories).items()
        },
    }


def train_judge(
    rt: Runtime,
    kind_name: str,
    reference: Path,
    *,
    corpus: str,
    config: JudgeTrainingConfig,
) -> JsonObject:
    """Train, calibrate, register and settle one trained judge (see the module docstring);
    returns what was done, for the CLI."""
    kind = trained_kind(kind_name)
    pairs = reference_pairs(rt, kind, reference, corpus)
    split = split_pairs(pairs, config, tune=kind.positive is not None)
    with tempfile.TemporaryDirectory(prefix=f"ragtrail-judge-{kind.kind}-") as scratch:
        work = Path(scratch) / "judge"
        training = train_cross_encoder(
            kind,
            split,
            config,
            work,
            device=rt.settings.device,
            cache_dir=rt.settings.resolved_model_cache_dir,
            s3_endpoint_url=rt.settings.s3_endpoint_url,
        )
        judge = load_trained_judge(work, model_ref=str(reference.name), device=rt.settings.device)
        record, verdicts, calibration = _calibrate(rt, judge, kind, split.held_out)
        held_out = {
            "kappa": calibration["kappa"],
            "accuracy": calibration["accuracy"],
            **_held_out_figures(rt, kind, split.held_out, verdicts),
        }
        comparison = compare_with_champion(rt, kind, split.held_out, verdicts)
        lineage: JsonObject = {
            "task": f"judge:{kind.kind}",
            "judge": judge.spec.as_dict(),
            "training_data": {
                "reference": str(reference),
                "reference_sha256": file_sha256(reference),
                "pairs": len(pairs),
                "split": split.summary(),
            },
            "configuration": config.as_dict(),
            "seeds": {"training": config.seed, "split": config.seed},
            "training": training.as_dict(),
            "held_out": held_out,
        }
        version = _register(rt, kind, work, split, lineage, Path(scratch) / "bundle")
    gate = gate_decision(rt, judge.spec, record)
    settle_challenger(
        rt.registry,
        kind.registered_model,
        version.version,
        promote_it=comparison.promote,
        reason=comparison.reason,
        decision={"comparison": comparison.as_dict(), "judge_gate": gate.as_dict()},
        actor="ragtrail judge train",
    )
    log.info(
        "%s v%d: kappa %s on %d held-out pairs; %s",
        kind.registered_model,
        version.version,
        record.value,
        record.n,
        "champion" if comparison.promote else "challenger",
    )
    return {
        "kind": kind.kind,
        "judge": judge.spec.as_dict(),
        "registered": {
            "model": kind.registered_model,
            "version": version.version,
            "digest": version.digest,
            "alias": CHAMPION if comparison.promote else CHALLENGER,
        },
        "split": split.summary(),
        "training": training.as_dict(),
        "held_out": held_out,
        "gate": gate.as_dict(),
        "comparison": comparison.as_dict(),
    }


def _calibrate(
    rt: Runtime, judge: Judge, kind: TrainedKind, held_out: Sequence[LabelledPair]
) -> tuple[CalibrationRecord, list[str | None], JsonObject]:
    """Calibrate ``judge`` on the held-out pairs and store it: the record, each verdict's value
    and the calibration's figures."""
    if len(held_out) < 2:
        raise CalibrationError(f"{len(held_out)} held-out pairs: too few to calibrate on")
    settings = rt.settings
    calibration, verdicts = calibrate_categorical(
        judge,
        [p.judge_input(kind) for p in held_out],
        [p.label for p in held_out],
        positive=kind.positive,
        n_resamples=settings.judges.bootstrap_samples,
        seed=settings.seed,
        item_ids=[p.item_id for p in held_out],
    )
    details = [
        {"item": p.item_id, "reference": p.label, **v.as_dict()}
        for p, v in zip(held_out, verdicts, strict=True)
    ]
    reference = reference_id(f"held-out:{kind.kind}", [(p.item_id, p.label) for p in held_out])
    record = store_calibration_run(rt, judge, calibration, reference, details)
    values = [str(v.value) if v.ok else None for v in verdicts]
    return record, values, calibration.as_dict()


def _register(
    rt: Runtime,
    kind: TrainedKind,
    work: Path,
    split: Split,
    lineage: JsonObject,
    bundle_dir: Path,
) -> ModelVersion:
    """Write the trained judge as a bundle (no adapters: the whole cross-encoder) and register
    it as the next version of the kind's model."""
    bundle = write_bundle(
        bundle_dir,
        kind=kind.bundle_kind,
        base_model=str(lineage["configuration"]["base_model"]),  # type: ignore[index]
        adapters={},
        lineage=lineage,
    )
    shutil.copytree(work / MODEL_SUBDIR, bundle.path / MODEL_SUBDIR)
    shutil.copy2(work / JUDGE_FILE, bundle.path / JUDGE_FILE)
    sides = {
        "train_queries": sorted({p.group for p in split.train}),
        "held_out_queries": sorted({p.group for p in split.held_out}),
    }
    (bundle.path / SPLIT_FILE).write_text(jsonsafe.dumps(sides, SPLIT_FILE), encoding="utf-8")
    return rt.registry.register_bundle(
        kind.registered_model,
        bundle.path,
        description=f"{kind.kind} judge trained on {lineage['training_data']['reference']}",  # type: ignore[index]
    )


__all__ = ["Comparison", "compare_with_champion", "reference_pairs", "train_judge"]
