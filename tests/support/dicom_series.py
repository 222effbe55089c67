"""The real 20-slice CT series of data/totalseg_example as a DICOM source: its slices, its grid as an empty NIfTI
image, and a highdicom DICOM-SEG of a label map on it (tests/scoring/test_scoring_dicom.py, tests/pipeline/test_evaluate.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import highdicom as hd
import nibabel as nib
import numpy as np
import pydicom
from pydicom.sr.codedict import codes

from repo_paths import TOTALSEG_EXAMPLE

EXAMPLE = TOTALSEG_EXAMPLE
LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])


def series() -> list[pydicom.Dataset]:
    """The example series, with the identifiers its anonymisation blanked restored (in memory only)."""
    ds = [pydicom.dcmread(p) for p in sorted((EXAMPLE / "ct_dicom").glob("*.dcm"))]
    study, series_uid, frame = hd.UID(), hd.UID(), hd.UID()
    for d in ds:
        d.SOPClassUID = d.SOPClassUID or d.file_meta.MediaStorageSOPClassUID
        d.SOPInstanceUID = d.SOPInstanceUID or d.file_meta.MediaStorageSOPInstanceUID
        d.StudyInstanceUID = d.get("StudyInstanceUID") or study
        d.SeriesInstanceUID = d.get("SeriesInstanceUID") or series_uid
        d.FrameOfReferenceUID = d.get("FrameOfReferenceUID") or frame
        d.PatientID = d.get("PatientID") or "anon"
    return sorted(ds, key=lambda d: float(d.ImagePositionPatient[2]))


def series_grid(ds: list[pydicom.Dataset]) -> nib.Nifti1Image:
    """Empty image on the series grid, array (slice, row, column), RAS affine from DICOM geometry."""
    iop = np.asarray(ds[0].ImageOrientationPatient, dtype=float)
    dr, dc = (float(v) for v in ds[0].PixelSpacing)
    ipp = np.array([[float(v) for v in d.ImagePositionPatient] for d in ds])
    affine = np.eye(4)
    affine[:3, 0] = (ipp[-1] - ipp[0]) / (len(ds) - 1)
    affine[:3, 1] = iop[3:] * dr
    affine[:3, 2] = iop[:3] * dc
    affine[:3, 3] = ipp[0]
    return nib.Nifti1Image(np.zeros((len(ds), ds[0].Rows, ds[0].Columns), np.uint8), LPS_TO_RAS @ affine)


def write_seg(labels_on_series: np.ndarray, ds: list[pydicom.Dataset], path: Path) -> dict[str, int]:
    """``labels_on_series`` (on ``series_grid``) as a binary DICOM-SEG of ``ds`` at ``path``; segment label -> label value."""
    values = [int(v) for v in np.unique(labels_on_series) if v]
    consecutive = np.zeros(max(values) + 1, np.uint8)
    consecutive[values] = np.arange(1, len(values) + 1)
    algo = hd.AlgorithmIdentificationSequence(name="TotalSegmentator", version="2", family=codes.DCM.ArtificialIntelligence)
    descriptions = [
        hd.seg.SegmentDescription(
            segment_number=i + 1,
            segment_label=f"label_{v}",
            segmented_property_category=codes.SCT.Tissue,
            segmented_property_type=codes.SCT.Organ,
            algorithm_type=hd.seg.SegmentAlgorithmTypeValues.AUTOMATIC,
            algorithm_identification=algo,
        )
        for i, v in enumerate(values)
    ]
    seg = hd.seg.Segmentation(
        source_images=ds,
        pixel_array=consecutive[labels_on_series],
        segmentation_type=hd.seg.SegmentationTypeValues.BINARY,
        segment_descriptions=descriptions,
        series_instance_uid=hd.UID(),
        series_number=99,
        sop_instance_uid=hd.UID(),
        instance_number=1,
        manufacturer="segbench-test",
        manufacturer_model_name="segbench-test",
        software_versions="0",
        device_serial_number="0",
    )
    seg.save_as(path)
    return {f"label_{v}": v for v in values}


def write_series(ds: list[pydicom.Dataset], folder: Path, columns: int | None = None, prefix: str = "slice") -> list[pydicom.Dataset]:
    """The slices ``ds`` as uncompressed files ``<prefix>_<i>.dcm`` in ``folder`` (cropped to their first ``columns``
    columns, so that a test can have rows and columns differ); the written datasets."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, d in enumerate(ds):
        d = copy.deepcopy(d)
        d.decompress()
        if columns is not None:
            d.PixelData = np.ascontiguousarray(d.pixel_array[:, :columns]).tobytes()
            d.Columns = columns
        d.save_as(folder / f"{prefix}_{i:03d}.dcm")
        out.append(d)
    return out


def write_rtstruct(labels_on_series: np.ndarray, folder: Path, path: Path) -> dict[str, int]:
    """``labels_on_series`` (on ``series_grid``: slice, row, column) as an RTSTRUCT written by rt-utils (an independent
    writer) on the series in ``folder``, one ROI per label; ROI name -> label value."""
    from rt_utils import RTStructBuilder

    rt = RTStructBuilder.create_new(dicom_series_path=str(folder))
    names = {}
    for v in (int(v) for v in np.unique(labels_on_series) if v):
        rt.add_roi(mask=np.transpose(labels_on_series == v, (1, 2, 0)), name=f"label_{v}")  # rt-utils: (row, column, slice)
        names[f"label_{v}"] = v
    rt.save(str(path))
    return names
