"""Entailment judges against HAGRID's human "attributable" labels.

Each judge decides whether the cited gold quotes support an answer sentence
(:func:`ragtrail.judges.references.read_hagrid_attribution`); its verdicts are compared with the
annotators' flags: n, accuracy, Cohen's kappa (both with 95% percentile-bootstrap intervals),
precision and recall of "supported", and throughput.

The queries are split in two halves with a fixed seed (by query, so one query's sentences and
quotes never sit on both sides). The embedding fallback's threshold is the one maximising balanced
accuracy on the first half, and every agreement figure is measured on the second half. The LLM
judge (bundled SmolLM2-135M through the real client and its SQL cache, on a temporary
RAGTRAIL_HOME) runs on a seeded sample of the second half, sized to take a few minutes on 2 cores.
No NLI model exists offline, so the NLI judge is listed as not run.

    .venv/bin/python -m benchmarks.bench_entailment [--llm-sample 120] [--write]

Cohen's kappa and the bootstrap are the shared ones of ``ragtrail.judges.calibration``; failed
verdicts are counted apart here (``n`` is the judged pairs), unlike ``ragtrail judge calibrate``,
which counts them as disagreements.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks._common import machine_line, require_shared, timer, write_section
from ragtrail.judges.calibration import cohen_kappa
from ragtrail.judges.contract import NOT_SUPPORTED, SUPPORTED, JudgeInput, Verdict
from ragtrail.judges.references import EntailmentExample, read_hagrid_attribution
from ragtrail.stats.intervals import agreement_interval, wilson_interval

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SEED = 20241122
LLM_SAMPLE = 120
N_RESAMPLES = 2000
HAGRID = ("reference", "hagrid-attributed-ir", "llama13_RTG_vanilla.csv")
CATEGORIES = (SUPPORTED, NOT_SUPPORTED)


# --------------------------------------------------------------------------- statistics


def _kappa(reference: Sequence[str], predicted: Sequence[str]) -> float | None:
    return cohen_kappa(reference, predicted, CATEGORIES)


def _interval(
    n: int, statistic: Callable[[np.ndarray], float | None]
) -> tuple[float, float] | None:
    """The shared agreement interval (BCa from 20 items; ragtrail.stats) as a (low, high) pair."""
    ci = agreement_interval(n, statistic, n_resamples=N_RESAMPLES, seed=SEED)
    return None if ci.low is None or ci.high is None else (ci.low, ci.high)


@dataclass(frozen=True)
class Agreement:
    """How a judge's verdicts agree with the human labels (on the verdicts that succeeded)."""

    n: int
    failed: int
    accuracy: float
    accuracy_ci: tuple[float, float] | None
    kappa: float | None
    kappa_ci: tuple[float, float] | None
    precision: float | None
    recall: float | None
    balanced_accuracy: float


def agreement(reference: Sequence[str], verdicts: Sequence[Verdict]) -> Agreement:
    pairs = [(r, str(v.value)) for r, v in zip(reference, verdicts, strict=True) if v.ok]
    ref = np.array([r for r, _ in pairs])
    pred = np.array([p for _, p in pairs])
    n = len(pairs)
    correct = ref == pred

    def kappa_of(idx: np.ndarray) -> float | None:
        return _kappa(ref[idx].tolist(), pred[idx].tolist())

    predicted_yes = int(np.sum(pred == SUPPORTED))
    actual_yes = int(np.sum(ref == SUPPORTED))
    true_yes = int(np.sum((pred == SUPPORTED) & (ref == SUPPORTED)))
    return Agreement(
        n=n,
        failed=len(verdicts) - n,
        accuracy=float(correct.mean()) if n else math.nan,
        accuracy_ci=wilson_interval(int(correct.sum()), n),
        kappa=_kappa(ref.tolist(), pred.tolist()),
        kappa_ci=_interval(n, kappa_of),
        precision=true_yes / predicted_yes if predicted_yes else None,
        recall=true_yes / actual_yes if actual_yes else None,
        balanced_accuracy=_balanced_accuracy(ref, pred),
    )


def _balanced_accuracy(ref: np.ndarray, pred: np.ndarray) -> float:
    """Mean of the recalls of the two classes (classes absent from ``ref`` are left out)."""
    recalls = [float(np.mean(pred[ref == c] == c)) for c in CATEGORIES if np.any(ref == c)]
    return float(np.mean(recalls)) if recalls else math.nan


