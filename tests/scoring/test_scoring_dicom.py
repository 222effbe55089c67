"""DICOM-SEG and RTSTRUCT predictions are aligned to a NIfTI reference by DICOM geometry and score like NIfTI.

Uses the real 20-slice CT series in data/totalseg_example/ct_dicom and TotalSegmentator's output
on that grid (seg_dicom.nii.gz): a perturbed copy of the output is written both as NIfTI and as a
highdicom DICOM-SEG on the series, and both must give the same rows. An RTSTRUCT written by rt-utils
on that series (cropped so that its rows outnumber its columns) must too.
"""

from __future__ import annotations

from pathlib import Path

import highdicom as hd
import nibabel as nib
import numpy as np
import pydicom
import pytest
from scipy import ndimage

from dicom_series import EXAMPLE, series, series_grid, write_rtstruct, write_seg, write_series
from segbench.scoring import labelmaps
from segbench.scoring.engine import score_case
from segbench.scoring.geometry import resample_to_reference
from segbench.scoring.labelmaps import _series_files, load_label_map
from segbench.scoring.settings import Region

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


def test_rtstruct_prediction_scores_like_nifti_from_its_own_series_only(tmp_path: Path) -> None:
    folder = tmp_path / "predictions"
    ds = write_series(series(), folder, columns=400)
    grid = series_grid(ds)  # (slice, row, column): 20 x 512 x 400
    truth = np.zeros(grid.shape, np.uint8)
    truth[4:16, 60:300, 150:260] = 1
    truth[7:12, 420:500, 80:380] = 2  # rows past the column count: rt-utils' reader lost them (a Dice of 0)
    pred = truth.copy()
    pred[4:16, 60:300, 260:280] = 1  # a boundary error
    pred[7:12, 470:500] = 0  # part of the lesion missed
    ref_path, pred_nii = tmp_path / "ref.nii.gz", tmp_path / "pred.nii.gz"
    nib.save(nib.Nifti1Image(truth, grid.affine), ref_path)
    nib.save(nib.Nifti1Image(pred, grid.affine), pred_nii)
    pred_rt = folder / "case_rt.dcm"
    names = write_rtstruct(pred, folder, pred_rt)

    # beside it, what must not be read: another case's series (its slices would join the volume), and a symlink to a
    # copy of one of its own slices outside the folder (a duplicate position: followed, the grid is refused)
    other_uid = hd.UID()
    for i, d in enumerate(ds):
        d.SeriesInstanceUID, d.SOPInstanceUID = other_uid, hd.UID()
        d.ImagePositionPatient = [*d.ImagePositionPatient[:2], float(d.ImagePositionPatient[2]) + 500]
        d.save_as(folder / f"other_{i:03d}.dcm")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "slice.dcm").write_bytes((folder / "slice_003.dcm").read_bytes())
    (folder / "zz_link.dcm").symlink_to(tmp_path / "outside" / "slice.dcm")

    regions = [Region("organ", (1,), 2.0), Region("lesion", (2,), 2.0, detection=True)]
    from_nifti = score_case("rt", ref_path, pred_nii, regions)
    from_rtstruct = score_case("rt", ref_path, pred_rt, regions, dicom_labels=names)
    assert from_rtstruct == from_nifti
    assert 0 < from_nifti[0]["dice"] < 1 and 0 < from_nifti[1]["dice"] < 1

    (folder / "zz_link.dcm").unlink()  # a regular duplicate slice is read, and refused by name
    (folder / "zz_copy.dcm").write_bytes((folder / "slice_003.dcm").read_bytes())
    with pytest.raises(ValueError, match="case_rt.dcm: the slices of its image series .* are not evenly spaced"):
        load_label_map(pred_rt, dicom_labels=names)


def test_rtstruct_series_claiming_a_huge_grid_is_refused_before_it_is_built(tmp_path: Path) -> None:
    pred_rt = _small_rtstruct(tmp_path / "predictions")
    # the headers lie: 60000 x 60000 slices (288 GB as the int32 volume); pixels never read
    _slices(pred_rt.parent, lambda d: setattr(d, "Rows", 60000) or setattr(d, "Columns", 60000))
    with pytest.raises(ValueError, match=r"case_rt.dcm: its geometry makes a volume of shape \(60000, 60000, 4\), over 8 times"):
        load_label_map(pred_rt, reference_shape=(4, 512, 512))


