"""Metric-definition profiles against the libraries they follow (docs/methodology.md, "Metric-definition profiles").

The ``deepmind`` profile must equal DeepMind's surface-distance package (PyPI ``surface-distance``, a
dev dependency only) to 1e-6 on every surface metric: on hand-built phantoms and on crops of real
KiTS23 cases (5, 3, 2 and 0.5 mm slices) with simulated errors, scored through ``score_case`` from
the files. Empty masks follow the project's worst-case policy instead of the package's inf/NaN.
"""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from scipy import ndimage

from repo_paths import ROOT
from segbench.config.params import ConfigError, load_params
from segbench.models.simulated import add_blob, displace_boundary, miss_largest_lesion, shift
from segbench.scoring.engine import score_case, score_cases
from segbench.scoring.labelmaps import nonzero_box
from segbench.scoring.profiles import (
    PROFILES,
    _distances_to,
    _nearest_within,
    deepmind_metrics,
    deepmind_surface_distances,
    near_offsets,
    surfel_areas,
)
from segbench.scoring.settings import Region
from tests_support import tumour_crop

sd = pytest.importorskip("surface_distance")
from surface_distance_reference import package_metrics  # noqa: E402  (after the skip: it imports surface_distance)

LABELS = ROOT / "data" / "kits23" / "labels"
REGIONS = (
    Region("kidney_and_mass", (1, 2, 3), 1.0331),
    Region("mass", (2, 3), 1.1329),
    Region("tumor", (2,), 1.1498, detection=True),
)
SURFACE_METRICS = ("hd", "hd95", "assd", "masd", "nsd")
TOL = 1e-6
meshmetrics = PROFILES["meshmetrics"]


def reversed_bits(code: int) -> int:
    """surface-distance's neighbour code of a cell whose corners are ``surface.CORNERS``-ordered bits."""
    return sum((code >> b & 1) << (7 - b) for b in range(8))


@pytest.mark.parametrize("spacing", [(1.0, 1.0, 1.0), (5.0, 0.73046875, 0.73046875), (0.7, 1.3, 2.9)])
def test_surfel_areas_are_the_packages_table(spacing: tuple[float, float, float]) -> None:
    theirs = sd.lookup_tables.create_table_neighbour_code_to_surface_area(spacing)
    ours = surfel_areas(spacing)
    np.testing.assert_allclose(ours, [theirs[reversed_bits(c)] for c in range(256)], rtol=0, atol=1e-12)


@pytest.mark.parametrize("spacing", [(1.0, 1.0, 1.0), (5.0, 0.73046875, 0.73046875), (0.7, 1.3, 2.9)])
def test_distances_to_is_the_exact_nearest_voxel_in_both_routes(spacing: tuple[float, float, float]) -> None:
    """Every query's distance is, bit for bit, the minimum over all target voxels of scipy's arithmetic: queries near
    the target (the ball of offsets), on it (0) and far from it (the distance transform) in one call, and a call
    whose target is empty (inf)."""
    rng = np.random.default_rng(11)
    target = np.zeros((40, 44, 38), dtype=bool)
    target[5:12, 6:15, 4:10] = rng.random((7, 9, 6)) > 0.5
    query = np.zeros_like(target)
    query[3:14, 4:17, 2:12] = rng.random((11, 13, 10)) > 0.7  # around and on the target
    query[30:38, 36:43, 28:37] = rng.random((8, 7, 9)) > 0.7  # tens of mm away: beyond the ball
    flat = np.flatnonzero(query)
    offsets, squared = near_offsets(spacing)
    assert np.all(np.diff(squared) >= 0) and squared[0] == 0
    near = np.zeros(len(flat))
    far = _nearest_within(target, flat, offsets, squared, near)
    assert 0 < len(far) < len(flat) and np.any(target.ravel()[flat])  # all three kinds of query are exercised
    t = np.argwhere(target).astype(np.float64)
    q = np.argwhere(query).astype(np.float64)
    w = [(q[:, None, a] - t[None, :, a]) * spacing[a] for a in range(3)]
    expected = np.sqrt(((w[0] * w[0] + w[1] * w[1]) + w[2] * w[2]).min(axis=1))
    ours = _distances_to(target, flat, *spacing)
    np.testing.assert_array_equal(ours.view(np.int64), expected.view(np.int64))
    np.testing.assert_array_equal(_distances_to(np.zeros_like(target), flat, *spacing), np.full(len(flat), np.inf))


