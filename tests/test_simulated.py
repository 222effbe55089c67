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
    return simulated.build_parser().parse_args(argv)


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
