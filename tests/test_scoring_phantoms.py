"""Analytic phantoms: concentric spheres at anisotropic spacing, where every surface distance is dR.

Tolerance (derived, not tuned). A voxel is inside iff its centre is within R of the centre. With a
binary mask every marching-cubes vertex is the midpoint of a voxel edge joining an inside and an
outside centre, so its radius lies in (R - s/2, R + s/2], s = the largest spacing. Triangle points
are convex combinations of vertices: radius <= R + s/2, and >= R - s/2 - sag, where sag <=
r0 - sqrt(r0^2 - D^2) (r0 = R - s/2, D = voxel diagonal >= any triangle edge) bounds how far a
triangle dips inside the sphere through its vertices. For x on the inner surface the distance to
the outer one is therefore within dR +- B, B = s + max(sag), pointwise, hence also for HD, HD95,
ASSD and MASD; NSD is 1 when the tolerance exceeds dR + B and 0 when it is below dR - B.
"""

from __future__ import annotations

import math
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import segauge

from segbench.scoring import Region, score_case
from segbench.scoring.surface import _areas_centroids, _distances_to_surface, mesh_triangles, point_triangle_distance

SPACING = (1.5, 0.6, 0.6)
R_IN, R_OUT = 9.0, 12.0


def sphere(radius: float, shape: tuple[int, int, int] = (24, 54, 54)) -> np.ndarray:
    centre = (np.asarray(shape) - 1) / 2 * np.asarray(SPACING) + 0.17  # off-grid centre
    grid = np.ogrid[tuple(slice(0, n) for n in shape)]
    return sum(((g * s - c) ** 2) for g, s, c in zip(grid, SPACING, centre, strict=True)) <= radius**2


def bound() -> float:
    s, diag = max(SPACING), math.sqrt(sum(v * v for v in SPACING))
    r0 = R_IN - s / 2
    return s + (r0 - math.sqrt(r0**2 - diag**2))


def write(path: Path, mask: np.ndarray) -> Path:
    nib.save(nib.Nifti1Image(mask.astype(np.uint8), np.diag([*SPACING, 1.0])), path)
    return path


def test_concentric_spheres_closed_form(tmp_path: Path) -> None:
    ref, pred = sphere(R_OUT), sphere(R_IN)
    truth, b = R_OUT - R_IN, bound()
    regions = [Region("s", (1,), truth + b + 0.01), Region("s_tight", (1,), truth - b - 0.01)]
    rows = score_case("sph", write(tmp_path / "r.nii.gz", ref), write(tmp_path / "p.nii.gz", pred), regions)
    for m in ("hd", "hd95", "assd", "masd"):
        assert abs(rows[0][m] - truth) <= b, m
    assert rows[0]["nsd"] == 1.0 and rows[1]["nsd"] == 0.0
    # the voxelised surfaces, not the distance method, dominate the error: segauge agrees closely
    sd = segauge.compute_surface_distances(pred, ref, SPACING)
    assert rows[0]["assd"] == pytest.approx(segauge.assd(sd), abs=0.05)
    assert rows[0]["hd95"] == pytest.approx(segauge.hausdorff95(sd), abs=0.05)


def test_distances_are_exact_point_to_triangle() -> None:
    """The KD-tree candidate search returns the brute-force minimum over all triangles."""
    tri_in, tri_out = mesh_triangles(sphere(R_IN), SPACING), mesh_triangles(sphere(R_OUT), SPACING)
    _, centroids = _areas_centroids(tri_in)
    pts = centroids[np.random.default_rng(0).choice(len(centroids), 150, replace=False)]
    fast = _distances_to_surface(pts, tri_out, 2 * min(SPACING))
    brute = [point_triangle_distance(np.repeat(p[None], len(tri_out), 0), tri_out).min() for p in pts]
    assert fast == pytest.approx(brute, abs=1e-12)


def test_point_triangle_distance_regions() -> None:
    tri = np.array([[0.0, 0, 0], [2, 0, 0], [0, 2, 0]])
    pts = np.array([[0.5, 0.5, 3], [-1, -1, 0], [3, 0, 0], [1, -2, 0], [2, 2, 0], [-1, 1, 0]])
    expected = [3.0, math.sqrt(2), 1.0, 2.0, math.sqrt(2), 1.0]
    got = point_triangle_distance(pts, np.repeat(tri[None], len(pts), 0))
    assert got == pytest.approx(expected)
