"""The studentized bootstrap test of paired mean differences (bootstrap-t with centred resampling; Hall & Wilson 1991),
the half of the separable verdict's test that holds without exchangeable models (docs/methodology.md#55-pairwise-separability):
tallied chunk by chunk from case counts, its own or those of a structure's bootstrap of the means, and inverted into
intervals."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numba
import numpy as np

from .resampling import CHUNK_ENTRIES, _case_draws, _tally, smallest_first, tail_count_needed


@dataclass(frozen=True)
class StudentizedBootstrap:
    """The studentized bootstrap test of P pairs' mean differences with centred resampling (bootstrap-t; Hall & Wilson
    1991), equal-tailed, kept so that it can be inverted into intervals.

    T = mean / se of the differences (se = SD / sqrt(n)); each resample of the cases gives T* = (mean* - mean) / se*,
    which is T's null distribution whatever the differences' shape (centring makes the resamples' mean difference 0
    without assuming the models exchangeable). Each tail is counted on its own, p = 2 min(1 + #{T* >= T},
    1 + #{T* <= T}) / (B + 1), capped at 1: skewed differences (rare failures) give T* a heavy tail on one side only,
    and each side is tested against its own. T* does not depend on the tested value δ (shifting every difference by δ
    leaves it unchanged), so the δ the test accepts at level alpha are [mean - q_hi se, mean - q_lo se], q_lo and q_hi
    the c-th smallest and largest T* (:func:`tail_count_needed` at alpha / 2): the equal-tailed bootstrap-t interval.
    """

    p: np.ndarray  #: (P,) p-value of 'mean difference = 0'
    n_resamples: int
    smallest: np.ndarray  #: (k, P) the k smallest T* per pair, ascending
    largest: np.ndarray  #: (k, P) the k largest T* per pair, descending
    mean: np.ndarray  #: (P,) mean difference
    se: np.ndarray  #: (P,) its standard error
    t: np.ndarray  #: (P,) T at 0, as the p-value compared it

    PER_PAIR: ClassVar[tuple[str, ...]] = ("p", "smallest", "largest", "mean", "se", "t")

    def interval(self, alpha: np.ndarray, columns: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """The (low, high) of the mean differences δ the test does not reject at level ``alpha`` (one per column):
        [mean - q_hi se, mean - q_lo se], unbounded where no count of resamples can reject (alpha (B + 1) / 2 <= 1).
        Kept on the side of 0 that p(0) says where the rounding of those ends could put one across it, so p(0) < alpha
        exactly when 0 is outside the interval."""
        alpha = np.asarray(alpha, dtype=np.float64)
        smallest, largest = self.smallest[:, columns], self.largest[:, columns]
        mean, se, t = self.mean[columns], self.se[columns], self.t[columns]
        count = tail_count_needed(alpha / 2.0, self.n_resamples)
        at, row = np.arange(largest.shape[1]), np.clip(count, 1, largest.shape[0]) - 1
        q_low, q_high = smallest[row, at], largest[row, at]
        with np.errstate(invalid="ignore"):
            low, high = mean - q_high * se, mean - q_low * se
        low[np.isnan(low)], high[np.isnan(high)] = -np.inf, np.inf  # inf * 0 (no spread, a resample that moved): every δ
        accepts_zero = ((q_low <= t) & (t <= q_high)) | (count <= 0)
        low[accepts_zero & (low > 0)] = 0.0
        high[accepts_zero & (high < 0)] = 0.0
        above, below = ~accepts_zero & (mean > 0) & (low <= 0), ~accepts_zero & (mean < 0) & (high >= 0)
        low[above], high[below] = np.nextafter(0.0, 1.0), np.nextafter(0.0, -1.0)
        unbounded = count <= 0
        low[unbounded], high[unbounded] = -np.inf, np.inf
        return low, high

    def part(self, columns: np.ndarray | slice) -> StudentizedBootstrap:
        """The test of the pairs at ``columns`` only."""
        return replace(self, **{name: getattr(self, name)[..., columns] for name in self.PER_PAIR})


def studentized_bootstrap(
    diffs: np.ndarray,
    n_resamples: int,
    rng: np.random.Generator,
    alpha: float,
    factors: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> StudentizedBootstrap:
    """The studentized bootstrap test (:class:`StudentizedBootstrap`) of 'mean difference = 0' per row of (P, n) paired
    differences, ``n_resamples`` case resamples drawn with replacement from ``rng`` and shared by the rows (paired);
    ``factors`` as :class:`StudentizedTally`'s."""
    n = diffs.shape[1]
    tally = StudentizedTally(diffs, n_resamples, alpha, factors)
    if n >= 2:
        chunk = max(1, CHUNK_ENTRIES // n)
        counts_buffer = np.empty((min(chunk, n_resamples), n))
        for start in range(0, n_resamples, chunk):
            counts = counts_buffer[: min(chunk, n_resamples - start)]
            counts.fill(0.0)
            _tally(_case_draws(n, counts.shape[0], rng), counts)
            tally.add(counts)
    return tally.result()


class StudentizedTally:
    """The studentized bootstrap test of P pairs' mean differences (:class:`StudentizedBootstrap`), tallied resample
    chunk by resample chunk from the chunks' case counts: whoever draws the resamples (:func:`studentized_bootstrap`,
    or the structure's bootstrap of the means, whose resamples the test then shares) hands each chunk to :meth:`add`.

    Per resample and pair: the resampled sum of the centred differences e = d - mean and of their squares, from two
    products of the (chunk, n) case counts; ``factors`` (values (K, n), a, b) with diffs = values[a] - values[b] gives
    the first from the K models' values (K columns instead of P), or from sums a caller already has (:meth:`add`'s
    ``sums``). The squares' product, P columns wide and most of the test's time, is in single precision (counts are
    small integers, exact there; the sums of squares then carry a relative error near 1e-6 and so does se*, far
    below the resampling's own noise; timed: benchmarks/README.md). A resample whose differences are all equal has
    se* = 0: T* is infinite (the sign of its mean's move) where its mean moved and 0 where it did not. With fewer than
    two cases there is no SE: p = 1. Kept for the intervals: the k smallest and largest T* per pair, k the count
    needed in one tail at ``alpha``.
    """

    def __init__(self, diffs: np.ndarray, n_resamples: int, alpha: float, factors: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> None:
        n_pairs, n = diffs.shape
        self.n, self.n_resamples, self.filled, self.added = n, n_resamples, 0, 0
        self.mean = diffs.mean(axis=1) if n else np.zeros(n_pairs)
        centred = diffs - self.mean[:, None]
        # differences equal to their mean but for its rounding are equal: no spread (all differences alike have se = 0)
        centred[np.abs(centred) <= 1e-12 * np.abs(diffs).mean(axis=1, keepdims=True)] = 0.0
        squares = centred**2
        self.se = np.sqrt(squares.sum(axis=1) / max(n - 1, 1) / max(n, 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            self.t = np.where(self.se > 0, self.mean / self.se, np.sign(self.mean) * np.inf)
        self.t[(self.se == 0) & (self.mean == 0)] = 0.0
        self.keep = int(min(max(int(tail_count_needed(alpha / 2.0, n_resamples)), 1), n_resamples))
        self.up, self.down = np.zeros(n_pairs, dtype=np.int64), np.zeros(n_pairs, dtype=np.int64)
        if factors is None:
            self.first_product, self.first, self.second, self.shift = centred.T, np.arange(n_pairs), np.full(n_pairs, -1), np.zeros(n_pairs)
            self.bound = n * np.finfo(np.float64).eps * np.abs(centred).sum(axis=1) / max(n, 1)
        else:
            values, self.first, self.second = factors
            self.first_product, self.shift = np.ascontiguousarray(values.T), n * self.mean  # sum of c_i d_i minus n mean is the centred sum
            absolute = np.abs(values).sum(axis=1)
            self.bound = 4.0 * n * np.finfo(np.float64).eps * (absolute[self.first] + absolute[self.second]) / max(n, 1)
        self.square_product = np.ascontiguousarray(squares.T, dtype=np.float32)
        self.counts32 = np.empty((0, n), dtype=np.float32)
        self.lows, self.highs = np.empty((n_pairs, 0)), np.empty((n_pairs, 0))  # T* and -T*: their k smallest

    def add(self, counts: np.ndarray, sums: np.ndarray | None = None) -> None:
        """Tally one chunk of resamples: (size, n) ``counts`` of the cases; ``sums`` (size, J) = counts @ values.T of
        the ``factors``' values already computed (their columns ``first`` and ``second``), else computed here."""
        if self.n < 2:
            return
        size = counts.shape[0]
        if self.filled + size > self.lows.shape[1]:  # room for the chunk: keep only the k smallest so far, else grow
            smallest_first(self.lows[:, : self.filled], self.keep)
            smallest_first(self.highs[:, : self.filled], self.keep)
            self.filled = min(self.filled, self.keep)
            if self.filled + size > self.lows.shape[1]:
                shape = (self.lows.shape[0], max(min(self.n_resamples, 4 * self.keep + size), self.filled + size))
                self.lows, self.highs = _grown(self.lows, shape, self.filled), _grown(self.highs, shape, self.filled)
        if self.counts32.shape[0] < size:
            self.counts32 = np.empty((size, self.n), dtype=np.float32)
        counts32 = self.counts32[:size]
        np.copyto(counts32, counts)
        first_sums = counts @ self.first_product if sums is None else sums
        _studentized_tails(
            first_sums,
            self.first,
            self.second,
            self.shift,
            self.bound,
            counts32 @ self.square_product,
            self.n,
            self.t,
            self.lows,
            self.highs,
            self.filled,
            self.up,
            self.down,
        )
        self.filled += size
        self.added += size

    def result(self) -> StudentizedBootstrap:
        """The test once every resample is tallied."""
        n_pairs = self.mean.size
        if self.n < 2:
            return StudentizedBootstrap(
                p=np.ones(n_pairs),
                n_resamples=self.n_resamples,
                smallest=np.full((self.keep, n_pairs), -np.inf),
                largest=np.full((self.keep, n_pairs), np.inf),
                mean=self.mean,
                se=np.full(n_pairs, np.nan),
                t=np.zeros(n_pairs),
            )
        if self.added != self.n_resamples:
            raise ValueError(f"the studentized bootstrap tallied {self.added} resamples, not {self.n_resamples}")
        smallest = np.ascontiguousarray(np.sort(smallest_first(self.lows[:, : self.filled], self.keep), axis=1).T)
        largest = -np.ascontiguousarray(np.sort(smallest_first(self.highs[:, : self.filled], self.keep), axis=1).T)
        p = np.minimum(1.0, 2.0 * (1.0 + np.minimum(self.up, self.down)) / (self.n_resamples + 1.0))
        return StudentizedBootstrap(p=p, n_resamples=self.n_resamples, smallest=smallest, largest=largest, mean=self.mean, se=self.se, t=self.t)


def _grown(kept: np.ndarray, shape: tuple[int, int], filled: int) -> np.ndarray:
    """A new (P, R) buffer of ``shape`` holding the first ``filled`` columns of ``kept``."""
    out = np.empty(shape)
    out[:, :filled] = kept[:, :filled]
    return out


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _studentized_tails(
    sums: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    shift: np.ndarray,
    bound: np.ndarray,
    squares: np.ndarray,
    n: int,
    t: np.ndarray,
    lows: np.ndarray,
    highs: np.ndarray,
    at: int,
    up: np.ndarray,
    down: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Per resample r (rows of ``sums`` and ``squares``) and pair p: T* = m / se*, m the mean of the resampled centred
    differences (sums[r, first[p]] - sums[r, second[p]] - shift[p], over n; no second term where it is -1; 0 within
    its rounding ``bound``) and se* from their sum of squares; stored as lows[p, at + r] = T* and highs[p, at + r] =
    -T*, and up[p], down[p] count T* >= t[p] and T* <= t[p]."""
    n_rows = sums.shape[0]
    for p in range(first.shape[0]):
        a, b, s, bar, tiny = first[p], second[p], shift[p], t[p], bound[p]
        above, below = 0, 0
        for r in range(n_rows):
            total = sums[r, a] - s if b < 0 else sums[r, a] - sums[r, b] - s
            m = total / n
            if abs(m) <= tiny:
                m = 0.0
            variance = max((squares[r, p] - n * m * m) / (n - 1), 0.0)
            if variance > 0.0:
                stat = m / np.sqrt(variance / n)
            elif m > 0.0:
                stat = np.inf
            elif m < 0.0:
                stat = -np.inf
            else:
                stat = 0.0
            lows[p, at + r] = stat
            highs[p, at + r] = -stat
            above += np.int64(stat >= bar)  # type: ignore[assignment]  # numba kernel: the counts are int64 there
            below += np.int64(stat <= bar)  # type: ignore[assignment]  # numba kernel: the counts are int64 there
        up[p] += above
        down[p] += below
