"""Lesion-wise scores of case files (segbench.scoring.lesionwise) and their analysis (segbench.stats.lesions), on real
KiTS23 label maps with SIMULATED predictions that miss, split, bridge and add lesions (tests/support/lesion_cases.py)."""

from __future__ import annotations

import math
from pathlib import Path

import nibabel as nib
import numpy as np
import pandas as pd
import pytest

from lesion_cases import STRUCTURES, load_case, simulate_lesions
from segbench.scoring.engine import score_cases
from segbench.scoring.geometry import GeometryError
from segbench.scoring.instances import score_lesions
from segbench.scoring.lesionwise import score_case_lesions, score_cases_and_lesions, score_lesion_cases
from segbench.scoring.settings import LesionSetting, Region, lesion_structures
from segbench.stats import StatsSettings, lesion_analysis, reanalyze

CASES = ("case_00021", "case_00028", "case_00008", "case_00037")
PROFILES = ("brats", "panoptica", "panoptica_merge", "brats2023")
SETTING = LesionSetting(lesion_structures({"kidney": 1, "tumor": 2, "cyst": 3}, ["tumor", "cyst", "ureter"]), "brats", PROFILES[1:], (1.0, 10.0))


def _write(path: Path, labels: np.ndarray, spacing: tuple[float, float, float]) -> Path:
    nib.save(nib.Nifti1Image(labels.astype(np.uint8), np.diag([*spacing, 1.0])), path)
    return path


def _simulated_map(labels: np.ndarray, spacing: tuple[float, float, float], seed: int) -> np.ndarray:
    """A SIMULATED prediction label map: the kidneys as in the reference, each lesion structure simulated."""
    pred = np.where(labels > 0, 1, 0).astype(np.uint8)
    for name, label in STRUCTURES.items():
        pred[simulate_lesions(labels, label, spacing, seed)[1]] = label
    return pred


@pytest.fixture(scope="module")
def case_files(kits_labels: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, np.ndarray, np.ndarray, tuple]]:
    folder = tmp_path_factory.mktemp("lesion_cases")
    out = {}
    for k, case in enumerate(CASES):
        labels, spacing = load_case(kits_labels, case)
        pred = _simulated_map(labels, spacing, k)
        out[case] = (_write(folder / f"{case}_ref.nii.gz", labels, spacing), _write(folder / f"{case}_pred.nii.gz", pred, spacing), labels, pred, spacing)
    return out


def test_case_file_scores_equal_the_array_scores_under_every_profile(case_files) -> None:
    """Each structure x profile row and the per-lesion table are what instances.score_lesions gives on the decoded masks."""
    assert [s.name for s in SETTING.structures] == ["tumor", "cyst"]  # a name the schema lacks is not a lesion structure here
    ref_path, pred_path, labels, pred, spacing = case_files["case_00008"]
    rows, table = score_case_lesions("case_00008", ref_path, pred_path, SETTING, allowed_labels={0, 1, 2, 3})
    assert [(r["structure"], r["lesion_profile"]) for r in rows] == [(s, p) for s in ("tumor", "cyst") for p in PROFILES]
    for row in rows:
        label = STRUCTURES[row["structure"]]
        expected_table, expected = score_lesions(labels == label, pred == label, spacing, row["lesion_profile"], (1.0, 10.0))
        for key, value in expected.items():
            assert (math.isnan(value) and math.isnan(row[key])) or value == row[key], (row["structure"], row["lesion_profile"], key)
        mine = table[(table.structure == row["structure"]) & (table.lesion_profile == row["lesion_profile"])]
        pd.testing.assert_frame_equal(mine.drop(columns=["case_id", "structure", "lesion_profile", "volume_stratum"]).reset_index(drop=True), expected_table)
        strata = mine["volume_stratum"].to_numpy()
        volumes = mine["reference_volume_ml"].to_numpy()
        assert ((strata == "lt_1ml") == ((mine.status != "FP") & (volumes < 1.0))).all() and (strata[(mine.status == "FP").to_numpy()] == "").all()
        assert ((strata == "ge_10ml") == (volumes >= 10.0)).all()
        assert row["reference_present"] and not row["prediction_missing"]
    cyst = next(r for r in rows if r["structure"] == "cyst" and r["lesion_profile"] == "brats")
    assert cyst["n_reference"] == 8 and cyst["fn"] >= 1 and cyst["fp"] >= 1  # the simulated miss and addition


