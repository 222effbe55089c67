"""What a score bundle's run record carries (docs/methodology.md#12-what-an-mlflow-run-carries): its tags and headline
means, as the score, import and interact stages write them (``tracking.ScoreBundle.write``) and the track stage logs."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

import segbench
from segbench.datasets.cases import data_version
from segbench.formats import base_digits, unit

#: the run tag naming the lesion profile a bundle's lesion-wise tables were scored under (compare checks every model has one)
LESION_PROFILE_TAG = "segbench.lesion_profile"


def shown_mean(values: pd.Series, present: np.ndarray, metric: str) -> float:
    """The mean of ``values`` over the ``present`` cases, rounded as every view prints a mean without its CI
    (``segbench.formats.base_digits``): an MLflow run's headline, which MLflow's runs table would show to 16 digits."""
    return round(float(values.to_numpy(dtype=np.float64)[present].mean()), base_digits(unit(metric) != "mm"))


def headline_metrics(rows: pd.DataFrame, metrics: Iterable[str]) -> dict[str, dict[str, float]]:
    """Per model, its MLflow run's headline metrics: ``<structure>.<metric>.mean`` over the cases whose reference has
    the structure, rounded as printed (``shown_mean``), ``<structure>.n_cases`` (those cases) and
    ``<structure>.n_absent`` (the others).

    Plain means, no statistics settings: a change of ``stats`` must not rerun scoring. CIs, ranks and verdicts
    are leaderboard statistics, logged by compare with the leaderboard run (docs/methodology.md#12-what-an-mlflow-run-carries).
    """
    summary: dict[str, dict[str, float]] = {}
    for (model, structure), group in rows.groupby(["model", "structure"], sort=True):
        present = group["reference_present"].to_numpy(dtype=bool)
        values = summary.setdefault(str(model), {})
        values.update({f"{structure}.{m}.mean": shown_mean(group[m], present, m) for m in metrics if present.any()})
        values[f"{structure}.n_cases"] = int(group["case_id"][present].nunique())
        values[f"{structure}.n_absent"] = int(group["case_id"][~present].nunique())
    return summary


def version_tags(dataset: str, model: str, kind: str, data: str | None = None, **extra: str) -> dict[str, str]:
    """The tags every MLflow run carries (docs/methodology.md#12-what-an-mlflow-run-carries): names, kind and the
    versions of everything used; ``data``: the version of the scored files when they are not the data bundle (a
    published set's own files).

    Only what the outputs depend on: the git commit is not here (the score bundle is a DVC output that
    must not change with every commit); tracking records it on the MLflow run when logging.
    """
    import segauge

    return {
        "segbench.dataset": dataset,
        "segbench.model": model,
        "segbench.kind": kind,
        "segbench.dataset_version": data or data_version(),
        "segbench.segauge_version": segauge.__version__,
        "segbench.segbench_version": segbench.__version__,
        **{f"segbench.{k}": v for k, v in extra.items()},
    }
