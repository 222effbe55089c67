"""Predict stage (``segbench predict``): a model's label maps for every case of a dataset, also a folder of predictions
made elsewhere (the ``predictions`` stages)."""

from __future__ import annotations

from pathlib import Path

from segbench.config.params import Params
from segbench.models.runner import predict
from segbench.models.slurm import executor_from_environ
from segbench.stages.paths import predictions_dir


def run_predict(
    params: Params,
    dataset_name: str,
    model_name: str,
    device: str | None = None,
    allow_unverified_weights: bool = False,
    root: Path = Path("."),
) -> None:
    """Predict stage: run the model adapter on every case of the dataset, here or on Slurm (``SEGBENCH_EXECUTOR``), into
    ``<root>/predictions/`` (``root``: the pipeline's folder)."""
    model = params.model(model_name)
    predict(
        params.dataset(dataset_name),
        model,
        predictions_dir(dataset_name, model_name, root),
        device=device or model.device,
        allow_unverified_weights=allow_unverified_weights,
        executor=executor_from_environ(),
    )
