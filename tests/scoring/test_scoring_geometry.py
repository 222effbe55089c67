"""Grid checks before any number, and nearest-neighbour resampling through world coordinates."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from segbench.scoring.engine import score_case
from segbench.scoring.geometry import GeometryError, resample_to_reference
from segbench.scoring.settings import Region

REGIONS = (Region("fg", (1,), 1.0),)


def image(labels: np.ndarray, spacing: tuple[float, float, float], origin: tuple[float, float, float]) -> nib.Nifti1Image:
    affine = np.diag([*spacing, 1.0])
    affine[:3, 3] = origin
    return nib.Nifti1Image(labels.astype(np.uint8), affine)


def labels() -> np.ndarray:
    lab = np.zeros((10, 20, 16), np.uint8)
    lab[2:8, 4:15, 3:12] = 1
    return lab


def test_shape_mismatch(tmp_path: Path) -> None:
    ref = tmp_path / "ref.nii.gz"
    pred = tmp_path / "pred.nii.gz"
    nib.save(image(labels(), (2, 1, 1), (0, 0, 0)), ref)
    nib.save(image(labels()[:, :, :-1], (2, 1, 1), (0, 0, 0)), pred)
    with pytest.raises(GeometryError, match=r"case k1.*ref\.nii\.gz.*pred\.nii\.gz.*shape"):
        score_case("k1", ref, pred, REGIONS)


@pytest.mark.parametrize(
    ("spacing", "origin", "what"),
    [((2, 1, 1), (0.001, 0, 0), "origin differs by 0.001"), ((1, 1, 2), (0, 0, 0), "orientation/spacing")],
)
def test_affine_mismatch(tmp_path: Path, spacing: tuple, origin: tuple, what: str) -> None:
    ref = tmp_path / "ref.nii.gz"
    pred = tmp_path / "pred.nii.gz"
    nib.save(image(labels(), (2, 1, 1), (0, 0, 0)), ref)
    nib.save(image(labels(), spacing, origin), pred)
    with pytest.raises(GeometryError, match=what):
        score_case("k1", ref, pred, REGIONS)


@pytest.mark.parametrize("broken", ["pred", "ref"])
def test_a_non_finite_or_singular_affine_is_refused(tmp_path: Path, broken: str) -> None:
    """A NaN in an affine made every tolerance comparison false, so the grid check passed and the case scored (a NaN
    origin in the prediction: Dice 1); an affine with a zero column puts a whole axis of voxels at one point."""
    files = {"ref": tmp_path / "ref.nii.gz", "pred": tmp_path / "pred.nii.gz"}
    for name, path in files.items():
        nib.save(image(labels(), (2, 1, 1), (float("nan") if name == broken else 0, 0, 0)), path)
    with pytest.raises(GeometryError, match=rf"case k1: \S*{broken}\.nii\.gz: its affine .*nan.* is not a finite, invertible"):
        score_case("k1", files["ref"], files["pred"], REGIONS)
    singular = nib.Nifti1Image(labels(), None)  # nibabel refuses to build one from an affine: written as its sform
    singular.header.set_sform(np.diag([2.0, 0.0, 1.0, 1.0]), code=2)
    nib.save(singular, files[broken])
    with pytest.raises(GeometryError, match=rf"{broken}\.nii\.gz: its affine .* is not a finite, invertible"):
        score_case("k1", files["ref"], files["pred"], REGIONS)


def test_float32_header_roundoff_is_tolerated(tmp_path: Path) -> None:
    ref = tmp_path / "ref.nii.gz"
    pred = tmp_path / "pred.nii.gz"
    nib.save(image(labels(), (2, 0.7, 0.7), (-100.3, 20.1, 5.7)), ref)
    nib.save(image(labels(), (2, 0.7 * (1 + 1e-7), 0.7), (-100.3 + 2e-5, 20.1, 5.7)), pred)
    assert score_case("k1", ref, pred, REGIONS)[0]["dice"] == 1.0


def test_header_spacing_must_match_affine(tmp_path: Path) -> None:
    img = image(labels(), (2, 1, 1), (0, 0, 0))
    img.header.set_zooms((1.0, 1.0, 2.0))  # reversed spacing in pixdim, affine says (2, 1, 1)
    ref = tmp_path / "ref.nii.gz"
    nib.save(img, ref)
    with pytest.raises(GeometryError, match=r"ref\.nii\.gz: header spacing"):
        score_case("k1", ref, ref, REGIONS)


def test_resample_identity_and_axis_flip() -> None:
    ref = image(labels(), (2, 0.8, 0.8), (10, -5, 3))
    assert np.array_equal(np.asanyarray(resample_to_reference(ref, ref).dataobj), labels())
    # the same world content stored with axis 1 reversed and the affine adjusted
    flipped_affine = ref.affine.copy()
    flipped_affine[:3, 1] *= -1
    flipped_affine[:3, 3] = ref.affine[:3, :3] @ [0, labels().shape[1] - 1, 0] + ref.affine[:3, 3]
    flipped = nib.Nifti1Image(labels()[:, ::-1, :].copy(), flipped_affine)
    back = resample_to_reference(flipped, ref)
    assert np.array_equal(np.asanyarray(back.dataobj), labels())
    assert np.allclose(back.affine, ref.affine)


def test_resample_uses_world_coordinates_not_shape_ratio() -> None:
    """A half-resolution image with an origin offset lands where its affine says, not stretched."""
    ref = image(np.zeros((10, 20, 16)), (1, 1, 1), (0, 0, 0))
    coarse = np.zeros((5, 10, 8), np.uint8)
    coarse[1, 2, 3] = 4
    src = image(coarse, (2, 2, 2), (4.5, 0.5, 0.5))  # voxel (1,2,3) covers world (6.5, 4.5, 6.5) +- 1
    out = np.asanyarray(resample_to_reference(src, ref).dataobj)
    expected = np.zeros((10, 20, 16), np.uint8)
    expected[6:8, 4:6, 6:8] = 4  # reference voxel centres within the coarse voxel
    assert out.dtype == np.uint8
    assert np.array_equal(out, expected)
