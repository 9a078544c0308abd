"""Run GX suites on in-memory DataFrames and build Data Docs into a run's report directory.

One :class:`QualityRunner` per run: creating a GX Data Context costs time, so the runner keeps a
single *ephemeral* context (in-memory stores, nothing written but the Data Docs site) and reuses
it for every validation. Each :meth:`QualityRunner.validate` call registers a pandas data asset
with a whole-dataframe batch definition, a copy of the suite, a ValidationDefinition and a
Checkpoint under one unique name, runs the Checkpoint on the frame and summarises the outcome
with the fail/warn policy carried in each expectation's ``meta`` (see
:mod:`ragtrail.quality.suites`). :meth:`QualityRunner.build_docs` renders Data Docs once, at the end
of the run, into ``report_dir / "data_docs"``; this is cheaper than an UpdateDataDocsAction on
every Checkpoint, which would rebuild the whole site after each validation.

Everything runs offline. The generated Data Docs HTML references public CDNs (Bootstrap,
jQuery, Font Awesome) for styling and interactivity; opened without internet the pages stay
readable but unstyled.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import great_expectations as gx
import pandas as pd
from great_expectations.core.expectation_validation_result import (
    ExpectationSuiteValidationResult,
    ExpectationValidationResult,
)
from great_expectations.data_context.types.base import (
    DataContextConfig,
    InMemoryStoreBackendDefaults,
    ProgressBarsConfig,
)

from ragtrail.jsonsafe import JsonObject
from ragtrail.paths import safe_name
from ragtrail.quality.suites import FAIL, WARN, severity_of

logger = logging.getLogger(__name__)

DATA_DOCS_DIR: Final = "data_docs"
DATASOURCE_NAME: Final = "ragtrail_frames"
_MAX_SAMPLE: Final = 5
_MAX_REPR: Final = 80


class QualityGateError(Exception):
    """A fail-severity expectation failed; ``results`` holds the unsuccessful validations."""

    def __init__(self, message: str, results: list[QualityResult]) -> None:
        super().__init__(message)
        self.results = results


@dataclass(frozen=True)
class QualityResult:
    """Outcome of one suite on one DataFrame, reduced to the ragtrail gate policy.

    ``success`` is False only when a *fail*-severity expectation failed (or could not be
    evaluated); failed *warn* expectations are listed in ``warnings`` and do not affect it.
    ``statistics`` has ``evaluated``, ``successful`` and ``unsuccessful`` expectation counts.
    """

    name: str
    success: bool
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    statistics: dict[str, int] = field(default_factory=dict)
    suite_name: str = ""
    validation_name: str = ""

    def as_dict(self) -> JsonObject:
        """JSON-safe summary (plain str/bool/int/list/dict only)."""
        return {
            "name": self.name,
            "success": bool(self.success),
            "failures": [str(f) for f in self.failures],
            "warnings": [str(w) for w in self.warnings],
            "statistics": {k: int(v) for k, v in self.statistics.items()},
            "suite_name": self.suite_name,
            "validation_name": self.validation_name,
        }


class QualityRunner:
    """Validates DataFrames with GX suites and builds one Data Docs site for the run.

    Data Docs land in ``report_dir / "data_docs"`` (``index.html`` there) when
    :meth:`build_docs` is called. The same ``name`` may be validated several times; later
    validations get a ``__2``, ``__3``... suffix inside GX.
    """

    def __init__(self, report_dir: Path, site_name: str = "ragtrail") -> None:
        self.report_dir = Path(report_dir)
        self.site_name = site_name
        self.docs_dir = self.report_dir / DATA_DOCS_DIR
        self._used_names: set[str] = set()
        self._context = gx.get_context(project_config=self._config(), mode="ephemeral")
        self._datasource = self._context.data_sources.add_pandas(name=DATASOURCE_NAME)

    def _config(self) -> DataContextConfig:
        site = {
            "class_name": "SiteBuilder",
            "store_backend": {
                "class_name": "TupleFilesystemStoreBackend",
                "base_directory": str(self.docs_dir.resolve()),
            },
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }
        return DataContextConfig(
            store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
            data_docs_sites={self.site_name: site},
            analytics_enabled=False,
            progress_bars=ProgressBarsConfig(globally=False),
        )

    def _unique_name(self, name: str) -> str:
        """A GX-safe name not used before in this runner: ``name``, ``name__2``, ``name__3``..."""
        base = safe_name(name) or "validation"
        candidate, count = base, 1
        while candidate in self._used_names:
            count += 1
            candidate = f"{base}__{count}"
        self._used_names.add(candidate)
        return candidate

    def validate(self, name: str, df: pd.DataFrame, suite: gx.ExpectationSuite) -> QualityResult:
        """Run ``suite`` on the whole of ``df`` through a GX Checkpoint and apply the gate policy.

        ``suite`` is copied, so one suite object can be used for many validations and is never
        bound to this runner's context.
        """
        gx_name = self._unique_name(name)
        gx_suite = self._context.suites.add(_copy_suite(suite, gx_name))
        asset = self._datasource.add_dataframe_asset(name=gx_name)
        batch_definition = asset.add_batch_definition_whole_dataframe(gx_name)
        validation = self._context.validation_definitions.add(
            gx.ValidationDefinition(name=gx_name, data=batch_definition, suite=gx_suite)
        )
        checkpoint = self._context.checkpoints.add(
            gx.Checkpoint(
                name=gx_name,
                validation_definitions=[validation],
                actions=[],
                result_format={"result_format": "SUMMARY", "partial_unexpected_count": _MAX_SAMPLE},
            )
        )
        outcome = checkpoint.run(batch_parameters={"dataframe": df})
        (suite_result,) = outcome.run_results.values()
        result = summarise(name, suite_result, suite_name=suite.name, validation_name=gx_name)
        logger.info(
            "GX %s: success=%s failures=%d warnings=%d",
            gx_name,
            result.success,
            len(result.failures),
            len(result.warnings),
        )
        return result

    def build_docs(self) -> Path:
        """Build the Data Docs site for every validation so far; return its ``index.html``."""
        self._context.build_data_docs(site_names=[self.site_name])
        index = self.docs_dir / "index.html"
        if not index.is_file():
            raise RuntimeError(f"GX did not build Data Docs at {index}")
        return index


def _copy_suite(suite: gx.ExpectationSuite, name: str) -> gx.ExpectationSuite:
    meta = dict(suite.meta or {})
    meta.setdefault("ragtrail_suite", suite.name)
    return gx.ExpectationSuite(
        name=name,
        expectations=[copy.copy(e) for e in suite.expectations],
        meta=meta,
    )


# ------------------------------------------------------------------------------------------------
# Result summaries
# ------------------------------------------------------------------------------------------------


def summarise(
    name: str,
    suite_result: ExpectationSuiteValidationResult,
    *,
    suite_name: str = "",
    validation_name: str = "",
) -> QualityResult:
    """Split a GX suite result into fail-severity failures and warn-severity warnings."""
    failures: list[str] = []
    warnings: list[str] = []
    for er in suite_result.results:
        if er.success and not _raised(er):
            continue
        severity = severity_of(er.expectation_config.meta)
        (warnings if severity == WARN else failures).append(describe(er, severity))
    stats = suite_result.statistics
    evaluated = int(stats.get("evaluated_expectations", 0))
    successful = int(stats.get("successful_expectations", 0))
    return QualityResult(
        name=name,
        success=not failures,
        failures=failures,
        warnings=warnings,
        statistics={
            "evaluated": evaluated,
            "successful": successful,
            "unsuccessful": evaluated - successful,
        },
        suite_name=suite_name,
        validation_name=validation_name,
    )


def _raised(er: ExpectationValidationResult) -> bool:
    return _exception_message(er) is not None


def _exception_message(er: ExpectationValidationResult) -> str | None:
    """First exception message GX recorded for this expectation, if any."""
    info = er.exception_info or {}
    candidates = [info] if "raised_exception" in info else list(info.values())
    for item in candidates:
        if isinstance(item, Mapping) and item.get("raised_exception"):
            message = str(item.get("exception_message") or "unknown error")
            return message.strip().splitlines()[-1] if message.strip() else "unknown error"
    return None


def _short(value: Any) -> str:
    text = repr(_plain(value))
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def _plain(value: Any) -> Any:
    """numpy/pandas scalars and containers to plain Python for readable reprs."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except (ValueError, TypeError):
            return str(value)
    return value


