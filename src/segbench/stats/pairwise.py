"""Pairwise comparisons of ranked models: bootstrap separability (docs/methodology.md#55-pairwise-separability), Wilcoxon map (#56-significance-map)."""

from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import ndtr

from .resampling import CHUNK_ENTRIES, intervals, sort_columns
from .schemes import signed_rank_z


def pair_indices(n_models: int) -> tuple[np.ndarray, np.ndarray]:
    """Unordered pairs (a, b), a before b in the given model order."""
    return np.triu_indices(n_models, k=1)


def bootstrap_p_values(diff_boot: np.ndarray) -> np.ndarray:
    """Two-sided bootstrap p-value of 'mean difference = 0' per column of (B, P) resampled differences.

    p = 2 min(#{d <= 0}, #{d >= 0}) / B, capped at 1: the smallest alpha at which the percentile CI
    at level 1 - alpha would touch 0. Used only to order the pairs for Holm's step-down.
    """
    n_rows = diff_boot.shape[0]
    tail = np.minimum((diff_boot <= 0).sum(axis=0), (diff_boot >= 0).sum(axis=0))
    return np.minimum(1.0, 2.0 * tail / n_rows)


def separability(
    diff_boot: np.ndarray,
    diff: np.ndarray,
    diff_jack: np.ndarray | None,
    *,
    alpha: float,
    correction: str,
    ci_method: str,
    p_values: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Family-wise adjusted separability of P pairs, with paired-bootstrap CIs of their mean differences.

    bonferroni: every CI at level 1 - alpha/P; separable when it excludes 0.
    holm (step-down, Holm 1979, applied to CI levels): pairs are sorted by bootstrap p-value (ties by
    pair order); the pair at step k = 1..P gets the CI level 1 - alpha/(P - k + 1). Walking down, a pair
    is separable while its CI excludes 0; at the first pair whose CI contains 0 the procedure stops:
    that pair and all later ones are not separable, and their CIs are reported at the stopping level
    1 - alpha/(P - k_stop + 1). ``ci_level`` gives the level of each reported CI.
    ``p_values`` (P,), a test's p-values (``sign_flip_p_values``): they order the pairs and decide instead of the
    CIs (separable when p < the step's alpha); the CIs keep the same levels, and ``p_adjusted`` holds the
    Holm- or Bonferroni-adjusted p-values.
    """
    n_pairs = diff_boot.shape[1]
    p_boot = bootstrap_p_values(diff_boot)
    diff_boot = sort_columns(diff_boot)  # once for every interval below
    if correction == "bonferroni":
        level_alpha = np.full(n_pairs, alpha / n_pairs)
        low, high = intervals(diff_boot, diff, diff_jack, level_alpha, ci_method, presorted=True)
        separable = (low > 0) | (high < 0) if p_values is None else p_values < level_alpha
    else:
        order = np.argsort(p_boot if p_values is None else p_values, kind="stable")
        step_alpha = np.empty(n_pairs)
        step_alpha[order] = alpha / (n_pairs - np.arange(n_pairs))
        low, high = intervals(diff_boot, diff, diff_jack, step_alpha, ci_method, presorted=True)
        excludes = ((low > 0) | (high < 0) if p_values is None else p_values < step_alpha)[order]
        n_separable = n_pairs if excludes.all() else int(np.argmin(excludes))
        separable = np.zeros(n_pairs, dtype=bool)
        separable[order[:n_separable]] = True
        level_alpha = step_alpha
        if n_separable < n_pairs:
            rest = order[n_separable:]
            level_alpha = step_alpha.copy()
            level_alpha[rest] = step_alpha[order[n_separable]]
            jack_rest = None if diff_jack is None else diff_jack[:, rest]
            low[rest], high[rest] = intervals(
                diff_boot[:, rest], diff[rest], jack_rest, level_alpha[rest], ci_method, presorted=True
            )
    out = {"ci_low": low, "ci_high": high, "ci_level": 1.0 - level_alpha, "p_bootstrap": p_boot, "separable": separable}
    if p_values is not None:
        out["p_test"] = p_values
        out["p_adjusted"] = holm(p_values) if correction == "holm" else np.minimum(1.0, p_values * n_pairs)
    return out


def sign_flip_p_values(diffs: np.ndarray, n_flips: int, rng: np.random.Generator) -> np.ndarray:
    """Two-sided sign-flip permutation p-value of 'mean difference = 0' per row of (P, n) paired differences.

    Under the null that a and b are exchangeable in each case, every case's difference is as likely with either
    sign; ``n_flips`` random sign vectors, shared by the rows (one product), give the null distribution of |sum|,
    and p = (1 + #{|flipped sum| >= |observed sum|}) / (n_flips + 1), which is exact at any n (the observed signs
    count as one draw; flips are drawn in chunks of bounded memory). Studentizing changes nothing: under flips the sum of
    squares is fixed, so |t| grows with |sum|.

    Where no flip reaches the observed sum, the Monte-Carlo p-value is only its floor 1 / (n_flips + 1), which Holm
    over many pairs cannot use (171 pairs at alpha 0.05 need p < 2.9e-4). There p is the smaller of that floor and
    :func:`sign_flip_tail_bound`, an upper bound of the exact permutation p-value: the result stays a valid p-value
    (P(p <= alpha) <= alpha at every alpha; docs/methodology.md#55-pairwise-separability).
    """
    observed = np.abs(diffs.sum(axis=1))
    tolerance = 1e-9 * np.abs(diffs).sum(axis=1)  # the same sum in another order is a tie, not a smaller value
    at_least = np.zeros(diffs.shape[0])
    chunk = max(1, CHUNK_ENTRIES // max(diffs.shape[1], 1))
    for start in range(0, n_flips, chunk):
        signs = rng.integers(0, 2, size=(min(chunk, n_flips - start), diffs.shape[1])).astype(np.float64) * 2.0 - 1.0
        at_least += (np.abs(signs @ diffs.T) >= observed - tolerance).sum(axis=0)
    p = (1.0 + at_least) / (n_flips + 1.0)
    beyond = at_least == 0
    p[beyond] = np.minimum(p[beyond], sign_flip_tail_bound(diffs[beyond], tolerance[beyond]))
    return p


#: Pinelis (1994): under sign flips, P(sum >= z sqrt(sum of squares)) <= 2e^3/9 (1 - Phi(z)) at every n and z
PINELIS_CONSTANT = 2.0 * np.e**3 / 9.0


def sign_flip_tail_bound(diffs: np.ndarray, tolerance: np.ndarray | float = 0.0) -> np.ndarray:
    """An upper bound of the exact two-sided sign-flip p-value per row of (P, n) paired differences.

    With S the observed sum and V^2 the sum of squared differences (fixed under flips), Pinelis's inequality for
    sums of symmetric variables (Ann. Statist. 22, 1994) bounds each tail by 2e^3/9 (1 - Phi(|S| / V)); two tails
    give 4e^3/9 (1 - Phi(|S| / V)), capped at 1. It is the normal tail times 4.46 per side, so it decides only far
    out (|S| / V above about 4), where the flips run out. ``tolerance``: subtracted from |S| first (ties).
    """
    spread = np.sqrt((diffs**2).sum(axis=1))
    z = np.divide(np.maximum(np.abs(diffs.sum(axis=1)) - tolerance, 0.0), spread, out=np.zeros(diffs.shape[0]), where=spread > 0)
    return np.minimum(1.0, 2.0 * PINELIS_CONSTANT * ndtr(-z))


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values: max over j <= i of min(1, (m - j + 1) p_(j)), ties by position.

    Hand-written (five lines) rather than pulling in statsmodels for multipletests.
    """
    m = p_values.size
    order = np.argsort(p_values, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p_values[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out


def common_case_groups(observed: np.ndarray, a: np.ndarray, b: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pairs (a[p], b[p]) grouped by the cases both models have: [(pair positions, case indices), ...].

    ``observed`` (K, N) marks the cases each model has. With shared cases there is one group; under
    pairwise-complete alignment (Touchstone) one per distinct common-case set, so every test and
    bootstrap runs vectorised over the pairs of a group.
    """
    # Work on the few distinct model patterns, not on the K(K-1) pair masks: unique over (P, N) rows is slow.
    model_patterns, model_of = np.unique(observed, axis=0, return_inverse=True)
    model_of = model_of.reshape(-1)
    combos, combo_of = np.unique(np.stack([model_of[a], model_of[b]], axis=1), axis=0, return_inverse=True)
    masks, mask_of = np.unique(model_patterns[combos[:, 0]] & model_patterns[combos[:, 1]], axis=0, return_inverse=True)
    group_of = mask_of.reshape(-1)[combo_of.reshape(-1)]
    return [(np.flatnonzero(group_of == g), np.flatnonzero(mask)) for g, mask in enumerate(masks)]


def wilcoxon_map(values: np.ndarray, higher_is_better: bool, alpha: float) -> dict[str, np.ndarray]:
    """Significance map (docs/methodology.md#56-significance-map) of K models' (K, n) values -> (K, K) matrices.

    Cell (a, b): one-sided Wilcoxon signed-rank test 'a better than b' (alternative 'greater' for
    higher-is-better metrics, 'less' for distances) on the cases both have (NaN = case missing for
    that model; docs/methodology.md#513-case-alignment), scipy's defaults otherwise. All K(K-1)
    p-values are Holm-adjusted together. A pair whose differences are all zero (or that has no
    common case) gets p = 1 (never significant). The diagonal is NaN. ``n_cases`` counts each
    pair's common cases.
    """
    n_models = values.shape[0]
    a, b = np.nonzero(~np.eye(n_models, dtype=bool))
    alternative = "greater" if higher_is_better else "less"  # of scipy.stats.wilcoxon, used for n <= 50
    p = np.ones(a.size)
    n_common = np.zeros(a.size, dtype=np.int64)
    for pairs, cases in common_case_groups(~np.isnan(values), a, b):
        diffs = values[a[pairs]][:, cases] - values[b[pairs]][:, cases]
        n_common[pairs] = cases.size
        test = np.flatnonzero((diffs != 0).any(axis=1))
        if test.size and cases.size > 50:
            # For n > 50 scipy's method='auto' is the normal approximation without continuity correction
            # for every pair: signed_rank_z computes it with the same operations (zeros dropped, average
            # ranks, tie-corrected SD), without scipy's per-call overhead.
            # One direction per pair: the reverse pair's statistic is exactly the negative.
            forward = pairs[test[a[pairs[test]] < b[pairs[test]]]]
            centred, sd, _ = signed_rank_z(values[a[forward]][:, cases] - values[b[forward]][:, cases])
            z = centred / sd if higher_is_better else -centred / sd
            reverse = b[forward] * (n_models - 1) + a[forward] - (a[forward] > b[forward])  # position of (b, a)
            p[forward], p[reverse] = ndtr(-z), ndtr(z)
        else:
            # n <= 50: 'auto' picks exact / permutation / normal from the ties and zeros of the whole
            # batch when vectorised; per-pair calls keep each pair's own choice, as a per-pair protocol does.
            for k in test:
                p[pairs[k]] = stats.wilcoxon(diffs[k], alternative=alternative).pvalue
    adjusted = holm(p)
    raw_m, adj_m = np.full((n_models, n_models), np.nan), np.full((n_models, n_models), np.nan)
    raw_m[a, b], adj_m[a, b] = p, adjusted
    significant = np.zeros((n_models, n_models), dtype=bool)
    significant[a, b] = adjusted < alpha
    n_m = np.zeros((n_models, n_models), dtype=np.int64)
    n_m[a, b] = n_common
    return {"p_value": raw_m, "p_adjusted": adj_m, "significant": significant, "n_cases": n_m}
