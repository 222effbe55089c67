"""``segbench evaluate`` and ``segbench.evaluate``: two folders of SIMULATED predictions (segbench.models.simulated) on
three real KiTS23 cases onto a leaderboard, from the command line and from a plain script; the numbers are the score
stage's; bad input stops with an error naming the file or case."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import nibabel as nib
import numpy as np
import pandas as pd
import pytest

from repo_paths import ROOT
from segbench import evaluation
from segbench.config.params import parse_params
from segbench.config.validation import compose_params
from segbench.models import intake, simulated
from segbench.report.terminal import render
from segbench.scoring.geometry import GeometryError, resample_to_reference
from segbench.scoring.settings import Region
from segbench.stages.paths import predictions_dir, scores_dir
from segbench.stages.score import run_score
from segbench.stats.results_file import read_results
from tests_support import command_env, in_directory

#: three of the default 78 cases with small label maps (fast to simulate and score)
CASES = ("case_00110", "case_00285", "case_00440")
#: the simulated models' options, as conf/model/<model>.yaml runs them
MODELS = {"sim_erode_1mm": ["--boundary-mm", "-1.0"], "sim_dilate_1mm": ["--boundary-mm", "1.0"]}
METRIC_COLUMNS = ["dice", "iou", "hd", "hd95", "assd", "masd", "nsd", "det_precision", "det_recall", "det_f1", "worst_case"]


@pytest.fixture(scope="module")
def evaluate_folder(tmp_path_factory: pytest.TempPathFactory, kits_labels: Path) -> Path:
    """A folder with ``gt/`` (the three references) and each simulated model's predictions where the score stage
    reads them (``predictions/kits23/<model>/``, with a manifest excluding no region)."""
    folder = tmp_path_factory.mktemp("evaluate")
    (folder / "gt").mkdir()
    for case in CASES:
        (folder / "gt" / f"{case}.nii.gz").symlink_to(kits_labels / f"{case}.nii.gz")
    (folder / "cases.txt").write_text("\n".join(CASES) + "\n", encoding="utf-8")
    for model, options in MODELS.items():
        out = predictions_dir("kits23", model, folder)
        out.mkdir(parents=True)
        simulated.main(["--input", str(folder / "gt"), "--output", str(out), "--cases", str(folder / "cases.txt"), "--seed", "0", *options])
        (out / "manifest.json").write_text('{"regions": {}}\n', encoding="utf-8")
    (folder / "data.dvc").write_bytes((ROOT / "data.dvc").read_bytes())  # the data version the score stage records
    return folder


def _pred_args(project: Path) -> list[str]:
    return [arg for model in MODELS for arg in ("--pred", f"{model}={predictions_dir('kits23', model, project)}")]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=command_env(), check=False, timeout=1800)
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


def test_cli_prints_a_leaderboard_with_cis_and_verdicts_and_writes_what_show_report_reanalyze_read(evaluate_folder: Path) -> None:
    out = evaluate_folder / "cli"
    printed = _run(
        [
            sys.executable,
            "-m",
            "segbench.cli",
            "evaluate",
            "--gt",
            "gt",
            *_pred_args(evaluate_folder),
            "--dataset",
            "kits23",
            "--conf",
            str(ROOT / "conf"),
            "--simulated",
            *MODELS,
            "--out",
            str(out),
            "--report",
            "--width",
            "200",
        ],
        evaluate_folder,
    ).stdout
    assert "2 models, all SIMULATED" in printed and re.search(r"mean \[95[\d.–]*% CI\]", printed)
    results = json.loads((out / "results" / "kits23.json").read_text(encoding="utf-8"))
    first = results["analysis"]["structures"]["tumor"]["metrics"]["dice"]["verdict"]["first"]
    assert any(re.match(rf"\s*tumor dice\s+{first}\s", line) for line in printed.splitlines()), printed  # its line: the cell, then #1
    assert results["analysis"]["structures"]["tumor"]["n_cases"] == len(CASES)
    assert results["models"]["sim_erode_1mm"]["simulated"] and results["dataset"]["regions"]["tumor"]["nsd_tolerance_mm"] == 1.1498
    assert (out / "site" / "index.html").is_file() and (out / "site" / "kits23--tumor.html").is_file()
    per_case = pd.read_csv(out / evaluation.PER_CASE_FILE, dtype={"case_id": str})
    assert sorted(set(per_case["case_id"])) == list(CASES) and set(per_case["model"]) == set(MODELS)
    assert (
        "every statistic re-derived" in _run([sys.executable, "-m", "segbench.cli", "reanalyze", str(out / "results" / "kits23.json")], evaluate_folder).stdout
    )
    shown = _run([sys.executable, "-m", "segbench.cli", "show", "--results", str(out / "results"), "--width", "200", "--detail"], evaluate_folder).stdout
    v = results["analysis"]["structures"]["tumor"]["metrics"]["dice"]["verdict"]
    assert f"#1 {v['first']} versus #2 {v['second']}: " in " ".join(shown.split())
    _run([sys.executable, "-m", "segbench.cli", "report", "--results", str(out / "results"), "--out", str(evaluate_folder / "site2")], evaluate_folder)
    assert (evaluate_folder / "site2" / "kits23.html").is_file()


def test_api_from_a_plain_script_without_main_guard_with_a_pool(evaluate_folder: Path) -> None:
    """workers=2 starts a spawn pool, whose workers would re-run an unguarded script."""
    script = evaluate_folder / "plain.py"
    script.write_text(
        textwrap.dedent(f"""\
        import segbench

        result = segbench.evaluate({str(evaluate_folder / "gt")!r}, {{m: {str(evaluate_folder)!r} + "/predictions/kits23/" + m for m in {list(MODELS)!r}}},
                                   dataset="kits23", conf={str(ROOT / "conf")!r}, simulated={list(MODELS)!r}, workers=2, progress=False)
        print(result.summary(width=200, cells=True))
        print(result.by_subgroup("gender").to_csv(index=False))
        result.to_json({str(evaluate_folder / "api" / "kits23.json")!r})
        print("SITE", result.to_html({str(evaluate_folder / "api" / "site")!r}))
        """),
        encoding="utf-8",
    )
    done = _run([sys.executable, str(script)], evaluate_folder)
    assert "Traceback" not in done.stderr and done.stdout.count("2 models, all SIMULATED") == 1
    assert re.search(r"mean \[95[\d.–]*% CI\]", done.stdout) and "\n  tumor dice " in done.stdout  # summary(cells=True): a line per cell
    assert "structure,metric,gender,n,tested,model,mean,ci_low,ci_high" in done.stdout
    assert (evaluate_folder / "api" / "site" / "index.html").is_file()
    assert json.loads((evaluate_folder / "api" / "kits23.json").read_text(encoding="utf-8"))["dataset"]["name"] == "kits23"


def test_numbers_equal_the_score_stage_on_the_same_cases(evaluate_folder: Path) -> None:
    raw = compose_params(
        ROOT / "conf",
        ["model=[sim_erode_1mm,sim_dilate_1mm]", "dataset=kits23", f"dataset.kits23.cases=[{','.join(CASES)}]", "scoring.sensitivity_profiles=[]"],
    )
    raw["scoring"].pop("lesions", None)
    params = parse_params(raw, ROOT)
    with in_directory(evaluate_folder):
        for model in MODELS:
            run_score(params, "kits23", model, workers=1)
    stage = pd.concat([pd.read_csv(scores_dir("kits23", m, evaluate_folder) / "per_case.csv", dtype={"case_id": str}) for m in MODELS], ignore_index=True)
    result = evaluation.evaluate(
        evaluate_folder / "gt",
        {m: predictions_dir("kits23", m, evaluate_folder) for m in MODELS},
        dataset="kits23",
        conf=ROOT / "conf",
        simulated=MODELS,
        progress=False,
    )
    ours = result.per_case
    key = ["model", "case_id", "structure"]
    stage, ours = stage.sort_values(key).reset_index(drop=True), ours.sort_values(key).reset_index(drop=True)
    assert len(ours) == len(MODELS) * len(CASES) * 3
    pd.testing.assert_frame_equal(ours[key + METRIC_COLUMNS], stage[key + METRIC_COLUMNS], check_dtype=False)
    pd.testing.assert_frame_equal(ours[["meta.gender", "meta.age_band"]], stage[["meta.gender", "meta.age_band"]], check_dtype=False)
    cell = result.results["analysis"]["structures"]["tumor"]["metrics"]["dice"]["models"]["sim_erode_1mm"]
    assert cell["mean"] == pytest.approx(stage.query("model == 'sim_erode_1mm' and structure == 'tumor'")["dice"].mean(), abs=0, rel=1e-15)


def _nifti(path: Path, data: np.ndarray, spacing: float = 1.0) -> Path:
    nib.save(nib.Nifti1Image(data.astype(np.uint8), np.diag([spacing, spacing, spacing, 1.0])), path)
    return path


@pytest.fixture()
def small(tmp_path: Path) -> Path:
    """A reference folder of two cases (label 1: a cube) and a model folder predicting them exactly."""
    cube = np.zeros((12, 12, 12), dtype=np.uint8)
    cube[3:8, 3:8, 3:8] = 1
    for folder in ("gt", "good"):
        (tmp_path / folder).mkdir()
        for case in ("a", "b"):
            _nifti(tmp_path / folder / f"{case}.nii.gz", cube)
    (tmp_path / "gt" / "dataset.json").write_text('{"labels": {"background": 0, "organ": 1}}', encoding="utf-8")
    return tmp_path


def _evaluate(small: Path, bad: Path, **options: object) -> evaluation.Evaluation:
    return evaluation.evaluate(small / "gt", {"good": small / "good", "bad": bad}, progress=False, **options)


def _bad_copy(small: Path) -> Path:
    bad = small / "bad"
    bad.mkdir()
    _nifti(bad / "a.nii.gz", nib.load(small / "good" / "a.nii.gz").get_fdata())
    return bad


def test_structures_default_from_the_label_map_and_npy_takes_the_reference_grid(small: Path) -> None:
    bad = small / "bad"
    bad.mkdir()
    for case in ("a", "b"):
        np.save(bad / f"{case}.npy", np.asarray(nib.load(small / "good" / f"{case}.nii.gz").dataobj))
    result = _evaluate(small, bad)
    assert set(result.per_case["structure"]) == {"organ"} and (result.per_case["dice"] == 1.0).all()
    assert result.results["dataset"]["regions"] == {"organ": {"labels": [1], "nsd_tolerance_mm": evaluation.DEFAULT_NSD_TOLERANCE_MM}}


def test_a_missing_prediction_is_an_error_naming_the_case_or_the_stated_worst_case(small: Path) -> None:
    bad = _bad_copy(small)
    with pytest.raises(ValueError, match=r"model bad: .*no prediction for 1 of 2 cases: b"):
        _evaluate(small, bad)
    worst = _evaluate(small, bad, missing="worst_case")
    rows = worst.per_case.set_index(["model", "case_id"])
    assert rows.loc[("bad", "b"), "prediction_missing"] and rows.loc[("bad", "b"), "dice"] == 0.0
    assert "bad" in worst.results["analysis"]["models"] and worst.results["coverage"]["applied"] == "worst_case"
    # own_cases: the board is the model covering every case; the other is analysed on its one case beside it
    own = _evaluate(small, bad, missing="own_cases").results
    assert own["coverage"]["models"] == {"bad": {"n_cases": 1, "of": 2, "missing": ["b"]}}
    # a bad reference is the organiser's: every team's number on that case would be wrong, so the run stops naming it
    (small / "gt" / "b.nii.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(ValueError, match=r"gt/b\.nii\.gz: cannot read as NIfTI"):
        _evaluate(small, bad, missing="worst_case")
    assert "bad" not in own["analysis"]["models"] and own["coverage"]["analyses"]["bad"]["structures"]["organ"]["case_ids"] == ["a"]
    assert "bad: 1 of 2 cases (no prediction for 1; estimated on its own cases, beside the leaderboard)." in render([own])


def test_another_grid_is_an_error_naming_the_file(small: Path) -> None:
    bad = _bad_copy(small)
    _nifti(bad / "b.nii.gz", np.asarray(nib.load(small / "good" / "b.nii.gz").dataobj), spacing=2.0)
    with pytest.raises(GeometryError, match=r"bad/b\.nii\.gz") as caught:
        _evaluate(small, bad)
    assert "what differs: spacing (2.0, 2.0, 2.0) (prediction) vs (1.0, 1.0, 1.0) (reference)" in str(caught.value)
    assert "fix: save the prediction on the reference's grid" in str(caught.value) and "--pred-config" in str(caught.value)
    flipped = small / "flipped"  # the first axis stored the other way round (the same voxels on the patient): LAS, not RAS
    flipped.mkdir()
    _nifti(flipped / "a.nii.gz", np.asarray(nib.load(small / "good" / "a.nii.gz").dataobj))
    data = np.asarray(nib.load(small / "good" / "b.nii.gz").dataobj)
    affine = np.diag([-1.0, 1.0, 1.0, 1.0])
    affine[0, 3] = data.shape[0] - 1
    nib.save(nib.Nifti1Image(np.ascontiguousarray(data[::-1]).astype(np.uint8), affine), flipped / "b.nii.gz")
    with pytest.raises(GeometryError) as caught:
        evaluation.evaluate(small / "gt", {"good": small / "good", "flipped": flipped}, progress=False)
    assert "what differs: orientation LAS (prediction) vs RAS (reference)" in str(caught.value), str(caught.value)


def test_a_npy_of_another_shape_is_an_error_naming_the_file(small: Path) -> None:
    bad = _bad_copy(small)
    np.save(bad / "b.npy", np.zeros((12, 12, 11), dtype=np.uint8))
    with pytest.raises(ValueError, match=r"model bad: predictions: .*bad/b\.npy has shape \(12, 12, 11\); expected \(12, 12, 12\)"):
        _evaluate(small, bad)


def test_a_npy_header_is_checked_before_anything_is_allocated(small: Path) -> None:
    """A header claiming 25 GiB over 1 KB of data, np.load would allocate first (numpy's MemoryError, or the memory
    taken); a header of the right shape over too few bytes is refused while reading."""
    bad = _bad_copy(small)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False, "shape": (3000, 3000, 3000)})
    (bad / "b.npy").write_bytes(header.getvalue() + bytes(1024))
    with pytest.raises(ValueError, match=r"bad/b\.npy has shape \(3000, 3000, 3000\); expected \(12, 12, 12\)"):
        _evaluate(small, bad)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False, "shape": (12, 12, 12)})
    (bad / "b.npy").write_bytes(header.getvalue() + bytes(1000))
    with pytest.raises(ValueError, match=r"bad/b\.npy: ends 728 bytes short of the 1728 its header implies"):
        _evaluate(small, bad)


def test_an_unknown_label_is_an_error_naming_the_file(small: Path) -> None:
    bad = _bad_copy(small)
    labels = np.asarray(nib.load(small / "good" / "b.nii.gz").dataobj).copy()
    labels[0, 0, 0] = 7
    _nifti(bad / "b.nii.gz", labels)
    with pytest.raises(ValueError, match=r"case b: .*bad/b\.nii\.gz: label values \[7\]"):
        _evaluate(small, bad)


def test_an_unknown_label_in_a_npy_is_an_error_naming_it(small: Path) -> None:
    bad = _bad_copy(small)
    labels = np.asarray(nib.load(small / "good" / "b.nii.gz").dataobj).copy()
    labels[0, 0, 0] = 7
    np.save(bad / "b.npy", labels)
    with pytest.raises(ValueError, match=r"bad/b\.npy: label values \[7\] are not in the allowed set \[0, 1\]"):
        _evaluate(small, bad)


def test_a_corrupt_file_is_an_error_naming_it(small: Path) -> None:
    bad = _bad_copy(small)
    (bad / "b.nii.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(ValueError, match=r"bad/b\.nii\.gz: cannot read as NIfTI"):
        _evaluate(small, bad)
    (bad / "b.nii.gz").unlink()
    (bad / "b.dcm").write_bytes(b"no DICOM at all")  # was read as a NIfTI: "Cannot work out file type"
    with pytest.raises(ValueError, match=r"bad/b\.dcm: not a DICOM file \(no DICM preamble\)"):
        _evaluate(small, bad)


def test_a_link_or_fifo_in_a_prediction_folder_is_refused_unread_naming_it(small: Path) -> None:
    """A submission's symlink to the reference would score a perfect case; a hard link, the same; a FIFO would hang
    the read; a file of gigabytes would be held whole in memory. Each is an error naming the model and the file, before
    a byte of it is read."""
    bad = _bad_copy(small)
    (bad / "b.nii.gz").symlink_to(small / "gt" / "b.nii.gz")
    with pytest.raises(ValueError, match=r"model bad: predictions: .*bad/b\.nii\.gz: a symlink, not a regular file; refused unread"):
        _evaluate(small, bad)
    (bad / "b.nii.gz").unlink()
    os.link(small / "gt" / "b.nii.gz", bad / "b.nii.gz")
    with pytest.raises(ValueError, match=r"model bad: predictions: .*bad/b\.nii\.gz: a hard link \(2 names for one file\)"):
        _evaluate(small, bad)
    (bad / "b.nii.gz").unlink()
    os.mkfifo(bad / "b.nii.gz")
    with pytest.raises(ValueError, match=r"bad/b\.nii\.gz: a FIFO, not a regular file"):
        _evaluate(small, bad)
    (bad / "b.nii.gz").unlink()
    with open(bad / "b.nii.gz", "wb") as sparse:  # a file over the cap (sparse: no disk): the readers would hold it whole
        sparse.truncate(intake.MAX_FILE_BYTES + 1)
    with pytest.raises(
        ValueError,
        match=rf"bad/b\.nii\.gz: {intake.MAX_FILE_BYTES + 1} bytes, over the cap of {intake.MAX_FILE_BYTES}; "
        "refused unread",
    ):
        _evaluate(small, bad)
    (bad / "b.nii.gz").unlink()
    (bad / "b.nii.gz").mkdir()  # a folder is not a case: b has no prediction
    with pytest.raises(ValueError, match=r"model bad: .*no prediction for 1 of 2 cases: b"):
        _evaluate(small, bad)


def test_a_file_swapped_after_its_checks_is_not_what_is_scored(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A team's folder stays the team's while it is evaluated: a file swapped after its checks, for a symlink to the
    reference or for a better prediction, is not what is scored. The scorers read private copies made through one
    checked descriptor each; they opened the team's names again, and the symlink scored the reference against itself."""
    bad = small / "bad"
    bad.mkdir()
    for case in ("a", "b"):
        _nifti(bad / f"{case}.nii.gz", np.zeros((12, 12, 12)))
    better = _nifti(small / "better.nii.gz", np.asarray(nib.load(small / "good" / "a.nii.gz").dataobj))
    score_cases, calls = evaluation.score_cases, []

    def swapped_then_scored(*args: object, **kwargs: object) -> pd.DataFrame:
        calls.append(1)
        if len(calls) == 2:  # teams are scored in turn: the second call scores "bad", after its files were checked
            (bad / "b.nii.gz").unlink()
            (bad / "b.nii.gz").symlink_to(small / "gt" / "b.nii.gz")
            os.replace(better, bad / "a.nii.gz")
        return score_cases(*args, **kwargs)

    monkeypatch.setattr(evaluation, "score_cases", swapped_then_scored)
    rows = _evaluate(small, bad).per_case.set_index(["model", "case_id"])
    assert (rows.loc["bad", "dice"] == 0.0).all() and (rows.loc["good", "dice"] == 1.0).all()
    assert not rows["prediction_missing"].any()


