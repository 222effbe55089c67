"""Per-case rows of an interactive run, in the statistics engine's layout (docs/interactive.md, "Statistics").

The harness's table (``metrics.csv``, the challenge's columns, one row per case) becomes one row per
case with structure ``mean_over_classes``: the challenge's own numbers, the mean over the case's
classes. The per-step records add one row per case and class (structure = the class's name), with
that class's DSC and NSD per step, its AUCs and final values, so each organ gets its own leaderboard.
Every row keeps the challenge's column names as metric names; ``TotalRunningTime`` (lower is better)
is the case's total in both kinds of row. A case over the time limit scores 0 in both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from segbench.interactive import protocol

STEPS = 1 + protocol.CLICK_STEPS
CASE_STRUCTURE = "mean_over_classes"
SCORE_COLUMNS: tuple[str, ...] = (
    "DSC_AUC",
    "NSD_AUC",
    "DSC_Final",
    "NSD_Final",
    *(f"DSC_{i}" for i in range(1, STEPS + 1)),
    *(f"NSD_{i}" for i in range(1, STEPS + 1)),
)
#: metric -> higher is better; what compare analyses for an interactive dataset
METRICS: dict[str, bool] = {**{c: True for c in SCORE_COLUMNS}, "TotalRunningTime": False}
#: the challenge's published per-case columns (``<team>_metrics.csv``); RunningTime_1..6 may be absent there
REQUIRED_COLUMNS: tuple[str, ...] = ("CaseName", "TotalRunningTime", *SCORE_COLUMNS)


def case_id_of(case_name: str) -> str:
    """The case id of a challenge ``CaseName`` (the npz file name): the name without ``.npz``."""
    return case_name[: -len(".npz")] if case_name.endswith(".npz") else case_name


def check_table(table: pd.DataFrame, where: str, scoring: protocol.Scoring = protocol.Scoring()) -> pd.DataFrame:
    """The challenge table with its columns checked: present, numeric, finite, scores in range (an AUC up to
    ``scoring``'s maximum), one row per case."""
    missing = [c for c in REQUIRED_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"{where}: missing column(s) {missing}")
    names = table["CaseName"].astype(str)
    duplicated = names[names.duplicated()]
    if not duplicated.empty:
        raise ValueError(f"{where}: case {duplicated.iloc[0]!r} appears more than once")
    for column in REQUIRED_COLUMNS[1:]:
        values = pd.to_numeric(table[column], errors="coerce")
        bad = ~np.isfinite(values.to_numpy(dtype=float, na_value=np.nan))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{where}: case {names.iloc[row]!r}, column {column!r}: {table[column].iloc[row]!r} is not a finite number")
        # a score lies in 0..1, an AUC in 0..1 per unit step, a running time in 0..inf
        upper = np.inf if column == "TotalRunningTime" else scoring.auc_max if column.endswith("_AUC") else 1.0
        outside = ((values < 0) | (values > upper)).to_numpy()
        if outside.any():
            row = int(np.flatnonzero(outside)[0])
            raise ValueError(f"{where}: case {names.iloc[row]!r}, column {column!r}: {values.iloc[row]} outside 0..{upper:g}")
        table = table.assign(**{column: values.astype(float)})
    return table


def case_rows(table: pd.DataFrame, model: str, kind: str, where: str, scoring: protocol.Scoring = protocol.Scoring()) -> pd.DataFrame:
    """One ``mean_over_classes`` row per case of a challenge table computed under ``scoring``, in the engine's layout."""
    table = check_table(table, where, scoring)
    rows = table.assign(case_id=table["CaseName"].astype(str).map(case_id_of))
    rows.insert(0, "model", model)
    rows.insert(1, "kind", kind)
    rows.insert(2, "structure", CASE_STRUCTURE)
    rows.insert(3, "reference_present", True)
    # the definitions behind the numbers, as every score row states them (docs/interactive.md, "Scores")
    return rows.assign(metric_profile=scoring.label, hd95_definition="not computed", nsd_tolerance_mm=protocol.NSD_TOLERANCE_MM)


def class_rows(records_dir: Path, table: pd.DataFrame, version: str = protocol.PROTOCOL_VERSION) -> pd.DataFrame:
    """One row per case and class from the harness's per-step records: the class's own DSC/NSD per step, its AUCs
    under protocol ``version``."""
    rows = []
    for _, case in table.iterrows():
        case_id = case_id_of(str(case["CaseName"]))
        path = Path(records_dir) / f"{case_id}.json"
        record = json.loads(path.read_text(encoding="utf-8"))
        steps = record["steps"]
        if len(steps) != STEPS:
            raise ValueError(f"{path}: {len(steps)} steps recorded, the protocol has {STEPS}")
        for c, name in enumerate(record["classes"]):
            dsc = [0.0 if record["over_time"] else float(s["dsc_per_class"][c]) for s in steps]
            nsd = [0.0 if record["over_time"] else float(s["nsd_per_class"][c]) for s in steps]
            box_step = steps[0]["output"] != "no_boxes"
            rows.append(
                {
                    "case_id": case_id,
                    "structure": name,
                    "reference_present": True,
                    "DSC_AUC": protocol.auc(dsc, version, box_step),
                    "NSD_AUC": protocol.auc(nsd, version, box_step),
                    "DSC_Final": dsc[-1],
                    "NSD_Final": nsd[-1],
                    **{f"DSC_{i}": v for i, v in enumerate(dsc, 1)},
                    **{f"NSD_{i}": v for i, v in enumerate(nsd, 1)},
                    "TotalRunningTime": float(case["TotalRunningTime"]),
                }
            )
    return pd.DataFrame(rows)


def step_curves(rows: pd.DataFrame) -> dict[str, list[float]]:
    """The mean over cases of DSC and NSD at each step (``mean_over_classes`` rows): MLflow's step metrics."""
    block = rows[rows["structure"] == CASE_STRUCTURE]
    return {name: [float(block[f"{name}_{i}"].mean()) for i in range(1, STEPS + 1)] for name in ("DSC", "NSD")}


def interactive_rows(table: pd.DataFrame, records_dir: Path, model: str, where: str, scoring: protocol.Scoring = protocol.Scoring()) -> pd.DataFrame:
    """All rows of one interactive run scored under ``scoring``: the per-case rows, and the per-class rows from the
    harness's records."""
    rows = case_rows(table, model, "interactive", where, scoring)
    per_class = class_rows(records_dir, rows, scoring.version)
    per_class.insert(0, "model", model)
    per_class.insert(1, "kind", "interactive")
    shared = [c for c in ("reference", "metric_profile", "hd95_definition", "nsd_tolerance_mm", "over_time", "protocol_version", "nsd_profile") if c in rows]
    per_class = per_class.join(rows.set_index("case_id")[shared], on="case_id")
    return pd.concat([rows, per_class], ignore_index=True)


def summary(rows: pd.DataFrame) -> dict[str, Any]:
    """Counts an interactive run reports beside its statistics."""
    block = rows[rows["structure"] == CASE_STRUCTURE]
    return {
        "n_cases": int(len(block)),
        "n_over_time": int(block["over_time"].astype(bool).sum()) if "over_time" in block else 0,
        "n_failed_steps": int(block["failed_steps"].astype(object).fillna("").astype(str).str.len().gt(0).sum()) if "failed_steps" in block else 0,
    }
