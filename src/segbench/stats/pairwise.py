"""Pairwise comparisons of ranked models: bootstrap separability (docs/methodology.md#55-pairwise-separability), Wilcoxon map (#56-significance-map)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, cast

import numba
import numpy as np
from scipy import stats
from scipy.special import ndtr, ndtri

from .bootstrap_t import StudentizedBootstrap, studentized_bootstrap
from .resampling import CHUNK_ENTRIES, intervals, smallest_first, sort_columns, tail_count_needed
from .schemes import PairRanks, signed_rank_z


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


def pair_bootstrap_p_values(boot: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`bootstrap_p_values` of the differences boot[:, a] - boot[:, b] of (B, K) resampled means, counted per
    pair without forming the (B, P) differences (under the sign-flip test they are needed for nothing else)."""
    below, above = np.zeros(a.size, dtype=np.int64), np.zeros(a.size, dtype=np.int64)
    _tail_counts(np.ascontiguousarray(boot.T), a, b, below, above)
    return np.minimum(1.0, 2.0 * np.minimum(below, above) / boot.shape[0])


@numba.njit(cache=True, nogil=True)
def _tail_counts(columns: np.ndarray, a: np.ndarray, b: np.ndarray, below: np.ndarray, above: np.ndarray) -> None:  # pragma: no cover - compiled
    """below[p] = #{r: columns[a[p], r] - columns[b[p], r] <= 0}, above[p] likewise for >= 0 (each model's resamples
    one contiguous row: the count over them vectorises)."""
    for p in range(a.size):
        first, second = columns[a[p]], columns[b[p]]
        at_most, at_least = 0, 0
        for r in range(first.size):
            d = first[r] - second[r]
            at_most += np.int64(d <= 0.0)  # type: ignore[assignment]  # numba kernel: the counts are int64 there
            at_least += np.int64(d >= 0.0)  # type: ignore[assignment]  # numba kernel: the counts are int64 there
        below[p], above[p] = at_most, at_least


