"""MLflow tracking with a real embedded store: idempotent logging, read-back, failure states."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from segbench import tracking


def _bundle(model: str = "sim_a", dice: float = 0.9) -> tracking.ScoreBundle:
    rows = pd.DataFrame(
        {"model": model, "case_id": ["c1", "c2"], "structure": "kidney", "reference_present": True, "dice": [dice, 0.8]}
    )
    buffer = io.StringIO()
    rows.to_csv(buffer, index=False)
    record = {
        "tags": {"segbench.dataset": "toy", "segbench.model": model, "segbench.kind": "simulated", "segbench.dataset_version": "0123abcd"},
        "params": {"model.command": "x", "dataset.source": "data/toy/labels"},
        "metrics": {"kidney.dice.mean": 0.85},
    }
    return tracking.ScoreBundle(buffer.getvalue().encode(), record)


def test_logging_is_idempotent_and_rows_come_back(tracking_store: str) -> None:
    bundle = _bundle()
    first = tracking.log_bundle(bundle)
    assert tracking.log_bundle(bundle) == first
    client = MlflowClient(tracking_store)
    runs = client.search_runs([client.get_experiment_by_name("segbench/toy").experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags["segbench.kind"] == "simulated"
    assert run.data.metrics["kidney.dice.mean"] == 0.85
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["per_case.csv", "per_case.json", "run.json"]
    runs = tracking.read_runs("toy", {"sim_a": bundle.fingerprint})
    assert runs.rows["dice"].tolist() == [0.9, 0.8]
    assert runs.tags["sim_a"]["segbench.model"] == "sim_a"
    assert runs.run_ids == {"sim_a": first}


def test_interrupted_run_is_marked_failed_and_relogged(tracking_store: str) -> None:
    bundle = _bundle()
    client = MlflowClient(tracking_store)
    experiment = client.create_experiment("segbench/toy")
    stale = client.create_run(experiment, tags={tracking.FINGERPRINT_TAG: bundle.fingerprint}).info.run_id  # left RUNNING
    run_id = tracking.log_bundle(bundle)
    assert run_id != stale
    assert client.get_run(stale).info.status == "FAILED"
    assert client.get_run(run_id).info.status == "FINISHED"


def test_missing_and_duplicate_runs_are_errors(tracking_store: str) -> None:
    bundle = _bundle()
    tracking.log_bundle(_bundle("other"))
    with pytest.raises(tracking.TrackingError, match="no FINISHED MLflow run .* model 'sim_a'"):
        tracking.read_runs("toy", {"sim_a": bundle.fingerprint})
    client = MlflowClient(tracking_store)
    experiment = client.get_experiment_by_name("segbench/toy").experiment_id
    for _ in range(2):
        run = client.create_run(experiment, tags={tracking.FINGERPRINT_TAG: bundle.fingerprint})
        client.set_terminated(run.info.run_id, "FINISHED")
    with pytest.raises(tracking.TrackingError, match="2 MLflow runs claim"):
        tracking.read_runs("toy", {"sim_a": bundle.fingerprint})


def test_store_location_ignores_queued_experiment_workspaces(tmp_path, monkeypatch) -> None:
    (tmp_path / ".dvc" / "tmp" / "exps" / "run" / "abc").mkdir(parents=True)
    assert tracking.project_root(tmp_path / ".dvc" / "tmp" / "exps" / "run" / "abc") == tmp_path
    monkeypatch.delenv("SEGBENCH_TRACKING_URI", raising=False)
    assert tracking.tracking_uri(tmp_path) == f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
