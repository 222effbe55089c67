"""Audit-calibrated confidence levels (docs/methodology.md#518-calibration-audit, "Calibrated levels").

On a population whose per-case scores have a thin, heavy tail (the NSD of near-perfect models: skewness about -9),
a sample of 40 cases usually lacks the few poor cases that pull the mean down, and every interval computed from the
sample alone (percentile, BCa, skew_t, bootstrap-t) then misses above the truth: a 95 % CI covers about 90 %. What
the sample cannot show, a reference population of the same kind can: Loh (1987, "Calibrating confidence
coefficients") chooses the nominal level by simulation so that the actual coverage is the target. Here the
simulation is the calibration audit's own: for a population, a metric and a sample size n, the audit draws samples
of n cases, computes Hall's skewness-corrected t interval with its range rule, as the board prints it
(``resampling.skew_t_bounds``, analytic, no resample), at each level of a grid, and takes the smallest level whose
coverage of the population mean reaches the target (linearly interpolated between grid levels; never below the
target, capped at the grid's top).

A level fitted and measured on the same population would cover by construction. The audit therefore states the
**cross-fitted** coverage: the population's cases are split at random in two halves, the level chosen on one half
is measured on samples from the other, and the measurements of ``HALVINGS`` such splits are pooled (one split alone
depends on where the few tail cases fall). That is the rate the board prints beside a calibrated CI; the level the
board uses is the one chosen on the whole population.

As in the audit, models of equal quality are made exactly equal by dealing their values per sampled case in random
order (:func:`sample_draws`, vectorised over the samples as ``calibration.exchange`` is not), and the truth is the
population mean (:func:`population_truth`). Pure functions of arrays; ``calibration.audit`` calls :func:`level_rows`
for every audited population and n.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .resampling import jackknife_means, skew_t_bounds

#: the grid of levels, as fractions of the nominal alpha: at 95 % the levels 95, 96, 97, 97.5, 98, 98.5, 99, 99.25,
#: 99.5, 99.75 and 99.9 %
ALPHA_FRACTIONS = (1.0, 0.8, 0.6, 0.5, 0.4, 0.3, 0.2, 0.15, 0.1, 0.05, 0.02)
#: the CI method whose level is calibrated (analytic, so a grid of levels costs no resampling)
CALIBRATED_METHOD = "skew_t"
#: random halvings of the population whose cross-fitted coverages are pooled
HALVINGS = 5


def level_grid(confidence: float) -> np.ndarray:
    """The levels tried for a target ``confidence``: ``confidence`` itself first, then ever closer to 1."""
    return 1.0 - (1.0 - confidence) * np.asarray(ALPHA_FRACTIONS)


def sample_draws(values: np.ndarray, equal: Sequence[int], n: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """(M, K, draws, n) values of ``draws`` samples of n cases drawn with replacement from the (M, K, N) population,
    the equal models' values dealt in random order in every sampled case."""
    sample = values[:, :, rng.integers(0, values.shape[2], size=(draws, n))]
    if len(equal) > 1:
        equal = list(equal)
        order = rng.permuted(np.broadcast_to(np.arange(len(equal)), (draws, n, len(equal))), axis=2)
        sample[:, equal] = np.take_along_axis(sample[:, equal], order.transpose(2, 0, 1)[None], axis=1)
    return sample


def coverage_by_level(sample: np.ndarray, truth: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per metric and level: the share of the (M, K, D, n) ``sample``'s skew_t CIs (with the range rule; every model and
    draw pooled) that hold the (M, K) ``truth``, and their median width. Both (M, len(levels)); ``levels`` may also be (M, L)."""
    n_metrics, n_models, draws, n = sample.shape
    flat = sample.reshape(-1, n)
    estimate, jackknife, span = flat.mean(axis=1), jackknife_means(flat), (flat.min(axis=1), flat.max(axis=1))
    levels = np.broadcast_to(np.asarray(levels, dtype=float), (n_metrics, np.shape(levels)[-1]))
    covered, width = np.empty(levels.shape), np.empty(levels.shape)
    for g in range(levels.shape[1]):
        alpha = np.broadcast_to((1.0 - levels[:, g])[:, None, None], (n_metrics, n_models, draws)).ravel()
        low, high = (b.reshape(n_metrics, n_models, draws) for b in skew_t_bounds(estimate, jackknife, alpha, span))
        covered[:, g] = ((low <= truth[:, :, None]) & (truth[:, :, None] <= high)).mean(axis=(1, 2))
        width[:, g] = np.median((high - low).reshape(n_metrics, -1), axis=1)
    return covered, width


def calibrated_level(coverage: np.ndarray, levels: np.ndarray, target: float) -> tuple[float, bool]:
    """The smallest level whose coverage reaches ``target``, linearly interpolated between the grid's ``levels``
    (ascending, the first the target itself), and whether it was capped at the grid's top (no level reached it)."""
    reached = np.flatnonzero(coverage >= target)
    if reached.size == 0:
        return float(levels[-1]), True
    j = int(reached[0])
    if j == 0:
        return float(levels[0]), False
    share = (target - coverage[j - 1]) / (coverage[j] - coverage[j - 1])
    return float(levels[j - 1] + share * (levels[j] - levels[j - 1])), False


