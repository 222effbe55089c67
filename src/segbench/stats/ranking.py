"""Ranks, bootstrap ranking stability (challengeR) and leave-one-case-out stability."""

from __future__ import annotations

import numpy as np

#: means closer than this share of the row's largest magnitude (at least 1) are a tie. Identical per-case columns come
#: out of the BLAS product in bootstrap_means a few ulps apart (summation order differs between the kernel's column
#: blocks); a relative margin ties them in every resample, where rounding to a fixed number of decimals splits the
#: pair whenever the two land on either side of a rounding boundary.
TIE_RELATIVE = 1e-12


def rank_min(means: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """Competition ('min') ranks, 1 = best, of each row of ``means`` (R, K) -> int (R, K).

    rank = 1 + number of models better by more than the tie margin (``TIE_RELATIVE``); an (R, K, K) comparison
    instead of a per-row scipy.stats.rankdata call, so 10,000 bootstrap rows cost one vectorised pass.
    """
    m = means if higher_is_better else -means
    margin = TIE_RELATIVE * np.fmax(np.abs(m).max(axis=1, keepdims=True), 1.0)  # a row holding NaN: margin at scale 1
    better = m[:, None, :] > (m + margin)[:, :, None]  # better[r, i, j]: model j beats model i in row r
    return 1 + better.sum(axis=2)


def rank_order(means: np.ndarray, names: list[str], higher: bool) -> list[int]:
    """The models' positions in rank order (the rank of the mean, then the name): the order a cell's pairs are in."""
    full_ranks = rank_min(means[None, :], higher)[0]
    return sorted(range(len(names)), key=lambda k: (full_ranks[k], names[k]))


def identical_groups(values: np.ndarray, names: list[str]) -> list[list[str]]:
    """Groups of two or more models whose (K, n) per-case ``values`` are equal on every case, each in the order of
    ``names``, the groups in the order of their first member: models that tie in every resample and every ranking."""
    _, inverse = np.unique(values, axis=0, return_inverse=True)
    groups: dict[int, list[str]] = {}
    for k, g in enumerate(np.ravel(inverse)):
        groups.setdefault(int(g), []).append(names[k])
    return [g for g in groups.values() if len(g) > 1]


def kendall_tau_b(ranks: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Kendall's tau-b between each row of ``ranks`` (R, K) and ``reference`` (K,) -> (R,).

    Written by hand because scipy.stats.kendalltau takes one pair of vectors: 10,000 calls per cell are
    too slow, while the pair-sign formulation is a single (R, K(K-1)/2) product. NaN where a ranking is
    constant (tau-b undefined), as scipy returns.
    """
    i, j = np.triu_indices(ranks.shape[1], k=1)
    small: type[np.signedinteger] = np.int16 if ranks.shape[1] < np.iinfo(np.int16).max else np.int64  # signs in 2-byte ints
    r = ranks.astype(small)
    sign_boot = np.sign(r[:, i] - r[:, j])
    sign_ref = np.sign(reference[i] - reference[j]).astype(small)
    n_pairs = i.size
    ties_boot = n_pairs - np.count_nonzero(sign_boot, axis=1)
    ties_ref = n_pairs - int(np.count_nonzero(sign_ref))
    score = (sign_boot * sign_ref).sum(axis=1, dtype=np.int64)
    denom = np.sqrt((n_pairs - ties_boot) * float(n_pairs - ties_ref))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, score / denom, np.nan)


def ranking_stability(boot_means: np.ndarray, full_ranks: np.ndarray, higher_is_better: bool, confidence: float) -> dict[str, np.ndarray]:
    """challengeR bootstrap ranking summaries for K ranked models from their (B, K) resampled means."""
    ranks = rank_min(boot_means, higher_is_better)
    n_models = ranks.shape[1]
    tail = (1.0 - confidence) / 2.0
    freq = np.bincount(((ranks - 1) + n_models * np.arange(n_models)[None, :]).ravel(), minlength=n_models * n_models).reshape(n_models, n_models)
    tau = kendall_tau_b(ranks, full_ranks)
    finite = tau[~np.isnan(tau)]
    tau_q = np.quantile(finite, [0.25, 0.5, 0.75]) if finite.size else np.full(3, np.nan)
    return {
        "p_rank1": (ranks == 1).mean(axis=0),
        "mean_rank": ranks.mean(axis=0),
        "median_rank": np.median(ranks, axis=0),
        "rank_low": np.quantile(ranks, tail, axis=0),
        "rank_high": np.quantile(ranks, 1.0 - tail, axis=0),
        "rank_frequency": freq,
        "tau_mean": finite.mean() if finite.size else np.nan,
        "tau_q": tau_q,
    }


def leave_one_out(jackknife: np.ndarray, full_ranks: np.ndarray, higher_is_better: bool) -> tuple[float, float]:
    """Leave-one-case-out (docs/methodology.md#58-leave-one-case-out): share of cases whose removal changes the winner(s), and changes any rank.

    ``jackknife`` (n, K) holds the means without case i, computed as (sum - x_i) / (n - 1), so all n
    rankings come from one vectorised rank_min call. The winner changes when the set of rank-1 models
    differs from the full-data set.
    """
    ranks = rank_min(jackknife, higher_is_better)
    winner_change = ((ranks == 1) != (full_ranks == 1)[None, :]).any(axis=1)
    any_change = (ranks != full_ranks[None, :]).any(axis=1)
    return float(winner_change.mean()), float(any_change.mean())
