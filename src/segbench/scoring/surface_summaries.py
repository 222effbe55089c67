"""segauge's distance metrics (HD, HD95, ASSD, MASD, NSD) from two directed, area-weighted surface distance samples.

``surface.surface_distances`` gives the samples (segauge's quadrature at true spacing); here they are pooled as
segauge pools them: HD95 is the weighted quantile at 0.95 of both directions' distances together (interpolated
between the bracketing pair, as ``np.interp`` over the cumulative weights), ASSD the weighted mean of the pooled
distances, MASD the mean of the two directions' weighted means, NSD the weight within the tolerance over the total.
Compiled single passes, without sorting or concatenating the samples.
"""

from __future__ import annotations

import numba
import numpy as np
from segauge.metrics.distance import SurfaceDistances

#: Bins of the weighted histogram that locates HD95's bracketing pair (``_quantile_pair``).
QUANTILE_BINS = 4096


@numba.njit(cache=True, nogil=True)
def _interp_ordered(v: np.ndarray, vw: np.ndarray, q: float, below: float, total: float) -> float:
    """``np.interp(q, cum, sorted v)`` with ``cum = (below + cumsum(w) - w / 2) / total`` over the
    values ``v`` (weights ``vw``, both overwritten) sorted stably, without sorting them.

    Distances on a voxel grid tie massively (a one-voxel error puts half a million points at the
    same few distances), so instead of sorting, a weighted selection splits the values around a
    pivot into below, equal and above: the equal ones, in pooled order, span the cum values from
    their first one's to their last one's, and q either falls in that span (the answer is the
    pivot: np.interp between equal values), or the search goes on below or above it, the pivot
    becoming the nearest value on that side. When no value is left, q lies between the nearest
    values on either side (or beyond the ends, where np.interp clamps)."""
    m = len(v)
    cur_v, cur_w, nxt_v, nxt_w = v, vw, np.empty(m), np.empty(m)
    base = below
    has_prev = has_next = False
    prev_x = prev_cum = next_x = next_cum = 0.0
    while m:
        pivot = cur_v[m // 2]
        w_below = w_equal = first = last = 0.0
        n_below = n_equal = 0
        for i in range(m):
            if cur_v[i] < pivot:
                nxt_v[n_below], nxt_w[n_below] = cur_v[i], cur_w[i]
                w_below += cur_w[i]
                n_below += 1
            elif cur_v[i] == pivot:
                first = cur_w[i] if n_equal == 0 else first
                last = cur_w[i]
                w_equal += cur_w[i]
                n_equal += 1
        first_cum = (base + w_below + 0.5 * first) / total
        last_cum = (base + w_below + w_equal - 0.5 * last) / total
        if q < first_cum:
            has_next, next_x, next_cum = True, pivot, first_cum
            m = n_below
        elif q > last_cum:
            has_prev, prev_x, prev_cum = True, pivot, last_cum
            base += w_below + w_equal
            n_above = 0
            for i in range(m):
                if cur_v[i] > pivot:
                    nxt_v[n_above], nxt_w[n_above] = cur_v[i], cur_w[i]
                    n_above += 1
            m = n_above
        else:
            return pivot
        cur_v, nxt_v, cur_w, nxt_w = nxt_v, cur_v, nxt_w, cur_w
    if not has_prev:
        return next_x
    if not has_next:
        return prev_x
    return (next_x - prev_x) / (next_cum - prev_cum) * (q - prev_cum) + prev_x


@numba.njit(cache=True, nogil=True)
def _quantile_pair(d1: np.ndarray, w1: np.ndarray, d2: np.ndarray, w2: np.ndarray, q: float, total: float, top: float) -> float:
    """segauge's weighted quantile (``np.interp(q, (cumsum(w) - w / 2) / sum(w), sorted values)``)
    of the values of both arrays pooled, without sorting them all; ``total``: their weight, ``top``:
    their largest value.

    A weighted histogram finds the bin where the cumulative weight crosses ``q``; the interpolated
    pair lies in that bin or in the non-empty bins on either side, so only those values are ordered
    (``_interp_ordered``), with the weight of every bin below as the base of their cumsum."""
    if total == 0.0:
        return np.nan
    if top == 0.0:
        return 0.0
    scale = QUANTILE_BINS / top
    hist = np.zeros(QUANTILE_BINS)
    count = np.zeros(QUANTILE_BINS, dtype=np.int64)
    for d, w in ((d1, w1), (d2, w2)):
        for i in range(len(d)):
            b = min(int(d[i] * scale), QUANTILE_BINS - 1)
            hist[b] += w[i]
            count[b] += 1
    target, below, b = q * total, 0.0, 0
    while b < QUANTILE_BINS - 1 and below + hist[b] < target:
        below += hist[b]
        b += 1
    lo, hi = b, b  # widen to the nearest non-empty bin on each side
    while lo > 0:
        lo -= 1
        below -= hist[lo]
        if count[lo]:
            break
    while hi < QUANTILE_BINS - 1:
        hi += 1
        if count[hi]:
            break
    n = 0
    for k in range(lo, hi + 1):
        n += count[k]
    v, vw = np.empty(n), np.empty(n)
    n = 0
    for d, w in ((d1, w1), (d2, w2)):
        for i in range(len(d)):
            b = min(int(d[i] * scale), QUANTILE_BINS - 1)
            if lo <= b <= hi:
                v[n], vw[n] = d[i], w[i]
                n += 1
    return _interp_ordered(v, vw, q, max(below, 0.0), total)


@numba.njit(cache=True, nogil=True)
def _pooled_sums(d1: np.ndarray, w1: np.ndarray, d2: np.ndarray, w2: np.ndarray, tolerance: float) -> tuple[float, np.ndarray, float, float]:
    """(max distance, [sum w*d, sum w] of each direction, total weight, weight within ``tolerance``)
    in one pass; total and within are summed in the same order, so all-within gives exactly 1."""
    top = total = within = 0.0
    sums = np.zeros(4)
    for side, (d, w) in enumerate(((d1, w1), (d2, w2))):
        for i in range(len(d)):
            top = max(top, d[i])
            sums[2 * side] += w[i] * d[i]
            sums[2 * side + 1] += w[i]
            total += w[i]
            if d[i] <= tolerance:
                within += w[i]
    return top, sums, total, within


def distance_metrics(sd: SurfaceDistances, nsd_tolerance: float) -> dict[str, float]:
    """segauge's hd, hd95, assd, masd and nsd of ``sd`` (their formulas, one pass instead of one
    concatenation of both directions per metric; HD95 is the weighted quantile at 0.95 of the pooled
    distances, ``_quantile_pair``)."""
    top, (wd1, w1, wd2, w2), total, within = _pooled_sums(sd.d_pg, sd.w_pg, sd.d_gp, sd.w_gp, float(nsd_tolerance))
    return {
        "hd": float(top),
        "hd95": float(_quantile_pair(sd.d_pg, sd.w_pg, sd.d_gp, sd.w_gp, 0.95, total, top)),
        "assd": float((wd1 + wd2) / total),
        "masd": float(0.5 * (wd1 / w1 + wd2 / w2)),
        "nsd": float(within / total),
    }
