"""Storing a calibration: a judge's measured figures become a ``judge_calibrations`` row."""

from __future__ import annotations

from ragtrail.judges.calibration import CategoricalCalibration, ContrastCalibration
from ragtrail.judges.contract import JudgeSpec
from ragtrail.storage.judge_store import CalibrationRecord, JudgeStore

Calibration = CategoricalCalibration | ContrastCalibration


def store_calibration(
    store: JudgeStore,
    spec: JudgeSpec,
    calibration: Calibration,
    *,
    reference: str,
    details_uri: str | None = None,
) -> CalibrationRecord:
    """Append ``calibration`` of ``spec`` measured on ``reference``: the headline figure (kappa
    or contrast accuracy, with its interval and n) as columns, the full figures as JSON."""
    if calibration.judge != spec.ref:
        raise ValueError(f"calibration of {calibration.judge} stored for {spec.ref}")
    headline = calibration.headline
    return store.record(
        spec=spec.as_dict(),
        kind=calibration.kind,
        reference=reference,
        n=headline.n,
        metric=calibration.metric,
        value=headline.value,
        ci_low=headline.ci_low,
        ci_high=headline.ci_high,
        undefined=dict(headline.undefined),
        metrics=calibration.as_dict(),
        details_uri=details_uri,
    )


__all__ = ["Calibration", "store_calibration"]
