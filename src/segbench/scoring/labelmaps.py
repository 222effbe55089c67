"""Decoding label maps (NIfTI, DICOM-SEG, RTSTRUCT) into integer arrays on a known world grid.

Every failure names the file: a benchmark over hundreds of cases is only debuggable if the one bad
file is identified by the error itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import nibabel as nib
import numpy as np

#: NIfTI RAS+ from DICOM LPS: flip the first two world axes.
_LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])


def _validated(path: Path, data: np.ndarray) -> np.ndarray:
    """Return ``data`` as an integer array; reject non-3D, NaN and non-integer label values."""
    if data.ndim != 3:
        raise ValueError(f"{path}: expected a 3D label map, got shape {data.shape}")
    if data.size == 0:
        raise ValueError(f"{path}: label map has no voxels (shape {data.shape})")
    if np.issubdtype(data.dtype, np.integer) or data.dtype == np.bool_:
        return data.astype(np.uint8, copy=False) if data.dtype == np.bool_ else data
    if not np.issubdtype(data.dtype, np.floating):
        raise ValueError(f"{path}: unsupported label dtype {data.dtype}")
    if not np.isfinite(data).all():
        raise ValueError(f"{path}: label map contains NaN or infinite values")
    if not (np.mod(data, 1) == 0).all():
        bad = np.unique(data[np.mod(data, 1) != 0])[:5]
        raise ValueError(f"{path}: label map contains non-integer values, e.g. {bad.tolist()}")
    lo, hi = float(data.min()), float(data.max())
    dtype = np.uint8 if lo >= 0 and hi < 256 else np.int32
    return data.astype(dtype)


def _check_file(path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such label map file")
    if path.stat().st_size == 0:
        raise ValueError(f"{path}: file is empty (0 bytes)")


def load_nifti(path: Path) -> tuple[np.ndarray, nib.Nifti1Image]:
    """Decode a NIfTI label map once: (integer array, image carrying affine and header)."""
    path = Path(path)
    _check_file(path)
    try:
        img = nib.load(path)
        data = np.asanyarray(img.dataobj)
    except Exception as exc:  # nibabel/gzip/zlib raise many exception types for corrupt files
        raise ValueError(f"{path}: cannot read as NIfTI ({type(exc).__name__}: {exc})") from exc
    return _validated(path, data), img


def is_dicom(path: Path) -> bool:
    """True for a file with the DICOM preamble magic ``DICM`` at byte 128."""
    with open(path, "rb") as fh:
        fh.seek(128)
        return fh.read(4) == b"DICM"


def load_label_map(
    path: Path, *, dicom_labels: Mapping[str, int] | None = None
) -> tuple[np.ndarray, nib.spatialimages.SpatialImage]:
    """Decode a NIfTI, DICOM-SEG or RTSTRUCT label map into (integer array, image with world affine).

    DICOM label values: the segment number (DICOM-SEG) or ROI number (RTSTRUCT), unless
    ``dicom_labels`` maps segment labels / ROI names to label ids.
    """
    path = Path(path)
    _check_file(path)
    if not is_dicom(path):
        return load_nifti(path)
    import pydicom

    try:
        modality = pydicom.dcmread(path, stop_before_pixels=True).Modality
    except Exception as exc:
        raise ValueError(f"{path}: cannot read DICOM header ({type(exc).__name__}: {exc})") from exc
    if modality == "SEG":
        data, affine = _load_dicom_seg(path, dicom_labels)
    elif modality == "RTSTRUCT":
        data, affine = _load_rtstruct(path, dicom_labels)
    else:
        raise ValueError(f"{path}: DICOM modality {modality!r} is not a segmentation (SEG or RTSTRUCT)")
    img = nib.Nifti1Image(data, affine)
    return _validated(path, data), img


def _load_dicom_seg(path: Path, dicom_labels: Mapping[str, int] | None) -> tuple[np.ndarray, np.ndarray]:
    """DICOM-SEG -> (label array, RAS affine) using highdicom's geometry reconstruction."""
    import highdicom as hd

    try:
        seg = hd.seg.segread(str(path))
        volume = seg.get_volume(combine_segments=True, relabel=False, dtype=np.uint16)
    except Exception as exc:
        raise ValueError(f"{path}: cannot build a regular 3D volume from the DICOM-SEG ({exc})") from exc
    data = np.asarray(volume.array)
    if dicom_labels is not None:
        lut = np.zeros(int(data.max()) + 1, dtype=np.int32)
        for number in seg.get_segment_numbers():
            name = seg.get_segment_description(number).segment_label
            if name not in dicom_labels:
                raise ValueError(f"{path}: segment {number} {name!r} has no label id in {sorted(dicom_labels)}")
            lut[number] = dicom_labels[name]
        data = lut[data]
    data = data.astype(np.uint8) if data.max(initial=0) < 256 else data.astype(np.int32)
    return data, _LPS_TO_RAS @ np.asarray(volume.affine, dtype=np.float64)


def _load_rtstruct(path: Path, dicom_labels: Mapping[str, int] | None) -> tuple[np.ndarray, np.ndarray]:
    """RTSTRUCT -> (label array, RAS affine), rasterised on its referenced series.

    The referenced CT/MR series must be in the RTSTRUCT's directory (the usual export layout);
    rt-utils rasterises each ROI on that series, and the affine is rebuilt from the slices' own
    ImagePositionPatient / ImageOrientationPatient / PixelSpacing in rt-utils' slice order.
    """
    from rt_utils import RTStructBuilder, image_helper

    series_dir = path.parent
    try:
        rt = RTStructBuilder.create_from(dicom_series_path=str(series_dir), rt_struct_path=str(path))
        series = image_helper.load_sorted_image_series(str(series_dir))
    except Exception as exc:
        raise ValueError(f"{path}: cannot rasterise RTSTRUCT on the series in {series_dir} ({exc})") from exc
    rois = {int(r.ROINumber): str(r.ROIName) for r in rt.ds.StructureSetROISequence}
    first = series[0]
    data: np.ndarray | None = None
    for number, name in rois.items():
        label = number if dicom_labels is None else dicom_labels.get(name)
        if label is None:
            raise ValueError(f"{path}: ROI {number} {name!r} has no label id in {sorted(dicom_labels or {})}")
        mask = rt.get_roi_mask_by_name(name)  # (rows, cols, slices)
        if data is None:
            data = np.zeros(mask.shape, dtype=np.int32)
        data[mask] = label
    if data is None:
        raise ValueError(f"{path}: RTSTRUCT has no ROIs")
    iop = np.asarray(first.ImageOrientationPatient, dtype=np.float64)
    row_dir, col_dir = iop[:3], iop[3:]  # direction of increasing column index, of increasing row index
    dr, dc = (float(v) for v in first.PixelSpacing)  # spacing between rows, between columns
    ipp = np.array([[float(v) for v in s.ImagePositionPatient] for s in series])
    step = (ipp[-1] - ipp[0]) / max(len(series) - 1, 1)
    affine = np.eye(4)
    affine[:3, 0] = col_dir * dr  # array axis 0 = row index
    affine[:3, 1] = row_dir * dc  # array axis 1 = column index
    affine[:3, 2] = step if len(series) > 1 else np.cross(row_dir, col_dir) * float(first.SliceThickness)
    affine[:3, 3] = ipp[0]
    return data, _LPS_TO_RAS @ affine
