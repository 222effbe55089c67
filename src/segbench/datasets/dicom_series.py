"""A DICOM image series (one folder of single-frame slices) as a NIfTI image.

The voxel order is the one dcm2niix writes, which is what TotalSegmentator and most NIfTI-based
tools see after converting a series: first axis = the slice's columns as stored, second axis = its
rows in reverse order, third axis = the slices in ascending position along the slice normal. The
affine maps those indices to RAS+ world millimetres (DICOM's LPS with x and y negated), so a label
map written by such a tool lies on the same grid and is compared voxel for voxel.
Intensities are the stored values times RescaleSlope plus RescaleIntercept (Hounsfield units for CT).
"""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np


class DicomSeriesError(ValueError):
    """A folder that is not one regular, single-frame DICOM image series; the message names it."""


def read_series(folder: Path) -> nib.Nifti1Image:
    """The series in ``folder`` as an image with a RAS+ affine (see the module docstring for the voxel order)."""
    import pydicom

    folder = Path(folder)
    files = sorted(p for p in folder.iterdir() if p.is_file())
    if not files:
        raise DicomSeriesError(f"{folder}: no files")
    slices = []
    for path in files:
        try:
            ds = pydicom.dcmread(path)
            position = np.asarray(ds.ImagePositionPatient, dtype=float)
            orientation = np.asarray(ds.ImageOrientationPatient, dtype=float)
            pixel_spacing = np.asarray(ds.PixelSpacing, dtype=float)  # (row spacing, column spacing)
            pixels = ds.pixel_array.astype(np.float64) * float(getattr(ds, "RescaleSlope", 1)) + float(getattr(ds, "RescaleIntercept", 0))
            uid = str(ds.SeriesInstanceUID)
        except Exception as exc:  # pydicom raises many types for a damaged file
            raise DicomSeriesError(f"{path}: not a readable DICOM image slice ({type(exc).__name__}: {exc})") from exc
        if pixels.ndim != 2:
            raise DicomSeriesError(f"{path}: a single-frame slice is needed, got pixel data of shape {pixels.shape}")
        slices.append((path, uid, position, orientation, pixel_spacing, pixels))
    path0, uid0, _, orientation0, spacing0, pixels0 = slices[0]
    for path, uid, _, orientation, spacing, pixels in slices[1:]:
        if uid != uid0:
            raise DicomSeriesError(f"{path}: series {uid} differs from {path0.name}'s {uid0}; one series per folder")
        if not (np.allclose(orientation, orientation0, atol=1e-4) and np.allclose(spacing, spacing0) and pixels.shape == pixels0.shape):
            raise DicomSeriesError(f"{path}: orientation, pixel spacing or size differs from {path0.name}'s")
    column_dir, row_dir = orientation0[:3], orientation0[3:]  # along a row (columns increase), along a column (rows increase)
    normal = np.cross(column_dir, row_dir)
    slices.sort(key=lambda s: float(s[2] @ normal))
    offsets = np.array([float(s[2] @ normal) for s in slices])
    steps = np.diff(offsets)
    if len(slices) > 1 and (steps.min() <= 0 or not np.allclose(steps, steps[0], rtol=1e-3, atol=1e-3)):
        raise DicomSeriesError(f"{folder}: slice positions are not evenly spaced along the normal (steps {sorted(set(np.round(steps, 4)))} mm)")
    slice_step = float(steps[0]) if len(slices) > 1 else float(getattr(pydicom.dcmread(path0, stop_before_pixels=True), "SliceThickness", 1.0))
    n_rows = pixels0.shape[0]
    # volume[i, j, k]: column i, row (n_rows - 1 - j), slice k
    volume = np.stack([s[5].T[:, ::-1] for s in slices], axis=-1)
    lps = np.eye(4)
    lps[:3, 0] = column_dir * spacing0[1]
    lps[:3, 1] = -row_dir * spacing0[0]
    lps[:3, 2] = normal * slice_step
    lps[:3, 3] = slices[0][2] + row_dir * spacing0[0] * (n_rows - 1)
    ras = np.diag([-1.0, -1.0, 1.0, 1.0]) @ lps
    if np.array_equal(volume, np.round(volume)):
        volume = volume.astype(np.int32)
    return nib.Nifti1Image(volume, ras)
