"""Implementation sensitivity (docs/methodology.md#517-implementation-sensitivity): how the leaderboard moves when
only the metric definition, or only the missing-value policy, changes.

Each variant is the same statistics protocol (``analyze``, same settings and seed) on the same cases with one
choice changed; it is set beside the baseline per structure and metric:

- ``kendall_tau``: Kendall's tau-b between the baseline's and the variant's ranks of the models ranked in both;
- ``flipped_pairs``: [a, b] ranked strictly above b in the baseline and strictly below it in the variant;
- ``top_changed``: the set of rank-1 models differs; ``co_winners_changed``: the co-winner set of the cell's verdict
  differs (``verdicts.py``: #1 by mean and the models not separable from it); ``verdict_changed``: its code differs;
- ``verdicts_changed``: ordered pairs whose Wilcoxon-Holm verdict ('a significantly better than b') differs;
- ``separable_changed``: pairs whose bootstrap separability differs.

Missing-value policies (docs/methodology.md#4-empty-masks-and-missing-predictions), applied to the rows flagged
``worst_case`` (no prediction, a structure missed, or one predicted where the reference has none):

- ``worst_case`` (segbench's): as scored, 0 for overlap metrics and the case's worst distance;
- ``drop_failed``: those rows removed; the shared-case protocol then leaves a case any model failed out of every
  model's comparison (a complete-case analysis, what tools that skip NaN do when they pair cases);
- ``zero``: every metric of those rows set to 0 (a distance of 0 mm is a perfect score: what tools that fill
  failures with 0 report).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np
import pandas as pd

from .analysis import analyze
from .ranking import kendall_tau_b
from .results import Sensitivity, Variant
from .settings import StatsSettings

BASELINE_POLICY = "worst_case"
MISSING_POLICIES = (BASELINE_POLICY, "drop_failed", "zero")


def apply_missing_policy(rows: pd.DataFrame, policy: str, metrics: Mapping[str, bool]) -> pd.DataFrame:
    """The rows as ``policy`` would have them (module docstring); rows without a ``worst_case`` column are unchanged."""
    if policy not in MISSING_POLICIES:
        raise ValueError(f"unknown missing-value policy {policy!r}; known: {list(MISSING_POLICIES)}")
    if policy == BASELINE_POLICY or "worst_case" not in rows:
        return rows
    failed = rows["worst_case"].to_numpy(dtype=bool)
    if policy == "drop_failed":
        return rows[~failed].reset_index(drop=True)
    zeroed = rows.copy()
    zeroed.loc[failed, list(metrics)] = 0.0
    return zeroed


def _pairs(cell: Mapping, key: str) -> set[tuple[str, str]]:
    return {(p["a"], p["b"]) for p in cell.get("pairwise") or () if p.get(key)}


def _significant(cell: Mapping) -> set[tuple[str, str]]:
    significance = cell.get("significance") or {}
    return {(a, b) for a, row in (significance.get("significant") or {}).items() for b, hit in row.items() if hit}


def compare_cells(baseline: Mapping, variant: Mapping) -> dict:
    """One structure and metric of two analyses side by side (module docstring); None where a side has no ranking."""
    if not baseline.get("ranking") or not variant.get("ranking"):
        return {"ranked": False}
    base_rank, var_rank = baseline["ranking"]["rank"], variant["ranking"]["rank"]
    models = sorted(set(base_rank) & set(var_rank))
    base = np.array([base_rank[m] for m in models], dtype=np.int64)
    var = np.array([var_rank[m] for m in models], dtype=np.int64)
    tau = kendall_tau_b(var[None, :], base)[0] if len(models) > 1 else np.nan
    flipped = sorted([a, b] for a in models for b in models if base_rank[a] < base_rank[b] and var_rank[a] > var_rank[b])
    co_base, co_var = set(baseline["verdict"]["co_winners"]), set(variant["verdict"]["co_winners"])
    code = {"baseline": baseline["verdict"]["code"], "variant": variant["verdict"]["code"]}
    return {
        "ranked": True,
        "kendall_tau": None if np.isnan(tau) else float(tau),
        "flipped_pairs": flipped,
        "top": {"baseline": sorted(m for m in models if base_rank[m] == 1), "variant": sorted(m for m in models if var_rank[m] == 1)},
        "top_changed": {m for m in models if base_rank[m] == 1} != {m for m in models if var_rank[m] == 1},
        "co_winners": {"baseline": sorted(co_base), "variant": sorted(co_var)},
        "co_winners_changed": co_base != co_var,
        "verdict": code,
        "verdict_changed": code["baseline"] != code["variant"],
        "verdicts_changed": sorted(map(list, _significant(baseline) ^ _significant(variant))),
        "separable_changed": sorted(map(list, _pairs(baseline, "separable") ^ _pairs(variant, "separable"))),
        "means": {m: {"baseline": baseline["models"][m]["mean"], "variant": variant["models"][m]["mean"]} for m in models},
    }


def compare_analyses(baseline: Mapping, variant: Mapping) -> Variant:
    """Every structure and metric the two analyses share, with a summary over them."""
    cells = {
        structure: {
            metric: compare_cells(block["metrics"][metric], variant["structures"][structure]["metrics"][metric])
            for metric in sorted(block["metrics"])
            if metric in variant["structures"][structure]["metrics"]
        }
        for structure, block in sorted(baseline["structures"].items())
        if structure in variant["structures"]
    }
    ranked = [c for by_metric in cells.values() for c in by_metric.values() if c["ranked"]]
    taus = [c["kendall_tau"] for c in ranked if c["kendall_tau"] is not None]
    summary = {
        "n_cells": len(ranked),
        "n_cells_with_flips": sum(bool(c["flipped_pairs"]) for c in ranked),
        "n_flipped_pairs": sum(len(c["flipped_pairs"]) for c in ranked),
        "n_top_changed": sum(c["top_changed"] for c in ranked),
        "n_co_winners_changed": sum(c["co_winners_changed"] for c in ranked),
        "n_verdicts_changed": sum(len(c["verdicts_changed"]) for c in ranked),
        "kendall_tau_min": min(taus) if taus else None,
    }
    return cast(Variant, {"summary": summary, "cells": cells})


def sensitivity(
    baseline: Mapping,
    rows: pd.DataFrame,
    profile_rows: pd.DataFrame,
    *,
    baseline_profile: str,
    metrics: Mapping[str, bool],
    settings: StatsSettings,
    contaminated: Mapping[str, bool] = {},
) -> Sensitivity:
    """The baseline analysis (of ``rows``) beside each other metric-definition profile in ``profile_rows`` and each
    missing-value policy. A profile missing for some model, or a policy that changes no row, is reported as not run."""

    def variant(variant_rows: pd.DataFrame) -> Variant:
        present = set(variant_rows["model"])  # a policy dropping failed cases drops a model that has only those
        flags = {m: flag for m, flag in contaminated.items() if m in present}
        return compare_analyses(baseline, analyze(variant_rows, metrics=metrics, settings=settings, contaminated=flags, count_identical=False))

    profiles: dict[str, Any] = {}
    models = set(rows["model"])
    for profile in sorted(set(profile_rows.get("metric_profile", ()))):
        variant_rows = profile_rows[profile_rows["metric_profile"] == profile]
        lacking = sorted(models - set(variant_rows["model"]))
        profiles[profile] = {"run": False, "reason": f"not scored for {', '.join(lacking)}"} if lacking else {"run": True, **variant(variant_rows)}
    failed = int(rows["worst_case"].sum()) if "worst_case" in rows else 0
    policies: dict[str, Any] = {}
    for policy in MISSING_POLICIES[1:]:
        variant_rows = apply_missing_policy(rows, policy, metrics)
        if not failed:
            policies[policy] = {"run": False, "reason": "no failed case (no row flagged worst_case)"}
        elif variant_rows.empty:
            policies[policy] = {"run": False, "reason": "every row is a failed case: nothing is left to compare"}
        else:
            policies[policy] = {"run": True, **variant(variant_rows)}
    return {
        "profiles": {"baseline": baseline_profile, "variants": profiles},
        "missing_policy": {"baseline": BASELINE_POLICY, "n_failed_rows": failed, "variants": policies},
    }
