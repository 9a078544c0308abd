"""Model bundles: written, read back, and every problem of a broken one reported at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragtrail.models.bundle import BundleError, is_bundle, read_bundle, write_bundle


def _adapter(path: Path, marker: str) -> Path:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"r": 4, "marker": marker}))
    (path / "adapter_model.safetensors").write_bytes(marker.encode())
    return path


def test_round_trip_keeps_adapter_order_files_and_lineage(tmp_path: Path) -> None:
    rl = _adapter(tmp_path / "src" / "rl", "rl")
    sft = _adapter(tmp_path / "src" / "sft", "sft")
    bundle = write_bundle(
        tmp_path / "b",
        kind="citation_answerer",
        base_model="builtin:smollm2-135m-instruct",
        adapters={"sft": sft, "rl": rl},
        lineage={"seed": 7, "split": {"train": 3, "eval": 2}},
    )
    again = read_bundle(tmp_path / "b")
    assert again == bundle
    assert again.adapters == ("sft", "rl")
    assert [p.name for p in again.adapter_dirs()] == ["sft", "rl"]
    assert (again.adapter_dir("rl") / "adapter_model.safetensors").read_bytes() == b"rl"
    assert again.lineage == {"seed": 7, "split": {"train": 3, "eval": 2}}
    assert is_bundle(tmp_path / "b") and not is_bundle(tmp_path / "src")


def test_write_refuses_bad_adapters_and_non_finite_lineage(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError) as err:
        write_bundle(tmp_path / "b", kind="", base_model="m", adapters={"a/b": tmp_path / "empty"})
    assert "kind is empty" in str(err.value)
    assert "not a plain directory name" in str(err.value)
    assert "has no adapter_config.json" in str(err.value)
    sft = _adapter(tmp_path / "sft", "sft")
    with pytest.raises(ValueError, match=r"(?i)nan|finite"):
        write_bundle(
            tmp_path / "c",
            kind="k",
            base_model="m",
            adapters={"sft": sft},
            lineage={"loss": float("nan")},
        )
    assert not (tmp_path / "c").exists()


def test_read_reports_every_problem(tmp_path: Path) -> None:
    root = tmp_path / "broken"
    root.mkdir()
    (root / "bundle.json").write_text(
        json.dumps({"format": "other/0", "kind": "", "adapters": ["sft"], "lineage": []})
    )
    with pytest.raises(BundleError) as err:
        read_bundle(root)
    message = str(err.value)
    for part in (
        "format is 'other/0'",
        "kind must be",
        "base_model must be",
        "adapter 'sft'",
        "lineage must be an object",
    ):
        assert part in message
    with pytest.raises(BundleError, match="not a model bundle"):
        read_bundle(tmp_path)