def separability(
    diff_boot: np.ndarray | None,
    diff: np.ndarray,
    diff_jack: np.ndarray | None,
    *,
    alpha: float,
    correction: str,
    ci_method: str,
    test: PairTest | None = None,
    p_boot: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Holm- or Bonferroni-adjusted separability of P pairs, each with the interval of its mean difference that decides it.

    bonferroni: every pair at level 1 - alpha/P; separable when its interval excludes 0.
    holm (step-down, Holm 1979): with m pairs not yet separated, those whose interval at level 1 - alpha/m excludes 0
    are separated, in p-value order (ties by pair order) at the step levels 1 - alpha/m, 1 - alpha/(m - 1), ... (the
    intervals are nested, so each still excludes 0); repeated until no interval at 1 - alpha/m excludes 0: those
    pairs are not separable and are reported at that stopping level. With p-values that decide (below) this is Holm's
    step-down on the sorted p-values; with bootstrap CIs, whose methods need not order pairs as the bootstrap p-values
    do, it keeps every reported interval on the side of 0 its verdict says. ``ci_level`` gives each pair's level: the
    intervals are per pair at their step's level, not simultaneous (their joint coverage is below 1 - alpha).

    Without ``test`` (``pairwise_test: bootstrap_ci``) the intervals are paired-bootstrap CIs of ``diff_boot``
    (``ci_method``) and the bootstrap p-values order the pairs. With ``test`` (:class:`MeanTest`, or the sign-flip test
    alone, :class:`SignFlips`) its p-values order and decide the pairs (separable when p < the step's alpha) and the
    intervals are the test's inversion at the same levels (``test.interval``), so a pair is separable exactly when its
    interval excludes 0; ``p_adjusted`` holds the Holm- or Bonferroni-adjusted p-values.

    ``p_boot``: the bootstrap p-values where the caller has them (:func:`pair_bootstrap_p_values`); with it and
    ``test`` the resampled differences are read for nothing, and ``diff_boot`` and ``diff_jack`` may be None.
    """
    p_boot = bootstrap_p_values(diff_boot) if p_boot is None else p_boot  # type: ignore[arg-type]  # diff_boot is given without p_boot
    n_pairs = p_boot.size
    p_values = None if test is None else test.p
    if test is None:
        diff_boot = sort_columns(diff_boot)  # type: ignore[arg-type]  # once for every interval below; given without a test

    def interval(columns: np.ndarray, level_alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if test is not None:
            return test.interval(level_alpha, columns)
        jack = None if diff_jack is None else diff_jack[:, columns]
        return intervals(diff_boot[:, columns], diff[columns], jack, level_alpha, ci_method, presorted=True)  # type: ignore[index]  # as above

    def excludes(columns: np.ndarray, level_alpha: np.ndarray) -> np.ndarray:
        if p_values is not None:
            return p_values[columns] < level_alpha
        low, high = interval(columns, level_alpha)
        return (low > 0) | (high < 0)

    separable = np.zeros(n_pairs, dtype=bool)
    if correction == "bonferroni":
        level_alpha = np.full(n_pairs, alpha / n_pairs)
        separable[:] = excludes(np.arange(n_pairs), level_alpha)
    else:
        level_alpha = np.empty(n_pairs)
        remaining = np.argsort(p_boot if p_values is None else p_values, kind="stable")
        while remaining.size:
            m = remaining.size
            hit = excludes(remaining, np.full(m, alpha / m))
            if not hit.any():
                level_alpha[remaining] = alpha / m
                break
            level_alpha[remaining[hit]] = alpha / (m - np.arange(hit.sum()))
            separable[remaining[hit]] = True
            remaining = remaining[~hit]
    low, high = interval(np.arange(n_pairs), level_alpha)
    out = {"ci_low": low, "ci_high": high, "ci_level": 1.0 - level_alpha, "p_bootstrap": p_boot, "separable": separable}
    if isinstance(test, MeanTest):
        out["p_sign_flip"], out["p_bootstrap_t"] = test.flips.p, test.studentized.p
    if p_values is not None:
        out["p_test"] = p_values
        out["p_adjusted"] = holm(p_values) if correction == "holm" else np.minimum(1.0, p_values * n_pairs)
    return out


@dataclass(frozen=True)
class SignFlips:
    """The sign-flip test of P pairs' mean differences, kept so that it can be inverted into intervals.

    Flip s reaches the observed statistic at δ (|sum of s_i (d_i - δ)| >= |sum of (d_i - δ)|) exactly for δ in
    [lo_s, hi_s], between the mean of d over its flipped and over its unflipped cases (Hartigan 1969); flips of
    every case or of none reach at every δ. Every [lo_s, hi_s] holds the mean difference, so the δ the test accepts
    form one interval, bounded by order statistics of lo and hi (:meth:`interval`).
    """

    p: np.ndarray  #: (P,) p-value of 'mean difference = 0', from the same flips as the intervals
    n_flips: int
    lowest: np.ndarray  #: (k, P) the k smallest lo_s per pair, ascending
    highest: np.ndarray  #: (k, P) the k largest hi_s per pair, descending
    mean: np.ndarray  #: (P,) mean difference
    spread: np.ndarray  #: (P,) sum of squared deviations from the mean difference
    n_cases: np.ndarray  #: (P,) cases of each pair
    tolerance: np.ndarray  #: (P,) ties on the sum scale (the tail bound's)
    slack: np.ndarray  #: (P,) ties on the difference scale (the flips' intervals)

    def interval(self, alpha: np.ndarray, columns: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """The (low, high) of the mean differences δ the test does not reject at level ``alpha`` (one per column).

        Accepted: count(δ) >= c (:func:`~segbench.stats.resampling.tail_count_needed`); where c <= 0 also where no flip reaches but the tail
        bound's p-value at δ is >= alpha, which holds while |mean - δ| <= :func:`tail_bound_radius`. So p(0) < alpha
        exactly when 0 is outside the interval.
        """
        alpha = np.asarray(alpha, dtype=np.float64)
        lowest, highest, slack = self.lowest[:, columns], self.highest[:, columns], self.slack[columns]
        count = tail_count_needed(alpha, self.n_flips)
        row = np.clip(count, 1, lowest.shape[0]) - 1
        at = np.arange(lowest.shape[1])
        low, high = lowest[row, at] - slack, highest[row, at] + slack
        tail = count <= 0
        if tail.any():
            radius = tail_bound_radius(self.spread[columns][tail], self.n_cases[columns][tail], self.tolerance[columns][tail], alpha[tail])
            mean = self.mean[columns][tail]
            low[tail] = np.minimum(low[tail], mean - radius)
            high[tail] = np.maximum(high[tail], mean + radius)
        return low, high

    #: the fields with one entry per pair (in their last axis)
    PER_PAIR: ClassVar[tuple[str, ...]] = ("p", "lowest", "highest", "mean", "spread", "n_cases", "tolerance", "slack")

    def part(self, columns: np.ndarray | slice) -> SignFlips:
        """The test of the pairs at ``columns`` only."""
        return SignFlips(n_flips=self.n_flips, **{name: getattr(self, name)[..., columns] for name in self.PER_PAIR})


def sign_flips(
    diffs: np.ndarray,
    n_flips: int,
    rng: np.random.Generator,
    alpha: float,
    factors: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> SignFlips:
    """The two-sided sign-flip permutation test of 'mean difference = 0' per row of (P, n) paired differences.

    Under the null that a and b are exchangeable in each case, every case's difference is as likely with either
    sign; ``n_flips`` random sign vectors, shared by the rows, give the null distribution of |sum|, and
    p = (1 + #{flips reaching the observed sum}) / (n_flips + 1), which is exact at any n (the observed signs count
    as one draw; flips are drawn in chunks of bounded memory). Studentizing changes nothing: under flips the sum of
    squares is fixed, so |t| grows with |sum|. A flip reaches at 0 when its interval [lo_s, hi_s] holds 0 (within
    ``slack``: the same sum in another order is a tie): the arrays the intervals come from.

    Where no flip reaches the observed sum, the Monte-Carlo p-value is only its floor 1 / (n_flips + 1), which Holm
    over many pairs cannot use (171 pairs at alpha 0.05 need p < 2.9e-4). There p is the smaller of that floor and
    :func:`sign_flip_tail_bound`, an upper bound of the exact permutation p-value: the result stays a valid p-value
    (P(p <= alpha) <= alpha at every alpha; docs/methodology.md#55-pairwise-separability).

    Kept for the intervals: per pair the k smallest lo_s and largest hi_s, k the count needed at ``alpha`` (every
    level the analysis asks for is at most the family's alpha), so memory stays (4k + chunk) x P at any n_flips.

    ``factors`` (values (K, n), a, b) with diffs = values[a] - values[b] (the K models' pairs): each flip's sums come
    from one product with the K models' values, differenced per pair (K columns instead of K(K-1)/2: the product is
    most of the test's time). That sum carries the rounding of the models' sums, not of their differences; where that
    rounding could decide whether the flip reaches (0 within its bound of an interval end, a tie), the flip's sum is
    recomputed from the differences, so ties count as they do without ``factors``.
    """
    n_pairs, n = diffs.shape
    total = diffs.sum(axis=1)
    tolerance = 1e-9 * np.abs(diffs).sum(axis=1)
    slack = tolerance / max(n, 1)
    keep = int(min(max(int(tail_count_needed(alpha, n_flips)), 1), n_flips))
    reach = np.zeros(n_pairs)
    chunk = max(1, CHUNK_ENTRIES // max(n, 1))
    # per pair one contiguous row of lo_s and one of -hi_s: the selections below partition contiguous memory
    capacity = min(n_flips, 4 * keep + chunk)
    lows, highs = np.empty((n_pairs, capacity)), np.empty((n_pairs, capacity))
    signs, signs_sum = np.empty((min(chunk, n_flips), n)), np.empty(min(chunk, n_flips))  # reused: new pages cost more than the pass
    if factors is None:
        product, first, second, bound = diffs.T, np.arange(n_pairs), np.full(n_pairs, -1), np.zeros(n_pairs)
    else:
        values, first, second = factors
        product = values.T
        # a bound of the rounding of a difference of two flipped sums of n terms (n eps per sum of |x|, doubled)
        absolute = np.abs(values).sum(axis=1)
        bound = 2.0 * n * np.finfo(np.float64).eps * (absolute[first] + absolute[second])
    filled = 0
    for start in range(0, n_flips, chunk):
        size = min(chunk, n_flips - start)
        if filled + size > capacity:  # trim now and then, not per chunk: one partition per pair in most cases
            smallest_first(lows[:, :filled], keep)
            smallest_first(highs[:, :filled], keep)
            filled = keep
        # a fair bit per case: the top bit of a 32-bit draw, the bit integers(0, 2) returns from the same stream
        _signs(_uint32_draws(rng, size, n), signs, signs_sum)
        _flip_intervals(signs[:size] @ product, first, second, bound, signs[:size], diffs, signs_sum[:size], total, n, slack, lows, highs, filled, reach)
        filled += size
    lowest = np.ascontiguousarray(np.sort(smallest_first(lows[:, :filled], keep), axis=1).T)
    highest = -np.ascontiguousarray(np.sort(smallest_first(highs[:, :filled], keep), axis=1).T)
    p = (1.0 + reach) / (n_flips + 1.0)
    beyond = reach == 0
    p[beyond] = np.minimum(p[beyond], sign_flip_tail_bound(diffs[beyond], tolerance[beyond]))
    mean = total / max(n, 1)
    spread = ((diffs - mean[:, None]) ** 2).sum(axis=1)
    return SignFlips(
        p=p, n_flips=n_flips, lowest=lowest, highest=highest, mean=mean, spread=spread, n_cases=np.full(n_pairs, n), tolerance=tolerance, slack=slack
    )


def _uint32_draws(rng: np.random.Generator, size: int, n: int) -> np.ndarray:
    """``rng.integers(0, 2**32, size=(size, n), dtype=np.uint32)``, the same numbers, faster (timed: benchmarks/README.md).

    Full-range 32-bit draws are PCG64's 64-bit outputs split low half first (numpy's buffered uint32), so an even
    count with no half left over from an earlier draw is the raw stream viewed as uint32; anything else draws as
    numpy does.
    """
    if isinstance(rng.bit_generator, np.random.PCG64) and size * n % 2 == 0 and not rng.bit_generator.state["has_uint32"]:
        return rng.bit_generator.random_raw(size * n // 2).view(np.uint32).reshape(size, n)
    return rng.integers(0, 2**32, size=(size, n), dtype=np.uint32)


def merge_tests(parts: list[tuple[np.ndarray, PairTest]], n_pairs: int) -> PairTest:
    """One test of ``n_pairs`` pairs from tests of groups of them: [(pair positions, test), ...], every test of the same
    kind, resample count and alpha (pairs on different case sets, pairwise-complete alignment)."""
    first = parts[0][1]
    if isinstance(first, MeanTest):
        means = cast(list[tuple[np.ndarray, MeanTest]], parts)  # every test of one kind
        return MeanTest(
            cast(SignFlips, merge_tests([(at, part.flips) for at, part in means], n_pairs)),
            cast(StudentizedBootstrap, merge_tests([(at, part.studentized) for at, part in means], n_pairs)),  # type: ignore[misc]  # merged field by field as a PairTest is
        )
    fields: dict[str, Any] = {}
    for name in first.PER_PAIR:
        shape = getattr(first, name).shape[:-1] + (n_pairs,)
        merged = np.empty(shape, dtype=getattr(first, name).dtype)
        for positions, part in parts:
            merged[..., positions] = getattr(part, name)
        fields[name] = merged
    return replace(first, **fields)


@numba.njit(cache=True, nogil=True)
def _signs(draws: np.ndarray, signs: np.ndarray, sums: np.ndarray) -> None:  # pragma: no cover - compiled
    """(F, n) uint32 draws -> the first F rows of ``signs``: +1.0 (top bit set) or -1.0, and of ``sums``: each row's
    sum (exact: integers)."""
    n_flips, n = draws.shape
    for r in range(n_flips):
        ups = 0
        for i in range(n):  # no float accumulator: the loop vectorises
            up = draws[r, i] >> 31
            signs[r, i] = 2.0 * up - 1.0
            ups += up
        sums[r] = 2.0 * ups - n


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _flip_intervals(
    flipped: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    bound: np.ndarray,
    signs: np.ndarray,
    diffs: np.ndarray,
    signs_sum: np.ndarray,
    total: np.ndarray,
    n: int,
    slack: np.ndarray,
    lows: np.ndarray,
    highs: np.ndarray,
    at: int,
    reach: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Per flip f (rows of ``flipped``) and pair p the interval [lo, hi] of δ at which the flip reaches the observed
    statistic, stored as lows[p, at + f] = lo and highs[p, at + f] = -hi; reach[p] counts the flips whose interval
    holds 0 (within ``slack``).

    The flip's sum A = sum of s_i d_i is flipped[f, first[p]] - flipped[f, second[p]] (no second term where it is
    -1); where 0 lies within the rounding ``bound`` of A (scaled to an interval end) of lo - slack or hi + slack, A is
    recomputed from ``signs`` and ``diffs``. ``signs_sum`` (F,): m = sum of s_i; ``total`` (P,): S. The ends are the
    mean of d over the flipped cases, (S - A) / (n - m), and over the others, (S + A) / (n + m); a flip of every case
    or of none reaches at every δ.

    64 flips at a time, their sums transposed so that each pair's pass reads and writes contiguous memory and
    vectorises (the divisions are most of the work); the rare flips that need more (a recomputed sum, all or no
    case flipped) send the pair's 64 flips through :func:`_flip_intervals_exact`, which gives the same values.
    """
    n_flips, n_columns = flipped.shape
    n_pairs = first.shape[0]
    sums = np.zeros((n_columns + 1, 64))  # row n_columns: the absent second term (x - 0.0 is x)
    for block in range(0, n_flips, 64):
        size = min(64, n_flips - block)
        for f in range(size):
            for c in range(n_columns):
                sums[c, f] = flipped[block + f, c]
        for p in range(n_pairs):
            row_a, row_b = sums[first[p]], sums[second[p] if second[p] >= 0 else n_columns]
            low, high = lows[p, at + block : at + block + size], highs[p, at + block : at + block + size]
            t, s, b = total[p], slack[p], bound[p]
            for f in range(size):
                lo, hi = _ends(t, row_a[f] - row_b[f], n, signs_sum[block + f])
                low[f] = lo
                high[f] = -hi
            count, unusual = 0, 0  # integer counts: the loop vectorises
            for f in range(size):
                m = signs_sum[block + f]
                error = b / (n - abs(m))
                lo, hi = low[f], -high[f]
                unusual += np.int64((abs(m) == n) | ((b > 0.0) & ((abs(lo - s) <= error) | (abs(hi + s) <= error))))  # type: ignore[assignment]  # numba kernel: the counts are int64 there
                count += np.int64((lo - s <= 0.0) & (hi + s >= 0.0))  # type: ignore[assignment]  # numba kernel: the counts are int64 there
            if unusual:
                count = _flip_intervals_exact(flipped, first[p], second[p], b, signs, diffs[p], signs_sum, t, n, s, low, high, block, size)
            reach[p] += count


@numba.njit(cache=True, nogil=True)
def _flip_intervals_exact(
    flipped: np.ndarray,
    first: int,
    second: int,
    bound: float,
    signs: np.ndarray,
    diffs: np.ndarray,
    signs_sum: np.ndarray,
    total: float,
    n: int,
    slack: float,
    low: np.ndarray,
    high: np.ndarray,
    block: int,
    size: int,
) -> int:  # pragma: no cover - compiled
    """:func:`_flip_intervals` of one pair and the flips block ... block + size, flip by flip with every case handled:
    writes low[f] = lo, high[f] = -hi and returns the count of flips that reach at 0."""
    count = 0
    for f in range(block, block + size):
        m = signs_sum[f]
        if abs(m) == n:
            lo, hi = -np.inf, np.inf
        else:
            flip_sum = flipped[f, first]
            if second >= 0:
                flip_sum -= flipped[f, second]
            lo, hi = _ends(total, flip_sum, n, m)
            if bound > 0.0:
                error = bound / (n - abs(m))
                if abs(lo - slack) <= error or abs(hi + slack) <= error:
                    flip_sum = 0.0
                    for i in range(n):
                        flip_sum += signs[f, i] * diffs[i]
                    lo, hi = _ends(total, flip_sum, n, m)
        if lo - slack <= 0.0 and hi + slack >= 0.0:
            count += 1
        low[f - block] = lo
        high[f - block] = -hi
    return count


@numba.njit(cache=True, nogil=True, inline="always")
def _ends(total: float, flip_sum: float, n: int, m: float) -> tuple[float, float]:  # pragma: no cover - compiled
    """(lo, hi): the means of the differences over the flipped and over the unflipped cases, in order."""
    over_flipped = (total - flip_sum) / (n - m)
    over_unflipped = (total + flip_sum) / (n + m)
    return min(over_flipped, over_unflipped), max(over_flipped, over_unflipped)


def tail_bound_radius(spread: np.ndarray, n: np.ndarray, tolerance: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """The largest |mean - δ| at which :func:`sign_flip_tail_bound` of the differences d - δ is still >= alpha.

    With x = mean - δ the bound's z is (n|x| - tolerance) / sqrt(spread + n x²), increasing in |x|; z = z_alpha,
    where 4e³/9 (1 - Φ(z_alpha)) = alpha, has the root below. Unbounded where n <= z_alpha² (the bound never falls to
    alpha there).
    """
    z = -ndtri(np.minimum(alpha / (2.0 * PINELIS_CONSTANT), 0.5))
    q = n * n - n * z * z
    with np.errstate(divide="ignore", invalid="ignore"):
        radius = (n * tolerance + z * np.sqrt(n * tolerance**2 + np.maximum(q, 0.0) * spread)) / q
    return np.where(q > 0, radius, np.inf)


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


@dataclass(frozen=True)
class MeanTest:
    """The separable verdict's test of P pairs' mean differences: the sign-flip test and the studentized bootstrap test
    together, a pair separated only when both reject (p = the larger p-value).

    Each is a valid test of 'mean difference = 0' where its own assumption holds: the sign flips exactly at any n when
    the models are exchangeable in each case (the differences symmetric about 0), the bootstrap-t without that
    assumption as n grows (skewed differences: a steady model against one better on most cases with rare failures), so
    their larger p-value is valid wherever either is. Its inversion is the union of the two tests' intervals (both hold
    the mean difference, so the union is one interval): a pair is separable exactly when it excludes 0.
    """

    flips: SignFlips
    studentized: StudentizedBootstrap

    @property
    def p(self) -> np.ndarray:
        """(P,) the test's p-value: the larger of the two."""
        return np.maximum(self.flips.p, self.studentized.p)

    def interval(self, alpha: np.ndarray, columns: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """The (low, high) of the δ either test accepts at ``alpha``: the union of their intervals."""
        (flip_low, flip_high), (t_low, t_high) = self.flips.interval(alpha, columns), self.studentized.interval(alpha, columns)
        return np.minimum(flip_low, t_low), np.maximum(flip_high, t_high)

    def part(self, columns: np.ndarray | slice) -> MeanTest:
        """The test of the pairs at ``columns`` only."""
        return MeanTest(self.flips.part(columns), self.studentized.part(columns))


#: a test that decides separability and inverts into intervals (:func:`separability`'s ``test``)
PairTest = SignFlips | MeanTest


def mean_test(
    values: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    pairwise_test: str,
    n_resamples: int,
    alpha: float,
    flip_rng: np.random.Generator,
    bootstrap: np.random.Generator | StudentizedBootstrap,
) -> PairTest:
    """The separable verdict's test of the pairs (a[p], b[p]) of the (K, n) ``values``: under ``sign_flip_bootstrap_t``
    the sign flips (from ``flip_rng``) and the studentized bootstrap together (:class:`MeanTest`), under ``sign_flip``
    the sign flips alone; ``n_resamples`` draws each, intervals kept down to level ``alpha``. ``bootstrap``: the
    generator the studentized bootstrap draws its resamples from, or that test of the same pairs already tallied from
    resamples it shares (a structure's bootstrap of the means, :class:`StudentizedTally`)."""
    used, at = np.unique(np.concatenate([a, b]), return_inverse=True)
    rows, first, second = values[used], at[: a.size], at[a.size :]
    diffs = rows[first] - rows[second]
    flips = sign_flips(diffs, n_resamples, flip_rng, alpha, factors=(rows, first, second))
    if pairwise_test == "sign_flip":
        return flips
    if isinstance(bootstrap, StudentizedBootstrap):
        if not np.array_equal(bootstrap.mean, diffs.mean(axis=1)):
            raise ValueError("mean_test: the studentized bootstrap given was tallied for other pairs")
        return MeanTest(flips, bootstrap)
    return MeanTest(flips, studentized_bootstrap(diffs, n_resamples, bootstrap, alpha, factors=(rows, first, second)))


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
    # Work on the models' patterns packed 8 cases a byte: equal rows are equal bytes, and bytes order as the rows do
    # (first case in the top bit), so the groups come in np.unique(masks, axis=0)'s order without its slow row sort.
    n_cases = observed.shape[1]
    packed = np.packbits(observed, axis=1)
    rows = [row.tobytes() for row in packed]
    masks: dict[tuple[bytes, bytes], bytes] = {}  # per pair of model patterns: their common cases
    pair_mask = []
    for i, j in zip(a.tolist(), b.tolist()):
        mask = masks.get((rows[i], rows[j]))
        if mask is None:
            mask = masks[rows[i], rows[j]] = (packed[i] & packed[j]).tobytes()
        pair_mask.append(mask)
    distinct = sorted(set(pair_mask))
    group = {mask: g for g, mask in enumerate(distinct)}
    group_of = np.array([group[mask] for mask in pair_mask], dtype=np.int64)
    return [
        (np.flatnonzero(group_of == g), np.flatnonzero(np.unpackbits(np.frombuffer(mask, dtype=np.uint8), count=n_cases))) for g, mask in enumerate(distinct)
    ]


def wilcoxon_map(values: np.ndarray, higher_is_better: bool, alpha: float, paired: PairRanks | None = None) -> dict[str, np.ndarray]:
    """Significance map (docs/methodology.md#56-significance-map) of K models' (K, n) values -> (K, K) matrices.

    Cell (a, b): one-sided Wilcoxon signed-rank test 'a better than b' (alternative 'greater' for
    higher-is-better metrics, 'less' for distances) on the cases both have (NaN = case missing for
    that model; docs/methodology.md#513-case-alignment), scipy's defaults otherwise. All K(K-1)
    p-values are Holm-adjusted together. A pair whose differences are all zero (or that has no
    common case) gets p = 1 (never significant). The diagonal is NaN. ``n_cases`` counts each
    pair's common cases. ``paired``: ``schemes.pair_ranks`` of ``values`` where the caller holds it (read for the
    pairs when every model has every case).
    """
    n_models = values.shape[0]
    a, b = np.nonzero(~np.eye(n_models, dtype=bool))
    alternative = "greater" if higher_is_better else "less"  # of scipy.stats.wilcoxon, used for n <= 50
    p = np.ones(a.size)
    n_common = np.zeros(a.size, dtype=np.int64)
    observed = ~np.isnan(values)
    whole = bool(observed.all())
    # every model on every case (shared cases): one group, without grouping the (K, n) observed patterns
    groups = [(np.arange(a.size), np.arange(values.shape[1]))] if whole else common_case_groups(observed, a, b)
    for pairs, cases in groups:
        n_common[pairs] = cases.size
        if paired is not None and whole and cases.size > 50:
            # the pairs' differences are paired.diffs (np.triu_indices order): no (K(K-1), n) differences to build
            at = np.flatnonzero(paired.m > 0)
            first, second = np.triu_indices(n_models, k=1)
            forward = first[at] * (n_models - 1) + second[at] - 1  # position of (a, b), a < b, among the ordered pairs
            centred, sd = paired.centred[at], paired.sd[at]
        else:
            diffs = values[a[pairs]][:, cases] - values[b[pairs]][:, cases]
            test = np.flatnonzero((diffs != 0).any(axis=1))
            if not test.size or cases.size <= 50:
                # n <= 50: 'auto' picks exact / permutation / normal from the ties and zeros of the whole
                # batch when vectorised; per-pair calls keep each pair's own choice, as a per-pair protocol does.
                for k in test:
                    p[pairs[k]] = stats.wilcoxon(diffs[k], alternative=alternative).pvalue
                continue
            # One direction per pair: the reverse pair's statistic is exactly the negative.
            forward = pairs[test[a[pairs[test]] < b[pairs[test]]]]
            centred, sd, _ = signed_rank_z(values[a[forward]][:, cases] - values[b[forward]][:, cases])
        if forward.size:
            # For n > 50 scipy's method='auto' is the normal approximation without continuity correction
            # for every pair: signed_rank_z computes it with the same operations (zeros dropped, average
            # ranks, tie-corrected SD), without scipy's per-call overhead.
            z = centred / sd if higher_is_better else -centred / sd
            reverse = b[forward] * (n_models - 1) + a[forward] - (a[forward] > b[forward])  # position of (b, a)
            p[forward], p[reverse] = ndtr(-z), ndtr(z)
    adjusted = holm(p)
    raw_m, adj_m = np.full((n_models, n_models), np.nan), np.full((n_models, n_models), np.nan)
    raw_m[a, b], adj_m[a, b] = p, adjusted
    significant = np.zeros((n_models, n_models), dtype=bool)
    significant[a, b] = adjusted < alpha
    n_m = np.zeros((n_models, n_models), dtype=np.int64)
    n_m[a, b] = n_common
    return {"p_value": raw_m, "p_adjusted": adj_m, "significant": significant, "n_cases": n_m}
