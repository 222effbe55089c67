"""The real-model pipeline's own pieces (realmodel/dvc.yaml; docs/guide.md#a-real-model-run-here): its params are the
composition of conf/, its cases are the bundle's files (liver masks of the pseudo-reference and of the shipped output, the
DICOM series read into NIfTI), and a stage run with ``--params realmodel/params.yaml`` writes under realmodel/.
The model itself: tests/models/test_pyliverlesionseg.py; the whole pipeline's rerun, byte for byte: .ci/run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np

from repo_paths import ROOT
from segbench.cli import _root, build_parser
from segbench.config.params import load_params
from segbench.datasets.dicom_series import read_series
from segbench.stages.realmodel_cases import run_cases

EXAMPLE = ROOT / "data" / "totalseg_example"
#: the overrides realmodel/dvc.yaml's header and .ci/run compose realmodel/params.yaml with
OVERRIDES = [
    "dataset=[totalseg_liver]",
    "model=[pyliverlesionseg]",
    "predictions=[totalsegmentator_fast_shipped]",
    "published=[]",
    "interactive_dataset=[]",
    "model@interactive_model=[]",
]


def test_params_are_the_composition_of_conf() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "segbench.cli", "--params", "realmodel/params.yaml", "params", "--check", *OVERRIDES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    text = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert all(f"'{o}'" in text for o in OVERRIDES)


def test_outputs_lie_under_the_params_folder() -> None:
    """`.` for params.yaml (the default pipeline's paths unchanged), realmodel/ for realmodel/params.yaml."""
    params = load_params(ROOT / "realmodel" / "params.yaml")
    for argv, root in (
        (["compare", "--dataset", "totalseg_liver"], Path(".")),
        (["--params", "realmodel/params.yaml", "compare", "--dataset", "totalseg_liver"], Path("realmodel")),
    ):
        assert _root(build_parser().parse_args(argv), params, "totalseg_liver") == root


def test_cases_are_the_bundles_files(tmp_path: Path) -> None:
    """Each case's image (the CT byte for byte, the DICOM series as segbench reads it) and the 0/1 liver masks (id 5)
    of TotalSegmentator's output and of its shipped --fast output, without TotalSegmentator's NIfTI extensions (label
    names that are not the mask's)."""
    (tmp_path / "data").symlink_to(ROOT / "data")
    folder = tmp_path / "realmodel"
    folder.mkdir()
    params_file = folder / "params.yaml"
    params_file.write_bytes((ROOT / "realmodel" / "params.yaml").read_bytes())
    run_cases(load_params(params_file), params_file, "totalseg_liver")
    cases = folder / "cases"
    assert (cases / "images" / "ct.nii.gz").read_bytes() == (EXAMPLE / "ct_sm.nii.gz").read_bytes()
    dicom = nib.load(cases / "images" / "ct_dicom.nii.gz")
    series = read_series(EXAMPLE / "ct_dicom")
    assert np.array_equal(np.asarray(dicom.dataobj), np.asarray(series.dataobj)) and np.allclose(dicom.affine, series.affine)
    for mask_file, source in (
        (cases / "labels" / "ct.nii.gz", "seg_total.nii.gz"),
        (cases / "labels" / "ct_dicom.nii.gz", "seg_dicom.nii.gz"),
        (cases / "shipped" / "totalsegmentator_fast" / "ct.nii.gz", "seg_total_fast.nii.gz"),
    ):
        mask, labels = nib.load(mask_file), nib.load(EXAMPLE / source)
        assert np.array_equal(np.asarray(mask.dataobj), (np.asarray(labels.dataobj) == 5).astype(np.uint8)), mask_file
        assert np.allclose(mask.affine, labels.affine) and len(mask.header.extensions) == 0
    assert not (cases / "shipped" / "totalsegmentator_fast" / "ct_dicom.nii.gz").exists()  # no --fast output on the series


def test_the_record_stage_puts_the_measurements_on_the_model_s_mlflow_run(tracking_store: str, tmp_path: Path) -> None:
    """The real model's MLflow run records its package, weights digests, device and wall time: the record stage puts the
    predict stage's measurements (runs/<model>.json) on the run the track stage logged (found by the track marker's
    fingerprint) as run.* tags, never as segbench.* tags, which compare copies into the results."""
    from mlflow.tracking import MlflowClient

    from segbench.base.io import write_json_atomic
    from segbench.stages.paths import runs_file, tracking_marker
    from segbench.stages.realmodel_record import run_record
    from segbench.tracking import runs as tracking
    from tests_support import score_bundle

    bundle = score_bundle()
    logged = tracking.log_bundle(bundle)
    write_json_atomic(tracking_marker("toy", "sim_a", tmp_path), {"dataset": "toy", "model": "sim_a", "fingerprint": bundle.fingerprint})
    measured = {
        "package": "pyliverlesionseg==0.3, torch==2.13.0 CPU",
        "weights_sha256": "59" * 32,
        "weights_md5": "a2" * 16,
        "device": "cpu",
        "wall_time_s": 21.2,
        "peak_memory_gb": 3.47,
    }
    write_json_atomic(runs_file("sim_a", tmp_path), {"dataset": "toy", "model": "sim_a", **measured})
    assert run_record("toy", "sim_a", tmp_path) == logged
    tags = MlflowClient(tracking_store).get_run(logged).data.tags
    assert {key: tags.get(f"run.{key}") for key in measured} == {key: str(value) for key, value in measured.items()}
    assert "run.dataset" not in tags and not any(key.startswith("segbench.") and "wall" in key for key in tags)