def test_under_a_coverage_policy_a_file_that_cannot_be_scored_is_a_missing_case_and_stops_nobody(small: Path, caplog: pytest.LogCaptureFixture) -> None:
    """One team's corrupt file and its link to the reference: under worst_case both cases score as failures, flagged,
    with a warning naming each file; the other team is on the board as without them. A model with no file left is
    still ranked (last)."""
    bad = small / "bad"
    bad.mkdir()
    (bad / "a.nii.gz").write_bytes(b"\x1f\x8b not really gzip")
    (bad / "b.nii.gz").symlink_to(small / "gt" / "b.nii.gz")
    alone = evaluation.evaluate(small / "gt", {"good": small / "good"}, progress=False)
    with caplog.at_level("WARNING", logger="segbench.evaluation"):
        worst = _evaluate(small, bad, missing="worst_case")
    rows = worst.per_case.set_index(["model", "case_id"])
    assert rows.loc["bad", ["prediction_missing", "worst_case"]].all().all() and (rows.loc["bad", "dice"] == 0.0).all()
    assert "bad/a.nii.gz: cannot read as NIfTI" in caplog.text and "bad/b.nii.gz: a symlink, not a regular file; refused unread" in caplog.text
    assert worst.results["coverage"]["models"] == {"bad": {"n_cases": 0, "of": 2, "missing": ["a", "b"]}}
    cell = worst.results["analysis"]["structures"]["organ"]["metrics"]["dice"]
    assert cell["ranking"]["order"] == ["good", "bad"]
    assert cell["models"]["good"] == alone.results["analysis"]["structures"]["organ"]["metrics"]["dice"]["models"]["good"]
    # off the grid under own_cases: the case is the model's missing one, its other case is its own analysis
    (bad / "a.nii.gz").unlink()
    (bad / "b.nii.gz").unlink()
    _nifti(bad / "a.nii.gz", np.asarray(nib.load(small / "good" / "a.nii.gz").dataobj))
    _nifti(bad / "b.nii.gz", np.asarray(nib.load(small / "good" / "b.nii.gz").dataobj), spacing=2.0)
    _nifti(bad / "c.nii.gz", np.zeros((12, 12, 12)))  # and a file for a case without a reference: named, not scored
    (bad / "notes.dcm").write_bytes(b"no DICOM at all")  # the same, though it cannot be read (it stopped every team)
    with caplog.at_level("WARNING", logger="segbench.evaluation"):
        own = _evaluate(small, bad, missing="own_cases").results
    assert own["coverage"]["models"] == {"bad": {"n_cases": 1, "of": 2, "missing": ["b"]}}
    assert "prediction files for cases without a reference: c.nii.gz, notes.dcm; not scored (coverage policy own_cases)" in caplog.text
    # a bad reference is the organiser's: every team's number on that case would be wrong, so the run stops naming it
    (small / "gt" / "b.nii.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(ValueError, match=r"gt/b\.nii\.gz: cannot read as NIfTI"):
        _evaluate(small, bad, missing="worst_case")


def test_a_case_with_two_files_or_an_empty_folder_is_one_team_s_problem(small: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Two files for one case (a.nii.gz and a.nii: which is the prediction cannot be told) stop the run naming both
    under ``missing="error"``; under a coverage policy that case is the team's missing one, named in a warning, and the
    other team is scored (it stopped every team). An empty folder is a model with no scored case: an error naming it,
    before anything is scored, never a board of nothing."""
    bad = _bad_copy(small)
    (bad / "a.nii").write_bytes(gzip.decompress((bad / "a.nii.gz").read_bytes()))
    _nifti(bad / "b.nii.gz", np.asarray(nib.load(small / "good" / "b.nii.gz").dataobj))
    with pytest.raises(ValueError, match=r"model bad: predictions: .*bad: case a has 2 files, a\.nii and a\.nii\.gz"):
        _evaluate(small, bad)
    empty = small / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"model empty: .*empty: no prediction file for any of the 2 cases"):
        evaluation.evaluate(small / "gt", {"good": small / "good", "bad": bad, "empty": empty}, progress=False, missing="own_cases")
    with caplog.at_level("WARNING", logger="segbench.evaluation"):
        own = evaluation.evaluate(small / "gt", {"good": small / "good", "bad": bad}, progress=False, missing="own_cases").results
    assert own["coverage"]["models"] == {"bad": {"n_cases": 1, "of": 2, "missing": ["a"]}}
    assert "case a has 2 files, a.nii and a.nii.gz; which one is its label map cannot be told" in caplog.text
    assert own["analysis"]["structures"]["organ"]["metrics"]["dice"]["ranking"]["order"] == ["good"]


def test_a_model_name_is_a_name_not_a_path(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Model names are staged by number: "../escape" wrote a folder beside the run's temporary one (left behind), and
    "a/b" failed with a bare errno."""
    (small / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(small / "tmp"))  # the run's temporary folder in small/tmp
    result = evaluation.evaluate(small / "gt", {"../escape": small / "good", "a/b": small / "good"}, progress=False)
    assert sorted(result.per_case["model"].unique()) == ["../escape", "a/b"]
    assert list((small / "tmp").iterdir()) == [] and not (small / "escape").exists()


def test_negative_label_values_are_an_error_even_without_a_label_schema(tmp_path: Path) -> None:
    """With structures given and no dataset or dataset.json, no label set is known; a negative value is still no label
    id under any schema: it stops the run naming the case and file (it was scored as background)."""
    cube = np.zeros((12, 12, 12), dtype=np.int16)
    cube[3:8, 3:8, 3:8] = 1
    for folder in ("gt", "pred"):
        (tmp_path / folder).mkdir()
    _nifti(tmp_path / "gt" / "a.nii.gz", cube)
    cube[0, 0, :3] = -1
    nib.save(nib.Nifti1Image(cube, np.eye(4)), tmp_path / "pred" / "a.nii.gz")
    with pytest.raises(ValueError, match=r"case a: .*pred/a\.nii\.gz: negative label values \[-1\]; label ids are 0 or more"):
        evaluation.evaluate(tmp_path / "gt", {"m": tmp_path / "pred"}, structures=["organ=1"], progress=False)


def test_a_prediction_for_a_case_without_reference_is_an_error_naming_it(small: Path) -> None:
    bad = small / "good"
    _nifti(bad / "c.nii.gz", np.zeros((12, 12, 12)))
    with pytest.raises(ValueError, match=r"prediction files for cases without a reference: c\.nii\.gz"):
        _evaluate(small, bad)


def test_a_staging_folder_that_cannot_be_written_stops_the_run_naming_it(tmp_path: Path) -> None:
    """evaluate keeps a private copy of every prediction in TMPDIR; a write there that fails (a full disk) was a bare
    "[Errno 28] No space left on device". A limit on the size of a file this process may write (RLIMIT_FSIZE, the
    write failing with EFBIG) stands in for the full disk: the run stops, under a coverage policy too (the organiser's
    disk is no team's fault), naming the folder, the team's file and TMPDIR."""
    rng = np.random.default_rng(0)
    for folder in ("gt", "team"):
        (tmp_path / folder).mkdir()
        _nifti(tmp_path / folder / "a.nii.gz", rng.integers(0, 2, (64, 64, 64)))  # noise: ~40 KB compressed
    limit = (tmp_path / "team" / "a.nii.gz").stat().st_size // 2

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, not a signal

    for policy in ("error", "own_cases"):
        run = subprocess.run(
            ["segbench", "evaluate", "--gt", "gt", "--pred", "team=team", "--structures", "organ=1", "--out", "out", "--missing", policy],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={**command_env(), "TMPDIR": str(tmp_path)},
            preexec_fn=small_files,
            check=False,
            timeout=600,
        )
        assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
        assert f"cannot write the private copy of team/a.nii.gz in {tmp_path}/segbench-evaluate-" in run.stderr, run.stderr
        assert "point TMPDIR at a disk with room" in run.stderr and not (tmp_path / "out").exists()
    assert not list(tmp_path.glob("segbench-evaluate-*"))  # the staging folder is removed


def test_the_temporary_folder_holds_one_team_s_copies_at_a_time(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The private copies were made for every team before any was scored, so TMPDIR (a RAM-backed /tmp on many systems)
    had to hold every prediction of a challenge at once; now a team's copies are removed once it is scored. Seen from
    inside the real scorer: while a team is scored, the temporary folder holds its two copies and no other team's."""
    second = small / "second"
    second.mkdir()
    for case in ("a", "b"):
        (second / f"{case}.nii.gz").write_bytes((small / "good" / f"{case}.nii.gz").read_bytes())
    tmpdir = small / "tmp"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    seen, score_cases = [], evaluation.score_cases

    def watched(triples: list, *args: object, **kwargs: object) -> pd.DataFrame:
        seen.append(sorted(p.relative_to(tmpdir).parts[-1] for p in tmpdir.rglob("*.nii.gz")))
        return score_cases(triples, *args, **kwargs)

    monkeypatch.setattr(evaluation, "score_cases", watched)
    result = evaluation.evaluate(small / "gt", {"good": small / "good", "second": second}, progress=False)
    assert seen == [["a.nii.gz", "b.nii.gz"], ["a.nii.gz", "b.nii.gz"]]
    assert not list(tmpdir.iterdir())  # and nothing is left behind
    assert list(result.per_case["model"].unique()) == ["good", "second"] and (result.per_case["dice"] == 1.0).all()


def test_a_file_name_cannot_drive_the_organisers_terminal(small: Path) -> None:
    """A team's stray file named with escape sequences (clear the screen, retitle the terminal) reached the terminal raw in
    the warning or the error that names it; the command shows them escaped."""
    hostile = "zz\x1b[2J\x1b]0;pwned\x07\r\u202e"
    _nifti(small / "good" / f"{hostile}.nii.gz", np.zeros((12, 12, 12)))
    command = ["segbench", "evaluate", "--gt", "gt", "--pred", "good=good", "--out", "out"]
    refused, warned = (
        subprocess.run(args, cwd=small, capture_output=True, text=True, env=command_env(), check=False, timeout=600)
        for args in (command, [*command, "--missing", "own_cases"])
    )
    assert refused.returncode == 1 and warned.returncode == 0, warned.stderr
    shown = r"zz\x1b[2J\x1b]0;pwned\x07\r\u202e.nii.gz"
    assert f"prediction files for cases without a reference: {shown}" in refused.stderr, refused.stderr
    assert f"prediction files for cases without a reference: {shown}; not scored" in warned.stderr, warned.stderr
    for output in (refused.stdout, refused.stderr, warned.stdout, warned.stderr):
        assert "\x1b" not in output and "\x07" not in output, output


def test_a_file_that_is_not_a_results_document_is_an_error_naming_it(small: Path) -> None:
    """show, report, export and reanalyze read results files from anywhere (a colleague's evaluate run, a download): one
    that is not a results document (truncated, another JSON, a value of the wrong type deep inside) was a traceback or
    a bare KeyError; now every reader names the file and, for a document, the first place it departs."""
    results = evaluation.evaluate(small / "gt", {"good": small / "good"}, progress=False).to_json(small / "results" / "organ.json")
    document = json.loads(results.read_text(encoding="utf-8"))
    assert read_results(results) == document
    cell = document["analysis"]["structures"]["organ"]["metrics"]["dice"]
    broken = {
        "truncated.json": (results.read_bytes()[:100], "not a readable results JSON (Unterminated string"),
        "list.json": (b"[]", "not a segbench results document: /: ResultsDocument expected, got list"),
        "no_ranking.json": (
            {
                **document,
                "analysis": {
                    **document["analysis"],
                    "structures": {
                        "organ": {**document["analysis"]["structures"]["organ"], "metrics": {"dice": {k: v for k, v in cell.items() if k != "ranking"}}}
                    },
                },
            },
            "/analysis/structures/organ/metrics/dice/ranking: required key of MetricCell missing",
        ),
        "text_value.json": (
            {
                **document,
                "analysis": {
                    **document["analysis"],
                    "structures": {"organ": {**document["analysis"]["structures"]["organ"], "metrics": {"dice": {**cell, "per_case": {"good": ["0.9", 1.0]}}}}},
                },
            },
            "/analysis/structures/organ/metrics/dice/per_case/good[0]: float expected, got '0.9'",
        ),
    }
    for name, (content, why) in broken.items():
        path = small / "broken" / name.removesuffix(".json") / name
        path.parent.mkdir(parents=True)
        path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
        with pytest.raises(ValueError, match="results") as error:
            read_results(path)
        assert str(error.value).startswith(f"{path}: ") and why in str(error.value), str(error.value)
    truncated = small / "broken" / "truncated"
    for command in (
        ["show", "--results", str(truncated)],
        ["report", "--results", str(truncated), "--out", str(small / "site")],
        ["export", "--dataset", "organ", "--results", str(truncated / "truncated.json"), "--format", "generic_csv", "--out", str(small / "rows.csv")],
        ["reanalyze", str(truncated / "truncated.json")],
    ):
        run = subprocess.run([sys.executable, "-m", "segbench.cli", *command], capture_output=True, text=True, env=command_env(), check=False, timeout=600)
        assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
        assert f"{truncated / 'truncated.json'}: not a readable results JSON" in run.stderr, run.stderr
    assert not (small / "site").exists() and not (small / "rows.csv").exists()


def test_dicom_seg_and_rtstruct_predictions_score_as_the_same_map_in_nifti(tmp_path: Path) -> None:
    """The real 20-slice CT series of data/totalseg_example: a perturbed TotalSegmentator output as NIfTI for one model,
    as DICOM-SEG on the series for another and as RTSTRUCT for a third (tests/support/dicom_series.py's writers), on two cases.
    The RTSTRUCT team's folder holds both cases' series, each its own series UID: each RTSTRUCT is drawn on its own."""
    from scipy import ndimage

    from dicom_series import EXAMPLE, series, series_grid, write_rtstruct, write_seg, write_series

    ref_path = EXAMPLE / "seg_dicom.nii.gz"
    if not (EXAMPLE / "ct_dicom").is_dir():
        pytest.skip("data bundle not pulled (dvc pull)")
    ref = nib.load(ref_path)
    labels = np.asanyarray(ref.dataobj)
    big = sorted((int(v) for v in np.unique(labels) if v), key=lambda v: -int((labels == v).sum()))[:2]
    pred = np.where(np.isin(labels, big), labels, 0).astype(np.uint8)
    pred[ndimage.binary_dilation(labels == big[0]) & (pred == 0)] = big[0]
    on_series = np.asanyarray(resample_to_reference(nib.Nifti1Image(pred, ref.affine), series_grid(series())).dataobj)
    for folder in ("gt", "nifti", "dicom", "rtstruct"):
        (tmp_path / folder).mkdir()
    for case in ("ts1", "ts2"):
        (tmp_path / "gt" / f"{case}.nii.gz").symlink_to(ref_path)
        nib.save(nib.Nifti1Image(pred, ref.affine, ref.header), tmp_path / "nifti" / f"{case}.nii.gz")
        names = write_seg(on_series, series(), tmp_path / "dicom" / f"{case}.dcm")
        scratch = tmp_path / f"scratch_{case}"  # rt-utils' writer reads every slice of its folder: one series there
        write_series(series(), scratch, prefix=case)
        assert write_rtstruct(on_series, scratch, scratch / f"{case}.dcm") == names
        for written in scratch.iterdir():
            written.rename(tmp_path / "rtstruct" / written.name)
    result = evaluation.evaluate(
        tmp_path / "gt",
        {"nifti": tmp_path / "nifti", "dicom": tmp_path / "dicom", "rtstruct": tmp_path / "rtstruct"},
        structures=[f"label_{v}={v}" for v in big],
        dicom_labels=names,
        progress=False,
    )
    rows = result.per_case.set_index(["model", "case_id", "structure"])
    metrics = ["dice", "nsd", "hd95", "assd"]
    pd.testing.assert_frame_equal(rows.loc["dicom", metrics], rows.loc["nifti", metrics])
    pd.testing.assert_frame_equal(rows.loc["rtstruct", metrics], rows.loc["nifti", metrics])
    assert rows.loc[("nifti", "ts1", f"label_{big[0]}"), "dice"] < 1.0
    # the RTSTRUCT is drawn from a private copy, on the series in the team's folder: an error names the team's file
    for slice_file in (tmp_path / "rtstruct").glob("ts2*"):
        if slice_file.name != "ts2.dcm":
            slice_file.unlink()
    with pytest.raises(ValueError, match=rf"^{tmp_path / 'rtstruct' / 'ts2.dcm'}: no slice of its image series .* directly in {tmp_path / 'rtstruct'}\)"):
        evaluation.evaluate(
            tmp_path / "gt", {"rtstruct": tmp_path / "rtstruct"}, structures=[f"label_{v}={v}" for v in big], dicom_labels=names, progress=False
        )


def test_a_dicom_seg_whose_geometry_claims_a_huge_volume_is_refused_before_it_is_built(tmp_path: Path) -> None:
    """A SEG on the real example series whose header says 20000 x 20000 pixels a frame: 8e9 voxels against the 5.2e6 of
    the reference. Its geometry is read from the header and the volume refused before highdicom allocates it."""
    import pydicom

    from dicom_series import EXAMPLE, series, series_grid, write_seg

    if not (EXAMPLE / "ct_dicom").is_dir():
        pytest.skip("data bundle not pulled (dvc pull)")
    ref = nib.load(EXAMPLE / "seg_dicom.nii.gz")
    labels = np.asanyarray(ref.dataobj)
    pred = (labels == np.bincount(labels[labels > 0].ravel()).argmax()).astype(np.uint8)
    on_series = np.asanyarray(resample_to_reference(nib.Nifti1Image(pred, ref.affine), series_grid(series())).dataobj)
    for folder in ("gt", "dicom"):
        (tmp_path / folder).mkdir()
    (tmp_path / "gt" / "ts1.nii.gz").symlink_to(EXAMPLE / "seg_dicom.nii.gz")
    write_seg(on_series, series(), tmp_path / "dicom" / "ts1.dcm")
    seg = pydicom.dcmread(tmp_path / "dicom" / "ts1.dcm")
    seg.Rows = seg.Columns = 20000
    seg.save_as(tmp_path / "dicom" / "ts1.dcm")
    with pytest.raises(
        ValueError,
        match=r"dicom/ts1\.dcm: (its header.s frames decode to [\d,]+ bytes, more than [\d,]+; refused before decoding|"
        r"its geometry makes a volume of shape \(\d+, 20000, 20000\), over 8 "
        r"times the reference grid \(512, 512, \d+\); refused before it is built)",
    ):
        evaluation.evaluate(tmp_path / "gt", {"dicom": tmp_path / "dicom"}, structures=["organ=1"], progress=False)


def test_metadata_columns_are_subgroups(small: Path) -> None:
    (small / "cases.csv").write_text("case_id,site\na,north\nb,south\nz,west\n", encoding="utf-8")
    result = evaluation.evaluate(small / "gt", {"good": small / "good"}, metadata=small / "cases.csv", progress=False)
    table = result.by_subgroup("site")
    assert sorted(set(table["site"])) == ["north", "south"] and (table["n"] == 1).all() and not table["tested"].any()
    assert set(result.per_case["meta.site"]) == {"north", "south"}
    with pytest.raises(ValueError, match=r"no subgroup field 'gender'; analysed: \['site'\]"):
        result.by_subgroup("gender")
    (small / "cases.csv").write_text("case_id,site\na,north\na,south\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"cases\.csv: case ids listed twice: \['a'\]"):
        evaluation.evaluate(small / "gt", {"good": small / "good"}, metadata=small / "cases.csv", progress=False)
    (small / "cases.csv").write_bytes("case_id,site\na,Malmö\n".encode("latin-1"))  # a spreadsheet's export in another encoding
    with pytest.raises(ValueError, match=r"cases\.csv: not a readable metadata CSV \('utf-8' codec can't decode"):
        evaluation.evaluate(small / "gt", {"good": small / "good"}, metadata=small / "cases.csv", progress=False)
    (small / "meta").mkdir()  # a folder given for the file: the same one-line error, not a bare IsADirectoryError
    with pytest.raises(ValueError, match=r"meta: not a readable metadata CSV \(\[Errno 21\] Is a directory"):
        evaluation.evaluate(small / "gt", {"good": small / "good"}, metadata=small / "meta", progress=False)
    (small / "gt" / "dataset.json").write_text("[" * 100_000, encoding="utf-8")
    with pytest.raises(ValueError, match=r"dataset\.json: expected an nnU-Net dataset.json"):
        evaluation.evaluate(small / "gt", {"good": small / "good"}, progress=False)


def test_structures_are_names_or_definitions_and_bad_ones_are_named() -> None:
    assert evaluation.regions(["mass=2+3:1.13", "organ=1"]) == [Region("mass", (2, 3), 1.13), Region("organ", (1,), 2.0)]
    assert evaluation.regions(["organ"], labels={"background": 0, "organ": 1}) == [Region("organ", (1,), 2.0)]
    for entry, message in (
        ("t=2:nan", "positive tolerance"),
        ("t=0", "non-zero label ids"),
        ("t=x", r"expected NAME=ID\[\+ID...\]"),
        ("liver", "not among any known structure"),
    ):
        with pytest.raises(ValueError, match=message):
            evaluation.regions([entry])


def test_a_dataset_without_its_config_folder_is_an_error_naming_the_folder(small: Path) -> None:
    """Run outside the project, --dataset finds no conf/: the error says which folder and what to give instead."""
    with pytest.raises(FileNotFoundError, match=r"dataset 'kits23': .*/elsewhere is not a segbench config folder .*--conf"):
        evaluation.evaluate(small / "gt", {"good": small / "good"}, dataset="kits23", conf=small / "elsewhere", progress=False)


def test_a_model_lacking_cases_is_in_every_table_with_its_n_and_coverage(small: Path) -> None:
    """tsv/json (``segbench show --format``) and ``by_subgroup`` carry every model: the one lacking a case (own_cases, off
    the board) has its rows from the analysis of its own cases, with n and its coverage; no row is dropped or zero-filled."""
    bad = _bad_copy(small)
    (small / "cases.csv").write_text("case_id,site\na,north\nb,south\n", encoding="utf-8")
    result = _evaluate(small, bad, missing="own_cases", metadata=small / "cases.csv")
    table = pd.read_csv(io.StringIO(render([result.results], fmt_name="tsv")), sep="\t")
    dice = table[(table["structure"] == "organ") & (table["metric"] == "dice")].set_index("model")
    assert sorted(dice.index) == ["bad", "good"]
    assert dice.loc["bad", "n"] == 1 and dice.loc["bad", "coverage"] == 0.5 and dice.loc["bad", "mean"] == 1.0
    assert pd.isna(dice.loc["bad", "rank"]) and dice.loc["good", "coverage"] == 1.0 and dice.loc["good", "n"] == 2
    records = json.loads(render([result.results], fmt_name="json"))
    assert {r["model"] for r in records} == {"good", "bad"} and all(r["coverage"] in (0.5, 1.0) for r in records)
    groups = result.by_subgroup("site")
    assert set(groups["model"]) == {"good", "bad"}
    own = groups[(groups["model"] == "bad") & (groups["metric"] == "dice")]
    assert list(own["site"]) == ["north"] and (own["coverage"] == 0.5).all() and (own["mean"] == 1.0).all()


#: 15 of the default cases (those with the fewest slices: quick to stage and score), a folder of their label maps under
#: other label values, the first 5 stored on another grid
INTAKE_CASES = (
    "case_00110",
    "case_00285",
    "case_00440",
    "case_00435",
    "case_00210",
    "case_00260",
    "case_00470",
    "case_00425",
    "case_00010",
    "case_00045",
    "case_00215",
    "case_00030",
    "case_00085",
    "case_00130",
    "case_00090",
)
OTHER_GRID = INTAKE_CASES[:5]
RELABEL = {1: 5, 2: 6, 3: 7}


def _user_folder(kits_labels: Path, folder: Path, cases: Sequence[str], relabel: Mapping[int, int]) -> None:
    """A folder as a user brings it: each case's reference label map under the label ids of ``relabel``; the cases of
    ``OTHER_GRID`` with their first axis stored the other way round (the affine says so: the same voxels on the patient)."""
    folder.mkdir(parents=True, exist_ok=True)
    for case in cases:
        image = nib.load(kits_labels / f"{case}.nii.gz")
        data = np.asarray(image.dataobj).astype(np.uint8)
        labels = np.zeros_like(data)
        for old, new in relabel.items():
            labels[data == old] = new
        affine = image.affine.copy()
        if case in OTHER_GRID:
            flip = np.eye(4)
            flip[0, 0], flip[0, 3] = -1, data.shape[0] - 1
            labels, affine = np.ascontiguousarray(labels[::-1]), affine @ flip
        nib.save(nib.Nifti1Image(labels, affine), folder / f"{case}.nii.gz")


@pytest.mark.slow
def test_a_predictions_folder_scores_the_same_through_the_pipeline_and_evaluate_pred_config(tmp_path: Path, kits_labels: Path) -> None:
    """One intake: the same conf/predictions/<name>.yaml (other label values, 5 cases on another grid) through the predict and
    score stages' functions and through `segbench.evaluate(pred_configs=...)` gives identical per-case numbers."""
    import yaml

    from segbench.models.runner import predict

    folder = tmp_path / "userdata" / "mine"
    _user_folder(kits_labels, folder, INTAKE_CASES, RELABEL)
    entry = {
        "title": "mine",
        "dataset": "kits23",
        "path": str(folder),
        "output": "{case}.nii.gz",
        "output_format": "multilabel",
        "label_map": {5: "kidney", 6: "tumor", 7: "cyst"},
        "trained_on": [],
        "licence": "test",
        "version": "1",
    }
    config = tmp_path / "mine.yaml"
    config.write_text(yaml.safe_dump({"mine": entry}), encoding="utf-8")
    (tmp_path / "userdata" / "example_subset").mkdir()  # the composition checks the worked example's folder is there
    with in_directory(tmp_path):
        raw = compose_params(
            ROOT / "conf",
            ["model=[sim_dilate_1mm]", f"dataset.kits23.cases=[{','.join(INTAKE_CASES)}]", "predictions=[example_subset]", "scoring.sensitivity_profiles=[]"],
        )
    raw["predictions"] = {"mine": entry}
    raw["scoring"].pop("lesions", None)
    params = parse_params(raw, ROOT)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "data.dvc").write_bytes((ROOT / "data.dvc").read_bytes())
    with in_directory(project):
        predict(params.dataset("kits23"), params.model("mine"), predictions_dir("kits23", "mine", project))
        run_score(params, "kits23", "mine", workers=1)
    stage = pd.read_csv(scores_dir("kits23", "mine", project) / "per_case.csv", dtype={"case_id": str})
    gt = tmp_path / "gt"
    gt.mkdir()
    for case in INTAKE_CASES:
        (gt / f"{case}.nii.gz").symlink_to(kits_labels / f"{case}.nii.gz")
    result = evaluation.evaluate(gt, {}, conf=ROOT / "conf", pred_configs=[config], progress=False)
    ours = result.per_case
    key = ["model", "case_id", "structure"]
    stage, ours = stage.sort_values(key).reset_index(drop=True), ours.sort_values(key).reset_index(drop=True)
    assert sorted(set(ours["case_id"])) == sorted(INTAKE_CASES) and not ours["prediction_missing"].any()
    pd.testing.assert_frame_equal(ours[key + METRIC_COLUMNS], stage[key + METRIC_COLUMNS], check_dtype=False)
    assert (ours.query("structure == 'kidney_and_mass'")["dice"] == 1.0).all()  # a flipped file resampled back exactly
    assert result.results["models"]["mine"]["source"] == folder.resolve().as_posix()


def test_every_faulty_file_of_a_folder_is_named_at_once_with_the_fix(tmp_path: Path, kits_labels: Path) -> None:
    """`--label-map` on a --pred folder: files holding a label id the map lacks are all listed in one error, each by the user's
    file (never the staged copy), with the fix."""
    cases = INTAKE_CASES[5:8]
    gt = tmp_path / "gt"
    gt.mkdir()
    for case in cases:
        (gt / f"{case}.nii.gz").symlink_to(kits_labels / f"{case}.nii.gz")
    _user_folder(kits_labels, tmp_path / "mine", cases, {1: 5, 2: 9, 3: 7})  # 9: no structure of the map
    with pytest.raises(ValueError) as caught:
        evaluation.evaluate(
            gt, {"mine": tmp_path / "mine"}, dataset="kits23", conf=ROOT / "conf", label_map={5: "kidney", 6: "tumor", 7: "cyst"}, progress=False
        )
    text = str(caught.value)
    assert f"model mine: 3 file(s) of {tmp_path / 'mine'} cannot be brought onto the references" in text, text
    assert all(f"{tmp_path / 'mine' / case}.nii.gz" in text for case in cases) and "staging" not in text and "/copy/" not in text, text
    assert "fix: map every label id the files hold to a structure of dataset 'kits23'" in text and "--label-map" in text
