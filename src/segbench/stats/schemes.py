"""Ranking schemes in challengeR's vocabulary (Wiesenfarth et al. 2021), their agreement, bootstrap stability, and consensus.

Definitions (docs/methodology.md#514-ranking-schemes), all ranks 'min' competition ranks, 1 = best:

- aggregate-then-rank: rank the models by their mean (``mean``) or median (``median``) over the cases;
- rank-then-aggregate (``rank_then_aggregate``): rank the models within every case, average each
  model's case ranks, rank those averages (lower better);
- test-then-rank (``test_then_rank``): one-sided paired Wilcoxon signed-rank test for every ordered
  pair (normal approximation with continuity correction, R's ``exact = FALSE``), no adjustment
  (challengeR's default ``p.adjust.method = "none"``), a significant win when p <= alpha; score = share
  of the other models a model significantly beats, ranked higher better;
- consensus across tasks (challengeR's ``method = "euclidean"``): each model's mean over the tasks of
  its rank, ties within a task given their average rank; ranked lower better.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from .ranking import kendall_tau_b, rank_min

SCHEMES = ("mean", "median", "rank_then_aggregate", "test_then_rank")
_RESAMPLED = ("mean", "median", "rank_then_aggregate")  # schemes whose bootstrap is vectorised here


def case_ranks(values: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """Min ranks of the K models within each case of (K, n) values -> (K, n)."""
    return rank_min(values.T, higher_is_better).T


def average_ranks(ranks: np.ndarray) -> np.ndarray:
    """Rows of min ranks (R, K) -> the same orderings with tied models given their average rank."""
    ties = (ranks[:, :, None] == ranks[:, None, :]).sum(axis=2)
    return ranks + (ties - 1) / 2.0


def test_then_rank_scores(values: np.ndarray, higher_is_better: bool, alpha: float) -> np.ndarray:
    """challengeR's significance score per model: share of the other K - 1 models it beats at p <= alpha (unadjusted)."""
    n_models = values.shape[0]
    if n_models < 2:
        return np.zeros(n_models)
    a, b = np.nonzero(~np.eye(n_models, dtype=bool))
    diffs = values[a] - values[b]
    p = np.full(a.size, np.nan)  # all-zero differences: no test (R: NaN p-value, counted as no win)
    test = np.flatnonzero((diffs != 0).any(axis=1))
    if test.size:
        p[test] = stats.wilcoxon(diffs[test], axis=1, alternative="greater" if higher_is_better else "less",
                                 method="approx", correction=True).pvalue
    wins = np.zeros((n_models, n_models))
    wins[a, b] = p <= alpha
    return wins.sum(axis=1) / (n_models - 1)


def scheme_scores(values: np.ndarray, higher_is_better: bool, alpha: float) -> dict[str, tuple[np.ndarray, bool]]:
    """Per scheme: each model's score and whether higher scores rank better."""
    return {
        "mean": (values.mean(axis=1), higher_is_better),
        "median": (np.median(values, axis=1), higher_is_better),
        "rank_then_aggregate": (case_ranks(values, higher_is_better).mean(axis=1), False),
        "test_then_rank": (test_then_rank_scores(values, higher_is_better, alpha), True),
    }


def resampled_scores(values: np.ndarray, higher_is_better: bool, counts: np.ndarray) -> dict[str, np.ndarray]:
    """Scores of the resampled schemes for (B, n) case counts -> {scheme: (B, K)}.

    Means and mean case ranks are count products (a case's ranks among the models do not change when
    it is drawn again). Medians: each model's values sorted once; the median of a resample is read off
    the cumulative counts in that order (numpy's median: the middle element, or the average of the two).
    """
    n_cases = values.shape[1]
    out = {"mean": counts @ values.T / n_cases, "rank_then_aggregate": counts @ case_ranks(values, higher_is_better).T / n_cases}
    lo, hi = (n_cases + 1) // 2, n_cases // 2 + 1  # 1-based positions of the middle element(s)
    medians = np.empty((counts.shape[0], values.shape[0]))
    # Cumulative counts reach n: 2-byte integers when they fit, a quarter of float64's memory traffic.
    small = np.int16 if n_cases <= np.iinfo(np.int16).max else np.int64
    ints = counts.astype(small)
    for k, row in enumerate(values):
        order = np.argsort(row, kind="stable")
        cum = np.cumsum(ints[:, order], axis=1, dtype=small)
        medians[:, k] = (row[order][(cum >= lo).argmax(axis=1)] + row[order][(cum >= hi).argmax(axis=1)]) / 2.0
    out["median"] = medians
    return out


def schemes(values: np.ndarray, names: list[str], higher_is_better: bool, alpha: float, counts: np.ndarray) -> tuple[dict, np.ndarray]:
    """Ranks under every scheme, Kendall's tau between schemes, and bootstrap stability of the resampled ones.

    ``counts`` (B, n): case counts of the resamples. Stability per scheme: P(rank 1) per model and the
    median Kendall tau-b between the resampled and the full-data ranking; test-then-rank has none (a
    Wilcoxon test per ordered pair and resample is outside this engine's time budget). Second result:
    the (B, K) resampled ranks of the mean, for the consensus.
    """
    scores = scheme_scores(values, higher_is_better, alpha)
    ranks = {s: rank_min(score[None, :], higher)[0] for s, (score, higher) in scores.items()}
    tau = {s: {t: float(kendall_tau_b(ranks[s][None, :], ranks[t])[0]) for t in SCHEMES} for s in SCHEMES}
    stability, boot_mean = {}, None
    for s, boot in resampled_scores(values, higher_is_better, counts).items():
        boot_ranks = rank_min(boot, scores[s][1])
        boot_mean = boot_ranks if s == "mean" else boot_mean
        taus = kendall_tau_b(boot_ranks, ranks[s])
        stability[s] = {"p_rank1": dict(zip(names, (boot_ranks == 1).mean(axis=0))),
                        "kendall_tau_median": float(np.nanmedian(taus)) if np.isfinite(taus).any() else None}
    return {
        "ranks": {s: dict(zip(names, ranks[s])) for s in SCHEMES},
        "scores": {s: dict(zip(names, scores[s][0])) for s in SCHEMES},
        "kendall_tau": tau,
        "stability": {s: stability.get(s) for s in SCHEMES},
        "n_resamples": counts.shape[0],
    }, boot_mean


def consensus(ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """challengeR's consensus (mean rank) of (R, T, K) per-task min ranks -> (R, K) mean ranks and their min ranks.

    NaN marks a model without a rank in a task; it is left out of that model's mean.
    """
    avg = np.where(np.isnan(ranks), np.nan, average_ranks(np.nan_to_num(ranks, nan=np.inf).reshape(-1, ranks.shape[-1])).reshape(ranks.shape))
    mean = np.nanmean(avg, axis=1)
    return mean, rank_min(mean, higher_is_better=False)
