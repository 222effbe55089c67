"""Where each stage reads and writes, the one place the pipeline's folders are named (``dvc.yaml``, ``interactive/dvc.yaml``
and ``calibration/dvc.yaml`` declare the same paths)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from segbench.config.params import Params

#: where the interactive benchmark (interactive/dvc.yaml) keeps its outputs, laid out as the main pipeline's
INTERACTIVE_ROOT = Path("interactive")
#: where the calibration audit (calibration/dvc.yaml) keeps its outputs
CALIBRATION_ROOT = Path("calibration")


def predictions_dir(dataset: str, model: str, root: Path = Path(".")) -> Path:
    return root / "predictions" / dataset / model


def scores_dir(dataset: str, model: str, root: Path = Path(".")) -> Path:
    return root / "scores" / dataset / model


def tracking_marker(dataset: str, model: str, root: Path = Path(".")) -> Path:
    return root / "tracking" / dataset / f"{model}.json"


def results_file(dataset: str, root: Path = Path(".")) -> Path:
    return root / "results" / f"{dataset}.json"


def metrics_dir(dataset: str, root: Path = Path(".")) -> Path:
    """The leaderboard heads DVC shows (``dvc metrics show``, ``dvc exp show``): ``<structure>/<metric>.json``."""
    return root / "metrics" / dataset


def plot_file(dataset: str, root: Path = Path(".")) -> Path:
    """Each model's mean with its CI, per structure and metric, for ``dvc plots``."""
    return root / "plots" / f"{dataset}.csv"


def cases_dir(dataset: str) -> Path:
    """An interactive dataset's challenge npz cases (``segbench cases``)."""
    return INTERACTIVE_ROOT / "cases" / dataset


def output_root(params: Params, name: str) -> Path:
    """Where a dataset's outputs live: under ``interactive/`` for an interactive dataset, else the project."""
    return INTERACTIVE_ROOT if name in params.interactive_datasets else Path(".")


def calibration_scores_dir() -> Path:
    """The calibration audit's per-case rows, one ``<model>.csv`` per simulated model (cached by DVC, not in git)."""
    return CALIBRATION_ROOT / "scores"


def calibration_results_dir() -> Path:
    """The audit's small results (audit.json and its tables): kept in git, so the site has them without a rerun."""
    return CALIBRATION_ROOT / "results"


def runs_file(model: str, root: Path) -> Path:
    """The real-model predict stage's measurements of ``model`` (a measurement: not compared byte for byte)."""
    return root / "runs" / f"{model}.json"
