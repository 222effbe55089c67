"""Bad input never yields a number: each fault gives an error naming the case/file and the problem.

The score stage is run through the real CLI on a real KiTS23 reference with crafted prediction files.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pandas as pd
import pytest
import yaml

from projects import working_folder
from segbench.cli import main
from tests_support import in_directory

CASE = "case_00110"
MODEL = "sim_dilate_1mm"


@pytest.fixture
def crafted_folder(root: Path, tmp_path: Path, tracking_store: str) -> Path:
    working_folder(root, tmp_path, [f"model=[{MODEL}]", f"dataset.kits23.cases=[{CASE}]", "stats.n_resamples=100", "published=[]"])
    (tmp_path / "predictions" / "kits23" / MODEL).mkdir(parents=True)
    (tmp_path / "predictions" / "kits23" / MODEL / "manifest.json").write_text('{"regions": {}}')  # as predict writes it
    return tmp_path


@pytest.fixture
def reference(root: Path) -> nib.Nifti1Image:
    return nib.load(root / "data" / "kits23" / "labels" / f"{CASE}.nii.gz")


def _prediction(project: Path, case: str = CASE) -> Path:
    return project / "predictions" / "kits23" / MODEL / f"{case}.nii.gz"


def _save(project: Path, data: np.ndarray, affine: np.ndarray, case: str = CASE) -> Path:
    path = _prediction(project, case)
    nib.save(nib.Nifti1Image(data, affine), path)
    return path


def _score(project: Path, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    with in_directory(project):
        code = main(["score", "--dataset", "kits23", "--model", MODEL, "--workers", "1"])
    err = capsys.readouterr().err
    assert code != 0 or not err.strip().startswith("segbench score: error")
    if code != 0:
        assert not (project / "scores" / "kits23" / MODEL / "per_case.csv").exists(), "a failed score stage left a table"
    return code, err


def _labels(reference: nib.Nifti1Image) -> np.ndarray:
    return np.asarray(reference.dataobj).astype(np.uint8)


def test_shape_mismatch(crafted_folder: Path, reference: nib.Nifti1Image, capsys: pytest.CaptureFixture) -> None:
    _save(crafted_folder, _labels(reference)[:-1], reference.affine)
    code, err = _score(crafted_folder, capsys)
    assert code == 1 and CASE in err and "shape" in err


def test_a_header_claiming_another_grid_is_refused_before_its_voxels_are_decoded(
    crafted_folder: Path, reference: nib.Nifti1Image, capsys: pytest.CaptureFixture
) -> None:
    """A 27 GB grid claimed over 1 KB (or over a gzip bomb): the headers are compared first, so the error is the grid's,
    not one found after inflating what the header claims."""
    header = nib.Nifti1Header()
    header.set_data_shape((3000, 3000, 3000))
    header.set_data_dtype(np.uint8)
    header.set_sform(reference.affine, code=1)
    header.set_qform(reference.affine, code=1)
    header.set_data_offset(352)
    path = _prediction(crafted_folder)
    path.write_bytes(gzip.compress(header.binaryblock + b"\0" * 4 + bytes(1024)))
    code, err = _score(crafted_folder, capsys)
    assert code == 1 and CASE in err and "shape" in err and "(3000, 3000, 3000)" in err and "voxel data" not in err, err


def _flip_axis(affine: np.ndarray) -> np.ndarray:
    return affine @ np.diag([1.0, 1.0, -1.0, 1.0])


def _shift_origin(affine: np.ndarray) -> np.ndarray:
    shifted = affine.copy()
    shifted[0, 3] += 5.0
    return shifted


def _other_spacing(affine: np.ndarray) -> np.ndarray:
    return affine @ np.diag([1.0, 1.0, 1.1, 1.0])


@pytest.mark.parametrize("change", [_flip_axis, _shift_origin, _other_spacing], ids=["flipped-axis", "shifted-origin", "other-spacing"])
def test_affine_mismatch(crafted_folder: Path, reference: nib.Nifti1Image, capsys: pytest.CaptureFixture, change) -> None:
    _save(crafted_folder, _labels(reference), change(reference.affine))
    code, err = _score(crafted_folder, capsys)
    assert code == 1 and CASE in err and ("affine" in err or "spacing" in err), err


def test_out_of_schema_label(crafted_folder: Path, reference: nib.Nifti1Image, capsys: pytest.CaptureFixture) -> None:
    data = _labels(reference)
    data[0, 0, 0] = 7
    _save(crafted_folder, data, reference.affine)
    code, err = _score(crafted_folder, capsys)
    assert code == 1 and CASE in err and "7" in err


def test_non_integer_and_nan_labels(crafted_folder: Path, reference: nib.Nifti1Image, capsys: pytest.CaptureFixture) -> None:
    data = _labels(reference).astype(np.float32)
    data[0, 0, 0] = 0.5
    _save(crafted_folder, data, reference.affine)
    code, err = _score(crafted_folder, capsys)
    assert code == 1 and "non-integer" in err
    data[0, 0, 0] = np.nan
    _save(crafted_folder, data, reference.affine)
    code, err = _score(crafted_folder, capsys)
    assert code == 1 and "NaN" in err


def test_truncated_and_empty_files(crafted_folder: Path, reference: nib.Nifti1Image, capsys: pytest.CaptureFixture) -> None:
    path = _save(crafted_folder, _labels(reference), reference.affine)
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])
    code, err = _score(crafted_folder, capsys)
    assert code == 1 and str(path.name) in err and "cannot read" in err
    path.write_bytes(b"")
    code, err = _score(crafted_folder, capsys)
    assert code == 1 and "empty" in err
    path.write_bytes(gzip.compress(b"not a nifti at all"))
    code, err = _score(crafted_folder, capsys)
    assert code == 1 and "cannot read" in err


def test_prediction_for_unknown_case(crafted_folder: Path, reference: nib.Nifti1Image, capsys: pytest.CaptureFixture) -> None:
    _save(crafted_folder, _labels(reference), reference.affine)
    _save(crafted_folder, _labels(reference), reference.affine, case="case_99999")
    code, err = _score(crafted_folder, capsys)
    assert code == 1 and "case_99999" in err and "unknown cases" in err


def test_missing_prediction_is_scored_worst_case_and_counted(crafted_folder: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture) -> None:
    code, _ = _score(crafted_folder, capsys)
    assert code == 0
    assert (
        f"1 of 1 cases have no prediction file; each is scored as the worst case and flagged prediction_missing, and the leaderboard "
        f"applies missing_predictions to them (docs/methodology.md#41-coverage): {CASE}"
    ) in caplog.text
    rows = pd.read_csv(crafted_folder / "scores" / "kits23" / MODEL / "per_case.csv")
    assert rows["prediction_missing"].all() and rows["worst_case"].all()
    assert (rows["dice"] == 0).all() and np.isfinite(rows["hd95"]).all()
    assert (rows["hd95"] == rows["worst_case_value_mm"]).all()
    record = json.loads((crafted_folder / "scores" / "kits23" / MODEL / "run.json").read_text())
    assert record["metrics"]["n_missing_prediction"] == 1 and record["metrics"]["n_worst_case"] == len(rows)
    with in_directory(crafted_folder):
        stages = (["track", "--dataset", "kits23", "--model", MODEL], ["compare", "--dataset", "kits23"], ["report", "--results", "results", "--out", "site"])
        for argv in stages:
            assert main(argv) == 0, argv
    results = json.loads((crafted_folder / "results" / "kits23.json").read_text())
    estimate = results["analysis"]["structures"]["kidney_and_mass"]["metrics"]["dice"]["models"][MODEL]
    assert estimate["n_missing_prediction"] == 1 and estimate["mean"] == 0
    # its only case lacks a prediction: no case is covered by every model, so the missing case counts as a failure, said
    assert results["coverage"]["applied"] == "worst_case" and results["coverage"]["reason"] == "no case is covered by every model"
    assert "(1 without a prediction)" in (crafted_folder / "site" / "kits23--kidney_and_mass.html").read_text()


def test_duplicate_case_ids_in_params(crafted_folder: Path, capsys: pytest.CaptureFixture) -> None:
    params = yaml.safe_load((crafted_folder / "params.yaml").read_text())
    params["dataset"]["kits23"]["cases"] = [CASE, CASE]
    (crafted_folder / "params.yaml").write_text(yaml.safe_dump(params))
    code, err = _score(crafted_folder, capsys)
    assert code == 1 and "duplicate case ids" in err


@pytest.mark.parametrize("section, name", [("dataset", "amos22"), ("model", "no_such_model")])
def test_params_naming_unknown_dataset_or_model(crafted_folder: Path, capsys: pytest.CaptureFixture, section: str, name: str) -> None:
    args = {"dataset": "kits23", "model": MODEL, section: name}
    with in_directory(crafted_folder):
        code = main(["score", "--dataset", args["dataset"], "--model", args["model"]])
    assert code == 1 and f"unknown {section} {name!r}" in capsys.readouterr().err


def test_region_the_model_does_not_segment_gets_no_rows_not_a_zero(crafted_folder: Path, reference: nib.Nifti1Image, capsys) -> None:
    _save(crafted_folder, _labels(reference), reference.affine)
    manifest = {"regions": {"tumor": {"status": "not_applicable", "reason": "model does not segment ['tumor']"}}}
    (_prediction(crafted_folder).parent / "manifest.json").write_text(json.dumps(manifest))
    code, _ = _score(crafted_folder, capsys)
    assert code == 0
    rows = pd.read_csv(crafted_folder / "scores" / "kits23" / MODEL / "per_case.csv")
    assert sorted(rows["structure"]) == ["kidney_and_mass", "mass"]
    record = json.loads((crafted_folder / "scores" / "kits23" / MODEL / "run.json").read_text())
    assert "not_applicable" in record["params"]["scoring.excluded_regions"]


def test_model_label_map_naming_a_structure_the_dataset_lacks(crafted_folder: Path, capsys: pytest.CaptureFixture) -> None:
    params = yaml.safe_load((crafted_folder / "params.yaml").read_text())
    params["model"][MODEL]["label_map"][2] = "liver"
    (crafted_folder / "params.yaml").write_text(yaml.safe_dump(params))
    code, err = _score(crafted_folder, capsys)
    assert code == 1 and f"model {MODEL!r} labels ['liver'] that dataset 'kits23' does not have" in err


def _drop_liver(table: pd.DataFrame) -> pd.DataFrame:
    return table.drop(columns="liver")


def _organ_columns_differ(model: str) -> str:
    return rf"touchstone/{model}: organ columns differ from MONAI_UNETR's: missing \['liver'\], extra \[\]"


def _non_numeric_cell(table: pd.DataFrame) -> pd.DataFrame:
    table.loc[1, "aorta"] = "0.14 (see text)"
    return table


def _dice_out_of_range(table: pd.DataFrame) -> pd.DataFrame:
    """A Dice above 1 (a flipped bit, a score in another scale): within no metric's range (segbench.base.rows)."""
    table.loc[1, "aorta"] = "1.8954"
    return table