def _sphere(shape: tuple[int, int, int], centre: tuple[float, ...], radius: float) -> np.ndarray:
    grid = np.indices(shape).astype(float)
    return sum((g - c) ** 2 for g, c in zip(grid, centre, strict=True)) <= radius**2


#: Phantom sizes: the deepmind comparisons' and, small enough for the meshmetrics brute force
#: (every centroid against every triangle), a smaller set. The distant blocks are more than 6 mm
#: apart at every tested spacing (the meshmetrics profile's search beyond its offset table).
SIZES = {
    False: {
        "ball": ((30, 34, 32), (15, 17, 16), 9),
        "roll": (2, -1, 3),
        "noise": (24, 26, 22),
        "block": (20, 40, 20),
        "near": np.s_[2:8, 3:12, 4:9],
        "far": np.s_[12:18, 30:38, 10:18],
        "edge": 12,
    },
    True: {
        "ball": ((16, 17, 15), (8, 8, 7), 5),
        "roll": (1, -1, 2),
        "noise": (12, 13, 11),
        "block": (10, 30, 10),
        "near": np.s_[2:6, 3:8, 3:7],
        "far": np.s_[5:9, 20:27, 2:8],
        "edge": 8,
    },
}


def _phantoms(small: bool = False) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    size = SIZES[small]
    rng = np.random.default_rng(7)
    ball = _sphere(*size["ball"])
    noise = ndimage.binary_opening(rng.random(size["noise"]) > 0.45)
    block = np.zeros(size["block"], dtype=bool)
    block[size["near"]] = True
    far = np.zeros_like(block)
    far[size["far"]] = True
    edge = np.zeros((size["edge"],) * 3, dtype=bool)
    edge[:, : size["edge"] // 2, :] = True  # touches the array's border: the surface closes outside the box
    return {
        "ball_dilated": (ndimage.binary_dilation(ball), ball),
        "ball_shifted": (np.roll(ball, size["roll"], axis=(0, 1, 2)), ball),
        "noise_vs_its_erosion": (ndimage.binary_erosion(noise), noise),
        "noise_vs_other_noise": (ndimage.binary_opening(rng.random(noise.shape) > 0.45), noise),
        "distant_blocks": (far, block),
        "one_voxel": (np.pad(np.ones((1, 1, 1), dtype=bool), 3), np.pad(np.ones((2, 1, 1), dtype=bool), 3)[:7]),
        "border": (np.roll(edge, 1, axis=1), edge),
        "identical": (ball, ball),
    }


@pytest.mark.parametrize("name", list(_phantoms()))
@pytest.mark.parametrize("spacing", [(1.0, 1.0, 1.0), (5.0, 0.73046875, 0.73046875), (0.7, 1.3, 2.9)])
def test_deepmind_profile_equals_package_on_phantoms(name: str, spacing: tuple[float, float, float]) -> None:
    pred, ref = _phantoms()[name]
    ours = deepmind_metrics(deepmind_surface_distances(pred, ref, spacing), 1.0)
    theirs = package_metrics(pred, ref, spacing, 1.0)
    for metric in SURFACE_METRICS:
        assert abs(ours[metric] - theirs[metric]) <= TOL, (name, metric, ours[metric], theirs[metric])


PERTURBATIONS = {
    "dilate_1mm": lambda lab, sp: displace_boundary(lab, sp, 1.0),
    "erode_1mm": lambda lab, sp: displace_boundary(lab, sp, -1.0),
    "shift_3mm": lambda lab, sp: shift(lab, sp, 3.0, np.random.default_rng(3)),
    "spurious_blob": lambda lab, sp: add_blob(lab, sp, 8.0, np.random.default_rng(5)),
    "missed_lesion": lambda lab, sp: miss_largest_lesion(lab),
}


@pytest.mark.skipif(not LABELS.is_dir(), reason="data bundle not pulled (dvc pull)")
@pytest.mark.parametrize("case", ["case_00030", "case_00015", "case_00040", "case_00005"])  # 5, 3, 2, 0.5 mm slices
def test_deepmind_profile_equals_package_on_real_cases(tmp_path: Path, case: str) -> None:
    ref_img = tumour_crop(LABELS, case, margin=8)
    ref = np.asanyarray(ref_img.dataobj)
    spacing = tuple(float(z) for z in ref_img.header.get_zooms())
    nib.save(ref_img, tmp_path / "ref.nii.gz")
    worst: dict[str, float] = dict.fromkeys(SURFACE_METRICS, 0.0)
    compared = 0
    for name, perturb in PERTURBATIONS.items():
        pred = perturb(ref, spacing).astype(ref.dtype)
        nib.save(nib.Nifti1Image(pred, ref_img.affine, ref_img.header), tmp_path / f"{name}.nii.gz")
        rows = score_case(case, tmp_path / "ref.nii.gz", tmp_path / f"{name}.nii.gz", REGIONS, profile="deepmind")
        for row in rows:
            assert row["metric_profile"] == "deepmind" and row["hd95_definition"] == "deepmind_max_directed_area_weighted"
            region = next(r for r in REGIONS if r.name == row["structure"])
            g, p = np.isin(ref, region.labels), np.isin(pred, region.labels)
            if not (g.any() and p.any()):
                assert row["worst_case"] == (g.any() != p.any()), (name, row)
                continue
            theirs = package_metrics(p, g, spacing, region.nsd_tolerance_mm)
            compared += 1
            for metric in SURFACE_METRICS:
                diff = abs(row[metric] - theirs[metric])
                worst[metric] = max(worst[metric], diff)
                assert diff <= TOL, (case, name, region.name, metric, row[metric], theirs[metric])
    print(f"{case} {spacing}: {compared} region comparisons, max abs diff {worst}")
    assert compared >= 10


def test_empty_masks_follow_the_worst_case_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The package returns inf distances (and NSD 0) when one mask is empty; the profile reports the
    project's worst case instead: distances = the volume's diagonal, dice/NSD 0; both empty: perfect."""
    monkeypatch.setattr(np, "Inf", np.inf, raising=False)  # the package still spells it the numpy-1 way
    ref = np.zeros((10, 12, 14), dtype=np.uint8)
    ref[2:6, 3:8, 4:9] = 1
    spacing = (2.0, 0.8, 0.8)
    s = sd.compute_surface_distances(ref > 0, np.zeros(ref.shape, dtype=bool), spacing)
    assert sd.compute_robust_hausdorff(s, 95) == np.inf and sd.compute_surface_dice_at_tolerance(s, 1.0) == 0.0
    affine = np.diag([*spacing, 1.0])
    nib.save(nib.Nifti1Image(ref, affine), tmp_path / "ref.nii.gz")
    nib.save(nib.Nifti1Image(np.zeros_like(ref), affine), tmp_path / "empty.nii.gz")
    regions = (Region("organ", (1,), 1.0), Region("absent", (2,), 1.0))
    organ, absent = score_case("phantom", tmp_path / "ref.nii.gz", tmp_path / "empty.nii.gz", regions, profile="deepmind")
    diagonal = float(np.sqrt(sum((n * s) ** 2 for n, s in zip(ref.shape, spacing, strict=True))))
    assert organ["worst_case"] and organ["nsd"] == 0.0 and organ["dice"] == 0.0
    assert organ["hd95"] == organ["hd"] == organ["assd"] == organ["masd"] == pytest.approx(diagonal)
    assert not absent["worst_case"] and (absent["dice"], absent["nsd"], absent["hd95"], absent["assd"]) == (1.0, 1.0, 0.0, 0.0)


def test_default_profile_is_segauge_and_unknown_profiles_fail(tmp_path: Path, root: Path) -> None:
    ref = np.zeros((10, 12, 14), dtype=np.uint8)
    ref[2:6, 3:8, 4:9] = 1
    nib.save(nib.Nifti1Image(ref, np.diag([2.0, 0.8, 0.8, 1.0])), tmp_path / "ref.nii.gz")
    (row,) = score_case("phantom", tmp_path / "ref.nii.gz", tmp_path / "ref.nii.gz", (Region("organ", (1,), 1.0),))
    assert (row["metric_profile"], row["hd95_definition"]) == ("segauge", "segauge_pooled_area_weighted")
    with pytest.raises(ValueError, match="unknown metric-definition profile 'monia'"):
        score_cases([("phantom", tmp_path / "ref.nii.gz", None)], (Region("organ", (1,), 1.0),), profile="monia", progress=False)
    params = (root / "params.yaml").read_text(encoding="utf-8").replace("profile: segauge", "profile: monia")
    (tmp_path / "params.yaml").write_text(params, encoding="utf-8")
    with pytest.raises(ConfigError, match="scoring.profile 'monia'"):
        load_params(tmp_path / "params.yaml")


# --- meshmetrics: MeshMetrics' SurfaceNets surface and exact centroid distances -------------------------------------


def _surfacenets_triangles(mask: np.ndarray, spacing: tuple[float, float, float]) -> np.ndarray:
    """(T, 3, 3) mm: vtkSurfaceNets3D's triangles without smoothing, as MeshMetrics makes them (mask
    zero-padded by one voxel): a square between every two differing 6-neighbours, at the voxels'
    common face, split along its diagonal from (high u, low v) to (low u, high v), u < v its in-plane
    axes (read off VTK 9.7.1's output)."""
    sp = np.asarray(spacing)
    padded = np.pad(mask, 1)
    tris = []
    for axis in range(3):
        u, v = (a for a in range(3) if a != axis)
        lower = np.argwhere(np.diff(padded.astype(np.int8), axis=axis) != 0) - 1  # array index of the pair's lower voxel
        corner = lower.astype(float)
        corner[:, axis] += 0.5
        corner[:, [u, v]] -= 0.5
        a, b, c, d = corner.copy(), corner.copy(), corner.copy(), corner.copy()
        b[:, u] += 1
        c[:, v] += 1
        d[:, [u, v]] += 1
        tris += [np.stack([a, b, c], axis=1), np.stack([d, c, b], axis=1)]
    return np.concatenate(tris) * sp


def _brute_force_distances(pts: np.ndarray, tris: np.ndarray) -> np.ndarray:
    """Exact distance from each point to the nearest triangle (Ericson's closest point, every pair)."""
    out = np.empty(len(pts))
    a, b, c = tris[:, 0], tris[:, 1], tris[:, 2]
    for s in range(0, len(pts), 256):
        p = pts[s : s + 256, None, :]
        ab, ac, ap = b - a, c - a, p - a
        d1, d2 = (ab * ap).sum(-1), (ac * ap).sum(-1)
        bp, cp = p - b, p - c
        d3, d4 = (ab * bp).sum(-1), (ac * bp).sum(-1)
        d5, d6 = (ab * cp).sum(-1), (ac * cp).sum(-1)
        va, vb, vc = d3 * d6 - d5 * d4, d5 * d2 - d1 * d6, d1 * d4 - d3 * d2
        with np.errstate(divide="ignore", invalid="ignore"):
            denom = va + vb + vc
            v_in, w_in = vb / denom, vc / denom
            closest = a + ab * v_in[..., None] + ac * w_in[..., None]
            t_ab = d1 / (d1 - d3)
            t_ac = d2 / (d2 - d6)
            t_bc = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        closest = np.where(((va <= 0) & (d4 - d3 >= 0) & (d5 - d6 >= 0))[..., None], b + (c - b) * t_bc[..., None], closest)
        closest = np.where(((vb <= 0) & (d2 >= 0) & (d6 <= 0))[..., None], a + ac * t_ac[..., None], closest)
        closest = np.where(((vc <= 0) & (d1 >= 0) & (d3 <= 0))[..., None], a + ab * t_ab[..., None], closest)
        closest = np.where(((d6 >= 0) & (d5 <= d6))[..., None], c, closest)
        closest = np.where(((d3 >= 0) & (d4 <= d3))[..., None], b, closest)
        closest = np.where(((d1 <= 0) & (d2 <= 0))[..., None], a, closest)
        out[s : s + 256] = np.sqrt(((p - closest) ** 2).sum(-1)).min(axis=1)
    return out


def _brute_force_meshmetrics(pred: np.ndarray, ref: np.ndarray, spacing: tuple[float, float, float], tolerance: float) -> dict[str, float]:
    """MeshMetrics' definitions on explicit SurfaceNets triangles: each triangle's centroid to every
    triangle of the other mesh, weighted by its area, combined as its ``DistanceMetrics`` does."""
    t_p, t_g = _surfacenets_triangles(pred, spacing), _surfacenets_triangles(ref, spacing)
    w_p = np.linalg.norm(np.cross(t_p[:, 1] - t_p[:, 0], t_p[:, 2] - t_p[:, 0]), axis=1) / 2
    w_g = np.linalg.norm(np.cross(t_g[:, 1] - t_g[:, 0], t_g[:, 2] - t_g[:, 0]), axis=1) / 2
    d_pg, d_gp = _brute_force_distances(t_p.mean(axis=1), t_g), _brute_force_distances(t_g.mean(axis=1), t_p)

    def perc(d: np.ndarray, w: np.ndarray, q: float) -> float:
        o = np.argsort(d)
        cum = np.cumsum(w[o]) / w.sum()
        return float(d[o][min(int(np.searchsorted(cum, q / 100)), len(d) - 1)])

    return {
        "hd": max(perc(d_pg, w_p, 100), perc(d_gp, w_g, 100)),
        "hd95": max(perc(d_pg, w_p, 95), perc(d_gp, w_g, 95)),
        "assd": float((d_pg @ w_p + d_gp @ w_g) / (w_p.sum() + w_g.sum())),
        "masd": float((d_pg @ w_p / w_p.sum() + d_gp @ w_g / w_g.sum()) / 2),
        "nsd": float((w_p[d_pg <= tolerance].sum() + w_g[d_gp <= tolerance].sum()) / (w_p.sum() + w_g.sum())),
    }


@pytest.mark.parametrize("name", list(_phantoms(small=True)))
@pytest.mark.parametrize("spacing", [(1.0, 1.0, 1.0), (5.0, 0.73046875, 0.73046875), (0.7, 1.3, 2.9)])
def test_meshmetrics_profile_equals_brute_force_on_phantoms(name: str, spacing: tuple[float, float, float]) -> None:
    pred, ref = _phantoms(small=True)[name]
    ours = meshmetrics.metrics(meshmetrics.measure(pred, ref, spacing), 1.2)
    theirs = _brute_force_meshmetrics(pred, ref, spacing, 1.2)
    for metric in SURFACE_METRICS:
        assert abs(ours[metric] - theirs[metric]) <= 1e-9, (name, metric, ours[metric], theirs[metric])


@pytest.mark.parametrize("spacing", [(1.0, 1.0, 1.0), (0.8, 0.8, 0.8)])
def test_meshmetrics_cube_in_its_dilation_has_known_distances(spacing: tuple[float, float, float]) -> None:
    """An n-voxel cube and the (n+2)-voxel cube around it, isotropic spacing s: every inner centroid
    lies s from the outer surface, the outer centroids at most s*sqrt(1 + 2 (2/3)^2) from the inner
    one (a corner square's low triangle's centroid, 1/3 of a voxel in from both outer edges); both surfaces'
    areas are the cubes' 6 n^2 s^2 and 6 (n+2)^2 s^2."""
    s, n = spacing[0], 6
    inner = np.zeros((n + 4,) * 3, dtype=bool)
    inner[2:-2, 2:-2, 2:-2] = True
    outer = ndimage.binary_dilation(inner, np.ones((3, 3, 3)))
    sd_ = meshmetrics.measure(outer, inner, spacing)
    assert sd_.w_gp.sum() == pytest.approx(6 * n**2 * s**2, rel=1e-12) and sd_.w_pg.sum() == pytest.approx(6 * (n + 2) ** 2 * s**2, rel=1e-12)
    np.testing.assert_allclose(sd_.d_gp, s, rtol=1e-12)
    assert sd_.d_pg.max() == pytest.approx(s * np.sqrt(1 + 2 * (2 / 3) ** 2), rel=1e-12)
    assert sd_.d_pg.min() == pytest.approx(s, rel=1e-12)
    m = meshmetrics.metrics(sd_, 0.5 * s)
    assert m["hd"] == pytest.approx(s * np.sqrt(17) / 3, rel=1e-12) and m["nsd"] == 0.0
    same = meshmetrics.metrics(meshmetrics.measure(inner, inner, spacing), 0.0)
    assert (same["hd"], same["hd95"], same["assd"], same["nsd"]) == (0.0, 0.0, 0.0, 1.0)


@pytest.mark.skipif(not LABELS.is_dir(), reason="data bundle not pulled (dvc pull)")
@pytest.mark.parametrize("profile", ["meshmetrics", "monai"])
def test_new_profiles_score_real_cases_with_the_same_columns(tmp_path: Path, profile: str) -> None:
    """Through ``score_case`` from the files: the same rows and metric names as the deepmind profile
    (checked equal to the package above), the profile's name and HD95 definition recorded, its own
    metrics in them."""
    ref_img = tumour_crop(LABELS, "case_00030", margin=8)
    ref = np.asanyarray(ref_img.dataobj)
    spacing = tuple(float(z) for z in ref_img.header.get_zooms())
    pred = displace_boundary(ref, spacing, 1.0).astype(ref.dtype)
    nib.save(ref_img, tmp_path / "ref.nii.gz")
    nib.save(nib.Nifti1Image(pred, ref_img.affine, ref_img.header), tmp_path / "pred.nii.gz")
    default = score_case("case_00030", tmp_path / "ref.nii.gz", tmp_path / "pred.nii.gz", REGIONS, profile="deepmind")
    rows = score_case("case_00030", tmp_path / "ref.nii.gz", tmp_path / "pred.nii.gz", REGIONS, profile=profile)
    definition = PROFILES[profile]
    assert [sorted(r) for r in rows] == [sorted(r) for r in default]
    for row in rows:
        assert (row["metric_profile"], row["hd95_definition"]) == (profile, definition.hd95_definition)
        region = next(r for r in REGIONS if r.name == row["structure"])
        g, p = np.isin(ref, region.labels), np.isin(pred, region.labels)
        box = nonzero_box(g, p)
        expected = definition.metrics(definition.measure(p[box], g[box], spacing), region.nsd_tolerance_mm)
        assert {m: row[m] for m in SURFACE_METRICS} == pytest.approx(expected, rel=1e-12, abs=1e-12)


# --- monai: MONAI's edge voxels, unweighted percentiles -------------------------------------------------------------


def _monai_package(pred: np.ndarray, ref: np.ndarray, spacing: tuple[float, ...], tolerance: float) -> dict[str, float]:
    """MONAI's own functions on one-channel masks: HD and HD95 (``directed=False``), ASSD
    (``symmetric=True``), MASD (the mean of ``symmetric=False`` both ways), NSD (``compute_surface_dice``)."""
    import torch
    from monai.metrics import compute_average_surface_distance, compute_hausdorff_distance, compute_surface_dice

    p, g = (torch.as_tensor(np.asarray(m, dtype=np.float32)[None, None]) for m in (pred, ref))
    kw = {"include_background": True, "spacing": list(spacing)}
    return {
        "hd": float(compute_hausdorff_distance(p, g, **kw)),
        "hd95": float(compute_hausdorff_distance(p, g, percentile=95, **kw)),
        "assd": float(compute_average_surface_distance(p, g, symmetric=True, **kw)),
        "masd": 0.5 * float(compute_average_surface_distance(p, g, **kw)) + 0.5 * float(compute_average_surface_distance(g, p, **kw)),
        "nsd": float(compute_surface_dice(p, g, [tolerance], **kw)),
    }


@pytest.mark.parametrize("name", list(_phantoms(small=True)))
@pytest.mark.parametrize("spacing", [(1.0, 1.0, 1.0), (5.0, 0.73046875, 0.73046875), (0.7, 1.3, 2.9)])
def test_monai_profile_equals_package_on_phantoms(name: str, spacing: tuple[float, float, float]) -> None:
    pytest.importorskip("monai", reason="MONAI (dev extra, with torch CPU) is not installed: pip install -e '.[dev]'")
    pred, ref = _phantoms(small=True)[name]
    monai = PROFILES["monai"]
    ours = monai.metrics(monai.measure(pred, ref, spacing), 1.2)
    theirs = _monai_package(pred, ref, spacing, 1.2)
    for metric in SURFACE_METRICS:
        assert ours[metric] == pytest.approx(theirs[metric], rel=TOL, abs=TOL), (name, metric, ours[metric], theirs[metric])


@pytest.mark.skipif(not LABELS.is_dir(), reason="data bundle not pulled (dvc pull)")
@pytest.mark.parametrize("case", ["case_00030", "case_00015", "case_00005"])  # 5, 3, 0.5 mm slices
def test_monai_profile_equals_package_on_real_cases(case: str) -> None:
    """Crops of real KiTS23 cases with every simulated error, each region's masks on their box as the
    engine measures them: within 1e-6 (relative, MONAI's distances being float32) of MONAI itself."""
    pytest.importorskip("monai", reason="MONAI (dev extra, with torch CPU) is not installed: pip install -e '.[dev]'")
    ref_img = tumour_crop(LABELS, case, margin=8)
    ref = np.asanyarray(ref_img.dataobj)
    spacing = tuple(float(z) for z in ref_img.header.get_zooms())
    monai, compared = PROFILES["monai"], 0
    for name, perturb in PERTURBATIONS.items():
        pred = perturb(ref, spacing)
        for region in REGIONS:
            g, p = np.isin(ref, region.labels), np.isin(pred, region.labels)
            if not (g.any() and p.any()):
                continue
            box = nonzero_box(g, p)
            ours = monai.metrics(monai.measure(p[box], g[box], spacing), region.nsd_tolerance_mm)
            theirs = _monai_package(p[box], g[box], spacing, region.nsd_tolerance_mm)
            compared += 1
            for metric in SURFACE_METRICS:
                assert ours[metric] == pytest.approx(theirs[metric], rel=TOL, abs=TOL), (case, name, region.name, metric)
    assert compared >= 10


@pytest.mark.parametrize("profile", ["meshmetrics", "monai"])
def test_new_profiles_map_empty_masks_to_the_worst_case_policy(tmp_path: Path, profile: str) -> None:
    """MeshMetrics returns inf and NSD 0 for one empty mask, MONAI inf and NSD 0 (NaN for both empty):
    under either profile the row is the project's worst case, and both empty a perfect row."""
    ref = np.zeros((10, 12, 14), dtype=np.uint8)
    ref[2:6, 3:8, 4:9] = 1
    spacing = (2.0, 0.8, 0.8)
    affine = np.diag([*spacing, 1.0])
    nib.save(nib.Nifti1Image(ref, affine), tmp_path / "ref.nii.gz")
    nib.save(nib.Nifti1Image(np.zeros_like(ref), affine), tmp_path / "empty.nii.gz")
    regions = (Region("organ", (1,), 1.0), Region("absent", (2,), 1.0))
    organ, absent = score_case("phantom", tmp_path / "ref.nii.gz", tmp_path / "empty.nii.gz", regions, profile=profile)
    diagonal = float(np.sqrt(sum((n * s) ** 2 for n, s in zip(ref.shape, spacing, strict=True))))
    assert organ["worst_case"] and organ["nsd"] == 0.0 and organ["metric_profile"] == profile
    assert organ["hd95"] == organ["hd"] == organ["assd"] == organ["masd"] == pytest.approx(diagonal)
    assert not absent["worst_case"] and (absent["dice"], absent["nsd"], absent["hd95"], absent["assd"]) == (1.0, 1.0, 0.0, 0.0)
