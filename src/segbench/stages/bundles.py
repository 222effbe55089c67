"""A score bundle (``scores/<dataset>/<model>/``): the per-case rows, the optional tables and the MLflow run record the
score, import and interact stages write and the track stage logs; its tags and headline means
(docs/methodology.md#12-what-an-mlflow-run-carries)."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import segbench
from segbench import tracking
from segbench.datasets.cases import data_version
from segbench.io import write_json_atomic, write_text_atomic
from segbench.rows import check_rows
from segbench.units import base_digits, unit

#: the run tag naming the lesion profile a bundle's lesion-wise tables were scored under (compare checks every model has one)
LESION_PROFILE_TAG = "segbench.lesion_profile"


def shown_mean(values: pd.Series, present: np.ndarray, metric: str) -> float:
    """The mean of ``values`` over the ``present`` cases, rounded as every view prints a mean without its CI
    (``segbench.units.base_digits``): an MLflow run's headline, which MLflow's runs table would show to 16 digits."""
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


def _csv_text(rows: pd.DataFrame) -> str:
    buffer = io.StringIO()
    rows.to_csv(buffer, index=False, lineterminator="\n")
    return buffer.getvalue()


def write_bundle(out: Path, rows: pd.DataFrame, record: dict[str, Any], tables: Mapping[str, pd.DataFrame] = {}) -> None:
    """Write one score bundle atomically: per-case table, run record and the optional tables it has
    (``tracking.OPTIONAL_ARTIFACTS``: rows under the other profiles, lesion-wise tables); any other left is removed.
    Every table is checked first (``segbench.rows``): a value out of its metric's range is never written."""
    fault = "a fault of the stage that scored them, not of the inputs: please report it with this line"
    for name, table in ((tracking.PER_CASE_ARTIFACT, rows), *tables.items()):
        check_rows(table, str(out / name), fault)
    write_text_atomic(out / tracking.PER_CASE_ARTIFACT, _csv_text(rows))
    for name in tracking.OPTIONAL_ARTIFACTS:
        if name in tables:
            write_text_atomic(out / name, _csv_text(tables[name]))
        else:
            (out / name).unlink(missing_ok=True)
    write_json_atomic(out / "run.json", record)
