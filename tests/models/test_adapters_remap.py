"""Real TotalSegmentator outputs remapped by the adapters into the KiTS, AMOS and BTCV schemas.

Expected masks are computed from TotalSegmentator's published class list (tests/support/fixtures), not from
the configs under test; every remapped mask must equal its source mask voxel for voxel.
"""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from adapters_support import DATASETS, MODEL_CLASS_LIST, REAL_MODELS, ROOT, classes, load, source_ids, to_schema
from segbench.config.params import Params, parse_params
from segbench.config.validation import compose_params
from segbench.models.layouts import read_mask_folder
from segbench.models.runner import applicability, native_to_dataset, remap_labels

#: recorded output -> the adapter whose native ids it carries
RECORDINGS = {
    "seg_total.nii.gz": "totalsegmentator",
    "seg_total_fast.nii.gz": "totalsegmentator_fast",
    "seg_roi_subset.nii.gz": "totalsegmentator_roi",
    "seg_mr.nii.gz": "totalsegmentator_mr",
    "seg_dicom.nii.gz": "totalsegmentator",  # 'total' run on the DICOM series, written on its grid
}


@pytest.fixture(scope="module")
def remap_params() -> Params:
    raw = compose_params(ROOT / "conf", [f"model=[{','.join(REAL_MODELS)}]", f"dataset=[{','.join(DATASETS)}]"])
    return parse_params(raw, ROOT)


@pytest.mark.parametrize("model_name", REAL_MODELS)
def test_label_map_has_the_published_names(remap_params: Params, model_name: str) -> None:
    published = classes(MODEL_CLASS_LIST[model_name])
    label_map = remap_params.model(model_name).label_map
    assert {i: published[i] for i in label_map} == label_map, "a native id names a different structure than the published list"
    if model_name != "totalsegmentator_roi":  # the roi-subset adapter lists exactly its subset
        assert label_map == published


@pytest.mark.parametrize("recording", sorted(RECORDINGS))
@pytest.mark.parametrize("dataset_name", ["kits23", "amos22", "btcv"])
def test_recorded_output_remaps_voxel_for_voxel(remap_params: Params, recording: str, dataset_name: str) -> None:
    model, dataset = remap_params.model(RECORDINGS[recording]), remap_params.dataset(dataset_name)
    native, _ = load(recording)
    remapped = remap_labels(native, native_to_dataset(model, dataset), Path(recording))
    published = classes(MODEL_CLASS_LIST[model.name])
    expected = to_schema(native, {i: published[i] for i in model.label_map}, dataset.labels)
    structures, _ = applicability(model, dataset)
    for structure, label in dataset.labels.items():
        ids = source_ids(structure, {i: published[i] for i in model.label_map})
        assert np.array_equal(remapped == label, expected == label), f"{recording} -> {dataset_name}.{structure} differs"
        assert structures[structure]["status"] == ("not_applicable" if ids is None else "segmented"), structure
        if ids is None:
            assert not (remapped == label).any(), f"{structure} is n/a for {model.name} but got voxels"
    assert np.array_equal(remapped, expected)
    present = {s for s, label in dataset.labels.items() if (remapped == label).any()}
    # the recordings' content: the roi subset is the liver alone; the 20-slice DICOM series is above the kidneys
    must = {"kidney"} if dataset_name == "kits23" else {"liver", "spleen"}
    if recording in ("seg_roi_subset.nii.gz", "seg_dicom.nii.gz") and dataset_name == "kits23":
        must = set()
    elif recording == "seg_roi_subset.nii.gz":
        must = {"liver"}
    assert must <= present, f"{recording} -> {dataset_name}: {must - present} not mapped"


def test_kits_kidney_is_both_tumor_free_kidneys(remap_params: Params) -> None:
    model, kits = remap_params.model("totalsegmentator"), remap_params.dataset("kits23")
    native, _ = load("seg_total.nii.gz")
    remapped = remap_labels(native, native_to_dataset(model, kits), Path("seg_total.nii.gz"))
    assert np.array_equal(remapped == 1, np.isin(native, [2, 3]))  # kidney_right, kidney_left
    _, regions = applicability(model, kits)
    assert regions["kidney_and_mass"]["status"] == "scored"
    assert regions["tumor"]["status"] == regions["mass"]["status"] == "not_applicable"


def test_mask_folder_reader_rebuilds_the_multilabel_output(tmp_path: Path, remap_params: Params) -> None:
    """TotalSegmentator without --ml writes one mask per structure; the reader must rebuild --ml's map."""
    native, image = load("seg_total_fast.nii.gz")
    published = classes("totalsegmentator_total")
    for label in np.unique(native)[1:]:
        nib.save(nib.Nifti1Image((native == label).astype(np.uint8), image.affine), tmp_path / f"{published[int(label)]}.nii.gz")
    rebuilt, rebuilt_image = read_mask_folder(tmp_path, remap_params.model("totalsegmentator_fast").label_map)
    assert np.array_equal(rebuilt, native)
    assert np.allclose(rebuilt_image.affine, image.affine)
    nib.save(nib.Nifti1Image(np.ones(native.shape, np.uint8), image.affine), tmp_path / "not_a_structure.nii.gz")
    with pytest.raises(ValueError, match="not_a_structure"):
        read_mask_folder(tmp_path, remap_params.model("totalsegmentator_fast").label_map)
