"""The simulated error models: graded, seeded, and measured in world millimetres."""

from __future__ import annotations

import argparse
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from segbench.models import simulated
from segbench.scoring.labelmaps import load_nifti


def _args(**kw) -> argparse.Namespace:
    argv = ["--input", "x", "--output", "y", "--cases", "z"]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return simulated.simulated_parser().parse_args(argv)


def _sphere(shape=(40, 60, 60), radius_mm=10.0, spacing=(2.0, 0.8, 0.8)) -> np.ndarray:
    grid = np.indices(shape).astype(float)
    centre = (np.array(shape) - 1) / 2
    d2 = sum(((g - c) * s) ** 2 for g, c, s in zip(grid, centre, spacing))
    return (d2 <= radius_mm**2).astype(np.uint8)


@pytest.mark.parametrize("spacing", [(2.0, 0.8, 0.8), (1.0, 1.0, 1.0)])
def test_boundary_displacement_is_in_world_millimetres(spacing: tuple[float, float, float]) -> None:
    sphere = _sphere(spacing=spacing)
    voxel = float(np.prod(spacing))

    def radius(mask: np.ndarray) -> float:  # radius of the sphere with the mask's volume
        return float((3 * mask.sum() * voxel / (4 * np.pi)) ** (1 / 3))

    grown = simulated.displace_boundary(sphere, spacing, 2.0)
    shrunk = simulated.displace_boundary(sphere, spacing, -2.0)
    # displacement measured between voxel centres: exact up to half a voxel
    assert abs(radius(grown) - radius(sphere) - 2.0) < 0.5 * max(spacing)
    assert abs(radius(sphere) - radius(shrunk) - 2.0) < 0.5 * max(spacing)
    assert np.all(grown >= sphere) and np.all(shrunk <= sphere)


def test_grown_voxels_take_the_nearest_label() -> None:
    labels = np.zeros((10, 10, 20), np.uint8)
    labels[4:6, 4:6, 2:5] = 1
    labels[4:6, 4:6, 14:17] = 2
    grown = simulated.displace_boundary(labels, (1.0, 1.0, 1.0), 1.0)
    assert grown[5, 5, 1] == 1 and grown[5, 5, 17] == 2 and grown[5, 5, 9] == 0


def test_missed_lesion_turns_the_largest_tumor_into_kidney() -> None:
    labels = np.zeros((10, 10, 30), np.uint8)
    labels[2:8, 2:8, 2:28] = 1
    labels[3:6, 3:6, 3:9] = 2  # large lesion
    labels[4:5, 4:5, 20:21] = 2  # small lesion
    out = simulated.miss_largest_lesion(labels)
    assert (out == 2).sum() == 1 and out[4, 4, 20] == 2 and out[4, 4, 5] == 1


def test_same_seed_same_prediction_other_seed_differs(kits_labels: Path) -> None:
    labels, image = load_nifti(kits_labels / "case_00010.nii.gz")
    spacing = tuple(float(z) for z in image.header.get_zooms())
    a = simulated.simulate(labels, spacing, "case_00010", _args(shift_mm=3.0, seed=0))
    b = simulated.simulate(labels, spacing, "case_00010", _args(shift_mm=3.0, seed=0))
    c = simulated.simulate(labels, spacing, "case_00010", _args(shift_mm=3.0, seed=1))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_cli_writes_predictions_on_the_reference_grid(kits_labels: Path, tmp_path: Path) -> None:
    cases = tmp_path / "cases.txt"
    cases.write_text("case_00010\n")
    assert simulated.main(["--input", str(kits_labels), "--output", str(tmp_path / "out"), "--cases", str(cases), "--boundary-mm", "1"]) == 0
    ref = nib.load(kits_labels / "case_00010.nii.gz")
    pred = nib.load(tmp_path / "out" / "case_00010.nii.gz")
    assert pred.shape == ref.shape
    assert np.allclose(pred.affine, ref.affine)
    assert set(np.unique(np.asarray(pred.dataobj))) <= {0, 1, 2, 3}


def _kidney_with_tumor(spacing=(3.0, 0.8, 0.8)) -> np.ndarray:
    """A real-looking synthetic case: an ellipsoidal kidney (label 1) holding a spherical tumor (label 2), on a thick-slice grid."""
    shape = (24, 80, 80)
    grid = np.indices(shape).astype(float)
    centre = (np.array(shape) - 1) / 2
    offset = [(g - c) * s for g, c, s in zip(grid, centre, spacing)]
    labels = np.zeros(shape, np.uint8)
    labels[(offset[0] / 25) ** 2 + (offset[1] / 20) ** 2 + (offset[2] / 14) ** 2 <= 1] = 1
    labels[offset[0] ** 2 + (offset[1] - 6) ** 2 + offset[2] ** 2 <= 8.0**2] = 2
    return labels


# the grid's spacing as a NIfTI header gives it (float32), and exactly
@pytest.mark.parametrize("spacing", [(3.0, 0.8, 0.8), tuple(float(np.float32(s)) for s in (3.0, 0.8, 0.8))])
@pytest.mark.parametrize("mm", [0.75, -0.75])
def test_boundary_move_below_the_spacing_still_moves_one_voxel_layer(spacing: tuple[float, float, float], mm: float) -> None:
    """|D| < the finest spacing: the threshold is raised to that spacing, so exactly the voxels one in-plane step across
    the boundary flip (before the floor, no voxel did and the 'model' returned the reference)."""
    labels = _kidney_with_tumor(spacing)
    out = simulated.displace_boundary(labels, spacing, mm)
    changed = out != labels
    assert changed.any()
    if mm > 0:
        assert np.all(out >= labels)
        reach = simulated.ndimage.distance_transform_edt(labels == 0, sampling=spacing)
    else:
        assert np.all(out <= labels) and np.all(out[changed] == 0)
        reach = simulated.ndimage.distance_transform_edt(labels > 0, sampling=spacing)
    # one layer: every changed voxel is one finest spacing from the boundary, and every such voxel changed
    assert np.allclose(reach[changed], 0.8)
    assert np.array_equal(changed, np.isclose(reach, 0.8))
    assert simulated.effective_mm(mm, spacing) == pytest.approx(np.copysign(0.8, mm), rel=1e-5)
    assert simulated.effective_mm(2.0, spacing) == 2.0 and simulated.effective_mm(0.0, spacing) == 0.0