def test_missing_prediction_misses_every_lesion_and_bad_files_are_errors(case_files, tmp_path: Path) -> None:
    ref_path, pred_path, labels, pred, spacing = case_files["case_00028"]
    rows, table = score_case_lesions("case_00028", ref_path, None, SETTING)
    assert all(r["prediction_missing"] and r["tp"] == 0 and r["fp"] == 0 and r["fn"] == r["n_reference"] for r in rows)
    assert set(table.status) == {"FN"}
    shifted = nib.Nifti1Image(pred, np.diag([*spacing, 1.0]) @ np.array([[1, 0, 0, 2], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]))
    nib.save(shifted, tmp_path / "shifted.nii.gz")
    with pytest.raises(GeometryError, match="case_00028"):
        score_case_lesions("case_00028", ref_path, tmp_path / "shifted.nii.gz", SETTING)
    bad = _write(tmp_path / "seven.nii.gz", np.where(pred == 3, 7, pred), spacing)
    with pytest.raises(ValueError, match=r"seven.nii.gz: label values \[7\]"):
        score_case_lesions("case_00028", ref_path, bad, SETTING, allowed_labels={0, 1, 2, 3})


def test_setting_is_checked_at_the_boundary() -> None:
    with pytest.raises(ValueError, match="unknown lesion profile 'panoptika'"):
        LesionSetting((Region("tumor", (2,), 0.0),), "panoptika")
    with pytest.raises(ValueError, match="increasing positive volumes"):
        LesionSetting((Region("tumor", (2,), 0.0),), "brats", (), (10.0, 1.0))


