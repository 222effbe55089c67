"""The calibration audit's score stage (``segbench calibrate score``, calibration/dvc.yaml): simulated models of known
quality on every case, scored (``segbench.assembly.calibration``)."""

from __future__ import annotations

import dataclasses

from segbench.assembly.calibration import score_population
from segbench.config.params import ConfigError, Params
from segbench.scoring.settings import DEFAULT_PROFILE
from segbench.stages.paths import calibration_scores_dir


def run_calibration_scores(params: Params, workers: int | None = None) -> None:
    """Calibration stage 1: the simulated models of known quality on every reference label map of the dataset (the
    configured case subset does not apply), scored -> ``calibration/scores/<model>.csv`` (``segbench.assembly.calibration``)."""
    if params.calibration is None:
        raise ConfigError("params.yaml has no calibration block (conf/config.yaml's calibration:)")
    config = params.calibration
    score_population(
        dataclasses.replace(config.population, cases=None),
        config.models,
        config.structures,
        calibration_scores_dir(),
        workers=workers or config.workers,
        profile=str(params.scoring.get("profile", DEFAULT_PROFILE)),
    )
