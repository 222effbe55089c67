"""``segbench prune-runs``: the MLflow runs no checked-out output names, deleted; the way back after an experiment.

After `dvc exp run` and a return to the committed baseline (git restore, dvc checkout), the store still holds the runs
the experiment logged: its models' runs and its leaderboard runs. A run is kept when the workspace names it: a model
run by the fingerprint of a track marker (``tracking/<dataset>/<model>.json``) that ``dvc.lock`` records, a
leaderboard run when the results file ``dvc.lock`` records, with the model runs the run names, gives its fingerprint.
Every other active run of those datasets' experiments is deleted (MLflow's lifecycle: `mlflow runs restore` brings it
back), or with ``purge`` removed for good, its artifacts too (`mlflow gc`); compare logs a missing run again from its
score bundle.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from segbench.base.io import recorded, recorded_files
from segbench.tracking import runs as tracking

#: the tag prefix by which a leaderboard run names the model runs it was computed from
RUN_TAG = "segbench.run."


@dataclass(frozen=True)
class StaleRun:
    """An active MLflow run no checked-out output names."""

    dataset: str
    run_id: str
    name: str
    kind: str  # "leaderboard" or "model"


def _kept_fingerprints(root: Path, dataset: str) -> set[str]:
    """The fingerprints the track markers of ``dataset`` under ``root`` name, of the markers ``dvc.lock`` records."""
    markers = sorted((root / "tracking" / dataset).glob("*.json"))
    return {json.loads(path.read_text(encoding="utf-8"))["fingerprint"] for path in markers if recorded(path) is not None}


def _names_results(run, dataset: str, results: Path) -> bool:
    """Whether the leaderboard ``run`` was logged from ``results`` as it is now (its fingerprint, recomputed)."""
    tags = run.data.tags
    model_runs = {key.removeprefix(RUN_TAG): value for key, value in tags.items() if key.startswith(RUN_TAG)}
    return tags.get(tracking.FINGERPRINT_TAG) == tracking.leaderboard_fingerprint(dataset, results.name, results.read_bytes(), model_runs)


def stale_runs(results_dir: Path, uri: str | None = None) -> list[StaleRun]:
    """The active runs of every dataset whose results file in ``results_dir`` ``dvc.lock`` records, that no checked-out
    output names (module docstring); the project is ``results_dir``'s parent."""
    root = results_dir.resolve().parent
    uri = uri or tracking.tracking_uri(root)
    client = tracking.store_client(uri)
    stale = []
    for results in (path for path in recorded_files(results_dir) if path.suffix == ".json" and path.is_file()):
        dataset = results.stem
        experiment = client.get_experiment_by_name(tracking.experiment_name(dataset))
        if experiment is None:
            continue
        kept = _kept_fingerprints(root, dataset)
        for run in client.search_runs([experiment.experiment_id], max_results=50000):
            leaderboard = run.data.tags.get(tracking.KIND_TAG) == tracking.LEADERBOARD_KIND
            named = _names_results(run, dataset, results) if leaderboard else run.data.tags.get(tracking.FINGERPRINT_TAG) in kept
            if not named:
                stale.append(StaleRun(dataset, run.info.run_id, run.info.run_name, "leaderboard" if leaderboard else "model"))
    return stale


def prune_runs(results_dir: Path, dry_run: bool = False, purge: bool = False, uri: str | None = None) -> list[StaleRun]:
    """Delete the ``stale_runs`` (only list them with ``dry_run``), with ``purge`` for good (`mlflow gc` of exactly
    those runs); returns them."""
    uri = uri or tracking.tracking_uri(results_dir.resolve().parent)
    stale = stale_runs(results_dir, uri)
    if dry_run or not stale:
        return stale
    client = tracking.store_client(uri)
    for run in stale:
        client.delete_run(run.run_id)
    if purge:
        ids = ",".join(run.run_id for run in stale)
        done = subprocess.run(
            [sys.executable, "-m", "mlflow", "gc", "--backend-store-uri", uri, "--tracking-uri", uri, "--run-ids", ids],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise tracking.TrackingError(
                f"mlflow gc of the {len(stale)} deleted runs failed ({last}); they stay deleted, "
                f"not purged: `mlflow gc --backend-store-uri {uri} --tracking-uri {uri} --run-ids {ids}`"
            )
    return stale