@pytest.mark.parametrize("mm", [0.05, 0.3])
def test_tiny_shift_still_moves_one_voxel(mm: float) -> None:
    labels = _kidney_with_tumor()
    spacing = (3.0, 0.8, 0.8)
    out = simulated.shift(labels, spacing, mm, np.random.default_rng(7))
    assert not np.array_equal(out, labels)
    assert np.array_equal(np.bincount(out.ravel()), np.bincount(labels.ravel()))  # moved, nothing cut off
    moved = [(axis, step) for axis in range(3) for step in (-1, 1) if np.array_equal(np.roll(labels, step, axis), out)]
    assert len(moved) == 1


def test_simulate_changes_every_case_it_claims_and_warns_when_it_cannot(capsys: pytest.CaptureFixture) -> None:
    labels, spacing = _kidney_with_tumor(), (3.0, 0.8, 0.8)
    for options in ({"boundary_mm": -1.0}, {"boundary_mm": 1.0}, {"shift_mm": 0.2}):
        for seed in range(5):
            assert not np.array_equal(simulated.simulate(labels, spacing, f"case_{seed}", _args(seed=seed, **options)), labels)
    assert capsys.readouterr().err == ""
    empty = np.zeros_like(labels)
    assert np.array_equal(simulated.simulate(empty, spacing, "case_empty", _args(boundary_mm=1.0)), empty)
    err = capsys.readouterr().err
    assert "warning" in err and "case_empty" in err and "empty label map" in err


def test_predict_models_equals_simulate_case_by_case(tmp_path: Path) -> None:
    """The calibration audit's several models of one case (one decode) give each model's simulate() map, small moves
    included."""
    labels, spacing = _kidney_with_tumor(), (3.0, 0.8, 0.8)
    nib.save(nib.Nifti1Image(labels, np.diag([*spacing, 1.0])), tmp_path / "case_x.nii.gz")
    models = {
        "in_small": ["--seed", "1", "--boundary-mm", "-0.5"],
        "in_large": ["--seed", "2", "--boundary-mm", "-1.5"],
        "out_small": ["--seed", "3", "--boundary-mm", "0.6"],
        "shift_tiny": ["--seed", "4", "--shift-mm", "0.2"],
    }
    written = simulated.predict_models("case_x", tmp_path / "case_x.nii.gz", models, tmp_path / "out")
    ref, image = load_nifti(tmp_path / "case_x.nii.gz")
    zooms = tuple(float(z) for z in image.header.get_zooms()[:3])
    for name, options in models.items():
        args = simulated.simulated_parser().parse_args(["--input", ".", "--output", ".", "--cases", ".", *options])
        expected = simulated.simulate(ref, zooms, "case_x", args)
        got, _ = load_nifti(written[name])
        assert not np.array_equal(expected, ref), name
        assert np.array_equal(got, expected), name


def _eroded_by_distance_transform(labels: np.ndarray, spacing: tuple[float, float, float], mm: float) -> np.ndarray:
    """The inward rule as a distance transform states it: a foreground voxel whose nearest background voxel (scipy's
    feature transform) lies within ``mm`` by scipy's arithmetic, sqrt(((d0 s0)^2 + (d1 s1)^2) + (d2 s2)^2), is cleared."""
    nearest = simulated.ndimage.distance_transform_edt(labels > 0, sampling=spacing, return_distances=False, return_indices=True)
    d = [(nearest[a] - np.indices(labels.shape)[a]).astype(np.float64) * spacing[a] for a in range(3)]
    return np.where(np.sqrt((d[0] * d[0] + d[1] * d[1]) + d[2] * d[2]) <= mm, 0, labels)


@pytest.mark.parametrize("spacing", [(3.0, 0.8, 0.8), (1.0, 1.0, 1.0), (0.5, 0.78125, 0.78125), tuple(float(np.float32(s)) for s in (2.5, 0.703125, 0.703125))])
@pytest.mark.parametrize("mm", [0.5, 1.0, 1.3, 2.0, 2.6])  # 2.0: exactly two 1 mm voxels away, within reach
def test_inward_move_clears_exactly_the_voxels_the_distance_transform_puts_within_reach(spacing: tuple[float, float, float], mm: float) -> None:
    """The ball search (a background voxel at one of the offsets within reach) clears the same voxels as the distance
    transform it replaced, at thin and thick slices, below one spacing (the one-layer floor) and at the array's edge
    (the kidney cut off there: no background beyond it)."""
    labels = _kidney_with_tumor(spacing)
    cut = np.ascontiguousarray(labels[:, 30:, :])  # the kidney cut through by the array's first in-plane row
    for case in (labels, cut):
        expected = _eroded_by_distance_transform(case, spacing, -simulated.effective_mm(-mm, spacing))
        got = simulated.displace_boundary(case, spacing, -mm)
        assert (got != case).any()
        assert np.array_equal(got, expected)
