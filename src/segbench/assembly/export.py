"""Per-case rows of a results file -> the long CSVs the published-set importer reads (docs/published.md#export-segbenchs-rows-to-challenger-and-back).

A user can take segbench's rows to challengeR (its case/algorithm/task/value table, one metric per file) or to any
tool reading one row per (case, model, structure) and bring them back through the ``challenger_csv`` or
``generic_csv`` formats: the values are written at full precision, so the reimported set gives the same statistics.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from segbench.base.io import write_text_atomic
from segbench.published.schema import CHALLENGER_COLUMNS

EXPORT_FORMATS = ("challenger_csv", "generic_csv")


def per_case_rows(results: Mapping[str, Any]) -> pd.DataFrame:
    """One row per (case, model, structure) with one column per metric, from every cell's ``per_case`` (shared cases)
    and ``per_case_unshared`` values; a value a model has for one metric only leaves the other cell empty."""
    records = []
    for structure, block in results["analysis"]["structures"].items():
        for metric, cell in block["metrics"].items():
            for model, values in cell["per_case"].items():
                records += [(case, model, structure, metric, v) for case, v in zip(block["case_ids"], values)]
            for model, cases in cell["per_case_unshared"].items():
                records += [(case, model, structure, metric, v) for case, v in cases.items()]
    if not records:
        raise ValueError("the results hold no per-case values to export")
    long = pd.DataFrame.from_records(records, columns=["case", "model", "structure", "metric", "value"])
    wide = long.pivot(index=["case", "model", "structure"], columns="metric", values="value")
    return wide.reset_index().sort_values(["structure", "model", "case"], ignore_index=True).rename_axis(columns=None)


def export_results(results: Mapping[str, Any], fmt: str, target: Path, metric: str | None = None) -> Path:
    """Write ``results``' per-case rows to ``target`` as challengeR's long CSV (one ``metric``; it may be left out when
    the results have one) or as the generic CSV (case, model, structure, one column per metric)."""
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"export format must be one of {EXPORT_FORMATS}, got {fmt!r}")
    rows = per_case_rows(results)
    metrics = [c for c in rows.columns if c not in ("case", "model", "structure")]
    if fmt == "challenger_csv":
        if metric is None and len(metrics) > 1:
            raise ValueError(f"a challengeR table holds one metric: give --metric, one of {metrics}")
        metric = metric or metrics[0]
        if metric not in metrics:
            raise ValueError(f"metric {metric!r} is not in the results; they have {metrics}")
        rows = rows[rows[metric].notna()][["case", "model", "structure", metric]]
        rows.columns = [CHALLENGER_COLUMNS[role] for role in ("case", "model", "structure", "value")]
    elif metric is not None:
        raise ValueError("--metric is for challenger_csv; the generic CSV holds every metric")
    buffer = io.StringIO()
    rows.to_csv(buffer, index=False, lineterminator="\n")  # floats as repr: they read back to the same value
    write_text_atomic(Path(target), buffer.getvalue())
    return Path(target)
