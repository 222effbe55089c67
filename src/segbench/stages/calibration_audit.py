"""The calibration audit's audit stage (``segbench calibrate audit``, calibration/dvc.yaml): the statistics audited on
samples redrawn from the scored population and from real published populations (``segbench.stats.calibration``)."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from segbench.base.io import write_json_atomic, write_text_atomic
from segbench.config.params import ConfigError, Params
from segbench.config.stats_settings import stats_settings
from segbench.published import readers as published
from segbench.stages.paths import calibration_results_dir, calibration_scores_dir
from segbench.stats import calibration, shapes


def run_calibration_audit(params: Params) -> list[Path]:
    """Calibration stage 2: redraw samples of n cases from the scored population, and from the real populations of
    ``calibration.real`` (published scores), and analyse each as compare would; writes ``audit.json`` and one CSV per
    table. Returns the files written."""
    if params.calibration is None:
        raise ConfigError("params.yaml has no calibration block (conf/config.yaml's calibration:)")
    config = params.calibration
    frames = []
    for model in config.models:
        path = calibration_scores_dir() / f"{model}.csv"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; run `segbench calibrate score` (the score stage of calibration/dvc.yaml)")
        frames.append(pd.read_csv(path, dtype={"case_id": str, "model": str, "structure": str}))
    real = [
        (calibration.ranked_populations(published.read_set(spec.source), name, spec.source.metrics, spec.ranks), spec.draws, spec.wilcoxon_draws)
        for name, spec in config.real.items()
    ]
    audit = calibration.audit(
        pd.concat(frames, ignore_index=True),
        models=tuple(config.models),
        equal=config.equal,
        structures=config.structures,
        metrics=config.metrics,
        n_cases=config.n_cases,
        draws=config.draws,
        wilcoxon_draws=config.wilcoxon_draws,
        n_resamples=config.n_resamples,
        seed=config.seed,
        settings=stats_settings(params),
        workers=config.workers,
        real=real,
        shapes=None
        if config.shapes is None
        else shapes.ShapePlan(config.shapes.n_cases, config.shapes.draws, config.shapes.real_draws, config.shapes.power_draws),
    )
    out = calibration_results_dir()
    written = [out / "audit.json"]
    write_json_atomic(written[0], audit)
    for name, table in calibration.tables(audit).items():
        buffer = io.StringIO()
        table.to_csv(buffer, index=False, lineterminator="\n", float_format="%.6g")
        written.append(out / f"{name}.csv")
        write_text_atomic(written[-1], buffer.getvalue())
    return written