@pytest.fixture(scope="module")
def lesion_tables(case_files) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Three SIMULATED models on the four cases: the reference itself with one lesion structure simulated, the
    simulated map, and no prediction for one case (every lesion missed)."""
    triples = {name: [] for name in ("sim_lesions", "sim_tumor_only", "sim_one_missing")}
    folder = next(iter(case_files.values()))[0].parent
    for case, (ref_path, pred_path, labels, pred, spacing) in case_files.items():
        tumor_only = np.where(pred == 2, 2, np.where(labels == 2, 1, labels))
        triples["sim_lesions"].append((case, ref_path, pred_path))
        triples["sim_tumor_only"].append((case, ref_path, _write(folder / f"{case}_tumor_only.nii.gz", tumor_only, spacing)))
        triples["sim_one_missing"].append((case, ref_path, None if case == "case_00037" else pred_path))
    parts = [score_lesion_cases(t, SETTING, progress=False) for t in triples.values()]
    rows = pd.concat([r.assign(model=m) for (r, _), m in zip(parts, triples, strict=True)], ignore_index=True)
    instances = pd.concat([i.assign(model=m) for (_, i), m in zip(parts, triples, strict=True)], ignore_index=True)
    return rows, instances


def test_lesion_analysis_by_case_by_lesion_and_by_matching_rule(lesion_tables) -> None:
    rows, instances = lesion_tables
    block = lesion_analysis(rows, instances, profile="brats", settings=StatsSettings(n_resamples=300, scheme_resamples=50))
    case = block["case"]["structures"]["tumor"]
    assert case["n_cases"] == 4 and set(case["metrics"]) == {"rq", "pq_dice", "recall", "lesion_dice", "lesion_hd95"}
    rq = case["metrics"]["rq"]["models"]
    assert rq["sim_one_missing"]["mean"] < rq["sim_lesions"]["mean"]  # one case with every lesion missed (RQ 0)
    assert rq["sim_one_missing"]["n_missing_prediction"] == 1
    # by lesion: one value per reference lesion, clustered by case
    lesion = block["lesion"]["structures"]["cyst"]
    cysts = rows[(rows.structure == "cyst") & (rows.lesion_profile == "brats") & (rows.model == "sim_lesions")].n_reference
    n_cysts = int(cysts.sum())
    assert lesion["n_cases"] == n_cysts > len(CASES) and lesion["metrics"]["dice"]["clustered"]["n_clusters"] == int((cysts > 0).sum())
    detected = lesion["metrics"]["detected"]["models"]
    assert detected["sim_tumor_only"]["mean"] == 1.0  # its cysts are the reference's
    counts = block["counts"]["cyst"]["sim_lesions"]
    assert counts["tp"] + counts["fn"] == counts["n_reference"] == n_cysts and counts["fp"] >= 3
    assert [v["stratum"] for v in counts["by_volume"]] == ["lt_1ml", "1_10ml", "ge_10ml"]
    assert sum(v["n_reference"] for v in counts["by_volume"]) == n_cysts and sum(v["tp"] for v in counts["by_volume"]) == counts["tp"]
    # panoptica leaves a missed lesion's HD95 undefined: not analysed under it, and said so
    assert block["undefined"] == {"case": [], "lesion": []}
    assert block["sensitivity"]["variants"]["panoptica"]["undefined"] == ["lesion_hd95"]
    assert set(block["sensitivity"]["variants"]) == {"panoptica", "panoptica_merge", "brats2023"}
    assert block["sensitivity"]["variants"]["brats2023"]["summary"]["n_cells"] > 0
    assert reanalyze(block["case"]) == [] and reanalyze(block["lesion"]) == []
    with pytest.raises(ValueError, match="not the lesion profile 'monai'"):
        lesion_analysis(rows, instances, profile="monai", settings=StatsSettings(n_resamples=300))


def test_a_lone_model_without_predictions_leaves_sq_unanalysed_and_the_page_says_so(lesion_tables) -> None:
    """One model, one case, no prediction file: every lesion missed, so no SQ (no matched lesion anywhere); the block
    says None there and the page says there is nothing to analyse instead of failing."""
    from segbench.report.lesions import lesion_section

    rows, instances = lesion_tables
    keep = lambda t: t[(t.model == "sim_one_missing") & (t.case_id == "case_00037")]  # noqa: E731
    block = lesion_analysis(
        keep(rows), keep(instances), profile="brats", settings=StatsSettings(n_resamples=200, scheme_resamples=50), contaminated={"sim_one_missing": False}
    )
    assert block["matched"] is None and block["case"]["structures"]["tumor"]["n_cases"] == 1
    assert block["counts"]["tumor"]["sim_one_missing"]["tp"] == 0
    page = lesion_section({"models": {"sim_one_missing": {"kind": "simulated", "simulated": True}}, "lesions": block})
    assert "Nothing to analyse: no case has a value for every model." in page


def test_one_decode_for_both_tables_gives_what_each_gives(case_files) -> None:
    """score_cases_and_lesions (the score stage) equals score_cases and score_lesion_cases run apart, a missing prediction included."""
    items = list(case_files.items())[:2]
    triples = [(case, ref, pred) for case, (ref, pred, *_) in items] + [(items[0][0], items[0][1][0], None)]
    regions = [Region("tumor", (2,), 1.0), Region("kidney_and_mass", (1, 2, 3), 1.0)]
    scored, rows, instances = score_cases_and_lesions(triples, regions, SETTING, progress=False, extra_profiles=("monai",))
    pd.testing.assert_frame_equal(scored, score_cases(triples, regions, progress=False, extra_profiles=("monai",)))
    expected_rows, expected_instances = score_lesion_cases(triples, SETTING, progress=False)
    pd.testing.assert_frame_equal(rows, expected_rows)
    pd.testing.assert_frame_equal(instances, expected_instances)
