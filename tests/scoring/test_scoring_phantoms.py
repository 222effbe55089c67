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

from segbench.scoring.engine import score_case
from segbench.scoring.settings import Region
from segbench.scoring.surface import directed_distances
from segbench.scoring.surface_mesh import Mesh, cell_codes, config_table, subface_templates, surface_mesh

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


def _brute_force(points: np.ndarray, tri: np.ndarray) -> np.ndarray:
    """Distance of each point to the nearest of all triangles, independently of the kernel: the
    projection onto each triangle's plane where it falls inside, else the nearest of its edges."""
    a, b, c = tri[:, 0], tri[:, 1], tri[:, 2]
    out = []
    for p in points:
        ab, ac, ap = b - a, c - a, p - a
        n = np.cross(ab, ac)
        nn = (n * n).sum(1)
        # inside-face candidate: projection with barycentrics in the triangle
        proj = p - ((ap * n).sum(1) / nn)[:, None] * n
        v0, v1, v2 = ab, ac, proj - a
        d00, d01, d11 = (v0 * v0).sum(1), (v0 * v1).sum(1), (v1 * v1).sum(1)
        d20, d21 = (v2 * v0).sum(1), (v2 * v1).sum(1)
        den = d00 * d11 - d01 * d01
        v, w = (d11 * d20 - d01 * d21) / den, (d00 * d21 - d01 * d20) / den
        inside = (v >= 0) & (w >= 0) & (v + w <= 1)
        best = np.where(inside, np.sqrt(((p - proj) ** 2).sum(1)), np.inf)
        for s0, s1 in ((a, b), (b, c), (c, a)):
            d = s1 - s0
            t = np.clip(((p - s0) * d).sum(1) / (d * d).sum(1), 0, 1)
            best = np.minimum(best, np.sqrt(((s0 + t[:, None] * d - p) ** 2).sum(1)))
        out.append(best.min())
    return np.asarray(out)


def _subface_centroids(mesh: Mesh, faces: np.ndarray) -> list[np.ndarray]:
    """Each face's quadrature points: its table entry's template moved to its cell."""
    sub_start, sub_centroid, _ = subface_templates(SPACING)
    origin = np.stack(np.unravel_index(mesh.triangle_cells()[faces], mesh.grid), axis=1) * np.asarray(SPACING)
    return [o + sub_centroid[sub_start[e] : sub_start[e + 1]] for o, e in zip(origin, mesh.entry[faces], strict=True)]


def test_distances_are_exact_point_to_triangle() -> None:
    """Every quadrature point's distance is the brute-force minimum over all triangles of the
    other surface, for near points (boundary errors of one voxel and of 3 mm, settled by the local
    scan or beyond it) and far ones (a distant block)."""
    inner, outer = sphere(R_IN), sphere(R_OUT)
    far = np.zeros_like(outer)
    far[:, :8, :8] = True  # a block in a corner, far from the inner sphere
    mesh_in = surface_mesh(cell_codes(inner), SPACING)
    for other in (sphere(R_IN + SPACING[1]), outer, far):
        mesh_out = surface_mesh(cell_codes(other), SPACING)
        every = np.arange(len(mesh_in.tri))
        dist, weight = directed_distances(every, mesh_in, mesh_out, SPACING)
        # the sub-faces tile the surface
        assert weight.sum() == pytest.approx(float(_areas(mesh_in.tri).sum()), rel=1e-12)
        pick = np.sort(np.random.default_rng(0).choice(every, 150, replace=False))
        got = directed_distances(pick, mesh_in, mesh_out, SPACING)[0]
        points = np.concatenate(_subface_centroids(mesh_in, pick))
        assert len(got) == len(points) > len(pick)  # some faces are split
        assert got == pytest.approx(_brute_force(points, mesh_out.tri), abs=1e-9)


def _areas(tri: np.ndarray) -> np.ndarray:
    return np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1) / 2


def test_mesh_is_skimages() -> None:
    """The table-built mesh has exactly skimage's marching-cubes triangles (what segauge meshes),
    on a sphere and on random noise (every corner code, ambiguous ones included)."""
    from skimage.measure import marching_cubes

    noise = np.random.default_rng(3).random((12, 14, 16)) < 0.5
    for mask in (sphere(R_IN), noise):
        verts, faces, _, _ = marching_cubes(np.pad(mask, 1).astype(np.float32), level=0.5, spacing=SPACING)
        theirs = np.rint(verts.astype(np.float64)[faces] / (np.asarray(SPACING) / 2)).astype(np.int64)
        ours = np.rint(surface_mesh(cell_codes(mask), SPACING).tri / (np.asarray(SPACING) / 2)).astype(np.int64)
        assert len(ours) == len(theirs)
        canon = [np.unique(np.sort(t.view([("", t.dtype)] * 3).ravel().reshape(-1, 3), axis=1), axis=0) for t in (ours, theirs)]
        assert np.array_equal(canon[0], canon[1])


