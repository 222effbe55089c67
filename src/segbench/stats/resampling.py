"""Paired case bootstrap, vectorised over resamples and models.

One resample is a multiset of case indices drawn with replacement. Instead of gathering values through a
(B, n) index matrix per model, each chunk of resamples is turned into a (chunk, n) matrix of case counts
and multiplied with the (n, K) value matrix: one BLAS call gives every model's resampled mean, and every
model sees the same resampled cases (paired, as challengeR requires). Chunking bounds memory by
``CHUNK_ENTRIES`` regardless of n and B (n = 5,160, B = 10,000 would otherwise be 50M entries).

Subgroup means come from the same resamples (domain estimation): a group's resampled mean is the mean
of the resampled cases that belong to it, so its size varies between resamples as it varies between
samples of cases. Drawing counts dominates the cost; reusing them makes subgroups nearly free instead of
one more full bootstrap per metadata field. A resample holding no case of a group leaves that group's
entry NaN (only plausible for groups of a few cases), and the CI uses the remaining resamples.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numba
import numpy as np
from scipy.special import ndtr, ndtri, stdtrit

CHUNK_ENTRIES = 2_000_000  # count-matrix entries per chunk: ~16 MB as float64


def rng_for(seed: int, *keys: str) -> np.random.Generator:
    """Generator for one analysis cell, derived from the seed and the cell's names.

    Keying by names (not by position) keeps a cell's resamples unchanged when other structures,
    metrics or groups are added to the dataset.
    """
    return np.random.default_rng([seed, *(zlib.crc32(key.encode("utf-8")) for key in keys)])


def bootstrap_means(
    values: np.ndarray,
    n_resamples: int,
    rng: np.random.Generator,
    groups: Sequence[np.ndarray] = (),
    draw: Callable[[int, np.random.Generator], np.ndarray] | None = None,
    on_chunk: Callable[[np.ndarray, np.ndarray], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Means of ``values`` (K rows x n cases) over ``n_resamples`` paired case resamples -> (B, K).

    Second result (B, G, K): per array of case indices in ``groups``, the mean of the resampled cases in that group,
    from the same resamples. The overall means are one product of the counts and the values, whatever the groups.
    Two equal ways to the group sums, by cost: with cells (:class:`CaseCells`: cases in the same groups) of at least
    ``CELL_MIN_CASES`` cases on average, one product per cell, a group's sums adding its cells' (one product's worth
    of multiply-adds for any number of groups; timed: benchmarks/README.md); with smaller cells, too thin for BLAS,
    one product with [values masked to group 1 | ... | group indicators].
    ``draw(size, rng)``: the (size, n) counts of another resampling scheme (clusters.cluster_counts), whose
    resamples may hold more or fewer than n cases; each mean then divides by its resample's case count.
    ``on_chunk(counts, sums)``: gets each chunk's (size, n) counts and (size, K) sums, for a test on these resamples.
    """
    if draw is not None and on_chunk is not None:
        raise ValueError("bootstrap_means: on_chunk shares the case resamples, which draw replaces")
    n_rows, n_cases = values.shape
    n_groups = len(groups)
    cells = CaseCells.of(n_cases, groups)
    by_cell = n_groups > 0 and n_cases >= CELL_MIN_CASES * cells.size
    overall = np.ascontiguousarray(values.T)
    if by_cell:
        in_cells = overall[cells.order]
    elif n_groups:
        indicator = np.zeros((n_cases, n_groups))
        for k, idx in enumerate(groups):
            indicator[idx, k] = 1.0
        masked = np.ascontiguousarray(np.concatenate([(values.T[:, None, :] * indicator[:, :, None]).reshape(n_cases, n_groups * n_rows), indicator], axis=1))
    out = np.empty((n_resamples, n_rows))
    group_out = np.empty((n_resamples, n_groups, n_rows))
    # chunks as wide as the masked design (an odd chunk leaves half a 32-bit draw unused): both ways, the same resamples
    chunk = max(1, CHUNK_ENTRIES // max(n_cases, n_rows * (n_groups + 1) + n_groups, 1))
    # the count matrices of every chunk in the same memory (fresh pages per chunk cost more than the tally)
    counts_buffer = np.empty((min(chunk, n_resamples), n_cases)) if draw is None else None
    ordered_buffer = np.empty((min(chunk, n_resamples), n_cases)) if by_cell and draw is None else None
    cell_buffer = np.empty((min(chunk, n_resamples), cells.size)) if by_cell and draw is None else None  # draws per cell
    for start in range(0, n_resamples, chunk):
        size = min(chunk, n_resamples - start)
        if draw is not None:
            counts = draw(size, rng)
            if by_cell:
                ordered = counts[:, cells.order]
                in_cell = np.add.reduceat(ordered, cells.starts[:-1], axis=1)
        elif by_cell:  # the counts, in cell order and per cell from one pass per resample
            counts, ordered, in_cell = counts_buffer[:size], ordered_buffer[:size], cell_buffer[:size]  # type: ignore[index]  # allocated above without draw
            _tally_cells(_case_draws(n_cases, size, rng), counts, ordered, cells.order, cells.starts, in_cell)
        else:
            counts = counts_buffer[:size]  # type: ignore[index]  # allocated above without draw
            counts.fill(0.0)
            _tally(_case_draws(n_cases, size, rng), counts)
        # the overall means in a product of their own: the same bits whatever the groups (a wider product may add in
        # another order, and a leaderboard's means would then move with its subgroup fields)
        sums = counts @ overall
        if on_chunk is not None:
            on_chunk(counts, sums)
        rows = slice(start, start + size)
        out[rows] = sums if draw is None else sums / counts.sum(axis=1, keepdims=True)
        if by_cell:
            cell_sums = np.empty((cells.size, size, n_rows))
            for c, (lo, hi) in enumerate(zip(cells.starts[:-1], cells.starts[1:])):
                np.matmul(ordered[:, lo:hi], in_cells[lo:hi], out=cell_sums[c])
            group_sums = (cells.membership.T @ cell_sums.reshape(cells.size, -1)).reshape(n_groups, size, n_rows).transpose(1, 0, 2)
            group_sizes = (in_cell @ cells.membership)[:, :, None]
        elif n_groups:
            masked_sums = counts @ masked
            group_sums = masked_sums[:, : n_groups * n_rows].reshape(size, n_groups, n_rows)
            group_sizes = masked_sums[:, n_groups * n_rows :, None]
        if n_groups:
            with np.errstate(invalid="ignore", divide="ignore"):
                group_out[rows] = group_sums / group_sizes
    if draw is None:
        out /= n_cases
    return out, group_out


#: the average cell size from which :func:`bootstrap_means` sums groups cell by cell: below it the cell products are
#: slower than the masked design, above it faster (timed: benchmarks/README.md)
CELL_MIN_CASES = 64


@dataclass(frozen=True)
class CaseCells:
    """The cases ordered by cell: a cell holds the cases that belong to the same groups (for subgroup fields, the
    cases sharing every field's level), so each group is a union of contiguous runs of this order."""

    order: np.ndarray  #: (n,) case indices in cell order
    starts: np.ndarray  #: (C + 1,) where each cell begins in ``order``, then n
    membership: np.ndarray  #: (C, G) 1.0 where cell c lies in group g

    @property
    def size(self) -> int:
        """The number of cells."""
        return len(self.starts) - 1

    @classmethod
    def of(cls, n_cases: int, groups: Sequence[np.ndarray]) -> CaseCells:
        """The cells of ``groups`` (arrays of case indices); one cell of every case in its order without groups."""
        if not groups:
            identity = np.arange(n_cases)
            return cls(identity, np.array([0, n_cases]), np.zeros((1, 0)))
        member = np.zeros((n_cases, len(groups)), dtype=bool)
        for k, idx in enumerate(groups):
            member[idx, k] = True
        patterns, cell = np.unique(member, axis=0, return_inverse=True)
        order = np.argsort(cell.ravel(), kind="stable")
        starts = np.searchsorted(cell.ravel()[order], np.arange(len(patterns) + 1))
        return cls(order, starts, patterns.astype(np.float64))


def resample_counts(n_cases: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(B, n) matrix of how often each case is drawn in each of B resamples of n cases with replacement.

    The draws are the narrowest integers that hold n (fewer random bits per draw) and are tallied in
    numba straight into the float64 matrix the products need: faster than int64 draws, np.bincount and a cast
    (timed: benchmarks/README.md).
    """
    counts = np.zeros((n_resamples, n_cases))
    _tally(_case_draws(n_cases, n_resamples, rng), counts)
    return counts


def _case_draws(n_cases: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(B, n) case indices drawn with replacement, as the narrowest integers that hold n (:func:`resample_counts`).

    ``rng.integers(0, n, size=(B, n), dtype=np.int16)``, the same numbers and the same generator state after, faster
    for PCG64 (timed: benchmarks/README.md): numpy's Lemire rejection on 16-bit words (:func:`_lemire_int16`) run in numba on the raw stream.
    """
    if n_cases > np.iinfo(np.int16).max:
        return rng.integers(0, n_cases, size=(n_resamples, n_cases), dtype=np.int64)
    bits = rng.bit_generator
    if not isinstance(bits, np.random.PCG64) or n_cases < 2 or not n_resamples:
        return rng.integers(0, n_cases, size=(n_resamples, n_cases), dtype=np.int16)
    # numpy's 16-bit words: the low then the high half of each 32-bit draw, which are the low then the high half of each
    # 64-bit output (after the half a 32-bit draw left, if any)
    saved = bits.state
    rejected = ((1 << 16) % n_cases) / (1 << 16)  # the share of words Lemire's method rejects
    raw = bits.random_raw(int(n_resamples * n_cases * (1.0 + 2.0 * rejected) + 4096) // 4 + 1)
    words = raw.view(np.uint16)
    if saved["has_uint32"]:
        words = np.concatenate([np.array([saved["uinteger"]], dtype=np.uint32).view(np.uint16), words])
    out = np.empty((n_resamples, n_cases), dtype=np.int16)
    used = _lemire_int16(words, n_cases, out)
    bits.state = saved
    if used < 0:  # more rejections than the margin allows (never seen): numpy's own draws
        return rng.integers(0, n_cases, size=(n_resamples, n_cases), dtype=np.int16)
    # numpy takes a 32-bit draw per two words (the half left of the last one is dropped), a 64-bit output per two 32-bit draws
    fresh = (used + 1) // 2 - saved["has_uint32"]
    outputs = (fresh + 1) // 2
    bits.advance(outputs)
    state = bits.state
    state["has_uint32"], state["uinteger"] = (fresh % 2, int(raw[outputs - 1] >> np.uint64(32))) if outputs else (0, saved["uinteger"])
    bits.state = state
    return out


@numba.njit(cache=True, nogil=True)
def _lemire_int16(words: np.ndarray, n: int, out: np.ndarray) -> int:  # pragma: no cover - compiled
    """numpy's ``buffered_bounded_lemire_uint16`` over the 16-bit ``words``: fills (B, n) ``out`` with draws in [0, n);
    the words used, or -1 where they run out."""
    threshold = (65536 - n) % n
    used = 0
    for r in range(out.shape[0]):
        for c in range(out.shape[1]):
            while True:
                if used == words.size:
                    return -1
                m = np.int64(words[used]) * n
                used += 1
                if (m & 0xFFFF) >= threshold:  # numpy tests against n first, the same verdict: threshold < n
                    break
            out[r, c] = m >> 16
    return used


@numba.njit(cache=True, nogil=True)
def _tally(draws: np.ndarray, counts: np.ndarray) -> None:  # pragma: no cover - compiled
    """counts[r, i] += 1 for every draw i in row r of ``draws``."""
    for r in range(draws.shape[0]):
        row = counts[r]
        for j in range(draws.shape[1]):
            row[draws[r, j]] += 1.0


@numba.njit(cache=True, nogil=True)
def _tally_cells(
    draws: np.ndarray,
    counts: np.ndarray,
    ordered: np.ndarray,
    order: np.ndarray,
    starts: np.ndarray,
    in_cell: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Per resample (row of ``draws``) its counts into ``counts`` (overwritten), then those counts in the cell ``order``
     into ``ordered`` and the draws of each cell (between ``starts``) into ``in_cell`` (:class:`CaseCells`): while the
     resample's counts are in cache, instead of a gather of every count matrix and a sum per cell (much slower
    ; timed: benchmarks/README.md). Integers: exact."""
    for r in range(draws.shape[0]):
        row, row_ordered, row_cells = counts[r], ordered[r], in_cell[r]
        row[:] = 0.0
        for j in range(draws.shape[1]):
            row[draws[r, j]] += 1.0
        for k in range(order.shape[0]):
            row_ordered[k] = row[order[k]]
        for c in range(starts.shape[0] - 1):
            total = 0.0
            for k in range(starts[c], starts[c + 1]):
                total += row_ordered[k]
            row_cells[c] = total


def jackknife_means(values: np.ndarray) -> np.ndarray:
    """Leave-one-case-out means (n, K): (sum - x_i) / (n - 1), no loop over cases."""
    n_cases = values.shape[1]
    return (values.sum(axis=1)[None, :] - values.T) / (n_cases - 1)


def column_quantiles(boot: np.ndarray, *probs: np.ndarray, presorted: bool = False) -> list[np.ndarray]:
    """For each array of levels in ``probs``: quantile ``p[j]`` of column j of ``boot`` (numpy 'linear').

    np.quantile takes one set of levels for all columns; Holm and BCa need a different level per column.
    NaN entries (subgroup absent from a resample) are ignored. One sort serves all levels (a full sort
    along axis 0 is faster here than np.partition or np.quantile; timed: benchmarks/README.md).
    """
    ordered = boot if presorted else sort_columns(boot)  # NaN sorts last
    n_valid = boot.shape[0] - np.isnan(boot).sum(axis=0)
    top = np.maximum(n_valid - 1, 0)
    cols = np.arange(boot.shape[1])
    out = []
    for p in probs:
        h = top * np.clip(p, 0.0, 1.0)
        lo = np.floor(h).astype(np.int64)
        hi = np.minimum(lo + 1, top)
        low_val = ordered[lo, cols]
        out.append(np.where(n_valid > 0, low_val + (h - lo) * (ordered[hi, cols] - low_val), np.nan))
    return out


def sort_columns(boot: np.ndarray) -> np.ndarray:
    """Each column of (B, P) ``boot`` sorted, as a (B, P) view of a (P, B) array.

    Sorting contiguous rows of the transpose is faster than np.sort(axis=0), which copies every strided
    column in and out (timed: benchmarks/README.md).
    """
    rows = np.ascontiguousarray(boot.T)
    rows.sort(axis=1)
    return rows.T


def intervals(
    boot: np.ndarray,
    estimate: np.ndarray,
    jackknife: np.ndarray | None,
    alpha: np.ndarray,
    method: str,
    presorted: bool = False,
    span: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided (1 - alpha[j]) CI per column of ``boot`` (B, P) around ``estimate`` (P,).

    Hand-written rather than scipy.stats.bootstrap: that draws its own resamples per call, so it can
    neither share one resample matrix across models (paired) nor take a different level per column.

    percentile: the alpha/2 and 1 - alpha/2 quantiles. bca (Efron 1987): the levels are shifted by the
    bias correction z0 (share of resampled statistics below the estimate, ties counted half) and the
    jackknife acceleration a (:func:`jackknife_spread`). skew_t (Hall 1992): the t interval with the
    jackknife SE, its ends moved by Hall's skewness-correcting transform (:func:`skew_t_bounds`); it
    reads no resample, and its ends are held inside the values it averages (:func:`skew_t_bounds`, the range
    rule; the quantiles of resampled means stay there by construction). ``jackknife`` (n, P) may hold NaN rows
    (cases a column lacks); None or no spread (n = 1, constant values) gives a = 0 and, for skew_t, the point
    interval. ``presorted``: ``boot`` is already sorted along axis 0 (callers taking several intervals of the
    same columns sort once). ``span``: see :func:`skew_t_bounds`.
    """
    if method == "skew_t":
        return skew_t_bounds(estimate, jackknife, alpha, span)
    lower = alpha / 2.0
    upper = 1.0 - alpha / 2.0
    if method == "bca":
        n_valid = np.maximum(boot.shape[0] - np.isnan(boot).sum(axis=0), 1)
        below = (boot < estimate).sum(axis=0) + 0.5 * (boot == estimate).sum(axis=0)
        z0 = ndtri(np.clip(below / n_valid, 1.0 / (n_valid + 1), n_valid / (n_valid + 1)))
        _, accel, _ = jackknife_spread(jackknife, boot.shape[1])
        lower, upper = (ndtr(z0 + (z0 + z) / (1.0 - accel * (z0 + z))) for z in (ndtri(lower), ndtri(upper)))
    low, high = column_quantiles(boot, lower, upper, presorted=presorted)
    return low, high


def jackknife_spread(jackknife: np.ndarray | None, n_columns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column of the leave-one-out statistics ``jackknife`` (n, P; NaN rows skipped): the jackknife SE,
    the acceleration a = sum d^3 / (6 (sum d^2)^1.5) with d the deviations from their mean (Efron 1987),
    and the number of cases. None: SE 0, a 0, one case.

    For a mean, a = skewness / (6 sqrt(n)) and the SE is s / sqrt(n), exactly.
    """
    if jackknife is None:
        return np.zeros(n_columns), np.zeros(n_columns), np.ones(n_columns, dtype=np.int64)
    count = (~np.isnan(jackknife)).sum(axis=0)
    dev = np.nansum(jackknife, axis=0) / np.maximum(count, 1) - jackknife
    ss = np.nansum(dev**2, axis=0)
    den = 6.0 * ss**1.5
    accel = np.divide(np.nansum(dev**3, axis=0), den, out=np.zeros(n_columns), where=den > 0)
    se = np.sqrt(ss * np.maximum(count - 1, 0) / np.maximum(count, 1))
    return se, accel, count


def skew_t_bounds(
    estimate: np.ndarray,
    jackknife: np.ndarray | None,
    alpha: np.ndarray,
    span: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Hall's (1992) skewness-corrected t interval per column, with the jackknife's SE and acceleration a, held
    inside the range of the values it averages (docs/methodology.md#53-estimates-and-cis, "range rule").

    With T = (estimate - mu) / SE and a = skewness / (6 sqrt(n)), Hall's transform
    h(T) = ((1 + 2aT)^3 - 1) / (6a) + a is monotone and removes the first-order skewness of T, so
    h(T) is referred to Student's t with n - 1 degrees of freedom and inverted exactly:
    mu in [estimate - SE h^-1(t_{1-alpha/2}), estimate - SE h^-1(-t_{1-alpha/2})]. a = 0 gives the t interval.

    Range rule: an end past the smallest or largest value the column averages is set to that value. A mean of
    values in a metric's range cannot leave [min x_i, max x_i], so the interval respects the metric's range too
    (Dice in [0, 1], distances >= 0). The rule is part of the method: the calibration audit and the calibrated
    levels (``levels``) call this function, so their coverage is that of the bounded interval. ``span``: the
    (P,) smallest and largest values per column, where the caller holds them (exact); None takes the range of
    the jackknife's pseudo-values n mean - (n - 1) x_(-i) (:func:`jackknife_span`), which for a leave-one-case-out
    jackknife of a mean are the values themselves (up to rounding); callers with another jackknife (the
    leave-one-cluster-out one of ``clusters``) pass the per-case range.
    """
    se, accel, count = jackknife_spread(jackknife, estimate.size)
    q = stdtrit(np.maximum(count - 1, 1), 1.0 - alpha / 2.0)

    def inverse(target: np.ndarray) -> np.ndarray:
        shifted = target - accel
        with np.errstate(divide="ignore", invalid="ignore"):
            root = (np.cbrt(1.0 + 6.0 * accel * shifted) - 1.0) / (2.0 * accel)
        return np.where(np.abs(accel) > 1e-12, root, shifted)

    se = np.where(count > 1, se, 0.0)
    smallest, largest = jackknife_span(estimate, jackknife, count) if span is None else span
    return np.fmax(estimate - se * inverse(q), smallest), np.fmin(estimate - se * inverse(-q), largest)


def jackknife_span(estimate: np.ndarray, jackknife: np.ndarray | None, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest jackknife pseudo-value per column, n mean - (n - 1) x_(-i), from the means ``estimate``
    (P,) and the leave-one-out means ``jackknife`` (n, P; NaN rows skipped; ``count`` rows per column): for a
    leave-one-case-out jackknife of a mean, the smallest and largest value. NaN (no bound) where a column has no
    jackknife row (then the interval is the point anyway)."""
    if jackknife is None:
        return np.full(estimate.shape, np.nan), np.full(estimate.shape, np.nan)
    values = count * estimate - (count - 1) * jackknife
    missing = np.isnan(values)
    some = ~missing.all(axis=0)
    return (np.where(some, np.where(missing, np.inf, values).min(axis=0), np.nan), np.where(some, np.where(missing, -np.inf, values).max(axis=0), np.nan))


def bounded_ends(low: np.ndarray, high: np.ndarray, estimate: np.ndarray, smallest: np.ndarray, largest: np.ndarray) -> list[str | None]:
    """Per column, the ends of a CI that lie on the range of the values it averages while the mean does not: "low",
    "high", "both" or None. Only the range rule puts an end there (a quantile of resampled means reaches the smallest
    value only if a share alpha/2 of the resamples draw that case alone), so it names the ends the rule moved."""
    at_low = (low == smallest) & (smallest < estimate)
    at_high = (high == largest) & (largest > estimate)
    return [("both" if lo and hi else "low" if lo else "high" if hi else None) for lo, hi in zip(at_low.tolist(), at_high.tolist())]


#: scales of :func:`studentized_bounds`: none, logit (scores in [0, 1]) or log (distances)
STUDENTIZED_SCALES = ("none", "logit", "log")
_T_CAP = 1e12  # |T*| of a resample without spread (SE* = 0) whose mean differs from the estimate


def studentized_bounds(
    boot: np.ndarray,
    boot_sq: np.ndarray,
    estimate: np.ndarray,
    estimate_sq: np.ndarray,
    n_cases: int,
    alpha: float,
    scale: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap-t (studentized) CI of P means from the resampled means ``boot`` and means of squares ``boot_sq`` (B, P).

    Each resample's SE is its own s / sqrt(n), from its two moments (for a mean, the jackknife SE equals it), and
    T* = (f(mean*) - f(mean)) / (SE* f'(mean*)) on the ``scale`` f: none; logit of the mean squeezed into
    [0.5/n, 1 - 0.5/n] (scores in [0, 1]: a mean of exactly 0 or 1 stays finite; Smithson and Verkuilen 2006); log
    (distances). The CI is f^-1(f(mean) - SE f'(mean) T*_{1-alpha/2}, ... T*_{alpha/2}). A resample with SE* = 0 gives
    a T* of +-1e12 unless its mean is the estimate; a sample of equal values, the point interval.
    """
    if scale not in STUDENTIZED_SCALES:
        raise ValueError(f"scale must be one of {STUDENTIZED_SCALES}, got {scale!r}")
    shrink = (n_cases - 1.0) / n_cases

    def forward(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if scale == "logit":
            u = shrink * v + 0.5 / n_cases
            return np.log(u / (1.0 - u)), shrink / (u * (1.0 - u))
        if scale == "log":
            with np.errstate(divide="ignore"):
                return np.log(v), 1.0 / v
        return v, np.ones_like(v)

    def back(y: np.ndarray) -> np.ndarray:
        if scale == "logit":
            return np.clip((1.0 / (1.0 + np.exp(-y)) - 0.5 / n_cases) / shrink, 0.0, 1.0)
        return np.exp(y) if scale == "log" else y

    se_boot = np.sqrt(np.maximum(boot_sq - boot**2, 0.0) / (n_cases - 1))
    se = np.sqrt(np.maximum(estimate_sq - estimate**2, 0.0) / (n_cases - 1))
    f_boot, slope_boot = forward(boot)
    f_est, slope_est = forward(estimate)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_boot = (f_boot - f_est) / (se_boot * slope_boot)
    t_boot = np.where(f_boot == f_est, 0.0, np.nan_to_num(t_boot, nan=0.0, posinf=_T_CAP, neginf=-_T_CAP))
    t_low, t_high = np.quantile(t_boot, [alpha / 2.0, 1.0 - alpha / 2.0], axis=0)
    step = se * slope_est
    with np.errstate(over="ignore", invalid="ignore"):
        return (back(np.where(step > 0, f_est - step * t_high, f_est)), back(np.where(step > 0, f_est - step * t_low, f_est)))


def tail_count_needed(alpha: np.ndarray | float, n_flips: int) -> np.ndarray:
    """The fewest reaching resamples (sign flips, bootstrap resamples) c at which p = (1 + c) / (n_flips + 1) >= alpha, per
    alpha.

    ceil(alpha (n_flips + 1) - 1), moved by one where floating point puts it across the comparison the test itself
    makes, so that "p >= alpha" and "count >= c" are the same statement. 0 or less: every count passes.
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    c = np.ceil(alpha * (n_flips + 1.0) - 1.0)
    c -= (c / (n_flips + 1.0) >= alpha) & (c > 0)  # c - 1 flips already pass
    c += (1.0 + c) / (n_flips + 1.0) < alpha  # c flips do not pass yet
    return c.astype(np.int64)


def smallest_first(values: np.ndarray, k: int) -> np.ndarray:
    """The k smallest of each row of (P, R) ``values``, in no order (all of them when R <= k), moved to its first k
    columns in place (a view: no copy of the rows)."""
    if values.shape[1] > k:
        values.partition(k - 1, axis=1)
    return values[:, :k]
