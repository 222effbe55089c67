"""The boundary of the statistics: per-case rows checked once (``validate``) and split per structure into shared-case matrices (``prepare``).

What :func:`segbench.stats.analysis.analyze` reads is checked here, each problem a ValueError naming the row or
column, so the analysis inside works on clean arrays (docs/methodology.md#52-shared-cases).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd

from segbench.base.formats import number

from .settings import StatsSettings

_REQUIRED = ("model", "case_id", "structure", "reference_present")
_FLAGS = ("prediction_missing", "worst_case")


@dataclass(frozen=True)
class StructureMatrices:
    """Everything the statistics need about one structure: the shared-case matrices and their context."""

    case_ids: list[str]
    n_absent: int
    n_unshared: int
    models: list[str]  # the models with rows for this structure (a model may not segment it: n/a)
    values: dict[str, np.ndarray]  # metric -> (K models, n cases)
    flags: dict[str, dict[str, list[str]]]
    case_meta: dict[str, list[str | None]]
    unshared: dict[str, dict[str, dict[str, float]]]  # metric -> model -> {case id: value} outside the shared cases


def validate(
    rows: pd.DataFrame,
    metrics: Mapping[str, bool],
    settings: StatsSettings,
    subgroup_fields: Sequence[str],
    contaminated: Mapping[str, bool],
) -> tuple[dict[str, bool], list[str], list[str], dict[str, bool]]:
    """Check the inputs once at the boundary (ValueError naming the row/column) and canonicalise them."""
    if not isinstance(rows, pd.DataFrame):
        raise ValueError(f"rows must be a pandas DataFrame, got {type(rows).__name__}")
    if not isinstance(settings, StatsSettings):
        raise ValueError(f"settings must be a StatsSettings, got {type(settings).__name__}")
    if not isinstance(metrics, Mapping) or not metrics:
        raise ValueError("metrics must be a non-empty mapping metric -> higher_is_better")
    for metric, higher in metrics.items():
        if not isinstance(higher, (bool, np.bool_)):
            raise ValueError(f"metrics[{metric!r}] must be a bool (higher_is_better), got {higher!r}")
    if isinstance(subgroup_fields, str):
        raise ValueError("subgroup_fields must be a sequence of field names, not a string")
    missing = [c for c in (*_REQUIRED, *metrics, *(f"meta.{f}" for f in subgroup_fields)) if c not in rows.columns]
    if missing:
        raise ValueError(f"rows lack column(s) {missing}")
    for column in ("model", "case_id", "structure"):
        if rows[column].isna().any():
            raise ValueError(f"rows column {column!r} has empty cells, first at row {_first(rows[column].isna())}")
    for column in ("reference_present", *(f for f in _FLAGS if f in rows.columns)):
        if not pd.api.types.is_bool_dtype(rows[column]):
            raise ValueError(f"rows column {column!r} must be boolean, got dtype {rows[column].dtype}")
    for metric in metrics:
        col = rows[metric]
        if not pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
            raise ValueError(f"metric column {metric!r} must be numeric, got dtype {col.dtype}")
        bad = rows["reference_present"] & ~np.isfinite(col.to_numpy(dtype=np.float64, na_value=np.nan))
        if bad.any():
            r = rows.loc[bad].iloc[0]
            raise ValueError(
                f"metric {metric!r} is not a finite number where the reference is present: row "
                f"{_first(bad)} (model {r['model']!r}, case {r['case_id']!r}, structure {r['structure']!r})"
            )
    dup = rows.duplicated(["model", "case_id", "structure"])
    if dup.any():
        r = rows.loc[dup].iloc[0]
        raise ValueError(f"duplicate row {_first(dup)}: model {r['model']!r}, case {r['case_id']!r}, structure {r['structure']!r}")
    presence = rows.groupby(["structure", "case_id"], sort=True)["reference_present"].nunique()
    if (presence > 1).any():
        structure, case = presence.index[(presence > 1).to_numpy()][0]
        raise ValueError(f"reference_present differs between models for case {case!r}, structure {structure!r}")
    for field in subgroup_fields:
        per_case = rows.groupby("case_id", sort=True)[f"meta.{field}"].nunique()
        if (per_case > 1).any():
            raise ValueError(f"meta.{field} has several values for case {per_case.index[(per_case > 1).to_numpy()][0]!r}")
    models = sorted(rows["model"].astype(str).unique())
    unknown = sorted(set(contaminated) - set(models))
    if unknown:
        raise ValueError(f"contaminated names model(s) not in rows: {unknown}")
    flags = {m: bool(contaminated.get(m, False)) for m in models}
    # Metrics in sorted order: the column order of the shared resample products then does not depend
    # on the caller's mapping order, nor on a JSON round trip with sort_keys (reanalyze).
    canonical = {str(k): bool(metrics[k]) for k in sorted(metrics)}
    return canonical, [str(f) for f in subgroup_fields], models, flags


def _first(mask: pd.Series) -> object:
    return mask.index[mask.to_numpy()][0]


def group_labels(column: pd.Series) -> pd.Series:
    """Subgroup label per case: the value as text, or for numeric fields a quartile band.

    Numeric fields (e.g. age) are banded at the quartiles of the dataset's cases: '<q1', 'q1-<q2',
    'q2-<q3', '>=q3' with the edges written out (repeated edges merge bands). Fixed clinical bands are
    the reader's job (see segbench.base.bands.age_band, exported as meta.age_band).
    """
    if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
        values = column.astype(np.float64)
        edges: np.ndarray | list[float] = np.unique(np.quantile(values.dropna(), [0.25, 0.5, 0.75])) if values.notna().any() else []
        bounds = [-np.inf, *edges, np.inf]
        labels = [
            f"<{number(hi)}" if lo == -np.inf else (f">={number(lo)}" if hi == np.inf else f"{number(lo)}-<{number(hi)}")
            for lo, hi in zip(bounds[:-1], bounds[1:])
        ]
        column = pd.cut(values, bounds, right=False, labels=labels)
    return pd.Series([None if pd.isna(v) else str(v) for v in column], index=column.index, dtype=object)


def prepare(rows: pd.DataFrame, metrics: Mapping[str, bool], models: list[str], subgroup_fields: list[str]) -> dict[str, StructureMatrices]:
    """Split the rows per structure into shared-case (K, n) matrices (docs/methodology.md#52-shared-cases).

    Works on integer codes (one factorisation of model, case and structure) so that a JHH-scale table
    (~10^6 rows) is split without per-row Python work.
    """
    model_code = pd.Categorical(rows["model"].astype(str), categories=models).codes
    case_code, case_ids = pd.factorize(rows["case_id"].astype(str), sort=True)
    structure_code, structures = pd.factorize(rows["structure"].astype(str), sort=True)
    case_ids = np.asarray(case_ids, dtype=object)
    present = rows["reference_present"].to_numpy(dtype=bool)
    metric_values = {m: rows[m].to_numpy(dtype=np.float64, na_value=np.nan) for m in metrics}
    flag_values = {f: rows[f].to_numpy(dtype=bool) if f in rows.columns else np.zeros(len(rows), bool) for f in _FLAGS}
    meta = rows.assign(case_id=rows["case_id"].astype(str)).groupby("case_id", sort=True)[[f"meta.{f}" for f in subgroup_fields]].first()
    labels = {f: group_labels(meta[f"meta.{f}"]).reindex(case_ids).to_numpy(dtype=object) for f in subgroup_fields}
    n_models, n_all = len(models), case_ids.size
    out = {}
    for code, structure in enumerate(structures):
        sel = np.flatnonzero(structure_code == code)
        mc, cc, pr = model_code[sel], case_code[sel], present[sel]
        with_rows = np.zeros(n_models, dtype=bool)
        with_rows[mc] = True
        scored = np.zeros((n_models, n_all), dtype=bool)
        scored[mc[pr], cc[pr]] = True
        shared = cast(np.ndarray, scored[with_rows].all(axis=0))
        column = np.cumsum(shared) - 1  # position of a shared case among the shared cases
        keep = pr & shared[cc]
        rows_k, cols_k = mc[keep], column[cc[keep]]
        n = int(shared.sum())
        values = {}
        for metric, vals in metric_values.items():
            matrix = np.empty((n_models, n))
            matrix[rows_k, cols_k] = vals[sel][keep]
            values[metric] = matrix
        shared_ids = case_ids[shared]
        extra = pr & ~shared[cc]
        unshared = {
            metric: {
                m: dict(zip(case_ids[cc[extra & (mc == k)]].tolist(), vals[sel][extra & (mc == k)].tolist()))
                for k, m in enumerate(models)
                if with_rows[k] and (extra & (mc == k)).any()
            }
            for metric, vals in metric_values.items()
        }
        flags = {}
        for flag, vals in flag_values.items():
            hit = np.zeros((n_models, n), dtype=bool)
            hit[rows_k, cols_k] = vals[sel][keep]
            flags[flag] = {m: shared_ids[hit[k]].tolist() for k, m in enumerate(models)}
        keep_models = np.flatnonzero(with_rows)
        out[str(structure)] = StructureMatrices(
            case_ids=shared_ids.tolist(),
            n_absent=int(np.unique(cc[~pr]).size),
            n_unshared=int(scored.any(axis=0).sum()) - n,
            models=[models[k] for k in keep_models],
            values={metric: matrix[keep_models] for metric, matrix in values.items()},
            flags={flag: {models[k]: per_model[models[k]] for k in keep_models} for flag, per_model in flags.items()},
            case_meta={f: labels[f][shared].tolist() for f in subgroup_fields},
            unshared=unshared,
        )
    return out