def _conflicting_duplicate_row(table: pd.DataFrame) -> pd.DataFrame:
    """Case s0001 listed twice with different aorta values (an exact copy is dropped and counted: docs/published.md)."""
    copy = table.iloc[[1]].copy()
    copy["aorta"] = "0.5"
    return pd.concat([table, copy], ignore_index=True)


@pytest.mark.parametrize(
    "files, fault, problem",
    [
        (["MONAI_UNETR/dsc.csv"], _drop_liver, r"MONAI_UNETR/nsd\.csv: row 1 \(header\): organ columns differ from dsc\.csv's: .*'liver'"),
        (["nnU-Net_U-Net/dsc.csv", "nnU-Net_U-Net/nsd.csv"], _drop_liver, _organ_columns_differ("nnU-Net_U-Net")),
        (["MONAI_UNETR/dsc.csv"], _non_numeric_cell, r"MONAI_UNETR/dsc\.csv: row 3 \(name='s0001'\), column 'aorta': '0.14 \(see text\)' is not a finite"),
        (
            ["MONAI_UNETR/nsd.csv"],
            _conflicting_duplicate_row,
            r"MONAI_UNETR/nsd\.csv: rows \d+ and \d+ \(.*'s0001'.*\), column 'aorta': conflicting duplicates",
        ),
        (
            ["MONAI_UNETR/dsc.csv"],
            _dice_out_of_range,
            r"touchstone: row \d+ of the rows table \(model 'MONAI_UNETR', case_id 's0001', structure 'aorta'\), column 'dice': "
            r"1\.8954 is not a number in \[0, 1\]; refused",
        ),
    ],
    ids=["column-missing-in-one-file", "column-missing-for-one-model", "non-numeric-cell", "conflicting-duplicate-row", "dice-out-of-range"],
)
def test_bad_published_score_file(
    root: Path, tmp_path: Path, tracking_store: str, capsys: pytest.CaptureFixture, files: list[str], fault, problem: str
) -> None:
    """`segbench import` on published per-case files with one fault: exit 1, the file and the problem, no table."""
    source = root / "data" / "published" / "touchstone_totalsegmentator"
    copy = tmp_path / "touchstone"
    copy.mkdir()
    shutil.copy(source / "metaTotalSeg.csv", copy)
    for model in ("MONAI_UNETR", "nnU-Net_U-Net"):
        shutil.copytree(source / model, copy / model)
    for name in files:
        fault(pd.read_csv(copy / name, dtype=str, keep_default_na=False)).to_csv(copy / name, index=False)
    working_folder(root, tmp_path, ["published=[touchstone_totalsegmentator]", f"published.touchstone_totalsegmentator.path={copy}", "stats.n_resamples=100"])
    with in_directory(tmp_path):
        code = main(["import", "--published", "touchstone_totalsegmentator"])
    err = capsys.readouterr().err
    assert code == 1 and re.search(problem, err), err
    assert not (tmp_path / "scores").exists(), "a failed import left a table"
