"""Lesion-wise analysis (docs/methodology.md#519-lesion-wise-analysis): the lesion-wise scores through the same
statistics protocol as the case metrics, with two units of analysis, and the ranking's sensitivity to the matching rule.

- **Case unit** (``case``): each case's lesion-wise scores under the lesion profile (RQ = detection F1, PQ, lesion
  recall, BraTS-style lesion-wise Dice and HD95) are per-case values like any metric: case bootstrap CIs, ranking
  stability, pairwise verdicts. A case enters a structure's analysis when its reference holds a lesion the profile
  counts (``reference_present`` of the lesion rows), for every model alike.
- **Matched lesions** (``matched``): SQ, the mean quality (Dice, NSD, HD95) of the lesions a model matched, is
  defined only where it matched one; it is analysed over the cases where every model did (a case one model
  matched nothing in is not shared: ``n_unshared`` counts them), which pairs the models on the same cases.
- **Lesion unit** (``lesion``): every reference lesion is a row (Dice, NSD, HD95 against its matched predictions;
  ``detected`` 1 or 0), so a mean is over lesions and a large case with many lesions weighs more. Lesions of one case
  share scan, patient and model behaviour, so they are not independent: the analysis resamples lesions (its main
  CIs) and, as clustered data with the case as the cluster, cases then their lesions (``clustered``), whose wider
  intervals are the honest ones (docs/methodology.md#516-clustered-data).
- **Sensitivity** (``sensitivity``): the case-unit analysis under each other lesion profile of the rows (another
  matching rule), beside the profile's: rank flips, top and verdict changes (``sensitivity.compare_analyses``).

A metric a profile leaves undefined on some analysed row (panoptica's HD95 of a missed lesion) is not analysed
under that profile, and the result says so (``undefined``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import numpy as np
import pandas as pd

from segbench.base.metrics import directions

from .analysis import analyze
from .results import Analysis, Lesions
from .sensitivity import compare_analyses
from .settings import StatsSettings

#: the case-unit metrics (column of the lesion rows -> higher is better)
CASE_METRICS: dict[str, bool] = directions(("rq", "pq_dice", "recall", "lesion_dice", "lesion_hd95"))
#: SQ, over the cases where every model matched a lesion
MATCHED_METRICS: dict[str, bool] = directions(("sq_dice", "sq_nsd", "sq_hd95"))
#: the lesion-unit metrics (column of the per-lesion table, ``detected`` derived from its status)
LESION_METRICS: dict[str, bool] = directions(("dice", "nsd", "hd95", "detected"))
#: the metadata field that clusters lesion rows: their case
CLUSTER_FIELD = "case"


def _defined(rows: pd.DataFrame, metrics: Mapping[str, bool]) -> tuple[dict[str, bool], list[str]]:
    """The metrics finite on every analysed row, and the others."""
    present = rows["reference_present"].to_numpy(dtype=bool)
    finite = {m: bool(np.isfinite(rows[m].to_numpy(dtype=np.float64)[present]).all()) for m in metrics}
    return {m: h for m, h in metrics.items() if finite[m]}, sorted(m for m in metrics if not finite[m])


def _analyze(
    rows: pd.DataFrame, metrics: Mapping[str, bool], settings: StatsSettings, contaminated: Mapping[str, bool], cluster_field: str | None = None
) -> Analysis | None:
    """``analyze`` of ``rows`` with the contamination flags of the models they hold; None without a row or a metric
    (every case of a lone model without a prediction leaves no matched lesion, so no SQ). No count of cases identical
    to the reference: that is the voxel-wise analysis's (a lesion row's Dice is a lesion's, and a lesion row no case)."""
    if rows.empty or not metrics:
        return None
    held = set(rows["model"])
    return analyze(
        rows,
        metrics=metrics,
        settings=settings,
        contaminated={m: c for m, c in contaminated.items() if m in held},
        cluster_field=cluster_field,
        count_identical=False,
    )


def case_unit_rows(lesion_rows: pd.DataFrame, profile: str) -> pd.DataFrame:
    """The lesion rows of one lesion profile, as the analysis reads per-case rows."""
    rows = lesion_rows[lesion_rows["lesion_profile"] == profile]
    return rows.astype({"reference_present": bool, "prediction_missing": bool}).reset_index(drop=True)


