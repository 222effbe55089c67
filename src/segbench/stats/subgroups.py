"""Subgroup analysis (docs/methodology.md#59-subgroups): per-group estimates with CIs, Kruskal-Wallis, Mann-Whitney U."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
from scipy import stats


def group_indices(labels: list[str | None]) -> dict[str, np.ndarray]:
    """Case indices per group label, sorted by label; cases without a label belong to no group."""
    out: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        if label is not None:
            out.setdefault(label, []).append(i)
    return {g: np.asarray(out[g]) for g in sorted(out)}


def group_tests(
    values: np.ndarray, groups: dict[str, np.ndarray], *, min_cases: int, alpha: float
) -> dict[str, Any]:
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