def _number(value: Any) -> Any:
    """GX stores numeric bounds as floats; show whole numbers without ``.0``."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _expected(kwargs: Mapping[str, Any]) -> str:
    parts = []
    for key in ("min_value", "max_value", "value", "value_set", "regex", "column_set"):
        if kwargs.get(key) is not None:
            parts.append(f"{key}={_short(_number(kwargs[key]))}")
    return ", ".join(parts)


def _condition_text(condition: Any) -> str:
    """``kind == 'text'`` for a GX comparison condition; its string form otherwise."""
    if isinstance(condition, Mapping) and {"column", "operator", "parameter"} <= set(condition):
        column = condition["column"]
        column_name = column.get("name", column) if isinstance(column, Mapping) else column
        return f"{column_name} {condition['operator']} {_short(condition['parameter'])}"
    return str(condition)


def describe(er: ExpectationValidationResult, severity: str = FAIL) -> str:
    """One readable line for a failed expectation: what was expected and what was observed."""
    config = er.expectation_config
    kwargs = config.kwargs
    target = kwargs.get("column") or kwargs.get("column_list") or "table"
    head = f"[{severity}] {config.type}({target})"
    if kwargs.get("row_condition"):
        head += f" where {_condition_text(kwargs['row_condition'])}"
    expected = _expected(kwargs)
    if expected:
        head += f" expecting {expected}"
    error = _exception_message(er)
    if error is not None:
        return f"{head}: could not be evaluated: {error}"
    # Samples of a not-null check are just NaNs: leave them out.
    show_sample = config.type != "expect_column_values_to_not_be_null"
    return f"{head}: {_observed(er.result or {}, show_sample)}"


def _observed(result: Mapping[str, Any], show_sample: bool = True) -> str:
    """Counts and a sample of unexpected values, or the observed aggregate and what is missing."""
    if result.get("unexpected_count") is not None:
        count = int(result["unexpected_count"])
        total = result.get("element_count")
        pct = result.get("unexpected_percent")
        text = f"{count} unexpected"
        if total is not None:
            text += f" of {int(total)} rows"
        if isinstance(pct, int | float) and not math.isnan(pct):
            text += f" ({pct:.1f}%)"
        sample = result.get("partial_unexpected_list") or []
        if sample and show_sample:
            text += f", e.g. {_short(list(sample)[:_MAX_SAMPLE])}"
        return text
    observed = result.get("observed_value")
    parts = [] if observed is None else [f"observed {_short(observed)}"]
    if result.get("partial_missing_list"):
        parts.append(f"missing {_short(result['partial_missing_list'])}")
    details = result.get("details") or {}
    if isinstance(details, Mapping) and details.get("mismatched"):
        parts.append(f"mismatched {_short(details['mismatched'])}")
    return ", ".join(parts) or "failed"


# ------------------------------------------------------------------------------------------------
# Gate
# ------------------------------------------------------------------------------------------------


def enforce(results: Iterable[QualityResult]) -> list[str]:
    """Raise :class:`QualityGateError` if any fail-severity expectation failed.

    Warnings never raise; they are logged and returned (prefixed by the validation name) so the
    caller can put them in the report.
    """
    results = list(results)
    warnings = [f"{r.name}: {w}" for r in results for w in r.warnings]
    for warning in warnings:
        logger.warning("data quality warning: %s", warning)
    failed = [r for r in results if not r.success]
    if failed:
        lines = [f"data quality gate failed for {len(failed)} of {len(results)} validation(s):"]
        for r in failed:
            lines.append(f"- {r.name}:")
            lines.extend(f"    {f}" for f in r.failures)
        raise QualityGateError("\n".join(lines), failed)
    return warnings