def test_subfaces_are_segauges() -> None:
    """Each face's sub-faces are those of trimesh's subdivide_to_size (segauge's), face for face:
    the templates of every table triangle, and a whole mesh whose coordinates are exact in binary
    (as KiTS23's header spacings are; elsewhere segauge's float32 coordinates decide edges exactly
    as long as the smallest spacing by rounding: docs/scoring.md)."""
    import trimesh

    def split(tri: np.ndarray, spacing: tuple[float, float, float]) -> np.ndarray:
        faces = np.arange(3 * len(tri)).reshape(-1, 3)
        mesh = trimesh.Trimesh(vertices=tri.reshape(-1, 3), faces=faces, process=False)
        return np.sort(mesh.subdivide_to_size(min(spacing)).area_faces)

    table, _ = config_table()
    _, _, sub_area = subface_templates(SPACING)
    assert np.sort(sub_area) == pytest.approx(split(table * (np.asarray(SPACING) / 2), SPACING), abs=1e-12)

    exact = (1.5, 0.625, 0.625)
    mesh = surface_mesh(cell_codes(sphere(R_IN)), exact)
    _, weight = directed_distances(np.arange(len(mesh.tri)), mesh, mesh, exact)
    theirs = split(mesh.tri, exact)
    assert len(weight) == len(theirs) > len(mesh.tri)
    assert np.sort(weight) == pytest.approx(theirs, abs=1e-12)


def test_shared_cells_hold_identical_faces() -> None:
    """Cells with one corner code in both masks hold the same triangles (distance 0, not searched);
    a mask cut in half shares the intact half's faces and none of the cut half's."""
    a = sphere(R_IN)
    b = a.copy()
    b[:, :, 27:] = False
    codes_a, codes_b = cell_codes(a), cell_codes(b)
    mesh_a, mesh_b = surface_mesh(codes_a, SPACING), surface_mesh(codes_b, SPACING)
    cell = mesh_a.triangle_cells()
    shared = codes_a.ravel()[cell] == codes_b.ravel()[cell]
    cen = mesh_a.tri.mean(axis=1)
    assert shared[cen[:, 2] < 20 * SPACING[2]].all()
    assert not shared[cen[:, 2] > 29 * SPACING[2]].any()

    def triangles(tri: np.ndarray) -> set:
        return {tuple(sorted(map(tuple, t))) for t in tri.round(9).tolist()}

    assert triangles(mesh_a.tri[shared]) <= triangles(mesh_b.tri)
    assert len(triangles(mesh_a.tri[~shared]) & triangles(mesh_b.tri)) < (~shared).sum()  # the cut half differs


def test_distance_metrics_equal_segauges() -> None:
    """hd, hd95, assd, masd and nsd equal segauge's functions on the same distances: ties, skewed
    weights, many zeros (shared faces), and HD95 clamped to either end of the distribution."""
    from segauge.metrics import distance as segauge_distance
    from segauge.metrics.distance import SurfaceDistances

    from segbench.scoring.surface_summaries import distance_metrics

    def assert_equal(sd: SurfaceDistances, tolerance: float = 1.1) -> None:
        ours = distance_metrics(sd, tolerance)
        theirs = {m: getattr(segauge_distance, name)(sd) for m, name in (("hd", "hausdorff"), ("hd95", "hausdorff95"), ("assd", "assd"), ("masd", "masd"))}
        theirs["nsd"] = segauge_distance.nsd(sd, tolerance)
        assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-12)

    rng = np.random.default_rng(1)
    for n, ties, skew in ((7, False, False), (50_000, True, False), (50_000, False, True), (3, True, True)):
        d = rng.gamma(2.0, 1.0, size=(2, n))
        if ties:
            d = np.round(d, 1)
        w = rng.uniform(0.1, 1.0, size=(2, n))
        if skew:  # a few huge weights in the lower half
            w[0, np.argsort(d[0])[: max(1, n // 100)]] *= 1e4
        assert_equal(SurfaceDistances(d_pg=d[0], w_pg=w[0], d_gp=d[1], w_gp=w[1]))
    # shared faces (many exact zeros), all zero, and the quantile clamped to the smallest or largest value
    d = np.concatenate([np.zeros(30_000), rng.gamma(2.0, 1.0, 3_000)])
    w = rng.uniform(0.1, 1.0, d.size)
    cases = [(d, w), (np.zeros(10), np.ones(10))]
    for at in (np.argmin, np.argmax):
        heavy = w.copy()
        heavy[at(d)] = 1e9
        cases.append((d, heavy))
    for d, w in cases:
        half = len(d) // 3
        assert_equal(SurfaceDistances(d_pg=d[:half], w_pg=w[:half], d_gp=d[half:], w_gp=w[half:]))