def _small_rtstruct(folder: Path) -> Path:
    """An RTSTRUCT (rt-utils) of one square ROI on the first 4 slices of the example series, written beside them."""
    ds = write_series(series()[:4], folder)
    labels = np.zeros((4, ds[0].Rows, ds[0].Columns), np.uint8)
    labels[1:3, 100:200, 100:200] = 1
    write_rtstruct(labels, folder, folder / "case_rt.dcm")
    return folder / "case_rt.dcm"


def _slices(folder: Path, edit: object) -> None:
    for path in sorted(folder.glob("slice_*.dcm")):
        d = pydicom.dcmread(path)
        edit(d)
        d.save_as(path)


def _rtstruct(path: Path, edit: object) -> None:
    d = pydicom.dcmread(path)
    edit(d)
    d.save_as(path)


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (lambda p: _slices(p.parent, lambda d: setattr(d, "ImageOrientationPatient", [1, 0, 0, 1, 0, 0])), "has no usable geometry"),
        (lambda p: _slices(p.parent, lambda d: setattr(d, "PixelSpacing", [0, 0.7])), "has no usable geometry"),
        (lambda p: _rtstruct(p, lambda d: setattr(d.StructureSetROISequence[0], "ROINumber", 2**40)), "is not a label id"),
        (lambda p: _rtstruct(p, lambda d: setattr(d.ROIContourSequence[0].ContourSequence[0], "ContourData", [1.0, 2.0])), "a contour of 2 coordinates"),
        (lambda p: _rtstruct(p, lambda d: setattr(d.ROIContourSequence[0].ContourSequence[0], "ContourData", [1e30, 0.0, 0.0] * 3)), "a contour lies outside"),
        (lambda p: _rtstruct(p, lambda d: delattr(d, "ReferencedFrameOfReferenceSequence")), "references 0 image series"),
    ],
    ids=["orientation", "spacing", "roi-number", "short-contour", "far-contour", "no-series"],
)
def test_a_malformed_rtstruct_or_series_is_refused_naming_the_file(tmp_path: Path, broken: object, message: str) -> None:
    """Headers an RTSTRUCT's writer controls: each one wrong is a ValueError naming the RTSTRUCT (a singular grid raised
    numpy's LinAlgError, a huge ROI number an OverflowError, from inside the drawing)."""
    path = _small_rtstruct(tmp_path / "predictions")
    load_label_map(path)  # as written, it loads
    _series_files.cache_clear()
    broken(path)
    with pytest.raises(ValueError, match=f"case_rt.dcm.*{message}"):
        load_label_map(path)


def test_a_deflated_dicom_bomb_is_refused_before_pydicom_inflates_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1.5 MB DICOM in the deflated transfer syntax cost pydicom 3.43 GB: what it inflates to is counted, in chunks, first."""
    pred_rt = _small_rtstruct(tmp_path / "predictions")
    honest = load_label_map(pred_rt, reference_shape=(4, 512, 512))[0]
    d = pydicom.dcmread(pred_rt)
    d.file_meta.TransferSyntaxUID = pydicom.uid.DeflatedExplicitVRLittleEndian
    d.save_as(pred_rt, enforce_file_format=True)
    assert np.array_equal(load_label_map(pred_rt, reference_shape=(4, 512, 512))[0], honest)  # an honest deflated file still reads
    d.add_new((0x0011, 0x0010), "LO", "bomb")
    d.add_new((0x0011, 0x1010), "OB", bytes(16 << 20))
    d.save_as(pred_rt, enforce_file_format=True)
    assert pred_rt.stat().st_size < 1 << 20
    monkeypatch.setattr(labelmaps, "DICOM_BASE_BYTES", 8 << 20)
    cap = labelmaps.dicom_byte_cap((4, 8, 8))
    with pytest.raises(ValueError, match=rf"case_rt.dcm: its deflated DICOM dataset inflates past {cap:,} bytes; refused before decoding"):
        load_label_map(pred_rt, reference_shape=(4, 8, 8))


def test_a_dicom_seg_whose_frames_decode_past_the_cap_is_refused_from_its_header(tmp_path: Path) -> None:
    ds = series()
    labels = np.zeros((len(ds), ds[0].Rows, ds[0].Columns), np.uint8)
    labels[2:5, 100:200, 100:200] = 1
    pred = tmp_path / "seg.dcm"
    write_seg(labels, ds, pred)
    d = pydicom.dcmread(pred)
    d.NumberOfFrames = 10**6  # 10^6 frames of 512 x 512 pixels: 32 GB as bits; the pixels are never decoded
    d.save_as(pred)
    with pytest.raises(ValueError, match=r"seg.dcm: its header's frames decode to [\d,]+ bytes, more than [\d,]+; refused before decoding"):
        load_label_map(pred, reference_shape=(len(ds), 512, 512))
