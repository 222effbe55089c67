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

from dataclasses import dataclass

import numba
import numpy as np
from scipy.special import ndtr

from .ranking import kendall_tau_b, rank_min

SCHEMES = ("mean", "median", "rank_then_aggregate", "test_then_rank")
_BLOCK = 1024  # resamples per call of the test-then-rank walk (large blocks are faster than small ones; timed: benchmarks/README.md)


def case_ranks(values: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """Min ranks of the K models within each case of (K, n) values -> (K, n)."""
    return rank_min(values.T, higher_is_better).T


def average_ranks(ranks: np.ndarray) -> np.ndarray:
    """Rows of min ranks (R, K) -> the same orderings with tied models given their average rank."""
    ties = (ranks[:, :, None] == ranks[:, None, :]).sum(axis=2)
    return ranks + (ties - 1) / 2.0


@dataclass(frozen=True)
class PairRanks:
    """The signed-rank statistics of the pairs np.triu_indices(K, 1) of (K, n) values (differences a - b) and the |d|
    order they come from: sorted once per cell and read by the significance map (``pairwise.wilcoxon_map``), the
    test-then-rank score and its resamples, which would otherwise each sort the same differences."""

    diffs: np.ndarray  #: (P, n) differences
    order: np.ndarray  #: (P, n) each row's cases by |d|, zero differences last (equal |d| in any order)
    ordered: np.ndarray  #: (P, n) |d| in that order, zero differences as inf
    centred: np.ndarray  #: (P,) T+ - m(m+1)/4 (signed_rank_z)
    sd: np.ndarray  #: (P,) its SD
    m: np.ndarray  #: (P,) non-zero differences


def pair_ranks(values: np.ndarray) -> PairRanks:
    """:class:`PairRanks` of (K, n) values."""
    a, b = np.triu_indices(values.shape[0], k=1)
    diffs = values[a] - values[b]
    order, ordered = _abs_order(diffs)
    return PairRanks(diffs, order, ordered, *_signed_rank_stats(diffs, order, ordered))


def _abs_order(diffs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's cases by |d| (zero differences last, as inf) and the sorted |d|.

    The order of equal |d| is left to the sort (numpy's vectorised quicksort, faster here than a stable one): every
    statistic read from it treats a run of equal |d| as a whole (average ranks, group sums).
    """
    absd = np.where(diffs == 0, np.inf, np.abs(diffs))  # zeros rank last and are not counted
    order = np.argsort(absd, axis=1)
    return order, np.take_along_axis(absd, order, axis=1)


def signed_rank_z(diffs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Wilcoxon signed-rank statistic of each row of (P, n) differences: (T+ - m(m+1)/4, its SD, m).

    Zero differences dropped, tied |d| given average ranks, the tie-corrected variance
    (m(m+1)(2m+1) - sum(t^3 - t)/2) / 24: R's and scipy's normal approximation. One sort serves all
    rows; the reverse pair's statistic is the negative, so both directions cost one call.
    """
    return _signed_rank_stats(diffs, *_abs_order(diffs))


def _signed_rank_stats(diffs: np.ndarray, order: np.ndarray, ordered: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """signed_rank_z from the differences and their |d| order (:func:`_abs_order`); each row on its own."""
    m = (diffs != 0).sum(axis=1)
    t_plus, ties = _rank_sums(diffs, order, ordered)
    var = (m * (m + 1.0) * (2 * m + 1) - 0.5 * ties) / 24.0
    return t_plus - m * (m + 1.0) / 4.0, np.sqrt(var), m


@numba.njit(cache=True, nogil=True)
def _rank_sums(diffs: np.ndarray, order: np.ndarray, ordered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Per row: T+ (the average ranks of the runs of equal finite |d| in ``ordered``, summed over the positive
    differences) and sum(t^3 - t) over those runs. Integers and halves: exact in any order of summation."""
    n_rows, n_cases = diffs.shape
    t_plus, ties = np.zeros(n_rows), np.zeros(n_rows)
    for p in range(n_rows):
        start = 0
        while start < n_cases and np.isfinite(ordered[p, start]):
            end = start + 1
            while end < n_cases and ordered[p, end] == ordered[p, start]:
                end += 1
            rank = start + (end - start + 1) / 2.0
            for k in range(start, end):
                if diffs[p, order[p, k]] > 0:
                    t_plus[p] += rank
            ties[p] += float((end - start) ** 3 - (end - start))
            start = end
    return t_plus, ties


def test_then_rank_scores(values: np.ndarray, higher_is_better: bool, alpha: float, paired: PairRanks | None = None) -> np.ndarray:
    """challengeR's significance score per model: share of the other K - 1 models it beats at p <= alpha (unadjusted).

    'a beats b': one-sided test, normal approximation with continuity correction 0.5 (R's
    ``wilcox.test(exact = FALSE)``); a pair whose differences are all zero is no win (R gives no p-value).
    ``paired``: :func:`pair_ranks` of ``values`` where the caller holds it.
    """
    n_models = values.shape[0]
    if n_models < 2:
        return np.zeros(n_models)
    paired = paired or pair_ranks(values)
    return _win_shares(paired.centred, paired.sd, paired.m, n_models, higher_is_better, alpha)


def _win_shares(centred: np.ndarray, sd: np.ndarray, m: np.ndarray, n_models: int, higher_is_better: bool, alpha: float) -> np.ndarray:
    """Test-then-rank scores from the signed-rank statistics of the pairs np.triu_indices(K, 1): (..., P) -> (..., K)."""
    a, b = np.triu_indices(n_models, k=1)
    sign = 1.0 if higher_is_better else -1.0
    wins = np.zeros((*centred.shape[:-1], n_models))
    with np.errstate(invalid="ignore", divide="ignore"):
        for x, s in ((a, sign), (b, -sign)):  # 'a beats b' uses T+ of a - b, 'b beats a' its negative
            won = (m > 0) & (ndtr(-(s * centred - 0.5) / sd) <= alpha)
            wins += won @ (x[:, None] == np.arange(n_models)).astype(np.float64)  # wins per winner model
    return wins / (n_models - 1)


def resampled_test_then_rank(
    values: np.ndarray,
    higher_is_better: bool,
    alpha: float,
    counts: np.ndarray,
    paired: PairRanks | None = None,
) -> np.ndarray:
    """test_then_rank_scores of every resample, (K, n) values and (B, n) case counts -> (B, K), without materialising a resample."""
    n_models = values.shape[0]
    if n_models < 2:
        return np.zeros((counts.shape[0], n_models))
    paired = paired or pair_ranks(values)
    return _win_shares(*_resampled_signed_rank_z(paired.diffs, paired.order, paired.ordered, counts), n_models, higher_is_better, alpha)


def resampled_signed_rank_z(diffs: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """signed_rank_z of every resample: (P, n) differences, (B, n) case counts -> (B, P) arrays.

    Per pair, the cases are sorted once by |d| (zeros dropped) into tie groups. In a resample with case
    multiplicities c_i, a tie group holding T = sum of its c_i draws after C draws of smaller |d| gives
    each of its draws the average rank C + (T + 1) / 2 (drawing a case twice makes a tie), adds T^3 - T
    to the tie correction, and m = sum of the c_i over non-zero differences. The walk over the sorted
    cases runs in numba, vectorised over the resamples: O(B P n), no resample materialised.
    """
    return _resampled_signed_rank_z(diffs, *_abs_order(diffs), counts)


def _resampled_signed_rank_z(
    diffs: np.ndarray,
    order: np.ndarray,
    ordered: np.ndarray,
    counts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """resampled_signed_rank_z from the differences and their |d| order (:func:`_abs_order`)."""
    group_end = np.ones(ordered.shape, dtype=bool)
    group_end[:, :-1] = ordered[:, 1:] != ordered[:, :-1]
    positive = np.take_along_axis(diffs, order, axis=1) > 0
    n_nonzero = (diffs != 0).sum(axis=1)
    # Blocks of resamples with 1-byte counts: the walks of all pairs then read a block that stays in cache
    # (a float64 (n, B) matrix re-read from memory per pair made it memory-bound at n = 5,000).
    small = np.uint8 if counts.max(initial=0) <= np.iinfo(np.uint8).max else np.float64
    # 2 T+ and the draw counts are integers up to top (top + 1), top the most draws of a resample: int32 lanes where
    # they fit (twice float64's per vector)
    top = float(counts.sum(axis=1).max(initial=0))
    exact = np.int32 if small is np.uint8 and top * (top + 1.0) < np.iinfo(np.int32).max else np.float64
    blocks = []
    for r in range(0, counts.shape[0], _BLOCK):
        block = counts[r : r + _BLOCK]
        out = (
            np.zeros((order.shape[0], block.shape[0]), dtype=exact),
            np.empty((order.shape[0], block.shape[0])),
            np.zeros((order.shape[0], block.shape[0]), dtype=exact),
        )
        _resampled_signed_ranks(np.ascontiguousarray(block.T, dtype=small), order, group_end, positive, n_nonzero, *out)
        blocks.append(out)
    t_plus2, ties, below = (np.concatenate([block[i] for block in blocks], axis=1) for i in range(3))
    m = below.astype(np.float64)
    centred = t_plus2 / 2.0 - m * (m + 1.0) / 4.0
    sd = np.sqrt((m * (m + 1.0) * (2 * m + 1) - 0.5 * ties) / 24.0)
    return centred.T, sd.T, m.T


@numba.njit(cache=True, nogil=True, fastmath=True)
def _resampled_signed_ranks(
    counts_t: np.ndarray,
    order: np.ndarray,
    group_end: np.ndarray,
    positive: np.ndarray,
    n_nonzero: np.ndarray,
    t_plus2: np.ndarray,
    ties: np.ndarray,
    below: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Into (P, B) ``t_plus2`` 2 T+, ``ties`` sum(T^3 - T) over tie groups and ``below`` m (both zeros on entry, of one
    integer or float type), for (n, B) counts (any numeric type) and per pair p its cases in |d| order.

    A case alone in its tie group adds c^3 - c, which does not depend on the pair: the tie term starts
    from that sum over all cases, and the walk corrects it only at zero differences and shared |d|.
    All values are integers (2 T+ rather than T+ with its halves) far below 2^31 where the caller passes int32
    (2^53 for float64), so fastmath's reordering (which lets the loops over the resamples vectorise) cannot change a result.
    """
    n_pairs, n_cases, n_resamples = order.shape[0], order.shape[1], counts_t.shape[1]
    cubes = np.zeros(n_resamples)
    for i in range(n_cases):
        for r in range(n_resamples):
            c = float(counts_t[i, r])
            cubes[r] += c * c * c - c
    group = np.zeros_like(below[0])
    group_pos = np.zeros_like(below[0])
    for p in range(n_pairs):
        tp, tt, cb = t_plus2[p], ties[p], below[p]
        tt[:] = cubes
        for k in range(n_nonzero[p], n_cases):  # zero differences: not ranked
            row = counts_t[order[p, k]]
            for r in range(n_resamples):
                c = float(row[r])
                tt[r] -= c * c * c - c
        single = True  # the current position starts a tie group
        for k in range(n_nonzero[p]):
            row = counts_t[order[p, k]]
            if single and group_end[p, k]:  # a group of one case: the common case, one pass
                if positive[p, k]:  # its c draws take the ranks cb + 1 ... cb + c: 2 T+ gains c (2 cb + c + 1)
                    for r in range(n_resamples):
                        c = row[r]
                        tp[r] += c * (2 * cb[r] + c + 1)
                        cb[r] += c
                else:  # a negative difference only moves the ranks above it
                    for r in range(n_resamples):
                        cb[r] += row[r]
                continue
            pos = 1 if positive[p, k] else 0
            for r in range(n_resamples):
                c = row[r]
                group[r] += c
                group_pos[r] += pos * c
                cf = float(c)
                tt[r] -= cf * cf * cf - cf
            single = bool(group_end[p, k])
            if single:  # the group's g draws share the average rank cb + (g + 1) / 2
                for r in range(n_resamples):
                    g = group[r]
                    tp[r] += group_pos[r] * (2 * cb[r] + g + 1)
                    gf = float(g)
                    tt[r] += gf * gf * gf - gf
                    cb[r] += g
                    group[r] = 0
                    group_pos[r] = 0


def scheme_scores(
    values: np.ndarray,
    higher_is_better: bool,
    alpha: float,
    paired: PairRanks | None = None,
) -> dict[str, tuple[np.ndarray, bool]]:
    """Per scheme: each model's score and whether higher scores rank better (``paired``: as test_then_rank_scores)."""
    return {
        "mean": (values.mean(axis=1), higher_is_better),
        "median": (np.median(values, axis=1), higher_is_better),
        "rank_then_aggregate": (case_ranks(values, higher_is_better).mean(axis=1), False),
        "test_then_rank": (test_then_rank_scores(values, higher_is_better, alpha, paired), True),
    }


def resampled_scores(
    values: np.ndarray,
    higher_is_better: bool,
    alpha: float,
    counts: np.ndarray,
    paired: PairRanks | None = None,
) -> dict[str, np.ndarray]:
    """Scores of every scheme for (B, n) case counts -> {scheme: (B, K)}.

    Means and mean case ranks are count products (a case's ranks among the models do not change when
    it is drawn again). Medians: each model's values sorted once; the median of a resample is read off
    the cumulative counts in that order (numpy's median: the middle element, or the average of the two).
    Test-then-rank: resampled_test_then_rank.
    """
    n_cases = values.shape[1]
    out = {"mean": counts @ values.T / n_cases, "rank_then_aggregate": counts @ case_ranks(values, higher_is_better).T / n_cases}
    out["median"] = _resampled_medians(values, counts)
    out["test_then_rank"] = resampled_test_then_rank(values, higher_is_better, alpha, counts, paired)
    return out


def _resampled_medians(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Median of each model's values over each resample: (K, n), (B, n) -> (B, K).

    Each model's values are sorted once; a resample's median is where the running count of its draws
    in that order passes the middle (numpy's median: the middle draw, or the average of the two). The walks start
    4 sqrt(n) positions short of the middle (over 5 SDs of a resample's draws there), with the draws before that
    position from one product (integers: exact), instead of at the first value.
    """
    n_models, n_cases = values.shape
    orders = np.argsort(values, axis=1, kind="stable")
    lo, hi = (n_cases + 1) // 2, n_cases // 2 + 1
    start = max(0, lo - 1 - int(4 * np.sqrt(n_cases)))
    before = np.zeros((n_cases, n_models))
    before[orders[:, :start], np.arange(n_models)[:, None]] = 1.0
    return _median_walk(np.take_along_axis(values, orders, axis=1), orders, counts, lo, hi, start, counts @ before)


@numba.njit(cache=True, nogil=True)
def _median_walk(
    ordered: np.ndarray,
    orders: np.ndarray,
    counts: np.ndarray,
    lo: int,
    hi: int,
    start: int,
    drawn_before: np.ndarray,
) -> np.ndarray:  # pragma: no cover - compiled
    """Average of the lo-th and hi-th (1-based) draw in each model's sorted order, per resample: (B, K). The walk
    starts at position ``start`` where the (B, K) ``drawn_before`` (draws at earlier positions) is below lo, else
    at the first position."""
    n_models, n_resamples = ordered.shape[0], counts.shape[0]
    out = np.empty((n_resamples, n_models))
    for r in range(n_resamples):
        row = counts[r]
        for k in range(n_models):
            seen, low, j = drawn_before[r, k], np.nan, start
            if seen >= lo:  # the lo-th draw lies before start (over 5 SDs out): from the first position
                seen, j = 0.0, 0
            while True:
                seen += row[orders[k, j]]
                if seen >= lo and np.isnan(low):
                    low = ordered[k, j]
                if seen >= hi:
                    break
                j += 1
            out[r, k] = (low + ordered[k, j]) / 2.0
    return out


def schemes(
    values: np.ndarray,
    names: list[str],
    higher_is_better: bool,
    alpha: float,
    counts: np.ndarray,
    paired: PairRanks | None = None,
) -> tuple[dict, np.ndarray]:
    """Ranks under every scheme, Kendall's tau between schemes, and the bootstrap stability of each.

    ``counts`` (B, n): case counts of the resamples. Stability per scheme: P(rank 1) per model and the
    median Kendall tau-b between the resampled and the full-data ranking. Second result: the (B, K)
    resampled ranks of the mean, for the consensus. ``paired``: :func:`pair_ranks` of ``values`` where the caller holds it.
    """
    paired = paired or (pair_ranks(values) if len(names) > 1 else None)
    scores = scheme_scores(values, higher_is_better, alpha, paired)
    ranks = {s: rank_min(score[None, :], higher)[0] for s, (score, higher) in scores.items()}
    tau = {s: {t: float(kendall_tau_b(ranks[s][None, :], ranks[t])[0]) for t in SCHEMES} for s in SCHEMES}
    stability, boot_mean = {}, None
    for s, boot in resampled_scores(values, higher_is_better, alpha, counts, paired).items():
        boot_ranks = rank_min(boot, scores[s][1])
        boot_mean = boot_ranks if s == "mean" else boot_mean
        taus = kendall_tau_b(boot_ranks, ranks[s])
        stability[s] = {
            "p_rank1": dict(zip(names, (boot_ranks == 1).mean(axis=0))),
            "kendall_tau_median": float(np.nanmedian(taus)) if np.isfinite(taus).any() else None,
        }
    return {
        "ranks": {s: dict(zip(names, ranks[s])) for s in SCHEMES},
        "scores": {s: dict(zip(names, scores[s][0])) for s in SCHEMES},
        "kendall_tau": tau,
        "stability": {s: stability[s] for s in SCHEMES},
        "n_resamples": counts.shape[0],
    }, boot_mean  # type: ignore[return-value]  # set: "mean" is one of the schemes


def consensus(ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """challengeR's consensus (mean rank) of (R, T, K) per-task min ranks -> (R, K) mean ranks and their min ranks.

    NaN marks a model without a rank in a task; it is left out of that model's mean.
    """
    avg = np.where(np.isnan(ranks), np.nan, average_ranks(np.nan_to_num(ranks, nan=np.inf).reshape(-1, ranks.shape[-1])).reshape(ranks.shape))
    mean = np.nanmean(avg, axis=1)
    return mean, rank_min(mean, higher_is_better=False)