def lesion_unit_rows(instance_rows: pd.DataFrame, profile: str) -> pd.DataFrame:
    """One row per reference lesion of one lesion profile (missed ones included, false positives not: they belong to
    no reference lesion and so pair across no models), its unit id ``<case>#<lesion>`` and its case as ``meta.case``."""
    rows = instance_rows[(instance_rows["lesion_profile"] == profile) & (instance_rows["status"] != "FP")]
    return pd.DataFrame(
        {
            "model": rows["model"].to_numpy(),
            "case_id": (rows["case_id"].astype(str) + "#" + rows["reference_id"].astype(str)).to_numpy(),
            "structure": rows["structure"].to_numpy(),
            "reference_present": True,
            f"meta.{CLUSTER_FIELD}": rows["case_id"].astype(str).to_numpy(),
            **{m: rows[m].to_numpy(dtype=np.float64) for m in LESION_METRICS if m != "detected"},
            "detected": (rows["status"] == "TP").to_numpy(dtype=np.float64),
        }
    )


def counts(lesion_rows: pd.DataFrame, instance_rows: pd.DataFrame, profile: str) -> dict[str, dict[str, dict]]:
    """Per structure and model, the lesion counts and volumes summed over every case (reference lesion or not), and
    per lesion-volume stratum (``volume_stratum`` of the per-lesion table, smallest first) its reference lesions and TPs."""
    rows = case_unit_rows(lesion_rows, profile)
    strata = [c.removeprefix("recall_") for c in lesion_rows.columns if c.startswith("recall_")]
    refs = instance_rows[(instance_rows["lesion_profile"] == profile) & (instance_rows["status"] != "FP")]
    columns = ["n_reference", "n_prediction", "tp", "fp", "fn", "fp_volume_ml", "fn_volume_ml"]
    out: dict[str, dict[str, dict]] = {}
    for (structure, model), group in rows.groupby(["structure", "model"], sort=True):
        mine = refs[(refs["structure"] == structure) & (refs["model"] == model)]
        by_volume = [
            {
                "stratum": name,
                "n_reference": int((mine["volume_stratum"] == name).sum()),  # a list: JSON keeps its order
                "tp": int(((mine["volume_stratum"] == name) & (mine["status"] == "TP")).sum()),
            }
            for name in strata
        ]
        out.setdefault(str(structure), {})[str(model)] = {c: float(group[c].sum()) for c in columns} | {
            "n_cases": int(group["case_id"].nunique()),
            "n_cases_with_lesions": int(group["reference_present"].sum()),
            "by_volume": by_volume,
        }
    return out


def lesion_analysis(
    lesion_rows: pd.DataFrame,
    instance_rows: pd.DataFrame,
    *,
    profile: str,
    settings: StatsSettings,
    contaminated: Mapping[str, bool] = {},
) -> Lesions:
    """The lesion-wise block of a results file (module docstring): ``profile``, ``case``, ``matched`` and ``lesion`` analyses (the
    layout of ``analysis.analyze``, or None where nothing is left to analyse), the metrics each leaves undefined, ``counts`` and
    the matching-rule ``sensitivity``."""
    profiles = sorted(set(lesion_rows["lesion_profile"]))
    if profile not in profiles:
        raise ValueError(f"lesion rows hold profiles {profiles}, not the lesion profile {profile!r}")
    baseline_rows = case_unit_rows(lesion_rows, profile)
    case_metrics, case_undefined = _defined(baseline_rows, CASE_METRICS)
    case = _analyze(baseline_rows, case_metrics, settings, contaminated)
    unmatched = baseline_rows["reference_present"] & baseline_rows["sq_dice"].isna()  # no TP: SQ undefined, the case unshared
    matched = _analyze(baseline_rows[~unmatched.to_numpy()], MATCHED_METRICS, settings, contaminated)
    lesion_rows_unit = lesion_unit_rows(instance_rows, profile)
    lesion_metrics, lesion_undefined = _defined(lesion_rows_unit, LESION_METRICS)
    clustered = CLUSTER_FIELD if lesion_rows_unit[f"meta.{CLUSTER_FIELD}"].nunique() > 1 else None  # one case: nothing to resample between
    lesion = _analyze(lesion_rows_unit, lesion_metrics, settings, contaminated, clustered)
    variants = {}
    for other in profiles:
        rows = case_unit_rows(lesion_rows, other)
        metrics, undefined = _defined(rows, case_metrics)
        variant = _analyze(rows, metrics, settings, contaminated) if other != profile and case is not None else None
        if variant is not None:
            variants[other] = {"undefined": undefined, **compare_analyses(case, variant)}  # type: ignore[arg-type]  # variant is None without case
    return cast(
        Lesions,
        {
            "profile": profile,
            "case": case,
            "matched": matched,
            "lesion": lesion,
            "undefined": {"case": case_undefined, "lesion": lesion_undefined},
            "counts": counts(lesion_rows, instance_rows, profile),
            "sensitivity": {"baseline": profile, "variants": variants},
        },
    )
