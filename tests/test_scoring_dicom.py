"""DICOM-SEG predictions are aligned to a NIfTI reference by DICOM geometry and score like NIfTI.

Uses the real 20-slice CT series in data/totalseg_example/ct_dicom and TotalSegmentator's output
on that grid (seg_dicom.nii.gz): a perturbed copy of the output is written both as NIfTI and as a
highdicom DICOM-SEG on the series, and both must give the same rows.
"""

from __future__ import annotations

from pathlib import Path

import highdicom as hd
import nibabel as nib
import numpy as np
import pydicom
import pytest
from pydicom.sr.codedict import codes
from scipy import ndimage

from segbench.scoring import Region, resample_to_reference, score_case

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "totalseg_example"
pytestmark = pytest.mark.skipif(not (EXAMPLE / "ct_dicom").is_dir(), reason="data bundle not pulled (dvc pull)")

LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])


def _series() -> list[pydicom.Dataset]:
    """The example series, with the identifiers its anonymisation blanked restored (in memory only)."""
    ds = [pydicom.dcmread(p) for p in sorted((EXAMPLE / "ct_dicom").glob("*.dcm"))]
    study, series, frame = hd.UID(), hd.UID(), hd.UID()
    for d in ds:
        d.SOPClassUID = d.SOPClassUID or d.file_meta.MediaStorageSOPClassUID
        d.SOPInstanceUID = d.SOPInstanceUID or d.file_meta.MediaStorageSOPInstanceUID
        d.StudyInstanceUID = d.get("StudyInstanceUID") or study
        d.SeriesInstanceUID = d.get("SeriesInstanceUID") or series
        d.FrameOfReferenceUID = d.get("FrameOfReferenceUID") or frame
        d.PatientID = d.get("PatientID") or "anon"
    return sorted(ds, key=lambda d: float(d.ImagePositionPatient[2]))


def _series_grid(ds: list[pydicom.Dataset]) -> nib.Nifti1Image:
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


def _write_seg(labels_on_series: np.ndarray, ds: list[pydicom.Dataset], path: Path) -> dict[str, int]:
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


def test_dicom_seg_prediction_scores_like_nifti(tmp_path: Path) -> None:
    ref_path = EXAMPLE / "seg_dicom.nii.gz"
    ref = nib.load(ref_path)
    labels = np.asanyarray(ref.dataobj)
    present = [int(v) for v in np.unique(labels) if v]
    big = sorted(present, key=lambda v: -int((labels == v).sum()))[:3]
    pred = labels.copy()
    pred[ndimage.binary_dilation(labels == big[0]) & (labels == 0)] = big[0]  # boundary error
    pred[labels == big[2]] = 0  # a missed structure
    pred[~np.isin(pred, big)] = 0  # only the scored structures, to keep the DICOM-SEG small
    pred_nii = tmp_path / "pred.nii.gz"
    nib.save(nib.Nifti1Image(pred, ref.affine, ref.header), pred_nii)

    ds = _series()
    on_series = np.asanyarray(resample_to_reference(nib.Nifti1Image(pred, ref.affine), _series_grid(ds)).dataobj)
    assert np.bincount(on_series.ravel(), minlength=256).tolist() == np.bincount(pred.ravel(), minlength=256).tolist()
    pred_dcm = tmp_path / "pred_seg.dcm"
    names = _write_seg(on_series, ds, pred_dcm)

    regions = [Region(f"label_{v}", (v,), 2.0) for v in big] + [Region("union", tuple(big), 2.0, detection=True)]
    from_nifti = score_case("ts", ref_path, pred_nii, regions)
    from_dicom = score_case("ts", ref_path, pred_dcm, regions, dicom_labels=names)
    assert from_dicom == from_nifti
    assert from_nifti[0]["dice"] < 1.0 and from_nifti[2]["worst_case"]
