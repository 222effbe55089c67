"""Metric-definition profiles against the libraries they follow (docs/methodology.md, "Metric-definition profiles").

The ``deepmind`` profile must equal DeepMind's surface-distance package (PyPI ``surface-distance``, a
dev dependency only) to 1e-6 on every surface metric: on hand-built phantoms and on crops of real
KiTS23 cases (5, 3, 2 and 0.5 mm slices) with simulated errors, scored through ``score_case`` from
the files. Empty masks follow the project's worst-case policy instead of the package's inf/NaN.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from scipy import ndimage

from segbench.config import ConfigError, load_params
from segbench.models.simulated import add_blob, displace_boundary, miss_largest_lesion, shift
from segbench.scoring import Region, score_case, score_cases
from segbench.scoring.profiles import deepmind_metrics, deepmind_surface_distances, surfel_areas
from tests_support import tumour_crop

sd = pytest.importorskip("surface_distance")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_profiles import package as package_metrics  # noqa: E402  (the package's metrics, shared with the benchmark)

LABELS = ROOT / "data" / "kits23" / "labels"
REGIONS = (
    Region("kidney_and_mass", (1, 2, 3), 1.0331),
    Region("mass", (2, 3), 1.1329),
    Region("tumor", (2,), 1.1498, detection=True),
)
SURFACE_METRICS = ("hd", "hd95", "assd", "masd", "nsd")
TOL = 1e-6


def reversed_bits(code: int) -> int:
    """surface-distance's neighbour code of a cell whose corners are ``surface.CORNERS``-ordered bits."""
    return sum((code >> b & 1) << (7 - b) for b in range(8))


@pytest.mark.parametrize("spacing", [(1.0, 1.0, 1.0), (5.0, 0.73046875, 0.73046875), (0.7, 1.3, 2.9)])
def test_surfel_areas_are_the_packages_table(spacing: tuple[float, float, float]) -> None:
    theirs = sd.lookup_tables.create_table_neighbour_code_to_surface_area(spacing)
    ours = surfel_areas(spacing)
    np.testing.assert_allclose(ours, [theirs[reversed_bits(c)] for c in range(256)], rtol=0, atol=1e-12)


def _sphere(shape: tuple[int, int, int], centre: tuple[float, ...], radius: float) -> np.ndarray:
    grid = np.indices(shape).astype(float)
    return sum((g - c) ** 2 for g, c in zip(grid, centre, strict=True)) <= radius**2


def _phantoms() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    ball = _sphere((30, 34, 32), (15, 17, 16), 9)
    noise = ndimage.binary_opening(rng.random((24, 26, 22)) > 0.45)
    block = np.zeros((20, 40, 20), dtype=bool)
    block[2:8, 3:12, 4:9] = True
    far = np.zeros_like(block)
    far[12:18, 30:38, 10:18] = True
    edge = np.zeros((12, 12, 12), dtype=bool)
    edge[:, :6, :] = True  # touches the array's border: the surface closes outside the box
    return {
        "ball_dilated": (ndimage.binary_dilation(ball), ball),
        "ball_shifted": (np.roll(ball, (2, -1, 3), axis=(0, 1, 2)), ball),
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
