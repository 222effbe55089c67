"""Interact stage (``segbench interact``): a promptable model through the CVPR 2025 protocol, step by step, and the run's
score bundle (docs/interactive.md)."""

from __future__ import annotations

import json

from segbench.config.params import Params
from segbench.interactive import scores as interactive_scores
from segbench.interactive.harness import interact
from segbench.interactive.schema import REFERENCE_LABELS
from segbench.models.slurm import shard_runner_from_environ
from segbench.stages.bundles import headline_metrics, version_tags
from segbench.stages.paths import INTERACTIVE_ROOT, cases_dir, predictions_dir, scores_dir
from segbench.tracking import runs as tracking


def run_interact(params: Params, dataset_name: str, model_name: str, device: str | None = None, allow_unverified_weights: bool = False) -> None:
    """Interact stage: the box step and 5 clicks per case (docs/interactive.md), here or on Slurm (``SEGBENCH_EXECUTOR``),
    then the run's score bundle.

    ``interactive/predictions/<dataset>/<model>/`` gets what reruns reproduce (predictions, prompt and
    score records); ``interactive/scores/<dataset>/<model>/`` the per-case rows with the measured
    running times, the challenge's table (``metrics.csv``) and the MLflow run record with the per-step curves.
    """
    source, model = params.interactive_dataset(dataset_name), params.interactive_model(model_name)
    predictions = predictions_dir(dataset_name, model_name, INTERACTIVE_ROOT)
    bundle = scores_dir(dataset_name, model_name, INTERACTIVE_ROOT)
    table_file = bundle / "metrics.csv"
    table = interact(
        cases_dir(dataset_name),
        model,
        predictions,
        reference=source.reference,
        seconds_per_class=source.seconds_per_class,
        time_limit_clock=source.time_limit_clock,
        scoring=source.scoring,
        device=device,
        allow_unverified_weights=allow_unverified_weights,
        table_file=table_file,
        shard_runner=shard_runner_from_environ(),
    )
    rows = interactive_scores.interactive_rows(table, predictions / "records", model.name, where=str(table_file), scoring=source.scoring)
    metrics = headline_metrics(rows, interactive_scores.METRICS)[model.name]
    metrics.update({f"n_{k}": v for k, v in interactive_scores.summary(rows).items() if k != "n_cases"})
    weights = model.weights or {}
    record = {
        "tags": version_tags(
            dataset_name,
            model.name,
            model.kind,
            weights_version=str(weights.get("md5", "none")),
            model_version=model.version,
            reference=REFERENCE_LABELS[source.reference],
            protocol="cvpr25_box_then_5_clicks",
        ),
        "params": {
            "dataset.source": cases_dir(dataset_name).as_posix(),
            "model.title": model.title,
            "model.command": " ".join(model.command),
            "model.environment": json.dumps(model.environment, sort_keys=True),
            "model.trained_on": ",".join(model.trained_on),
            "model.device": device or model.device,
            "model.licence": model.licence,
            "interactive.seconds_per_class": source.seconds_per_class,
            "interactive.time_limit_clock": source.time_limit_clock,
            "interactive.box_seed": source.seed,
            "interactive.nsd_tolerance_mm": interactive_scores.protocol.NSD_TOLERANCE_MM,
            "interactive.protocol_version": source.scoring.version,
            "interactive.nsd_profile": source.scoring.nsd_profile,
        },
        "metrics": metrics,
        # MLflow step metrics (step 1 = box, 2-6 = clicks): the DSC-versus-interaction curve in the run's charts
        "step_metrics": interactive_scores.step_curves(rows),
    }
    tracking.ScoreBundle.write(bundle, rows, record)
