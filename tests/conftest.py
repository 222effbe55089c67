"""Shared fixtures: the project root, the real data bundle, an isolated MLflow store, the project factory, and the
session's small experiment reproduced (shared, read only) or copied (one per module).

The tests run on the real data bundle; a missing bundle is a failure (run `dvc pull data.dvc`), not a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import segbench  # noqa: F401  (first: it pins OpenBLAS's kernels before numpy loads, as the command line does)

# isort: split
import pandas as pd
import pytest

from repo_paths import KITS_LABELS, ROOT, TOUCHSTONE

if TYPE_CHECKING:
    from projects import Projects

# The commands the tests run print for a pipe: no terminal width from the session that runs the tests (pytest-xdist's
# workers inherit COLUMNS=80 and LINES=24, and `segbench show` wraps at COLUMNS when piped).
for _terminal_size in ("COLUMNS", "LINES"):
    os.environ.pop(_terminal_size, None)


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"{path} missing: run `dvc pull data.dvc` first (the tests use the real data bundle)")
    return path


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def kits_labels() -> Path:
    return _require(KITS_LABELS)


@pytest.fixture(scope="session")
def touchstone_rows() -> pd.DataFrame:
    from segbench.published.readers import read_touchstone

    return read_touchstone(_require(TOUCHSTONE))


@pytest.fixture
def tracking_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh embedded MLflow store (SQLite + artifacts) in a temp dir, used by segbench.tracking.runs."""
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    (tmp_path / "mlruns").mkdir()
    monkeypatch.setenv("SEGBENCH_TRACKING_URI", uri)
    return uri


@pytest.fixture(scope="session")
def projects(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Projects]:
    """The one project factory (tests/support/projects.py): new DVC projects, and each experiment reproduced once per session,
    shared for reading and copied for changing; the session fails if a test wrote to a shared one."""
    from projects import Projects  # on first use: it loads segbench.config.params and nibabel (a second), which many modules never need

    factory = Projects(root, tmp_path_factory)
    yield factory
    factory.check_unchanged()


@pytest.fixture
def small_run(projects: Projects) -> Path:
    """The session's small experiment (``projects.SMALL``: 4 real KiTS23 cases, 2 SIMULATED models, a small published
    set, B = 500) in a new DVC project from this repo's pipeline files, reproduced once per session and shared by the
    tests that read it: read only (the session fails if a test wrote to it)."""
    from projects import SMALL

    return projects.reproduced(SMALL)


@pytest.fixture(scope="module")
def committed_copy(projects: Projects) -> Path:
    """A copy of the small experiment reproduced, everything committed (`git status` clean): the baseline a module's
    tests change, in order (one copy per module)."""
    from projects import SMALL
    from tests_support import commit_all

    proj = projects.copy(SMALL)
    commit_all(proj, "the small experiment reproduced")
    return proj
