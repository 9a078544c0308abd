"""One citation-model training run: targets -> SFT -> RL -> a model bundle with its lineage.

Layout of ``out_dir`` (fresh or empty)::

    bundle/            the model bundle (kind ``citation_answerer``, adapters ``sft`` then ``rl``)
    stages/sft/        the SFT stage's work (its adapter is copied into the bundle)
    stages/rl/         the RL stage's work
    split.json         the whole split (:meth:`CitationSplit.to_json`), content-addressed
    result.json        :meth:`CitationTrainingResult.as_dict`

The lineage stored in the bundle names the base model, the split (version, settings, counts,
held-out questions, excluded documents, training prompt keys), the config, the seeds, how the
SFT targets were made, and each stage's steps, wall time, tokens and losses (RL: mean reward).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

from ragtrail import jsonsafe
from ragtrail.failures import FailureCount, check_failures
from ragtrail.jsonsafe import JsonObject
from ragtrail.llm.client import LLMClient
from ragtrail.models.bundle import ModelBundle, write_bundle
from ragtrail.train.citation.config import CitationTrainingConfig
from ragtrail.train.citation.data import CitationPrompt, CitationSplit
from ragtrail.train.citation.rl import run_rl
from ragtrail.train.citation.sft import run_sft
from ragtrail.train.citation.stage import StageResult
from ragtrail.train.citation.targets import TargetReport, make_targets

BUNDLE_KIND = "citation_answerer"
BUNDLE_DIR = "bundle"
STAGES_DIR = "stages"
SPLIT_FILE = "split.json"
RESULT_FILE = "result.json"


@dataclass(frozen=True)
class CitationTrainingResult:
    """A finished run: the bundle, the targets report, both stages and the lineage written."""

    bundle: ModelBundle
    targets: TargetReport
    sft: StageResult
    rl: StageResult
    lineage: JsonObject
    wall_seconds: float

    def as_dict(self) -> JsonObject:
        return jsonsafe.check_finite(
            {
                "bundle": str(self.bundle.path),
                "adapters": list(self.bundle.adapters),
                "wall_seconds": round(self.wall_seconds, 3),
                "lineage": self.lineage,
            },
            "citation training result",
        )


def training_prompts(split: CitationSplit, config: CitationTrainingConfig) -> list[CitationPrompt]:
    """The split's training prompts, or a seeded sample of ``max_train_prompts`` of them."""
    prompts = list(split.train)
    limit = config.max_train_prompts
    if 0 < limit < len(prompts):
        picked = sorted(random.Random(config.seed).sample(range(len(prompts)), limit))
        prompts = [prompts[i] for i in picked]
    return prompts


def train_citation_model(
    base_model: str,
    split: CitationSplit,
    config: CitationTrainingConfig,
    out_dir: Path,
    teacher: LLMClient | None = None,
    current: LLMClient | None = None,
    *,
    cache_dir: str | Path | None = None,
) -> CitationTrainingResult:
    """Train the citation answerer on ``split`` and write a bundle (see the module docstring).

    SFT targets come from ``teacher`` when given, else by best-of-N from ``current`` (the
    answerer now in service, e.g. the champion); one of them is required. ``base_model`` is the
    spec the adapters are trained on and the bundle records (the current answerer's base).
    """
    if teacher is None and current is None:
        raise ValueError(
            "SFT targets need a teacher client or the current answerer's client (best-of-N)"
        )
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir}: not empty; a training run writes into a fresh directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SPLIT_FILE).write_text(split.to_json(), encoding="utf-8")
    started = time.perf_counter()
    prompts = training_prompts(split, config)

    client = teacher if teacher is not None else current
    assert client is not None
    targets, report = make_targets(
        prompts,
        client,
        source="teacher" if teacher is not None else "best_of_n",
        samples=config.best_of_n,
        temperature=config.sample_temperature,
        threshold=config.reward_threshold,
        max_new_tokens=config.target_max_new_tokens,
        seed=config.seed,
    )
    check_failures(  # training on the few targets a dead teacher left would pose as retraining
        "SFT target generation",
        [
            FailureCount(
                f"target answers of {report.model_id}",
                report.failed_answers,
                report.answers,
                report.first_error,
            )
        ],
        max_share=config.max_failed_share,
        setting="citation_training.max_failed_share",
    )
    stages = out_dir / STAGES_DIR
    sft = run_sft(base_model, prompts, targets, config, stages / "sft", cache_dir=cache_dir)
    rl = run_rl(
        base_model,
        sft.adapter_dir,
        prompts,
        config,
        stages / "rl",
        target_completions=[t.completion for t in targets] if sft.adapter_dir else (),
        cache_dir=cache_dir,
    )

    adapters = {s.name: s.adapter_dir for s in (sft, rl) if s.adapter_dir is not None}
    lineage = {
        "base_model": base_model,
        "split": split.lineage(),
        "config": config.as_dict(),
        "seeds": {"split": split.settings["seed"], "training": config.seed},
        "train_prompts_used": len(prompts),
        "targets": report.as_dict(),
        "stages": {"sft": sft.as_dict(), "rl": rl.as_dict()},
    }
    bundle = write_bundle(
        out_dir / BUNDLE_DIR,
        kind=BUNDLE_KIND,
        base_model=base_model,
        adapters=adapters,
        lineage=lineage,
    )
    result = CitationTrainingResult(
        bundle=bundle,
        targets=report,
        sft=sft,
        rl=rl,
        lineage=lineage,
        wall_seconds=time.perf_counter() - started,
    )
    (out_dir / RESULT_FILE).write_text(
        jsonsafe.dumps(result.as_dict(), "result.json", indent=1), encoding="utf-8"
    )
    return result
