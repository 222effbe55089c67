"""Grid checks and nearest-neighbour resampling by world coordinates.

A prediction is scored voxel-for-voxel against its reference, so both must sit on the same grid:
same shape and same voxel-to-world affine. The tolerances below absorb float32 round-off in NIfTI
headers (sform is stored as float32, ~1e-7 relative) while still catching a half-voxel shift or a
swapped axis, which are the errors that silently corrupt every metric.
"""

from __future__ import annotations

import nibabel as nib
import numpy as np
from scipy import ndimage

#: Maximum allowed difference of the affine translations (mm).
TRANSLATION_TOL_MM = 1e-4
#: Maximum allowed difference of the affines' linear parts, relative to the largest entry.
LINEAR_RTOL = 1e-5


class GeometryError(ValueError):
    """Reference and prediction are not on the same grid, or a header contradicts itself."""


def spacing_from_affine(affine: np.ndarray) -> np.ndarray:
    """Voxel spacing in array-axis order: the column norms of the affine's linear part."""
    return np.sqrt((np.asarray(affine, dtype=np.float64)[:3, :3] ** 2).sum(axis=0))


def check_affine(case_id: str, path: object, affine: np.ndarray) -> None:
    """Raise :class:`GeometryError` unless ``affine`` is finite and places voxels (its linear part invertible): a NaN in
    it makes every tolerance comparison false, so that a grid check would pass it."""
    affine = np.asarray(affine, dtype=np.float64)
    if not np.isfinite(affine).all() or not abs(np.linalg.det(affine[:3, :3])) > 0:
        raise GeometryError(f"case {case_id}: {path}: its affine {affine[:3].round(5).tolist()} is not a finite, invertible voxel-to-world map")


def check_spacing(case_id: str, path: object, img: nib.spatialimages.SpatialImage) -> tuple[float, float, float]:
    """Return the header zooms (array order) after checking they agree with the affine.

    Libraries take spacing as a bare tuple and silently accept it reversed or stale; the affine is
    what places voxels in the world, so the zooms we hand to the metrics must agree with it.
    """
    zooms = np.asarray(img.header.get_zooms()[:3], dtype=np.float64)
    check_affine(case_id, path, img.affine)
    if not (zooms > 0).all():  # NaN too: a zero spacing would put every surface point at distance 0
        raise GeometryError(f"case {case_id}: {path}: header spacing {tuple(zooms.round(6))}: voxel sizes must be positive")
    from_affine = spacing_from_affine(img.affine)
    if not np.allclose(zooms, from_affine, rtol=LINEAR_RTOL, atol=0.0):
        raise GeometryError(
            f"case {case_id}: {path}: header spacing {tuple(zooms.round(6))} does not match the "
            f"affine's voxel sizes {tuple(from_affine.round(6))} (array-axis order)"
        )
    return (float(zooms[0]), float(zooms[1]), float(zooms[2]))


def check_same_grid(
    case_id: str,
    reference_path: object,
    reference: nib.spatialimages.SpatialImage,
    prediction_path: object,
    prediction: nib.spatialimages.SpatialImage,
) -> None:
    """Raise :class:`GeometryError` unless both images have the same shape and affine (within tolerance)."""
    where = f"case {case_id}: reference {reference_path} vs prediction {prediction_path}"
    if tuple(reference.shape[:3]) != tuple(prediction.shape[:3]) or len(prediction.shape) != len(reference.shape):
        raise GeometryError(f"{where}: shape {tuple(reference.shape)} != {tuple(prediction.shape)}")
    check_affine(case_id, reference_path, reference.affine)
    check_affine(case_id, prediction_path, prediction.affine)
    a = np.asarray(reference.affine, dtype=np.float64)
    b = np.asarray(prediction.affine, dtype=np.float64)
    dt = float(np.abs(a[:3, 3] - b[:3, 3]).max())
    if dt > TRANSLATION_TOL_MM:
        raise GeometryError(
            f"{where}: affine origin differs by {dt:.6g} mm (tolerance {TRANSLATION_TOL_MM} mm): {a[:3, 3].round(5).tolist()} vs {b[:3, 3].round(5).tolist()}"
        )
    scale = float(np.abs(a[:3, :3]).max())
    dl = float(np.abs(a[:3, :3] - b[:3, :3]).max())
    if dl > LINEAR_RTOL * scale:
        raise GeometryError(
            f"{where}: affine orientation/spacing differs by {dl:.6g} (max entry; relative tolerance "
            f"{LINEAR_RTOL}): {a[:3, :3].round(5).tolist()} vs {b[:3, :3].round(5).tolist()}"
        )


def resample_to_reference(img: nib.spatialimages.SpatialImage, reference: nib.spatialimages.SpatialImage) -> nib.Nifti1Image:
    """Nearest-neighbour resample a label map onto the reference grid through world coordinates.

    Each reference voxel centre is mapped to world space by the reference affine and back into the
    source array by the inverse source affine; the nearest source voxel's label is taken, and voxels
    falling outside the source get 0. Never uses shape ratios, which ignore origin and orientation.
    """
    data = np.asanyarray(img.dataobj)
    ref_to_src = np.linalg.inv(np.asarray(img.affine, dtype=np.float64)) @ np.asarray(reference.affine, dtype=np.float64)
    out = ndimage.affine_transform(
        data,
        ref_to_src[:3, :3],
        offset=ref_to_src[:3, 3],
        output_shape=tuple(reference.shape[:3]),
        order=0,
        mode="constant",
        cval=0,
        prefilter=False,
    )
    header = reference.header.copy() if isinstance(reference, nib.Nifti1Image) else None
    result = nib.Nifti1Image(out.astype(data.dtype, copy=False), reference.affine, header)
    result.set_data_dtype(data.dtype)
    return result
