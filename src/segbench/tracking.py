"""Moving per-case rows in and out of MLflow.

One MLflow run per (dataset, model) pair, in an embedded store: a SQLite database and an artifact
folder under ``<project>/mlruns/`` (no server; a tracking server is a configuration change through
``SEGBENCH_TRACKING_URI``). Runs are identified by a content fingerprint of the score bundle, so
logging is idempotent: logging the same bundle twice finds the first run, and a run left unfinished
by an interrupted process is marked FAILED before the bundle is logged again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

FINGERPRINT_TAG = "segbench.fingerprint"
# MLflow draws a progress bar per artifact download; compare downloads one small table per run.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
PER_CASE_ARTIFACT = "per_case.csv"


class TrackingError(RuntimeError):
    """The tracking store does not hold what the pipeline expects (missing or duplicate runs)."""


@dataclass(frozen=True)
class ScoreBundle:
    """What the score stage writes for one (dataset, model): the per-case table and the run record."""

    per_case_csv: bytes
    record: dict[str, Any]

    @property
    def fingerprint(self) -> str:
        """Content hash of the bundle: equal bundles are the same run."""
        digest = hashlib.sha256(self.per_case_csv)
        digest.update(json.dumps(self.record, sort_keys=True).encode())
        return digest.hexdigest()

    @classmethod
    def read(cls, folder: Path) -> ScoreBundle:
        folder = Path(folder)
        return cls(
            per_case_csv=(folder / PER_CASE_ARTIFACT).read_bytes(),
            record=json.loads((folder / "run.json").read_text(encoding="utf-8")),
        )


def project_root(start: Path | None = None) -> Path:
    """The project's root, also from inside the temporary workspace of a queued ``dvc exp run``.

    DVC runs queued experiments in copies under ``<project>/.dvc/tmp/exps/``; the store must be the
    project's own, so such paths are cut at ``.dvc``.
    """
    path = Path(start or Path.cwd()).resolve()
    parts = path.parts
    if ".dvc" in parts:
        path = Path(*parts[: parts.index(".dvc")])
    for candidate in (path, *path.parents):
        if (candidate / ".dvc").is_dir() or (candidate / "dvc.yaml").is_file():
            return candidate
    return path


def tracking_uri(root: Path | None = None) -> str:
    """``SEGBENCH_TRACKING_URI`` if set, else the embedded SQLite store under ``<project>/mlruns/``."""
    if os.environ.get("SEGBENCH_TRACKING_URI"):
        return os.environ["SEGBENCH_TRACKING_URI"]
    store = (root or project_root()) / "mlruns"
    store.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{store / 'mlflow.db'}"


def _sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///") :]) if uri.startswith("sqlite:///") else None


def _store_lock(uri: str) -> contextlib.AbstractContextManager:
    """A file lock beside an embedded store: two workers creating it at once must not race."""
    from filelock import FileLock

    db = _sqlite_path(uri)
    return FileLock(f"{db}.lock") if db else contextlib.nullcontext()


def _client(uri: str):
    """An MLflow client on ``uri`` whose store exists (schema created and migrated under the lock)."""
    from mlflow.tracking import MlflowClient

    with _store_lock(uri):
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments(max_results=1)
    return client


def experiment_name(dataset: str) -> str:
    return f"segbench/{dataset}"


def _experiment_id(client, uri: str, dataset: str) -> str:
    """The dataset's experiment, created once; its artifacts live beside an embedded database."""
    with _store_lock(uri):
        found = client.get_experiment_by_name(experiment_name(dataset))
        if found is not None:
            return found.experiment_id
        db = _sqlite_path(uri)
        artifacts = (db.parent / "artifacts").as_uri() if db else None
        return client.create_experiment(experiment_name(dataset), artifact_location=artifacts)


def _runs_with_fingerprint(client, experiment_id: str, fingerprint: str) -> list:
    return client.search_runs(
        [experiment_id], filter_string=f"tags.`{FINGERPRINT_TAG}` = '{fingerprint}'", max_results=100
    )


def log_bundle(bundle: ScoreBundle, uri: str | None = None) -> str:
    """Log a score bundle as one MLflow run (once); returns the run id.

    A FINISHED run with the same fingerprint is reused. Runs with that fingerprint in any other state
    were interrupted: they are marked FAILED, and a complete run is logged.
    """
    uri = uri or tracking_uri()
    client = _client(uri)
    record = bundle.record
    experiment_id = _experiment_id(client, uri, record["tags"]["segbench.dataset"])
    for run in _runs_with_fingerprint(client, experiment_id, bundle.fingerprint):
        if run.info.status == "FINISHED":
            return run.info.run_id
        client.set_terminated(run.info.run_id, status="FAILED")
    tags = {**record["tags"], FINGERPRINT_TAG: bundle.fingerprint}
    run = client.create_run(experiment_id, tags=tags, run_name=record["tags"]["segbench.model"])
    run_id = run.info.run_id
    try:
        from mlflow.entities import Metric, Param

        params = [Param(k, str(v)[:6000]) for k, v in sorted(record["params"].items())]
        metrics = [Metric(k, float(v), 0, 0) for k, v in sorted(record["metrics"].items())]
        for start in range(0, max(len(params), len(metrics)), 100):
            client.log_batch(run_id, metrics=metrics[start : start + 100], params=params[start : start + 100])
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / PER_CASE_ARTIFACT).write_bytes(bundle.per_case_csv)
            (Path(tmp) / "run.json").write_text(json.dumps(record, sort_keys=True, indent=1), encoding="utf-8")
            client.log_artifacts(run_id, tmp)
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id, status="FINISHED")
    return run_id


def read_runs(dataset: str, fingerprints: dict[str, str], uri: str | None = None) -> tuple[pd.DataFrame, dict[str, dict[str, str]]]:
    """Per-case rows and tags of the FINISHED runs with the given fingerprints (model -> fingerprint).

    Exactly one run per fingerprint must exist: none means the track stage has not logged it, two
    means the store holds duplicate claims for the same (dataset, model, versions).
    """
    uri = uri or tracking_uri()
    client = _client(uri)
    experiment = client.get_experiment_by_name(experiment_name(dataset))
    if experiment is None:
        raise TrackingError(f"tracking store {uri} has no experiment {experiment_name(dataset)!r}; run `dvc repro` (track stage)")
    tables, tags = [], {}
    for model, fingerprint in sorted(fingerprints.items()):
        runs = [r for r in _runs_with_fingerprint(client, experiment.experiment_id, fingerprint) if r.info.status == "FINISHED"]
        if not runs:
            raise TrackingError(f"no FINISHED MLflow run for dataset {dataset!r}, model {model!r} (fingerprint {fingerprint[:12]}) in {uri}")
        if len(runs) > 1:
            ids = ", ".join(r.info.run_id for r in runs)
            raise TrackingError(f"{len(runs)} MLflow runs claim dataset {dataset!r}, model {model!r} with the same versions: {ids}")
        run = runs[0]
        with tempfile.TemporaryDirectory() as tmp:
            local = client.download_artifacts(run.info.run_id, PER_CASE_ARTIFACT, tmp)
            table = pd.read_csv(local, dtype={"case_id": str})
        if (table["model"] != model).any():
            raise TrackingError(f"MLflow run {run.info.run_id}: per-case table is not model {model!r}")
        tables.append(table)
        tags[model] = {k: v for k, v in run.data.tags.items() if k.startswith("segbench.") and k != FINGERPRINT_TAG}
    return pd.concat(tables, ignore_index=True), tags