def best_threshold(scores: Sequence[float], labels: Sequence[str]) -> tuple[float, float]:
    """The threshold (rounded to 0.01) with the highest balanced accuracy, and that accuracy.

    Candidates are 0.00 .. 1.00 in steps of 0.01; ties go to the lowest threshold.
    """
    s, ref = np.asarray(scores), np.asarray(labels)
    best = (0.0, -1.0)
    for t in np.round(np.arange(0.0, 1.0001, 0.01), 2):
        pred = np.where(s >= t, SUPPORTED, NOT_SUPPORTED)
        score = _balanced_accuracy(ref, pred)
        if score > best[1]:
            best = (float(t), score)
    return best


# --------------------------------------------------------------------------- data


def split_by_query(
    examples: Sequence[EntailmentExample], seed: int = SEED
) -> tuple[list[EntailmentExample], list[EntailmentExample]]:
    """Two halves of the queries (seeded shuffle); every example goes with its query."""
    queries = sorted({e.source_id.split(":")[0] for e in examples})
    order = np.random.default_rng(seed).permutation(len(queries))
    first = {queries[i] for i in order[: len(queries) // 2]}
    tune = [e for e in examples if e.source_id.split(":")[0] in first]
    test = [e for e in examples if e.source_id.split(":")[0] not in first]
    return tune, test


def _inputs(examples: Sequence[EntailmentExample]) -> list[JudgeInput]:
    return [JudgeInput(premise=e.premise, hypothesis=e.hypothesis) for e in examples]


# --------------------------------------------------------------------------- judges


@dataclass(frozen=True)
class JudgeRun:
    label: str
    model: str
    agreement: Agreement
    seconds: float
    note: str


def run_embedding(
    tune: Sequence[EntailmentExample], test: Sequence[EntailmentExample]
) -> tuple[JudgeRun, dict[str, float]]:
    from ragtrail.embed.embedder import SentenceTransformerEmbedder
    from ragtrail.judges.embedding_entailment import EmbeddingEntailmentJudge

    embedder = SentenceTransformerEmbedder("builtin:all-MiniLM-L6-v2", batch_size=64)
    probe = EmbeddingEntailmentJudge(embedder, threshold=0.5)  # scores ignore the threshold
    tune_scores = probe.scores(_inputs(tune))
    threshold, tune_bacc = best_threshold(
        [s if s is not None else -1.0 for s in tune_scores], [e.label for e in tune]
    )
    judge = EmbeddingEntailmentJudge(embedder, threshold=threshold)
    with timer() as elapsed:
        verdicts = judge.judge(_inputs(test))
    run = JudgeRun(
        label=f"`{judge.spec.ref}` (approximate)",
        model=f"all-MiniLM-L6-v2, threshold {threshold:.2f}",
        agreement=agreement([e.label for e in test], verdicts),
        seconds=elapsed(),
        note="threshold tuned on the other half",
    )
    return run, {"threshold": threshold, "tune_balanced_accuracy": tune_bacc, "tune_n": len(tune)}


def run_llm(sample: Sequence[EntailmentExample]) -> JudgeRun:
    from ragtrail.config import ModelRole, load_settings
    from ragtrail.judges.llm_entailment import LLMEntailmentJudge
    from ragtrail.paths import REPO_ROOT
    from ragtrail.runtime import Runtime

    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(home=Path(tmp), model_cache_dir=REPO_ROOT / ".ragtrail" / "models")
        rt = Runtime(settings)
        try:
            client = rt.llm(ModelRole.JUDGE)  # load the model outside the timing
            judge = LLMEntailmentJudge(client)
            judge.judge([JudgeInput(premise="Warm-up text.", hypothesis="Warm-up.")])  # builds
            # the guided-decoding token tree once, as any long-lived process would
            with timer() as elapsed:
                verdicts = judge.judge(_inputs(sample))
            model = (
                f"{settings.model_for(ModelRole.JUDGE)} ({client.backend.name}, batch "
                f"{settings.generation.llm_batch_size})"
            )
        finally:
            rt.close()
    failures = [v for v in verdicts if not v.ok]
    note = f"seeded sample of the second half; {len(failures)} failed verdicts"
    return JudgeRun(
        label=f"`{judge.spec.ref}`",
        model=model,
        agreement=agreement([e.label for e in sample], verdicts),
        seconds=elapsed(),
        note=note,
    )


def majority_baseline(test: Sequence[EntailmentExample]) -> JudgeRun:
    """Always "supported": the accuracy any judge must beat on this imbalanced reference."""
    verdicts = [Verdict(judge="always-supported", value=SUPPORTED) for _ in test]
    return JudgeRun(
        "always `supported` (baseline)", "-", agreement([e.label for e in test], verdicts), 0.0, ""
    )


# --------------------------------------------------------------------------- report


def _num(value: float | None, digits: int = 3) -> str:
    return "undefined" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _ci(value: float | None, ci: tuple[float, float] | None) -> str:
    if value is None:
        return "undefined"
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{value:.3f}"


def _row(run: JudgeRun) -> str:
    a = run.agreement
    rate = f"{a.n / run.seconds:.1f}" if run.seconds > 0 else "-"
    return (
        f"| {run.label} | {run.model} | {a.n} ({a.failed} failed) | {_ci(a.accuracy, a.accuracy_ci)} "
        f"| {_ci(a.kappa, a.kappa_ci)} | {_num(a.precision)} | {_num(a.recall)} "
        f"| {_num(a.balanced_accuracy)} | {rate} | {run.note} |"
    )


def run(llm_sample: int = LLM_SAMPLE) -> str:
    path = require_shared(*HAGRID)
    pairs = read_hagrid_attribution(path)
    tune, test = split_by_query(pairs.examples)
    embedding, tuning = run_embedding(tune, test)
    rng = np.random.default_rng(SEED)
    sample = [
        test[i]
        for i in sorted(rng.choice(len(test), size=min(llm_sample, len(test)), replace=False))
    ]
    llm = run_llm(sample) if llm_sample > 0 else None
    supported = sum(e.supported for e in pairs.examples)
    test_supported = sum(e.supported for e in test)
    skipped = ", ".join(f"{k} {v}" for k, v in pairs.skipped.items())
    lines = [
        "## Entailment judges — agreement with HAGRID human attribution labels",
        "",
        f"Machine: {machine_line()}. Reference: {len(pairs.examples)} (cited gold quotes, answer "
        f"sentence) pairs from 716 HAGRID queries, {supported} ({100 * supported / len(pairs.examples):.1f}%) "
        f"labelled attributable; of {pairs.sentences} answer sentences, skipped: {skipped}. "
        f"Queries split in halves (seed {SEED}): threshold tuning on {tuning['tune_n']} pairs, "
        f"agreement measured on the other {len(test)} ({test_supported} attributable). "
        f"95% percentile bootstrap intervals ({N_RESAMPLES} resamples); kappa and the bootstrap "
        "from ragtrail.judges.calibration; failed verdicts counted apart.",
        "",
        "| judge | model / backend | n | accuracy [95% CI] | Cohen's kappa [95% CI] "
        "| precision (supported) | recall (supported) | balanced accuracy | pairs/s | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
        _row(majority_baseline(test)),
        _row(embedding),
    ]
    if llm is not None:
        lines.append(_row(llm))
    lines += [
        "| `entailment.nli` | NLI classifier / CrossEncoder / seq2seq (TRUE) | not run | - | - "
        "| - | - | - | - | no NLI model exists offline here; load one with `load_nli_judge` |",
        "",
        f"Embedding threshold: {tuning['threshold']:.2f}, the best balanced accuracy "
        f"({tuning['tune_balanced_accuracy']:.3f}) on the tuning half over 0.00-1.00 in steps of "
        "0.01 (`DEFAULT_EMBEDDING_THRESHOLD`). Throughput: embedding judge over the whole second "
        "half (sentences encoded once per distinct text); LLM judge greedy, guided JSON (verdict "
        "only), uncached (fresh home), model loaded and warmed up beforehand. Other jobs shared "
        f"the 2 cores during the run (1-minute load average at the end: {os.getloadavg()[0]:.1f}).",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm-sample", type=int, default=LLM_SAMPLE)
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()
    section = run(args.llm_sample)
    print(section)
    if args.write:
        write_section("entailment", section)


if __name__ == "__main__":
    main()
