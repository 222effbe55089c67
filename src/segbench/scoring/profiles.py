"""Metric-definition profiles: whose definition of the surface metrics a score follows (docs/methodology.md,
"Metric-definition profiles").

Every profile measures the same masks from the engine's one decode per case and returns the same
metric names; only the surface, its distances and how they are combined differ. Empty masks never
reach a profile: the engine applies the project's policy first (both empty: perfect; one empty or
no prediction: worst case), whatever the original library would return there (inf, NaN).

- ``segauge`` (default): segauge's marching-cubes surface at true spacing, exact area-weighted
  distances (``surface.py``), HD95 over both directions pooled (``surface_summaries.py``).
- ``deepmind``: DeepMind surface-distance's definitions: surfels are the grid cells whose 2x2x2
  neighbour code is neither empty nor full, each weighted by its code's surface area at this
  spacing, placed on the voxel grid; a surfel's distance is the Euclidean distance to the nearest
  surfel of the other mask (what its distance transform of the other border gives); HD and HD95
  are the larger of the two one-directional area-weighted percentiles (``compute_robust_hausdorff``
  at 100 and 95: the first sorted distance whose cumulative area share reaches the percentile);
  MASD is the mean of ``compute_average_surface_distance``'s two directed means, ASSD the
  area-weighted mean over both surfaces pooled; NSD is ``compute_surface_dice_at_tolerance``.
- ``meshmetrics``: MeshMetrics 0.2.1's definitions (``surfacenets.py``): vtkSurfaceNets3D's surface
  without smoothing, each triangle's centroid at its exact distance to the other surface, weighted
  by its area; HD, HD95, MASD, ASSD and NSD combined as for ``deepmind`` (MeshMetrics'
  ``DistanceMetrics`` uses the same directed area-weighted percentile and means). MeshMetrics
  returns inf (HD, MASD, ASSD) and NSD 0 for one empty mask, 0 and NSD 1 for both empty.
- ``monai``: MONAI 1.6's ``monai.metrics`` (``compute_hausdorff_distance``,
  ``compute_average_surface_distance``, ``compute_surface_dice`` on one-channel masks, defaults
  otherwise): the surface is the mask's edge voxels (the mask minus its binary erosion, the array's
  edge counting as outside: MONAI crops with a zero margin), each counted once; a voxel's distance
  is the Euclidean distance at this spacing to the nearest edge voxel of the other mask, in
  float32 as MONAI returns it; HD95 is the larger of the two directions' 95th percentiles (unweighted,
  ``percentile=95, directed=False``: ``torch.quantile``, linear interpolation, in float32); ASSD is the mean of both
  directions' distances concatenated (``symmetric=True``), MASD the mean of the two directed means
  (``symmetric=False`` each way); NSD counts the edge voxels of both masks within the tolerance
  (taken in float32, as torch compares it) over all of them. MONAI returns inf distances (with a
  warning) and NSD 0 for one empty mask, NaN for every metric for both empty.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np
from segauge.metrics.distance import SurfaceDistances

from segbench.scoring.surface import surface_distances
from segbench.scoring.surface_mesh import CORNERS, cell_codes
from segbench.scoring.surface_summaries import distance_metrics
from segbench.scoring.surfacenets import surfacenets_surface_distances

Spacing = tuple[float, float, float]


@functools.cache
def _lorensen_triangles() -> tuple[np.ndarray, ...]:
    """Per corner code (``surface.CORNERS`` bit order), the classic marching-cubes triangles (half-voxel
    units) of the side with fewer inside corners: for every one of the 256 codes, this surface's
    area at any spacing equals surface-distance's ``create_table_neighbour_code_to_surface_area``
    (tested against the package). skimage's Lorensen table built from the side with more corners
    differs on 44 codes; the minority side is the surface-distance table's convention."""
    from skimage.measure import marching_cubes

    out = []
    for code in range(256):
        minority = code if bin(code).count("1") <= 4 else 255 - code
        if minority == 0:
            out.append(np.zeros((0, 3, 3)))
            continue
        cube = np.zeros((2, 2, 2), dtype=np.float32)
        for b, corner in enumerate(CORNERS):
            cube[corner] = minority >> b & 1
        verts, faces, _, _ = marching_cubes(cube, level=0.5, method="lorensen")
        out.append(np.rint(verts * 2)[faces])
    return tuple(out)


