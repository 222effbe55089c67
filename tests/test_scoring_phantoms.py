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
from segbench.scoring.surface import _face_keys, directed_distances, surface_mesh

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


def test_distances_are_exact_point_to_triangle() -> None:
    """The kernel's grid/hierarchy search returns the brute-force minimum over all triangles, for
    near points (boundary error) and far ones (a second, distant sphere is the other surface)."""
    inner, outer = sphere(R_IN), sphere(R_OUT)
    far = np.zeros_like(outer)
    far[:, :8, :8] = True  # a block in a corner, far from the inner sphere
    for other in (outer, far):
        (v_in, f_in), (v_out, f_out) = surface_mesh(inner, SPACING), surface_mesh(other, SPACING)
        tri_in, tri_out = v_in[f_in], v_out[f_out]
        shape = tuple(n + 2 for n in inner.shape)
        dist, weight = directed_distances(tri_in, np.zeros(len(tri_in), bool), tri_out, SPACING, shape)
        # the sub-faces tile the surface
        assert weight.sum() == pytest.approx(float(np.linalg.norm(np.cross(tri_in[:, 1] - tri_in[:, 0], tri_in[:, 2] - tri_in[:, 0]), axis=1).sum() / 2))
        pick = np.random.default_rng(0).choice(len(tri_in), 150, replace=False)
        # unsplit faces, searched in one batch (warm starts across faces): equal to brute force
        sub = directed_distances(tri_in[pick], np.zeros(len(pick), bool), tri_out, SPACING, shape)[0]
        counts = [directed_distances(tri_in[i:i + 1], np.zeros(1, bool), tri_out, SPACING, shape)[0] for i in pick]
        single = np.array([len(c) == 1 for c in counts])
        centroids = tri_in[pick].mean(axis=1)
        starts = np.cumsum([0] + [len(c) for c in counts])[:-1]
        assert sub[starts[single]] == pytest.approx(_brute_force(centroids[single], tri_out), abs=1e-9)
        # split faces: every sub-face distance is within the face's radius of its centroid's
        rho = np.linalg.norm(tri_in[pick] - centroids[:, None], axis=2).max(axis=1)
        brute_c = _brute_force(centroids, tri_out)
        for i, c in enumerate(counts):
            assert np.all(np.abs(c - brute_c[i]) <= rho[i] + 1e-9)


def test_subfaces_are_segauges() -> None:
    """Sub-face weights are those of segauge's trimesh subdivision, face for face."""
    import trimesh

    mask = sphere(R_IN)
    verts, faces = surface_mesh(mask, SPACING)
    tri = verts[faces]
    _, weight = directed_distances(tri, np.ones(len(tri), bool), tri, SPACING, tuple(n + 2 for n in mask.shape))
    mesh = trimesh.Trimesh(vertices=verts, faces=faces, process=False).subdivide_to_size(min(SPACING))
    assert len(weight) == len(mesh.faces)
    assert np.sort(weight) == pytest.approx(np.sort(mesh.area_faces), abs=1e-12)


def test_identical_faces_are_found() -> None:
    """Faces common to two meshes on one grid get equal keys; a shifted mask shares none inside."""
    a = sphere(R_IN)
    b = a.copy()
    b[:, :, 27:] = False  # half the sphere: the other half's faces are shared
    shape = tuple(n + 2 for n in a.shape)
    (va, fa), (vb, fb) = surface_mesh(a, SPACING), surface_mesh(b, SPACING)
    shared = np.isin(_face_keys(va, fa, SPACING, shape), _face_keys(vb, fb, SPACING, shape))
    cen = va[fa].mean(axis=1)
    assert shared[cen[:, 2] < 20 * SPACING[2]].all()
    assert not shared[cen[:, 2] > 29 * SPACING[2]].any()


def test_hausdorff95_equals_segauges() -> None:
    """The tail-only weighted quantile equals segauge's full sort, ties and skewed weights included."""
    from segauge.metrics.distance import SurfaceDistances
    from segauge.metrics.distance import hausdorff95 as segauge_hd95

    from segbench.scoring.surface import hausdorff95

    rng = np.random.default_rng(1)
    for n, ties, skew in ((7, False, False), (50_000, True, False), (50_000, False, True), (3, True, True)):
        d = rng.gamma(2.0, 1.0, size=(2, n))
        if ties:
            d = np.round(d, 1)
        w = rng.uniform(0.1, 1.0, size=(2, n))
        if skew:  # a few huge weights in the lower half force the fallback path
            w[0, np.argsort(d[0])[: max(1, n // 100)]] *= 1e4
        sd = SurfaceDistances(d_pg=d[0], w_pg=w[0], d_gp=d[1], w_gp=w[1])
        assert hausdorff95(sd) == pytest.approx(segauge_hd95(sd), rel=1e-12, abs=1e-12)
