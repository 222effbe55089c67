"""DICOM-SEG predictions are aligned to a NIfTI reference by DICOM geometry and score like NIfTI.

Uses the real 20-slice CT series in data/totalseg_example/ct_dicom and TotalSegmentator's output
on that grid (seg_dicom.nii.gz): a perturbed copy of the output is written both as NIfTI and as a
highdicom DICOM-SEG on the series, and both must give the same rows.
"""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from scipy import ndimage

from dicom_series import EXAMPLE, series, series_grid, write_seg
from segbench.scoring import Region, resample_to_reference, score_case

pytestmark = pytest.mark.skipif(not (EXAMPLE / "ct_dicom").is_dir(), reason="data bundle not pulled (dvc pull)")


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

    ds = series()
    on_series = np.asanyarray(resample_to_reference(nib.Nifti1Image(pred, ref.affine), series_grid(ds)).dataobj)
    assert np.bincount(on_series.ravel(), minlength=256).tolist() == np.bincount(pred.ravel(), minlength=256).tolist()
    pred_dcm = tmp_path / "pred_seg.dcm"
    names = write_seg(on_series, ds, pred_dcm)

    regions = [Region(f"label_{v}", (v,), 2.0, detection=v == big[1]) for v in big]
    from_nifti = score_case("ts", ref_path, pred_nii, regions)
    from_dicom = score_case("ts", ref_path, pred_dcm, regions, dicom_labels=names)
    assert from_dicom == from_nifti
    assert from_nifti[0]["dice"] < 1.0 and from_nifti[2]["worst_case"]