@functools.cache
def surfel_areas(spacing: Spacing) -> np.ndarray:
    """Surface area (mm^2) of each of the 256 neighbour codes at ``spacing`` (array order)."""
    half = np.asarray(spacing, dtype=np.float64) / 2.0
    areas = np.zeros(256)
    for code, tri in enumerate(_lorensen_triangles()):
        if len(tri):
            t = tri * half
            areas[code] = float(np.linalg.norm(np.cross(t[:, 1] - t[:, 0], t[:, 2] - t[:, 0]), axis=1).sum() / 2.0)
    return areas


def _surfels(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flat indices of the border cells (code neither 0 nor 255) and their codes."""
    flat = codes.ravel()
    idx = np.flatnonzero((flat != 0) & (flat != 255))
    return idx, flat[idx]


def _sorted_by_distance(dist: np.ndarray, area: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both arrays ordered by (distance, area), surface-distance's order (its cumulative sums follow it)."""
    order = np.lexsort((area, dist))
    return dist[order], area[order]


def deepmind_surface_distances(pred: np.ndarray, ref: np.ndarray, spacing: Spacing) -> SurfaceDistances:
    """surface-distance's ``compute_surface_distances`` of two non-empty boolean masks, each direction
    sorted by (distance, area) as it returns them: surfels from the neighbour codes, their areas,
    and each surfel's distance to the nearest surfel of the other border (``_distances_to``, as the
    monai profile measures its edge voxels), evaluated only where a surfel needs it: what the
    package's ``distance_transform_edt`` of the other border gives, with its arithmetic."""
    areas = surfel_areas(tuple(float(s) for s in spacing))
    codes_p, codes_g = cell_codes(pred), cell_codes(ref)
    (idx_p, code_p), (idx_g, code_g) = _surfels(codes_p), _surfels(codes_g)
    border_p, border_g = ((codes != 0) & (codes != 255) for codes in (codes_p, codes_g))
    s0, s1, s2 = (float(s) for s in spacing)
    d_pg, w_pg = _sorted_by_distance(_distances_to(border_g, idx_p, s0, s1, s2), areas[code_p])
    d_gp, w_gp = _sorted_by_distance(_distances_to(border_p, idx_g, s0, s1, s2), areas[code_g])
    return SurfaceDistances(d_pg=d_pg, w_pg=w_pg, d_gp=d_gp, w_gp=w_gp)


def _directed_percentile(dist: np.ndarray, area: np.ndarray, percent: float) -> float:
    """``compute_robust_hausdorff``'s one direction: the first sorted distance whose cumulative area
    share reaches ``percent``."""
    cum = np.cumsum(area) / np.sum(area)
    return float(dist[min(int(np.searchsorted(cum, percent / 100.0)), len(dist) - 1)])


def deepmind_metrics(sd: SurfaceDistances, nsd_tolerance: float) -> dict[str, float]:
    """hd, hd95, assd, masd and nsd of ``deepmind_surface_distances`` by surface-distance's formulas."""
    mean_pg = np.sum(sd.d_pg * sd.w_pg) / np.sum(sd.w_pg)
    mean_gp = np.sum(sd.d_gp * sd.w_gp) / np.sum(sd.w_gp)
    total = np.sum(sd.w_gp) + np.sum(sd.w_pg)
    within = np.sum(sd.w_gp[sd.d_gp <= nsd_tolerance]) + np.sum(sd.w_pg[sd.d_pg <= nsd_tolerance])
    return {
        "hd": max(_directed_percentile(sd.d_gp, sd.w_gp, 100.0), _directed_percentile(sd.d_pg, sd.w_pg, 100.0)),
        "hd95": max(_directed_percentile(sd.d_gp, sd.w_gp, 95.0), _directed_percentile(sd.d_pg, sd.w_pg, 95.0)),
        "assd": float((np.sum(sd.d_gp * sd.w_gp) + np.sum(sd.d_pg * sd.w_pg)) / total),
        "masd": float(0.5 * (mean_gp + mean_pg)),
        "nsd": float(within / total),
    }


# Compiled at import (explicit signatures): numba re-reads its thread count when it compiles, and a process
# whose thread pool already runs under another count (a benchmark module pinning it) stops there.
@numba.njit("b1[:, :, ::1](b1[:, :, ::1])", cache=True, nogil=True)
def _edge_voxels(mask: np.ndarray) -> np.ndarray:
    """The mask minus its binary erosion by the 6-neighbour cross (the array's edge outside), in one pass."""
    n0, n1, n2 = mask.shape
    edge = np.zeros(mask.shape, dtype=np.bool_)
    for i in range(n0):
        for j in range(n1):
            for k in range(n2):
                if mask[i, j, k] and (
                    i == 0
                    or j == 0
                    or k == 0
                    or i == n0 - 1
                    or j == n1 - 1
                    or k == n2 - 1
                    or not (mask[i - 1, j, k] and mask[i + 1, j, k] and mask[i, j - 1, k] and mask[i, j + 1, k] and mask[i, j, k - 1] and mask[i, j, k + 1])
                ):
                    edge[i, j, k] = True
    return edge


@numba.njit(cache=True, nogil=True, inline="always")
def _lower_envelope(f: np.ndarray, s: float, out: np.ndarray, v: np.ndarray, z: np.ndarray) -> None:
    """``out[x] = min_q f[q] + ((x - q) s)^2`` over one line (Felzenszwalb and Huttenlocher's lower
    envelope of parabolas; inf sites skipped, all inf: inf); ``v`` and ``z`` are work arrays."""
    s2, m = s * s, -1
    for q in range(len(f)):
        if f[q] == np.inf:
            continue
        while True:
            if m < 0:
                x = -np.inf
                break
            p = v[m]
            x = ((f[q] + s2 * q * q) - (f[p] + s2 * p * p)) / (2.0 * s2 * (q - p))
            if x > z[m]:
                break
            m -= 1
        m += 1
        v[m], z[m] = q, x
    if m < 0:
        out[:] = np.inf
        return
    c = 0
    for x in range(len(f)):
        while c < m and z[c + 1] < x:
            c += 1
        d = (x - v[c]) * s
        out[x] = f[v[c]] + d * d


#: voxels in the ball of offsets ``_distances_to`` searches before the distance transform
NEAR_OFFSETS = 1000


@functools.cache
def near_offsets(spacing: Spacing) -> tuple[np.ndarray, np.ndarray]:
    """The voxel offsets (3, M) whose squared distance at ``spacing`` is at most r^2, nearest first, and those squared
    distances (M,) in scipy's ``distance_transform_edt`` arithmetic, ((d0 s0)^2 + (d1 s1)^2) + (d2 s2)^2: a ball of
    about NEAR_OFFSETS voxels (r at least the coarsest spacing). The window holds every such offset: a sum of
    non-negative floats is never below its terms, so |d_a| s_a <= r on each axis (one voxel of slack for rounding)."""
    s0, s1, s2 = spacing
    r = max((3.0 * NEAR_OFFSETS * s0 * s1 * s2 / (4.0 * np.pi)) ** (1.0 / 3.0), s0, s1, s2)
    reach = [int(np.ceil(r / s)) + 1 for s in spacing]
    d = np.mgrid[-reach[0] : reach[0] + 1, -reach[1] : reach[1] + 1, -reach[2] : reach[2] + 1].reshape(3, -1)
    w0, w1, w2 = d[0] * s0, d[1] * s1, d[2] * s2
    squared = (w0 * w0 + w1 * w1) + w2 * w2
    keep = np.flatnonzero(squared <= r * r)
    keep = keep[np.argsort(squared[keep], kind="stable")]
    return np.ascontiguousarray(d[:, keep]), squared[keep]


@numba.njit("i8[::1](b1[:, :, ::1], i8[::1], i8[:, ::1], f8[::1], f8[::1])", cache=True, nogil=True)
def _nearest_within(target: np.ndarray, query: np.ndarray, offsets: np.ndarray, squared: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[c]``: the distance from query voxel c (flat index) to the nearest ``target`` voxel, when one lies
    within the ball ``offsets`` (:func:`near_offsets`, nearest first: the first hit is the nearest voxel of the
    whole array, every nearer offset having been tried); 0 for a query on the target. Returns the positions in
    ``query`` with no target voxel in the ball (``out`` untouched there)."""
    n0, n1, n2 = target.shape
    flat = target.ravel()
    missed = np.empty(len(query), dtype=np.int64)
    n_missed = 0
    for c in range(len(query)):
        q = query[c]
        if flat[q]:
            out[c] = 0.0
            continue
        i, j, k = q // (n1 * n2), q // n2 % n1, q % n2
        for o in range(1, len(squared)):  # offset 0 is the voxel itself
            a, b, e = i + offsets[0, o], j + offsets[1, o], k + offsets[2, o]
            if 0 <= a < n0 and 0 <= b < n1 and 0 <= e < n2 and target[a, b, e]:
                out[c] = np.sqrt(squared[o])
                break
        else:
            missed[n_missed] = c
            n_missed += 1
    return missed[:n_missed]


def _distances_to(target: np.ndarray, query: np.ndarray, s0: float, s1: float, s2: float) -> np.ndarray:
    """Distance (mm) from each voxel of ``query`` (ascending flat indices) to the nearest voxel of ``target``, in
    scipy's ``distance_transform_edt`` arithmetic, sqrt(((d0 s0)^2 + (d1 s1)^2) + (d2 s2)^2), of the nearest voxel.

    Surfaces a few voxels apart (most regions) are searched in a ball of offsets around each query
    (:func:`_nearest_within`); only the queries farther than the ball go through the distance transform
    (:func:`_transform_distances_to`), the same minimum by another route."""
    offsets, squared = near_offsets((s0, s1, s2))
    out = np.zeros(len(query))
    missed = _nearest_within(target, query, offsets, squared, out)
    if len(missed):
        out[missed] = _transform_distances_to(target, query[missed], s0, s1, s2)
    return out


@numba.njit("f8[::1](b1[:, :, ::1], i8[::1], f8, f8, f8)", cache=True, nogil=True)
def _transform_distances_to(target: np.ndarray, query: np.ndarray, s0: float, s1: float, s2: float) -> np.ndarray:
    """:func:`_distances_to` by a separable squared distance transform (per axis: nearest target along axis 0, then
    lower envelopes along axes 1 and 2) whose later passes run only on the planes and lines holding a query off the
    target."""
    n0, n1, n2 = target.shape
    flat = target.ravel()
    out = np.zeros(len(query))
    plane = np.zeros(n0, dtype=np.bool_)
    line = np.zeros((n0, n1), dtype=np.bool_)
    for q in query:
        if not flat[q]:
            plane[q // (n1 * n2)] = True
            line[q // (n1 * n2), q // n2 % n1] = True
    g = np.empty(target.shape)
    last = np.full((n1, n2), -1, dtype=np.int64)
    for i in range(n0):  # nearest target along axis 0, from below then from above
        for j in range(n1):
            for k in range(n2):
                if target[i, j, k]:
                    last[j, k] = i
                d = (i - last[j, k]) * s0
                g[i, j, k] = d * d if last[j, k] >= 0 else np.inf
    last[:] = -1
    for i in range(n0 - 1, -1, -1):
        for j in range(n1):
            for k in range(n2):
                if target[i, j, k]:
                    last[j, k] = i
                if last[j, k] >= 0:
                    d = (last[j, k] - i) * s0
                    g[i, j, k] = min(g[i, j, k], d * d)
    n = max(n1, n2)
    f, res, v, z = np.empty(n), np.empty(n), np.empty(n, dtype=np.int64), np.empty(n)
    for i in range(n0):
        if plane[i]:
            for k in range(n2):
                f[:n1] = g[i, :, k]
                _lower_envelope(f[:n1], s1, res[:n1], v, z)
                g[i, :, k] = res[:n1]
    for i in range(n0):
        for j in range(n1):
            if line[i, j]:
                f[:n2] = g[i, j]
                _lower_envelope(f[:n2], s2, g[i, j], v, z)
    for c in range(len(query)):
        if not flat[query[c]]:
            out[c] = np.sqrt(g.ravel()[query[c]])
    return out


def edge_voxel_distances(pred: np.ndarray, ref: np.ndarray, spacing: Spacing) -> tuple[np.ndarray, np.ndarray]:
    """(prediction -> reference, reference -> prediction) distances (mm, float64, unsorted: ascending
    flat index) of the edge voxels of two non-empty boolean masks: a mask's edge is the mask minus its
    binary erosion by the 6-neighbour cross, the array's edge counting as outside; a voxel's distance
    is the Euclidean distance at this spacing to the nearest edge voxel of the other mask, what a
    distance transform of the other edge gives (MONAI's and panoptica's surfaces), here computed only
    where an edge voxel needs it (``_distances_to``)."""
    edge_p, edge_g = (_edge_voxels(np.ascontiguousarray(m, dtype=np.bool_)) for m in (pred, ref))
    s0, s1, s2 = (float(s) for s in spacing)
    return (_distances_to(edge_g, np.flatnonzero(edge_p), s0, s1, s2), _distances_to(edge_p, np.flatnonzero(edge_g), s0, s1, s2))


def monai_surface_distances(pred: np.ndarray, ref: np.ndarray, spacing: Spacing) -> SurfaceDistances:
    """MONAI's directed edge-voxel distances (``edge_voxel_distances``) in float32, as MONAI returns
    them, each voxel weight 1, each direction sorted."""
    d_pg, d_gp = (np.sort(d.astype(np.float32)) for d in edge_voxel_distances(pred, ref, spacing))
    return SurfaceDistances(d_pg=d_pg, w_pg=np.ones(len(d_pg)), d_gp=d_gp, w_gp=np.ones(len(d_gp)))


def _float32_quantile(ascending: np.ndarray, q: float) -> np.float32:
    """``torch.quantile`` (linear) of sorted float32 values, as MONAI takes its percentiles: the rank
    q (n - 1) and the interpolation weight in float32, and torch's ``lerp`` (from the nearer end)."""
    rank = np.float32(q) * np.float32(len(ascending) - 1)
    below = int(rank)
    weight = rank - np.float32(below)
    lo, hi = ascending[below], ascending[int(np.ceil(rank))]  # torch: the ranks below and above (its ceil)
    return lo + weight * (hi - lo) if weight < 0.5 else hi - (hi - lo) * (np.float32(1) - weight)


def monai_metrics(sd: SurfaceDistances, nsd_tolerance: float) -> dict[str, float]:
    """hd, hd95, assd, masd and nsd of ``monai_surface_distances`` by MONAI's formulas (unweighted)."""
    both = np.concatenate([sd.d_pg, sd.d_gp])
    within = np.count_nonzero(both <= np.float32(nsd_tolerance))
    return {
        "hd": float(max(sd.d_pg.max(), sd.d_gp.max())),
        "hd95": float(max(_float32_quantile(sd.d_pg, 0.95), _float32_quantile(sd.d_gp, 0.95))),
        "assd": float(both.mean(dtype=np.float64)),
        "masd": float(0.5 * (sd.d_pg.mean(dtype=np.float64) + sd.d_gp.mean(dtype=np.float64))),
        "nsd": within / len(both),
    }


@dataclass(frozen=True)
class Profile:
    """One definition of the surface metrics: how two non-empty masks are measured and combined."""

    name: str
    hd95_definition: str
    measure: Callable[[np.ndarray, np.ndarray, Spacing], SurfaceDistances]
    metrics: Callable[[SurfaceDistances, float], dict[str, float]]


PROFILES: dict[str, Profile] = {
    "segauge": Profile("segauge", "segauge_pooled_area_weighted", surface_distances, distance_metrics),
    "deepmind": Profile("deepmind", "deepmind_max_directed_area_weighted", deepmind_surface_distances, deepmind_metrics),
    "meshmetrics": Profile("meshmetrics", "meshmetrics_max_directed_area_weighted", surfacenets_surface_distances, deepmind_metrics),
    "monai": Profile("monai", "monai_max_directed_percentile_unweighted", monai_surface_distances, monai_metrics),
}


def get_profile(name: str) -> Profile:
    """The profile called ``name``; an error listing the known ones otherwise."""
    if name not in PROFILES:
        raise ValueError(f"scoring.profile: unknown metric-definition profile {name!r}; known: {sorted(PROFILES)}")
    return PROFILES[name]