def level_rows(
    values: np.ndarray,
    equal: Sequence[int],
    metrics: Sequence[str],
    n: int,
    draws: int,
    confidence: float,
    rng: np.random.Generator,
) -> list[dict]:
    """Per metric of the (M, K, N) population ``values`` at sample size n: the calibrated level and its cross-fitted
    coverage (module docstring). Each row: ``metric``, ``level`` (chosen on the whole population; 4 decimals),
    ``capped``, ``rate`` (the cross-fitted coverage) and its Monte-Carlo ``mc_se``, ``nominal_rate`` (coverage at the
    target level itself on the whole population), ``level_halves_min`` and ``level_halves_max`` (the range of the
    levels chosen on halves) and ``width_ratio`` (median width at the calibrated level over the nominal one's, on the
    whole population). Each half's level is chosen from ``draws`` samples, and measured on ``draws // HALVINGS``."""
    grid = level_grid(confidence)
    truth = population_truth(values, equal)
    whole = sample_draws(values, equal, n, draws, rng)
    coverage, width = coverage_by_level(whole, truth, grid)
    measure_draws = max(draws // HALVINGS, 1)
    fold_levels, fold_rates = [], []
    for _ in range(HALVINGS):
        halves = np.array_split(rng.permutation(values.shape[2]), 2)
        folds = [(values[:, :, half], population_truth(values[:, :, half], equal)) for half in halves]
        for fit, (other, other_truth) in ((folds[0], folds[1]), (folds[1], folds[0])):
            fit_cov, _ = coverage_by_level(sample_draws(fit[0], equal, n, draws, rng), fit[1], grid)
            chosen = np.array([calibrated_level(c, grid, confidence)[0] for c in fit_cov])
            rate, _ = coverage_by_level(sample_draws(other, equal, n, measure_draws, rng), other_truth, chosen[:, None])
            fold_levels.append(chosen)
            fold_rates.append(rate[:, 0])
    rows = []
    for m, metric in enumerate(metrics):
        level, capped = calibrated_level(coverage[m], grid, confidence)
        at = _width_at(whole[m : m + 1], truth[m : m + 1], level)
        mean_rate = float(np.mean([r[m] for r in fold_rates]))
        rows.append(
            {
                "metric": metric,
                "n": n,
                "confidence": confidence,
                "method": CALIBRATED_METHOD,
                "level": round(level, 4),
                "capped": capped,
                "rate": mean_rate,
                "mc_se": float(np.sqrt(mean_rate * (1.0 - mean_rate) / (2 * HALVINGS * measure_draws))),
                "nominal_rate": float(coverage[m, 0]),
                "level_halves_min": round(float(min(f[m] for f in fold_levels)), 4),
                "level_halves_max": round(float(max(f[m] for f in fold_levels)), 4),
                "width_ratio": float(at / width[m, 0]) if width[m, 0] > 0 else 1.0,
            }
        )
    return rows


def population_truth(values: np.ndarray, equal: Sequence[int]) -> np.ndarray:
    """(M, K) population means, the equal models' replaced by their common mean (what dealing their values in random
    order per case makes them)."""
    mean = values.mean(axis=2)
    mean[:, list(equal)] = mean[:, list(equal)].mean(axis=1, keepdims=True)
    return mean


def _width_at(sample: np.ndarray, truth: np.ndarray, level: float) -> float:
    """Median width of one metric's skew_t CIs at ``level``."""
    return float(coverage_by_level(sample, truth, np.array([level]))[1][0, 0])
