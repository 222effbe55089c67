"""Shared fixtures: the project root, the real data bundle, and an isolated MLflow store."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KITS_LABELS = ROOT / "data" / "kits23" / "labels"


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def kits_labels() -> Path:
    if not KITS_LABELS.is_dir():
        pytest.fail(f"{KITS_LABELS} missing: run `dvc pull data.dvc` first (the tests use the real data bundle)")
    return KITS_LABELS


@pytest.fixture
def tracking_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh embedded MLflow store (SQLite + artifacts) in a temp dir, used by segbench.tracking."""
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    (tmp_path / "mlruns").mkdir()
    monkeypatch.setenv("SEGBENCH_TRACKING_URI", uri)
    return uri
