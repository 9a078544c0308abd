"""One self-alignment run of the evidence extractor: preferences -> LPO -> a model bundle.

Layout of ``out_dir`` (fresh or empty)::

    bundle/         the model bundle (kind ``evidence_extractor``, one adapter ``lpo``)
    stages/lpo/     the LPO loop's work (its adapter is copied into the bundle)
    split.json      the whole split, content-addressed
    result.json     :meth:`EvidenceTrainingResult.as_dict`

Every version is the base model plus one LPO adapter trained on samples from the extractor in
service (the champion, or the base itself the first time): the champion's skill enters through
the data it samples, and each version loads with one adapter. The lineage names the base, the
split, the settings, the seeds, the sampling and scoring report (expert weights included) and the
loop's steps, wall time, tokens and per-step loss and margin.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ragtrail import jsonsafe
from ragtrail.config import EvidenceTrainingSettings
from ragtrail.evaluate.evidence.experts import Encode
from ragtrail.jsonsafe import JsonObject
from ragtrail.judges.contract import Judge
from ragtrail.llm.client import LLMClient
from ragtrail.llm.scoring import LogProbScorer
from ragtrail.models.bundle import ModelBundle, write_bundle
from ragtrail.train.citation.stage import StageResult
from ragtrail.train.evidence.data import EvidencePrompt, EvidenceSplit
from ragtrail.train.evidence.lpo import LPOConfig, lpo_stage_config, train_lpo
from ragtrail.train.evidence.preferences import PreferenceReport, build_preferences

BUNDLE_KIND = "evidence_extractor"


@dataclass(frozen=True)
class EvidenceTrainingResult:
    """A finished run: the bundle, the preference report, the LPO stage and the lineage."""

    bundle: ModelBundle
    preferences: PreferenceReport
    lpo: StageResult
    lineage: JsonObject
    wall_seconds: float

    def as_dict(self) -> JsonObject:
        return jsonsafe.check_finite(
            {
                "bundle": str(self.bundle.path),
                "wall_seconds": round(self.wall_seconds, 3),
                "lineage": self.lineage,
            },
            "evidence training result",
        )


def lpo_config(settings: EvidenceTrainingSettings) -> LPOConfig:
    """The loop's settings from ``settings.evidence_training``."""
    return LPOConfig(
        beta=settings.beta,
        lr=settings.lr,
        warmup_ratio=settings.warmup_ratio,
        pairs_per_batch=settings.pairs_per_batch,
        grad_accum=settings.grad_accum,
        epochs=settings.epochs,
        max_steps=settings.max_steps,
        lora_r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        max_length=settings.max_length,
        seed=settings.seed,
        weighting=settings.pair_weighting,
    )


def training_prompts(
    split: EvidenceSplit, settings: EvidenceTrainingSettings
) -> list[EvidencePrompt]:
    """The split's training prompts, or a seeded sample of ``max_train_prompts`` of them."""
    prompts = list(split.train)
    limit = settings.max_train_prompts
    if 0 < limit < len(prompts):
        picked = sorted(random.Random(settings.seed).sample(range(len(prompts)), limit))
        prompts = [prompts[i] for i in picked]
    return prompts


def train_evidence_model(
    base_model: str,
    split: EvidenceSplit,
    settings: EvidenceTrainingSettings,
    out_dir: Path,
    *,
    extractor: LLMClient,
    judge: Judge,
    scorer: LogProbScorer,
    encode: Encode,
    full_answers: Mapping[str, str | None],
    max_new_tokens: int,
    cache_dir: str | Path | None = None,
) -> EvidenceTrainingResult:
    """Self-align the extractor on ``split`` and write a bundle (see the module docstring)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir}: not empty; a training run writes into a fresh directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "split.json").write_text(split.to_json(), encoding="utf-8")
    started = time.perf_counter()
    prompts = training_prompts(split, settings)
    lists, report = build_preferences(
        prompts,
        extractor,
        settings,
        judge=judge,
        scorer=scorer,
        encode=encode,
        full_answers=full_answers,
        max_new_tokens=max_new_tokens,
    )
    if not lists:
        raise ValueError(
            f"no preference pairs: of {report.prompts} prompt(s), {report.kept_after_dedup} "
            f"distinct sample(s) ({report.empty} empty) left no question with two differently "
            "scored samples; raise evidence_training.samples or the temperature"
        )
    config = lpo_config(settings)
    lpo = train_lpo(base_model, lists, config, out_dir / "stages" / "lpo", cache_dir=cache_dir)
    assert lpo.adapter_dir is not None
    lineage: JsonObject = {
        "base_model": base_model,
        "split": split.lineage(),
        "settings": settings.model_dump(mode="json"),
        "seeds": {"split": split.settings["seed"], "training": settings.seed},
        "train_prompts_used": len(prompts),
        "preferences": report.as_dict(),
        "stages": {"lpo": {**lpo.as_dict(), "config": lpo_stage_config(config)}},
    }
    bundle = write_bundle(
        out_dir / "bundle",
        kind=BUNDLE_KIND,
        base_model=base_model,
        adapters={"lpo": lpo.adapter_dir},
        lineage=lineage,
    )
    result = EvidenceTrainingResult(
        bundle=bundle,
        preferences=report,
        lpo=lpo,
        lineage=lineage,
        wall_seconds=time.perf_counter() - started,
    )
    (out_dir / "result.json").write_text(
        jsonsafe.dumps(result.as_dict(), "result.json", indent=1), encoding="utf-8"
    )
    return result
