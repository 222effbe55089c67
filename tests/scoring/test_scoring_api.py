"""Row schema and the conventions (docs/methodology.md, sections 3-4) of score_case / score_cases, and input errors naming the file."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import segauge

from segbench.scoring.engine import COLUMNS, _region_mask, dice_iou, map_cases, raise_worker_died, score_case, score_cases, worker_died
from segbench.scoring.settings import DETECTION_METRICS, HIGHER_IS_BETTER, METRICS, Region

SPACING = (2.0, 0.8, 0.8)
SHAPE = (12, 40, 36)
REGIONS = (
    Region("kidney_and_mass", (1, 2, 3), 1.0331),
    Region("mass", (2, 3), 1.1329),
    Region("tumor", (2,), 1.1498, detection=True),
)
DIAGONAL = math.sqrt(sum((n * s) ** 2 for n, s in zip(SHAPE, SPACING, strict=True)))


def write(path: Path, labels: np.ndarray, spacing: tuple[float, ...] = SPACING, dtype: type = np.uint8) -> Path:
    affine = np.diag([*spacing, 1.0])
    affine[:3, 3] = (-10.0, 5.0, 3.0)
    nib.save(nib.Nifti1Image(labels.astype(dtype), affine), path)
    return path


def kidney_case() -> np.ndarray:
    lab = np.zeros(SHAPE, np.uint8)
    lab[3:9, 8:30, 6:20] = 1
    lab[4:8, 12:20, 8:14] = 2
    return lab


@pytest.fixture()
def ref(tmp_path: Path) -> Path:
    return write(tmp_path / "ref.nii.gz", kidney_case())


def by_structure(rows: list[dict]) -> dict[str, dict]:
    return {r["structure"]: r for r in rows}


def test_metric_names_and_directions() -> None:
    assert METRICS == ("dice", "iou", "hd", "hd95", "assd", "masd", "nsd")
    assert DETECTION_METRICS == ("det_precision", "det_recall", "det_f1")
    assert {m for m, up in HIGHER_IS_BETTER.items() if up} == {"dice", "iou", "nsd", *DETECTION_METRICS}


def test_perfect_prediction_and_row_schema(ref: Path) -> None:
    rows = score_case("c1", ref, ref, REGIONS)
    assert [r["structure"] for r in rows] == [r.name for r in REGIONS]
    for row in rows:
        assert tuple(row) == COLUMNS
        assert row["dice"] == row["iou"] == row["nsd"] == 1.0
        assert [row[m] for m in ("hd", "hd95", "assd", "masd")] == pytest.approx([0.0] * 4, abs=1e-9)
        assert row["reference_present"] and row["prediction_present"] and not row["prediction_missing"]
        assert not row["worst_case"] and row["hd95_definition"] == "segauge_pooled_area_weighted"
        assert row["worst_case_value_mm"] == pytest.approx(DIAGONAL)
    rows = by_structure(rows)
    assert all(math.isnan(rows["mass"][m]) for m in DETECTION_METRICS)
    assert all(rows["tumor"][m] == 1.0 for m in DETECTION_METRICS)
    assert rows["tumor"]["nsd_tolerance_mm"] == 1.1498


def test_empty_and_missing_conventions(tmp_path: Path, ref: Path) -> None:
    no_tumor = kidney_case()
    no_tumor[no_tumor == 2] = 1
    pred = write(tmp_path / "pred.nii.gz", no_tumor)
    rows = by_structure(score_case("c1", ref, pred, REGIONS))
    for name in ("mass", "tumor"):  # exactly one empty: worst case, never inf
        r = rows[name]
        assert r["reference_present"] and not r["prediction_present"] and r["worst_case"]
        assert (r["dice"], r["iou"], r["nsd"]) == (0.0, 0.0, 0.0)
        assert r["hd"] == r["hd95"] == r["assd"] == r["masd"] == pytest.approx(DIAGONAL)
    assert rows["tumor"]["det_recall"] == 0.0

    # both empty: reference absent, row still emitted, perfect agreement values
    ref2 = write(tmp_path / "ref2.nii.gz", no_tumor)
    rows = by_structure(score_case("c2", ref2, pred, REGIONS))
    r = rows["tumor"]
    assert not r["reference_present"] and not r["prediction_present"] and not r["worst_case"]
    assert (r["dice"], r["iou"], r["nsd"], r["hd"], r["hd95"], r["assd"]) == (1.0, 1.0, 1.0, 0.0, 0.0, 0.0)

    # no prediction file: the worst-case row for every region, flagged missing
    for r in score_case("c3", ref, None, REGIONS):
        assert r["prediction_missing"] and not r["prediction_present"] and r["worst_case"]
        assert r["dice"] == 0.0 and r["hd95"] == pytest.approx(DIAGONAL)
    assert by_structure(score_case("c3", ref, None, REGIONS))["tumor"]["det_f1"] == 0.0


def test_score_cases_order_and_workers(tmp_path: Path, ref: Path) -> None:
    """Serial first: the process's kernel threads have then run, so the pool is spawned (a forked worker would
    inherit them). The pool takes the largest case first (``case_bytes``: b, without a prediction, last), and the
    rows still come in input order."""
    shifted = np.roll(kidney_case(), 2, axis=1)
    pred = write(tmp_path / "pred.nii.gz", shifted)
    cases = [("a", ref, pred), ("b", ref, None), ("c", ref, ref)]
    serial = score_cases(cases, REGIONS, workers=1, progress=False)
    parallel = score_cases(cases, REGIONS, workers=2, progress=True)
    assert list(serial.columns) == list(COLUMNS)
    assert list(serial["case_id"]) == ["a"] * 3 + ["b"] * 3 + ["c"] * 3
    assert serial.equals(parallel)
    assert 0 < serial.loc[0, "dice"] < 1


def _double_or_die(args: tuple) -> int:
    """A job whose worker process is killed (as the kernel's OOM killer kills it) for the case named "dies"."""
    if args[0] == "dies":
        os.kill(os.getpid(), signal.SIGKILL)
    return 2 * args[3]


def test_a_worker_process_that_dies_fails_its_case_not_the_run() -> None:
    """A killed worker took the pool's job with it and multiprocessing's pool waited forever. Now the jobs it held run
    again, each alone; the one whose process dies again is an error naming the case and its file (or ``died``'s
    result), every other job's result comes back in order."""
    jobs = [(f"c{i}", Path("ref.nii.gz"), Path(f"pred{i}.nii.gz"), i) for i in range(6)]
    jobs[2] = ("dies", Path("ref.nii.gz"), Path("bad.nii.gz"), 2)
    out = map_cases(_double_or_die, jobs, workers=2, progress=False, died=worker_died)
    assert out[:2] == [0, 2] and out[3:] == [6, 8, 10]
    assert str(out[2]) == "case dies: bad.nii.gz: the worker process scoring it died (killed for memory, or a crash in a decoder)"
    with pytest.raises(ValueError, match=r"case dies: bad\.nii\.gz: the worker process scoring it died"):
        map_cases(_double_or_die, jobs, workers=2, progress=False, died=raise_worker_died)
    with pytest.raises(RuntimeError, match=r"scoring: the worker process running job 2 of 6 died"):
        map_cases(_double_or_die, jobs, workers=2, progress=False)


def test_pool_workers_fork_until_numba_threads_run_then_spawn(tmp_path: Path, ref: Path) -> None:
    """A fresh process forks its workers (they inherit the imported engine) and scores with them, then spawns once its
    own numba threads have run (a forked worker would inherit that thread pool): each in a process of its own, as the
    score stage runs it."""
    script = f"""
import numba
from segbench.scoring.engine import score_cases
from segbench.scoring.settings import Region
from segbench.scoring.engine import _start_method
cases = [("a", {str(ref)!r}, {str(ref)!r}), ("b", {str(ref)!r}, None)]
regions = [Region("kidney", (1,), 1.0)]
first = _start_method()
rows = score_cases(cases, regions, workers=2, progress=False)
numba.set_num_threads(1)
print(first, _start_method(), list(rows["case_id"]), rows["dice"].tolist())
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300).stdout.split()
    assert out[:2] == ["fork", "spawn"]
    assert out[2:] == ["['a',", "'b']", "[1.0,", "0.0]"]


def test_extra_profiles_come_from_the_same_decode_after_the_main_rows(tmp_path: Path, ref: Path) -> None:
    """score_cases with extra_profiles: the main profile's rows are exactly a plain call's, then each extra profile's
    rows equal that profile scored alone (a missing prediction included); an unknown profile fails before any decode."""
    pred = write(tmp_path / "pred.nii.gz", np.roll(kidney_case(), 2, axis=1))
    cases = [("a", ref, pred), ("b", ref, None)]
    both = score_cases(cases, REGIONS, progress=False, extra_profiles=["deepmind"])
    main, extra = both[both["metric_profile"] == "segauge"], both[both["metric_profile"] == "deepmind"]
    assert main.reset_index(drop=True).equals(score_cases(cases, REGIONS, progress=False))
    assert extra.reset_index(drop=True).equals(score_cases(cases, REGIONS, progress=False, profile="deepmind"))
    assert list(both["metric_profile"]) == ["segauge"] * 3 + ["deepmind"] * 3 + ["segauge"] * 3 + ["deepmind"] * 3
    assert (extra[["assd", "masd", "nsd"]].to_numpy() != main[["assd", "masd", "nsd"]].to_numpy()).any()  # the definitions differ here
    with pytest.raises(ValueError, match="unknown metric-definition profile 'vtk'"):
        score_cases([("a", tmp_path / "absent.nii.gz", None)], REGIONS, progress=False, extra_profiles=["vtk"])


def test_allowed_labels(tmp_path: Path, ref: Path) -> None:
    bad = kidney_case()
    bad[0, 0, 0] = 7
    pred = write(tmp_path / "odd.nii.gz", bad)
    assert len(score_case("c1", ref, pred, REGIONS)) == 3  # ignored unless asked
    with pytest.raises(ValueError, match=r"c1.*odd\.nii\.gz.*\[7\]"):
        score_case("c1", ref, pred, REGIONS, allowed_labels={1, 2, 3})


def test_bad_files_are_named(tmp_path: Path, ref: Path) -> None:
    empty = tmp_path / "empty.nii.gz"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty.nii.gz.*0 bytes"):
        score_case("c1", ref, empty, REGIONS)
    corrupt = tmp_path / "corrupt.nii.gz"
    corrupt.write_bytes(ref.read_bytes()[:200])
    with pytest.raises(ValueError, match="corrupt.nii.gz"):
        score_case("c1", ref, corrupt, REGIONS)
    frac = kidney_case().astype(np.float32)
    frac[5, 10, 10] = 1.5
    with pytest.raises(ValueError, match="frac.nii.gz.*non-integer"):
        score_case("c1", ref, write(tmp_path / "frac.nii.gz", frac, dtype=np.float32), REGIONS)
    nan = kidney_case().astype(np.float32)
    nan[5, 10, 10] = np.nan
    with pytest.raises(ValueError, match="nan.nii.gz.*NaN"):
        score_case("c1", ref, write(tmp_path / "nan.nii.gz", nan, dtype=np.float32), REGIONS)
    huge = kidney_case().astype(np.float64)
    huge[5, 10, 10] = 2.0**32 + 1  # whole, but no int32: the cast made it -2147483648, named as a negative label
    with pytest.raises(ValueError, match=r"huge.nii.gz.*beyond the int32 range, e\.g\. \[4294967297\.0\]"):
        score_case("c1", ref, write(tmp_path / "huge.nii.gz", huge, dtype=np.float64), REGIONS)
    with pytest.raises(FileNotFoundError, match="nope.nii.gz"):
        score_case("c1", ref, tmp_path / "nope.nii.gz", REGIONS)


def test_float_labels_with_integer_values_are_accepted(tmp_path: Path, ref: Path) -> None:
    pred = write(tmp_path / "float.nii.gz", kidney_case(), dtype=np.float32)
    assert [r["dice"] for r in score_case("c1", ref, pred, REGIONS)] == [1.0, 1.0, 1.0]


def test_crop_does_not_change_results(tmp_path: Path) -> None:
    """Scores on a tight volume equal scores on the same masks embedded in a larger one."""
    lab = kidney_case()
    pred = np.roll(lab, 1, axis=2)
    pred[pred == 2] = 3
    big = np.zeros((20, 70, 60), np.uint8)
    big_pred = big.copy()
    big[4:16, 10:50, 12:48] = lab
    big_pred[4:16, 10:50, 12:48] = pred
    small = score_case("c", write(tmp_path / "r.nii.gz", lab), write(tmp_path / "p.nii.gz", pred), REGIONS)
    large = score_case("c", write(tmp_path / "R.nii.gz", big), write(tmp_path / "P.nii.gz", big_pred), REGIONS)
    assert [r["worst_case"] for r in small] == [r["worst_case"] for r in large] == [False, False, True]
    for a, b in zip(small, large, strict=True):  # worst-case distances are the (different) diagonals
        for m in ("dice", "iou", "nsd", *DETECTION_METRICS) if a["worst_case"] else (*METRICS, *DETECTION_METRICS):
            assert a[m] == pytest.approx(b[m], abs=1e-9, nan_ok=True), m


def test_dice_iou_are_segauges() -> None:
    """One count gives segauge's own dice and iou bit for bit: overlapping, disjoint, nested, one or
    both masks empty, and a one-voxel mask."""
    rng = np.random.default_rng(7)
    a = rng.random((20, 30, 25)) < 0.3
    b = rng.random((20, 30, 25)) < 0.5
    empty, one = np.zeros_like(a), np.zeros_like(a)
    one[3, 4, 5] = True
    pairs = [(a, b), (b, a), (a, ~a), (a & b, a), (a, a), (a, empty), (empty, a), (empty, empty), (one, a | one), (one, one)]
    for pred, ref in pairs:
        assert dice_iou(pred, ref) == (segauge.dice(pred, ref), segauge.iou(pred, ref))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64])
def test_region_masks_are_isin(dtype: type) -> None:
    """The range test for consecutive ids selects exactly np.isin's voxels, with negative values,
    values just outside the range and ids beyond the dtype; non-consecutive ids and single ids too."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(3)
    labels = rng.integers(max(info.min, -4), min(info.max, 12), size=(9, 11, 13), endpoint=True).astype(dtype)
    labels.flat[:4] = [info.min, info.max, 0, 1]
    for ids in ((1, 2, 3), (2, 3), (3, 2), (2,), (0, 1), (1, 3), (5, 6, 7, 8), (int(info.max) - 1, int(info.max)), (250, 300)):
        mask = _region_mask(labels, Region("r", ids, 1.0))
        assert mask.dtype == np.bool_
        assert np.array_equal(mask, np.isin(labels, ids)), (dtype, ids)
