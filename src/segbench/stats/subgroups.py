"""Subgroup analysis (docs/methodology.md#59-subgroups): per-group estimates with CIs, Kruskal-Wallis, Mann-Whitney U."""

from __future__ import annotations

from itertools import combinations
from typing import Any, cast

import numpy as np
from scipy import stats

from .results import Subgroups
from .settings import StatsSettings


def group_indices(labels: list[str | None]) -> dict[str, np.ndarray]:
    """Case indices per group label, sorted by label; cases without a label belong to no group."""
    out: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        if label is not None:
            out.setdefault(label, []).append(i)
    return {g: np.asarray(out[g]) for g in sorted(out)}


def group_tests(values: np.ndarray, groups: dict[str, np.ndarray], *, min_cases: int, alpha: float) -> dict[str, Any]:
    """Tests across the groups with at least ``min_cases`` cases, vectorised over the K models.

    Kruskal-Wallis per model across those groups (needs two of them). Where its p < alpha, two-sided
    Mann-Whitney U for every pair of those groups, Bonferroni-adjusted over the number of group pairs.
    Returns arrays over models: kruskal statistic/p, and per group pair statistic/p/p_bonferroni
    (NaN for models whose Kruskal-Wallis p is not below alpha).
    """
    tested = [g for g, idx in groups.items() if idx.size >= min_cases]
    n_models = values.shape[0]
    result: dict[str, Any] = {"tested": tested, "kruskal": None, "mann_whitney": []}
    if len(tested) < 2:
        return result
    samples = [values[:, groups[g]] for g in tested]
    with np.errstate(invalid="ignore", divide="ignore"):
        kw = stats.kruskal(*samples, axis=1)  # NaN when every value is tied (no ranks to compare)
    follow_up = kw.pvalue < alpha
    result["kruskal"] = (kw.statistic, kw.pvalue)
    pairs = list(combinations(range(len(tested)), 2))
    for i, j in pairs:
        stat, p = np.full(n_models, np.nan), np.full(n_models, np.nan)
        if follow_up.any():
            mw = stats.mannwhitneyu(samples[i][follow_up], samples[j][follow_up], axis=1, alternative="two-sided")
            stat[follow_up], p[follow_up] = mw.statistic, mw.pvalue
        result["mann_whitney"].append((tested[i], tested[j], stat, p, np.minimum(1.0, p * len(pairs))))
    return result


def subgroup_block(
    values: np.ndarray,
    models: list[str],
    groups: dict[str, np.ndarray],
    means: dict[str, np.ndarray],
    cis: dict[str, tuple[np.ndarray, np.ndarray]],
    cols: slice,
    settings: StatsSettings,
) -> Subgroups:
    """Subgroups (docs/methodology.md#59-subgroups) for one metadata field: every model (contaminated ones too, marked in "models").

    ``means`` and ``cis``: per group, the resampled means and CI ends of every column of the shared resample products;
    ``cols`` picks this metric's."""
    tests = group_tests(values, groups, min_cases=settings.subgroup_min_cases, alpha=settings.alpha)
    out: dict[str, Any] = {
        "n_missing_value": values.shape[1] - sum(idx.size for idx in groups.values()),
        "groups": {
            g: {
                "n": idx.size,
                "tested": g in tests["tested"],
                "models": {m: {"mean": means[g][cols][k], "ci_low": cis[g][0][cols][k], "ci_high": cis[g][1][cols][k]} for k, m in enumerate(models)},
            }
            for g, idx in groups.items()
        },
        "kruskal": None,
        "mann_whitney": {},
    }
    if tests["kruskal"] is not None:
        stat, p = tests["kruskal"]
        out["kruskal"] = {m: {"statistic": stat[k], "p_value": p[k]} for k, m in enumerate(models)}
        out["mann_whitney"] = {
            m: [
                {"a": ga, "b": gb, "statistic": st[k], "p_value": pv[k], "p_bonferroni": pb[k], "significant": bool(pb[k] < settings.alpha)}
                for ga, gb, st, pv, pb in tests["mann_whitney"]
            ]
            for k, m in enumerate(models)
            if p[k] < settings.alpha
        }
    return cast(Subgroups, out)
