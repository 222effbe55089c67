"""Metric-definition profiles: whose definition of the surface metrics a score follows (docs/methodology.md,
"Metric-definition profiles").

Every profile measures the same masks from the engine's one decode per case and returns the same
metric names; only the surface, its distances and how they are combined differ. Empty masks never
reach a profile: the engine applies the project's policy first (both empty: perfect; one empty or
no prediction: worst case), whatever the original library would return there (inf, NaN).

- ``segauge`` (default): segauge's marching-cubes surface at true spacing, exact area-weighted
  distances, HD95 over both directions pooled (``surface.py``).
- ``deepmind``: DeepMind surface-distance's definitions: surfels are the grid cells whose 2x2x2
  neighbour code is neither empty nor full, each weighted by its code's surface area at this
  spacing, placed on the voxel grid; a surfel's distance is the Euclidean distance to the nearest
  surfel of the other mask (what its distance transform of the other border gives); HD and HD95
  are the larger of the two one-directional area-weighted percentiles (``compute_robust_hausdorff``
  at 100 and 95: the first sorted distance whose cumulative area share reaches the percentile);
  MASD is the mean of ``compute_average_surface_distance``'s two directed means, ASSD the
  area-weighted mean over both surfaces pooled; NSD is ``compute_surface_dice_at_tolerance``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree
from segauge.metrics.distance import SurfaceDistances

from segbench.scoring.surface import CORNERS, cell_codes, distance_metrics, surface_distances
from segbench.scoring.surfacenets import surfacenets_surface_distances

Spacing = tuple[float, float, float]


@functools.cache
def _lorensen_triangles() -> tuple[tuple[np.ndarray, ...], ...]:
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


def _directed(idx_from: np.ndarray, idx_to: np.ndarray, tree_to: cKDTree, shape: tuple[int, ...], spacing: np.ndarray) -> np.ndarray:
    """Distance (mm) from each surfel of ``idx_from`` to the nearest surfel of ``idx_to``; a surfel in
    both borders is at 0 without a search."""
    dist = np.zeros(len(idx_from))
    todo = ~np.isin(idx_from, idx_to, assume_unique=True)
    if todo.any():
        pts = np.stack(np.unravel_index(idx_from[todo], shape), axis=1) * spacing
        dist[todo] = tree_to.query(pts, k=1)[0]
    return dist


def _sorted_by_distance(dist: np.ndarray, area: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both arrays ordered by (distance, area), surface-distance's order (its cumulative sums follow it)."""
    order = np.lexsort((area, dist))
    return dist[order], area[order]


def deepmind_surface_distances(pred: np.ndarray, ref: np.ndarray, spacing: Spacing) -> SurfaceDistances:
    """surface-distance's ``compute_surface_distances`` of two non-empty boolean masks, each direction
    sorted by (distance, area) as it returns them: surfels from the neighbour codes, their areas,
    and nearest-surfel distances by a k-d tree over the other border instead of a distance
    transform of the whole box (the same nearest Euclidean distance)."""
    sp = np.asarray(spacing, dtype=np.float64)
    areas = surfel_areas(tuple(float(s) for s in spacing))
    codes_p, codes_g = cell_codes(pred), cell_codes(ref)
    (idx_p, code_p), (idx_g, code_g) = _surfels(codes_p), _surfels(codes_g)
    shape = codes_p.shape

    def tree(idx: np.ndarray) -> cKDTree:
        return cKDTree(np.stack(np.unravel_index(idx, shape), axis=1) * sp)

    d_pg = _directed(idx_p, idx_g, tree(idx_g), shape, sp)
    d_gp = _directed(idx_g, idx_p, tree(idx_p), shape, sp)
    d_pg, w_pg = _sorted_by_distance(d_pg, areas[code_p])
    d_gp, w_gp = _sorted_by_distance(d_gp, areas[code_g])
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
}
DEFAULT_PROFILE = "segauge"


def get_profile(name: str) -> Profile:
    """The profile called ``name``; an error listing the known ones otherwise."""
    if name not in PROFILES:
        raise ValueError(f"scoring.profile: unknown metric-definition profile {name!r}; known: {sorted(PROFILES)}")
    return PROFILES[name]
