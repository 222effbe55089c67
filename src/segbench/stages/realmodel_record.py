"""The real-model pipeline's record stage (realmodel/dvc.yaml; docs/guide.md#a-real-model-run-here): the predict stage's
measurements (``runs/<model>.json``: package, weights digests, device, wall time, peak memory) as ``run.*`` tags on the
model's MLflow run. Compare copies only ``segbench.*`` tags into the results, so these measurements leave the results
byte-identical from run to run.
"""

from __future__ import annotations

from pathlib import Path

from segbench.base.io import read_json
from segbench.stages.paths import runs_file, tracking_marker
from segbench.tracking import runs as tracking

#: the record's tags on the model's MLflow run (not ``segbench.*``: compare copies those into the results)
RECORD_TAG_PREFIX = "run."


def run_record(dataset_name: str, model_name: str, root: Path) -> str:
    """Record stage: the predict stage's measurements (``runs/<model>.json``) as ``run.*`` tags on the model's MLflow run
    (the one the track stage logged, found by its fingerprint); returns the run's id."""
    from mlflow.tracking import MlflowClient

    record = read_json(runs_file(model_name, root), "the predict stage's measurements")
    marker = read_json(tracking_marker(dataset_name, model_name, root), "the track stage's marker")
    runs = tracking.read_runs(dataset_name, {model_name: marker["fingerprint"]})
    run_id = runs.run_ids[model_name]
    client = MlflowClient(tracking_uri=tracking.tracking_uri())
    for key, value in record.items():
        if key not in ("dataset", "model"):
            client.set_tag(run_id, f"{RECORD_TAG_PREFIX}{key}", str(value))
    return run_id
